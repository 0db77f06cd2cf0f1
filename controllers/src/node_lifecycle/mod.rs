//! The node-lifecycle controller: every 5 s it checks when each node was last heard from (Lease or
//! Ready heartbeat), turns a silent node's conditions Unknown after the grace period, taints nodes by
//! their conditions (NoSchedule at once, and also on every change of a node; NoExecute at a rate
//! limited per zone), and marks the pods of
//! nodes that are not ready not ready. The taint-eviction controller ([`taint_eviction`]) acts on the
//! NoExecute taints.

pub mod health;
pub mod taint_eviction;
pub mod taints;
pub mod zones;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use crate::context::Context;
use crate::endpointslice::pods as podutil;
use crate::error::{is_conflict, is_not_found};
use crate::manager::ControllerDef;
use health::Health;
use taints::{NOT_READY, NO_EXECUTE, UNREACHABLE};
use zones::{Limiter, State};

/// How often nodes are checked (`--node-monitor-period`).
pub const NODE_MONITOR_PERIOD: Duration = Duration::from_secs(5);
/// The namespace of the nodes' heartbeat Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "node-lifecycle",
        start,
    }
}

/// What the controller keeps between passes.
#[derive(Default)]
struct Monitor {
    health: Health,
    limiters: HashMap<String, Limiter>,
    ready: HashMap<String, bool>,
    all_fully_disrupted: bool,
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let mut changed = ctx.shared::<Node>().subscribe();
    ctx.shared::<Lease>();
    ctx.shared::<Pod>();
    let ctx = ctx.clone();
    async move {
        let mut monitor = Monitor::default();
        let mut tick = tokio::time::interval(NODE_MONITOR_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => monitor.pass(&ctx).await,
                node = changed.next() => match node {
                    Some(node) => no_schedule_pass(&ctx, &node).await,
                    None => return,
                },
            }
        }
    }
    .boxed()
}

/// Brings a node's condition NoSchedule taints in line with its conditions as soon as the node is
/// added or changes (upstream's doNoScheduleTaintingPass, fed by the node informer), so a new node's
/// not-ready taint from admission comes off the moment it reports Ready, not at the next monitor pass.
async fn no_schedule_pass(ctx: &Arc<Context>, seen: &Node) {
    let name = seen.name_any();
    // The cache may already hold a newer state than the event; a deleted node needs nothing.
    let Some(node) = ctx.store::<Node>().get(&ObjectRef::new(&name)) else {
        return;
    };
    if node.metadata.deletion_timestamp.is_some() {
        return;
    }
    let current = taints::taints(&node).to_vec();
    let want = taints::with_condition_taints(&node, current.clone());
    if want == current {
        return;
    }
    let mut updated = (*node).clone();
    updated.spec.get_or_insert_with(Default::default).taints = (!want.is_empty()).then_some(want);
    match ctx
        .api_all::<Node>()
        .replace(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => debug!(node = %name, "node NoSchedule taints follow its conditions"),
        // A newer state of the node is on its way as another event.
        Err(e) if is_conflict(&e) || is_not_found(&e) => {}
        Err(e) => debug!(node = %name, error = %e, "updating node NoSchedule taints"),
    }
}

impl Monitor {
    async fn pass(&mut self, ctx: &Arc<Context>) {
        let nodes_store = ctx.store::<Node>();
        let leases = ctx.store::<Lease>();
        let mut nodes: Vec<Node> = nodes_store.state().iter().map(|n| (**n).clone()).collect();
        nodes.sort_by_key(|n| n.name_any());
        self.health
            .retain(&nodes.iter().map(|n| n.name_any()).collect::<Vec<_>>());
        let recorder = ctx.recorder("node-controller");
        let mut pods_by_node: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
        for p in ctx.store::<Pod>().state() {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                pods_by_node.entry(n).or_default().push(p);
            }
        }
        // 1. Health: silent nodes' conditions turn Unknown.
        for node in nodes.iter_mut() {
            let name = node.name_any();
            let lease = leases.get(&ObjectRef::new(&name).within(LEASE_NAMESPACE));
            let silent = self.health.observe(node, lease.as_deref());
            let grace = health::grace_of(node, ctx.node_monitor_grace_period);
            if silent > grace {
                if let Some(conditions) = health::unknown_conditions(node, jiff::Timestamp::now()) {
                    let mut updated = node.clone();
                    if let Some(st) = updated.status.as_mut() {
                        st.conditions = Some(conditions);
                    } else {
                        updated.status = Some(k8s_openapi::api::core::v1::NodeStatus {
                            conditions: Some(conditions),
                            ..Default::default()
                        });
                    }
                    match ctx
                        .api_all::<Node>()
                        .replace_status(&name, &PostParams::default(), &updated)
                        .await
                    {
                        Ok(written) => {
                            info!(node = %name, silent_for = ?silent, "node stopped posting status: conditions Unknown");
                            *node = written;
                        }
                        Err(e) => debug!(node = %name, error = %e, "marking node Unknown"),
                    }
                }
            }
            let ready = taints::ready_status(node) == "True";
            let was = self.ready.insert(name.clone(), ready);
            if was == Some(true) && !ready {
                let _ = recorder
                    .publish(
                        &Event {
                            type_: EventType::Normal,
                            reason: "NodeNotReady".into(),
                            note: Some(format!("Node {name} status is now: NodeNotReady")),
                            action: "NodeNotReady".into(),
                            secondary: None,
                        },
                        &node.object_ref(&()),
                    )
                    .await;
            }
            if !ready {
                let on_node = pods_by_node.get(&name).map(Vec::as_slice).unwrap_or(&[]);
                mark_pods_not_ready(ctx, &name, on_node).await;
            }
        }
        self.ready
            .retain(|n, _| nodes.iter().any(|x| x.name_any() == *n));
        // 2. Zones: how disrupted each is, and so how fast NoExecute taints may come.
        let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
        for node in &nodes {
            let c = counts.entry(zones::key(node)).or_default();
            if taints::ready_status(node) == "True" {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
        let states: HashMap<String, State> = counts
            .iter()
            .map(|(z, (r, n))| (z.clone(), zones::state(*r, *n)))
            .collect();
        let all_fully = !states.is_empty() && states.values().all(|s| *s == State::FullDisruption);
        if all_fully && !self.all_fully_disrupted {
            info!(
                "every node is not ready: evictions stop (this controller may be the one cut off)"
            );
        }
        self.all_fully_disrupted = all_fully;
        // 3. Taints.
        for node in &nodes {
            let zone = zones::key(node);
            let size = counts.get(&zone).map_or(0, |(r, n)| r + n);
            let state = states.get(&zone).copied().unwrap_or(State::Normal);
            let rate = zones::rate(state, size, all_fully);
            let limiter = self.limiters.entry(zone).or_default();
            let want = desired_taints(node, all_fully, || limiter.try_take(rate));
            if want.as_slice() == taints::taints(node) {
                continue;
            }
            let mut updated = node.clone();
            updated.spec.get_or_insert_with(Default::default).taints =
                (!want.is_empty()).then_some(want);
            match ctx
                .api_all::<Node>()
                .replace(&node.name_any(), &PostParams::default(), &updated)
                .await
            {
                Ok(_) => debug!(node = %node.name_any(), "node taints updated"),
                Err(e) if is_conflict(&e) || is_not_found(&e) => {}
                Err(e) => debug!(node = %node.name_any(), error = %e, "updating node taints"),
            }
        }
    }
}

/// The taints `node` should have: its condition NoSchedule taints, and the NoExecute taint of its
/// readiness. A new NoExecute taint needs a token from `take`; swapping not-ready for unreachable (or
/// back) and removing them do not. While every zone is fully disrupted NoExecute taints come off.
fn desired_taints(
    node: &Node,
    all_fully_disrupted: bool,
    take: impl FnOnce() -> bool,
) -> Vec<k8s_openapi::api::core::v1::Taint> {
    let current = taints::taints(node).to_vec();
    let mut want = taints::with_condition_taints(node, current);
    let key = match taints::ready_status(node) {
        "True" => None,
        "False" => Some(NOT_READY),
        _ => Some(UNREACHABLE),
    };
    let had = want
        .iter()
        .any(|t| t.effect == NO_EXECUTE && (t.key == NOT_READY || t.key == UNREACHABLE));
    let has_right = key.is_some_and(|k| taints::has(node, k, NO_EXECUTE));
    want.retain(|t| {
        t.effect != NO_EXECUTE
            || (t.key != NOT_READY && t.key != UNREACHABLE)
            || (Some(t.key.as_str()) == key && !all_fully_disrupted)
    });
    if let Some(k) = key {
        if !has_right && !all_fully_disrupted && (had || take()) {
            want.push(taints::taint(k, NO_EXECUTE, Some(jiff::Timestamp::now())));
        }
    }
    want
}

/// Sets the Ready condition of the pods bound to `node` False (upstream's MarkPodsNotReady), so that
/// Services stop sending them traffic.
async fn mark_pods_not_ready(ctx: &Arc<Context>, node: &str, pods: &[Arc<Pod>]) {
    for pod in pods {
        if !crate::pod_state::is_ready(pod) || podutil::terminal(pod) {
            continue;
        }
        let mut updated = (**pod).clone();
        let now = Time(jiff::Timestamp::now());
        if let Some(conds) = updated.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            for c in conds.iter_mut().filter(|c| c.type_ == "Ready") {
                *c = PodCondition {
                    status: "False".into(),
                    last_transition_time: Some(now.clone()),
                    ..c.clone()
                };
            }
        }
        let ns = pod.namespace().unwrap_or_default();
        match ctx
            .api::<Pod>(&ns)
            .replace_status(&pod.name_any(), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => debug!(pod = %pod.name_any(), node, "pod marked not ready"),
            Err(e) => debug!(pod = %pod.name_any(), error = %e, "marking pod not ready"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};

    fn node(ready: &str, taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn keys(t: &[Taint]) -> Vec<String> {
        let mut k: Vec<String> = t
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        k.sort();
        k
    }

    #[test]
    fn unknown_nodes_get_unreachable_taints_rate_limited() {
        let n = node("Unknown", vec![]);
        assert_eq!(
            keys(&desired_taints(&n, false, || true)),
            vec![
                format!("{UNREACHABLE}:NoExecute"),
                format!("{UNREACHABLE}:NoSchedule")
            ]
        );
        // Without a token only the NoSchedule taint comes.
        assert_eq!(
            keys(&desired_taints(&n, false, || false)),
            vec![format!("{UNREACHABLE}:NoSchedule")]
        );
        // Every zone down: no NoExecute.
        assert_eq!(
            keys(&desired_taints(&n, true, || true)),
            vec![format!("{UNREACHABLE}:NoSchedule")]
        );
    }

    #[test]
    fn not_ready_swaps_to_unreachable_without_a_token_and_ready_clears() {
        let n = node(
            "Unknown",
            vec![
                taints::taint(NOT_READY, NO_EXECUTE, None),
                taints::taint(NOT_READY, "NoSchedule", None),
            ],
        );
        assert_eq!(
            keys(&desired_taints(&n, false, || false)),
            vec![
                format!("{UNREACHABLE}:NoExecute"),
                format!("{UNREACHABLE}:NoSchedule")
            ]
        );
        let mut back = node(
            "True",
            vec![
                taints::taint(UNREACHABLE, NO_EXECUTE, None),
                taints::taint("x", NO_EXECUTE, None),
            ],
        );
        assert_eq!(
            keys(&desired_taints(&back, false, || false)),
            vec!["x:NoExecute".to_string()]
        );
        back.spec = None;
        assert!(desired_taints(&back, false, || false).is_empty());
    }
}
