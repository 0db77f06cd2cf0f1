//! NodePorts: a pod's host ports must be free on the node. Ports clash on the same protocol and port
//! when the host IPs are equal or either is `0.0.0.0`.

use crate::cache::NodeInfo;
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::{HostPort, PodInfo};

/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

fn clashes(a: &HostPort, b: &HostPort) -> bool {
    a.port == b.port
        && a.protocol == b.protocol
        && (a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0")
}

/// The NodePorts filter.
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        "NodePorts"
    }

    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let taken = pod
            .ports
            .iter()
            .any(|want| node.used_ports.iter().any(|used| clashes(want, used)));
        if taken {
            Status::unschedulable(ERR_REASON)
        } else {
            Status::success()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node, pod};
    use serde_json::json;

    fn with_port(name: &str, port: i32, ip: &str, protocol: &str) -> PodInfo {
        pod(
            name,
            None,
            None,
            json!({"spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80, "hostPort": port, "hostIP": ip, "protocol": protocol}]}]}}),
        )
    }

    #[test]
    fn host_ports_clash_by_protocol_port_and_ip() {
        let mut n = node("n", "4", "8Gi", json!({}));
        n.add_pod(with_port("a", 8080, "10.0.0.1", "TCP"));
        assert_eq!(
            NodePorts.filter(
                &CycleState::default(),
                &with_port("b", 8080, "10.0.0.1", "TCP"),
                &n
            ),
            Status::unschedulable(ERR_REASON)
        );
        assert!(!NodePorts
            .filter(&CycleState::default(), &with_port("c", 8080, "", "TCP"), &n)
            .is_success());
        assert!(NodePorts
            .filter(
                &CycleState::default(),
                &with_port("d", 8080, "10.0.0.2", "TCP"),
                &n
            )
            .is_success());
        assert!(NodePorts
            .filter(
                &CycleState::default(),
                &with_port("e", 8080, "10.0.0.1", "UDP"),
                &n
            )
            .is_success());
        assert!(NodePorts
            .filter(&CycleState::default(), &with_port("f", 9090, "", "TCP"), &n)
            .is_success());
    }
}
