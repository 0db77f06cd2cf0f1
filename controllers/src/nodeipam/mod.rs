//! The node-ipam controller, as kube-controller-manager's range allocator (`--allocate-node-cidrs`): every
//! Node without `spec.podCIDR` gets the lowest `/--node-cidr-mask-size` range of `--cluster-cidr` that no
//! other Node holds, written as `spec.podCIDR` and `spec.podCIDRs`. IPv4 only (one range per node).
//!
//! - What is used is read from the Nodes themselves (`spec.podCIDR` and `spec.podCIDRs`, ranges outside
//!   the cluster CIDR ignored), so a deleted Node's range is free again as soon as the cache drops it, and
//!   a new leader knows everything its predecessor handed out.
//! - Nodes that already have a range keep it, whoever set it (an agent started with `--pod-cidr`
//!   registers its Node with one). The API server refuses to change a range once set.
//! - Allocations are serialised, and a range written but not yet seen back through the watch is held in
//!   a small in-flight table until the cache shows it (or the Node is gone), so two Nodes never get the
//!   same range from one stale cache.
//! - When no range is left the Node gets a `CIDRNotAvailable` Event (upstream's reason and message) and is
//!   tried again after a back-off (30 s, doubling, at most 1 000 s as upstream's workqueue); a deleted Node
//!   that held a range wakes every Node still waiting at once.

pub mod allocator;
pub mod cidr;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;
use tracing::{debug, info};

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;
pub use allocator::{Allocator, ConfigError};
pub use cidr::{CidrError, Ipv4Cidr};

/// Upstream's name (`--controllers`).
pub const NAME: &str = "node-ipam";
/// The Events' reporting component (upstream's range allocator records as `cidrAllocator`).
pub const COMPONENT: &str = "cidrAllocator";
/// The Event reason when the cluster CIDR has no range left.
pub const CIDR_NOT_AVAILABLE: &str = "CIDRNotAvailable";
/// How soon a Node that found no free range first tries again (a deleted Node wakes it sooner).
pub const EXHAUSTED_RETRY: Duration = Duration::from_secs(30);
/// The longest wait between tries of a Node that keeps finding no range (upstream's workqueue cap).
pub const EXHAUSTED_RETRY_MAX: Duration = Duration::from_secs(1000);

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

/// What allocations share: the lock that serialises them and what it guards, and one Event recorder so
/// that repeated `CIDRNotAvailable` Events count in a series.
struct Ipam {
    allocator: Allocator,
    state: Mutex<State>,
    recorder: Recorder,
}

/// What the allocations remember between reconciles, by Node name. Neither says which ranges are used
/// (the Nodes do); both only bridge the cache's lag and pace retries.
#[derive(Default)]
struct State {
    /// Ranges written but not yet seen back through the watch.
    in_flight: HashMap<String, Ipv4Cidr>,
    /// Nodes that found no free range, and how many times in a row.
    exhausted: HashMap<String, u32>,
}

/// The wait before try `n + 1` of a Node that found no range `n` times in a row.
pub fn exhausted_retry(n: u32) -> Duration {
    let factor = 1u32
        .checked_shl(n.saturating_sub(1).min(31))
        .unwrap_or(u32::MAX);
    EXHAUSTED_RETRY
        .checked_mul(factor)
        .map_or(EXHAUSTED_RETRY_MAX, |d| d.min(EXHAUSTED_RETRY_MAX))
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let Some(allocator) = ctx.node_cidrs else {
        return futures::future::pending().boxed();
    };
    let nodes = ctx.shared::<Node>();
    let store = nodes.store();
    let controller = Controller::for_shared_stream(nodes.subscribe(), nodes.store())
        // A deleted Node that held a range frees it: every Node still waiting for one tries again.
        .watches_shared_stream(nodes.subscribe(), move |gone: Arc<Node>| {
            released(&gone, &store)
        });
    let ipam = Arc::new(Ipam {
        allocator,
        state: Mutex::new(State::default()),
        recorder: ctx.recorder(COMPONENT),
    });
    runner::run(NAME, controller, ctx, move |node, ctx| {
        let ipam = ipam.clone();
        async move { reconcile(node, ctx, ipam).await }
    })
}

/// The ranges a Node holds, as written (`spec.podCIDRs`, else `spec.podCIDR`).
pub fn pod_cidrs(node: &Node) -> Vec<&str> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    let list: Vec<&str> = spec
        .pod_cidrs
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|c| !c.is_empty())
        .collect();
    if !list.is_empty() {
        return list;
    }
    spec.pod_cidr
        .as_deref()
        .filter(|c| !c.is_empty())
        .into_iter()
        .collect()
}

/// Whether the Node has a range (any, even one this controller cannot parse or did not give).
pub fn has_pod_cidr(node: &Node) -> bool {
    !pod_cidrs(node).is_empty()
}

/// The IPv4 ranges the Nodes hold.
fn used_by(nodes: &[Arc<Node>]) -> Vec<Ipv4Cidr> {
    nodes
        .iter()
        .flat_map(|n| pod_cidrs(n))
        .filter_map(|c| c.parse::<Ipv4Cidr>().ok())
        .collect()
}

/// When `gone` was deleted holding a range: the Nodes still waiting for one.
fn released(gone: &Node, store: &Store<Node>) -> Vec<ObjectRef<Node>> {
    if !has_pod_cidr(gone) || store.get(&ObjectRef::from_obj(gone)).is_some() {
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|n| !has_pod_cidr(n) && n.metadata.deletion_timestamp.is_none())
        .map(|n| ObjectRef::from_obj(n.as_ref()))
        .collect()
}

/// Forgets the Nodes the cache shows with a range, or no longer shows: their in-flight range is
/// observed (or freed), and they wait no more.
fn settle(state: &mut State, nodes: &[Arc<Node>]) {
    let waiting = |name: &String| {
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
            .is_some_and(|n| !has_pod_cidr(n))
    };
    state.in_flight.retain(|name, _| waiting(name));
    state.exhausted.retain(|name, _| waiting(name));
}

/// The range to give a Node, from what the Nodes hold and what was given but not yet observed.
fn choose(
    allocator: &Allocator,
    nodes: &[Arc<Node>],
    in_flight: &HashMap<String, Ipv4Cidr>,
) -> Option<Ipv4Cidr> {
    let used = used_by(nodes);
    allocator.lowest_free(used.iter().chain(in_flight.values()))
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Context>, ipam: Arc<Ipam>) -> Result<Action> {
    if has_pod_cidr(&node) || node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = node.name_any();
    let mut state = ipam.state.lock().await;
    // The lock serialises allocations; read the cache only once holding it.
    let nodes = ctx.store::<Node>().state();
    settle(&mut state, &nodes);
    if state.in_flight.contains_key(&name) {
        // Given one already; the watch has not brought it back yet.
        return Ok(Action::await_change());
    }
    let current = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name.as_str()));
    if current.is_none_or(|n| has_pod_cidr(n)) {
        return Ok(Action::await_change());
    }
    let Some(cidr) = choose(&ipam.allocator, &nodes, &state.in_flight) else {
        let tries = state.exhausted.entry(name).or_default();
        *tries = tries.saturating_add(1);
        let wait = exhausted_retry(*tries);
        drop(state);
        not_available(&ipam.recorder, &node).await;
        return Ok(Action::requeue(wait));
    };
    let patch = json!({"spec": {"podCIDR": cidr.to_string(), "podCIDRs": [cidr.to_string()]}});
    match ctx
        .api_all::<Node>()
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            state.exhausted.remove(&name);
            state.in_flight.insert(name.clone(), cidr);
            info!(node = %name, cidr = %cidr, "pod CIDR allocated");
            Ok(Action::await_change())
        }
        // Deleted meanwhile, or given a range by someone else (the API refuses to change it): the watch
        // brings what happened.
        Err(e) if is_not_found(&e) || is_conflict(&e) || is_invalid(&e) => {
            debug!(node = %name, error = %e, "pod CIDR not written");
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether `e` is the API's 422 (the object failed validation).
fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

/// Records upstream's `CIDRNotAvailable` status change on the Node.
async fn not_available(recorder: &Recorder, node: &Node) {
    let name = node.name_any();
    info!(node = %name, "no pod CIDR left in the cluster CIDR");
    let event = Event {
        type_: EventType::Normal,
        reason: CIDR_NOT_AVAILABLE.into(),
        note: Some(format!("Node {name} status is now: {CIDR_NOT_AVAILABLE}")),
        action: CIDR_NOT_AVAILABLE.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &node.object_ref(&())).await {
        debug!(node = %name, error = %e, "recording CIDRNotAvailable");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use kube::api::ObjectMeta;

    fn node(name: &str, cidr: Option<&str>, cidrs: &[&str]) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(String::from),
                pod_cidrs: (!cidrs.is_empty())
                    .then(|| cidrs.iter().map(|c| c.to_string()).collect()),
                ..Default::default()
            }),
            status: None,
        })
    }

    fn p(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn reads_pod_cidrs_then_pod_cidr() {
        assert_eq!(
            pod_cidrs(&node("a", Some("10.42.0.0/24"), &[])),
            ["10.42.0.0/24"]
        );
        assert_eq!(
            pod_cidrs(&node(
                "a",
                Some("10.42.0.0/24"),
                &["10.42.0.0/24", "fd00::/64"]
            )),
            ["10.42.0.0/24", "fd00::/64"]
        );
        assert!(pod_cidrs(&node("a", Some(""), &[])).is_empty());
        assert!(!has_pod_cidr(&node("a", None, &[])));
        assert!(!has_pod_cidr(&Node::default()));
    }

    #[test]
    fn chooses_around_nodes_and_in_flight_ranges() {
        let a = Allocator::default();
        let nodes = vec![
            node("a", Some("10.42.0.0/24"), &["10.42.0.0/24"]),
            // IPv6 and unparseable ranges take nothing from the IPv4 cluster CIDR.
            node("b", None, &["fd00::/64"]),
            node("c", Some("garbage"), &[]),
            node("d", None, &[]),
        ];
        let mut state = State::default();
        assert_eq!(
            choose(&a, &nodes, &state.in_flight),
            Some(p("10.42.1.0/24"))
        );
        state.in_flight.insert("d".to_string(), p("10.42.1.0/24"));
        state.exhausted.insert("d".to_string(), 2);
        assert_eq!(
            choose(&a, &nodes, &state.in_flight),
            Some(p("10.42.2.0/24"))
        );
        // "d" still shows no range: it is remembered; once it shows one, or is gone, it is forgotten.
        settle(&mut state, &nodes);
        assert_eq!((state.in_flight.len(), state.exhausted.len()), (1, 1));
        let seen = vec![node("d", Some("10.42.1.0/24"), &["10.42.1.0/24"])];
        settle(&mut state, &seen);
        assert!(state.in_flight.is_empty() && state.exhausted.is_empty());
        state.in_flight.insert("d".to_string(), p("10.42.1.0/24"));
        settle(&mut state, &[]);
        assert!(state.in_flight.is_empty());
    }

    #[test]
    fn exhausted_nodes_retry_at_30_s_doubling_to_1000_s() {
        assert_eq!(exhausted_retry(1), Duration::from_secs(30));
        assert_eq!(exhausted_retry(2), Duration::from_secs(60));
        assert_eq!(exhausted_retry(5), Duration::from_secs(480));
        assert_eq!(exhausted_retry(6), Duration::from_secs(960));
        assert_eq!(exhausted_retry(7), EXHAUSTED_RETRY_MAX);
        assert_eq!(exhausted_retry(u32::MAX), EXHAUSTED_RETRY_MAX);
    }

    #[test]
    fn a_deleted_node_with_a_range_wakes_the_waiting_ones() {
        let (store, mut writer) = kube::runtime::reflector::store::<Node>();
        let waiting = node("w", None, &[]);
        let holding = node("h", Some("10.42.0.0/24"), &["10.42.0.0/24"]);
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*waiting).clone()));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*holding).clone()));
        // Still there: nothing to do.
        assert!(released(&holding, &store).is_empty());
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Delete((*holding).clone()));
        assert_eq!(released(&holding, &store), vec![ObjectRef::new("w")]);
        // A deleted Node without a range frees nothing.
        assert!(released(&node("x", None, &[]), &store).is_empty());
    }
}
