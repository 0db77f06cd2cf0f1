//! DefaultPreemption, as far as this slice goes: the PostFilter's dry run that words the `preemption:`
//! part of a FailedScheduling message. Nodes whose refusal preemption cannot cure are "not helpful";
//! on the others the pods of lower priority are taken away in thought and the filters run again. When
//! that would make the pod fit somewhere, upstream would evict; keel does not evict yet, so the message
//! then carries no preemption part (as upstream's does not when it preempts).

use std::sync::Arc;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::fit_error::{Diagnosis, FitError};
use crate::framework::{Code, CycleState, Framework, Status};
use crate::pod_info::PodInfo;

/// Upstream's status for nodes where preemption cannot help.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Upstream's status for nodes without pods of lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The PostFilter message for a pod that fits nowhere (`preemption: …`), or None when preemption
/// would find a node.
pub fn post_filter_message(
    fw: &Framework,
    state: &CycleState,
    snap: &Snapshot,
    pod: &PodInfo,
    diagnosis: &Diagnosis,
) -> Option<String> {
    let policy = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref());
    if policy == Some("Never") {
        return Some("preemption: not eligible due to preemptionPolicy=Never.".into());
    }
    let mut result = Diagnosis::default();
    for node in &snap.nodes {
        let name = node.name().to_string();
        let helps = diagnosis
            .node_statuses
            .get(&name)
            .is_some_and(|s| s.code == Code::Unschedulable);
        let status = if helps {
            try_without_lower_priority(fw, state, node, pod)?
        } else {
            Status::unresolvable(NOT_HELPFUL)
        };
        result.node_statuses.insert(name, status);
    }
    let err = FitError {
        num_all_nodes: snap.nodes.len(),
        diagnosis: result,
    };
    Some(format!("preemption: {err}"))
}

/// The node's status with its lower-priority pods gone; None when the pod would then fit.
fn try_without_lower_priority(
    fw: &Framework,
    state: &CycleState,
    node: &Arc<NodeInfo>,
    pod: &PodInfo,
) -> Option<Status> {
    let victims: Vec<&PodInfo> = node
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .collect();
    if victims.is_empty() {
        return Some(Status::unresolvable(NO_VICTIMS));
    }
    let mut without = NodeInfo::clone(node);
    let mut state = state.clone();
    for v in victims {
        without.remove_pod(&v.key);
        fw.run_remove_pod(&mut state, pod, v, &without);
    }
    let status = fw.run_filters(&state, pod, &without);
    if status.is_success() {
        None
    } else {
        Some(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::schedule::{Algorithm, Failure};
    use crate::plugins::default_framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;

    fn message(snap: &Snapshot, p: &PodInfo) -> String {
        let fw = default_framework();
        let mut state = CycleState::default();
        match Algorithm::seeded(1).schedule(&fw, &mut state, snap, p) {
            Err(Failure::Fit(mut e)) => {
                e.diagnosis.post_filter_msg =
                    post_filter_message(&fw, &state, snap, p, &e.diagnosis);
                e.to_string()
            }
            other => panic!("expected a fit error, got {other:?}"),
        }
    }

    #[test]
    fn upstream_wording_for_taints_and_cpu() {
        let snap = snapshot(
            vec![
                node("small", "1", "4Gi", json!({})),
                node(
                    "t1",
                    "8",
                    "16Gi",
                    json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}),
                ),
                node(
                    "t2",
                    "8",
                    "16Gi",
                    json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}),
                ),
            ],
            vec![],
        );
        assert_eq!(
            message(&snap, &pod("p", Some("2"), None, json!({}))),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: db}. \
             preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, \
             2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn lower_priority_pods_that_would_not_free_enough_keep_the_filter_reason() {
        let low = pod(
            "low",
            Some("500m"),
            None,
            json!({"spec": {"nodeName": "n", "priority": 0}}),
        );
        let snap = snapshot(vec![node("n", "1", "4Gi", json!({}))], vec![low]);
        let big = pod("big", Some("2"), None, json!({"spec": {"priority": 10}}));
        assert_eq!(
            message(&snap, &big),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient cpu."
        );
        let never = pod(
            "never",
            Some("2"),
            None,
            json!({"spec": {"preemptionPolicy": "Never"}}),
        );
        assert_eq!(
            message(&snap, &never),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
        );
    }
}
