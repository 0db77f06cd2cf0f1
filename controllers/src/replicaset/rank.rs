//! Which pods a ReplicaSet deletes first when it has too many: upstream's ranking of active pods, the
//! cheapest to lose first.

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::pod_state;

/// The annotation a user sets to make a pod cheaper (lower) or dearer (higher) to delete.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn node(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn phase_rank(p: &Pod) -> u8 {
    match pod_state::phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn cost(p: &Pod) -> i32 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Orders `pods` so that the first are the ones to delete: unassigned before assigned; Pending before
/// Unknown before Running; not ready before ready; lower deletion cost; more of its siblings on the same
/// node; more recently ready; more restarts; newer.
pub fn sort_for_deletion(pods: &mut [&Pod]) {
    let mut on_node: HashMap<String, usize> = HashMap::new();
    for p in pods.iter() {
        if !node(p).is_empty() {
            *on_node.entry(node(p).to_string()).or_default() += 1;
        }
    }
    let colocated = |p: &Pod| on_node.get(node(p)).copied().unwrap_or(0);
    pods.sort_by(|a, b| {
        let assigned = |p: &Pod| !node(p).is_empty();
        assigned(a)
            .cmp(&assigned(b))
            .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
            .then_with(|| pod_state::is_ready(a).cmp(&pod_state::is_ready(b)))
            .then_with(|| cost(a).cmp(&cost(b)))
            .then_with(|| colocated(b).cmp(&colocated(a)))
            .then_with(|| {
                // Both ready: the more recently ready goes first.
                match (
                    pod_state::ready_since(a).flatten(),
                    pod_state::ready_since(b).flatten(),
                ) {
                    (Some(x), Some(y)) => y.cmp(&x),
                    _ => Ordering::Equal,
                }
            })
            .then_with(|| pod_state::restarts(b).cmp(&pod_state::restarts(a)))
            .then_with(|| {
                let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(b).cmp(&t(a))
            })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, node: &str, phase: &str, ready: bool, cost: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: cost.map(|c| [(DELETION_COST.to_string(), c.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!node.is_empty()).then(|| node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn cheapest_first() {
        let a = pod("running-ready", "n1", "Running", true, None);
        let b = pod("running-unready", "n1", "Running", false, None);
        let c = pod("pending", "n1", "Pending", false, None);
        let d = pod("unassigned", "", "Pending", false, None);
        let e = pod("ready-cheap", "n1", "Running", true, Some("-5"));
        let mut all = vec![&a, &b, &c, &d, &e];
        sort_for_deletion(&mut all);
        let names: Vec<_> = all
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "unassigned",
                "pending",
                "running-unready",
                "ready-cheap",
                "running-ready"
            ]
        );
    }
}
