//! NodeName: a pod that names its node fits only there.

use crate::cache::NodeInfo;
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName filter.
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        "NodeName"
    }

    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let wanted = pod.node_name();
        if wanted.is_empty() || wanted == node.name() {
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
    fn only_the_named_node() {
        let p = pod("p", None, None, json!({"spec": {"nodeName": "n2"}}));
        let n1 = node("n1", "1", "1Gi", json!({}));
        let n2 = node("n2", "1", "1Gi", json!({}));
        assert_eq!(
            NodeName.filter(&CycleState::default(), &p, &n1),
            Status::unresolvable(ERR_REASON)
        );
        assert!(NodeName
            .filter(&CycleState::default(), &p, &n2)
            .is_success());
        assert!(NodeName
            .filter(
                &CycleState::default(),
                &pod("q", None, None, json!({})),
                &n1
            )
            .is_success());
    }
}
