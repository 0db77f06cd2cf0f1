//! NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only pods that tolerate the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::Taint;

use crate::cache::NodeInfo;
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;
use keel_client_kit::placement::tolerates;

/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) were unschedulable";

/// The NodeUnschedulable filter.
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        "NodeUnschedulable"
    }

    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let cordoned = node
            .node
            .as_ref()
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !cordoned {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerations = pod.pod.spec.as_ref().and_then(|s| s.tolerations.as_deref());
        if tolerations
            .unwrap_or(&[])
            .iter()
            .any(|t| tolerates(t, &taint))
        {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node, pod};
    use serde_json::json;

    #[test]
    fn cordoned_nodes_take_only_tolerating_pods() {
        let cordoned = node("n", "1", "1Gi", json!({"spec": {"unschedulable": true}}));
        let plain = pod("p", None, None, json!({}));
        assert_eq!(
            NodeUnschedulable.filter(&CycleState::default(), &plain, &cordoned),
            Status::unresolvable(ERR_REASON)
        );
        let tolerant = pod(
            "t",
            None,
            None,
            json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        assert!(NodeUnschedulable
            .filter(&CycleState::default(), &tolerant, &cordoned)
            .is_success());
        assert!(NodeUnschedulable
            .filter(
                &CycleState::default(),
                &plain,
                &node("m", "1", "1Gi", json!({}))
            )
            .is_success());
    }
}
