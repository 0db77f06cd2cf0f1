//! One node as the scheduler sees it: the Node object and the pods on it (bound or assumed), with the
//! sums the filters and scores need kept up to date as pods come and go.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::pod_info::{HostPort, PodInfo};
use crate::resources::{allocatable, Resources};

/// A node and the pods placed on it.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    /// The Node (None while pods still name a node that was deleted).
    pub node: Option<Arc<Node>>,
    /// The pods on the node, assumed ones included.
    pub pods: Vec<PodInfo>,
    /// Sum of the pods' effective requests.
    pub requested: Resources,
    /// Sum of the pods' requests with the scoring defaults.
    pub non_zero_requested: Resources,
    /// The node's allocatable.
    pub allocatable: Resources,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// How many of its pods declare pod affinity or anti-affinity.
    pub pods_with_affinity: usize,
    /// How many of its pods declare required pod anti-affinity.
    pub pods_with_required_anti_affinity: usize,
    /// Its images by normalised name, with their sizes (ImageLocality); shared, as it changes
    /// only with the Node.
    pub images: Arc<HashMap<String, i64>>,
}

impl NodeInfo {
    /// A NodeInfo for `node` with no pods.
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let mut n = NodeInfo::default();
        n.set_node(node);
        n
    }

    /// The node's name (empty for a NodeInfo without a Node).
    pub fn name(&self) -> &str {
        self.node
            .as_ref()
            .and_then(|n| n.metadata.name.as_deref())
            .unwrap_or("")
    }

    /// Replaces the Node object.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = allocatable(&node);
        let images = crate::plugins::image_locality::node_images(&node);
        if *self.images != images {
            self.images = Arc::new(images);
        }
        self.node = Some(node);
    }

    /// Places a pod on the node.
    pub fn add_pod(&mut self, pod: PodInfo) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero);
        self.used_ports.extend(pod.ports.iter().cloned());
        self.pods_with_affinity += usize::from(pod.has_affinity);
        self.pods_with_required_anti_affinity += usize::from(pod.has_required_anti_affinity);
        self.pods.push(pod);
    }

    /// Takes the pod `key` off the node; returns whether it was there.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.key == key) else {
            return false;
        };
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero);
        self.pods_with_affinity -= usize::from(pod.has_affinity);
        self.pods_with_required_anti_affinity -= usize::from(pod.has_required_anti_affinity);
        for port in &pod.ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == port) {
                self.used_ports.swap_remove(j);
            }
        }
        true
    }

    /// The node's labels.
    pub fn labels(&self) -> &std::collections::BTreeMap<String, String> {
        static EMPTY: std::collections::BTreeMap<String, String> =
            std::collections::BTreeMap::new();
        self.node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .unwrap_or(&EMPTY)
    }

    /// The node's taints.
    pub fn taints(&self) -> &[k8s_openapi::api::core::v1::Taint] {
        self.node
            .as_ref()
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sums_follow_the_pods() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
        .unwrap();
        let mut info = NodeInfo::new(Arc::new(node));
        assert_eq!(info.allocatable.milli_cpu, 4000);
        assert_eq!(info.allocatable.pods, 110);
        let pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}},
                                      "ports": [{"containerPort": 80, "hostPort": 8080}]}]},
        }))
        .unwrap();
        info.add_pod(PodInfo::new(Arc::new(pod)));
        assert_eq!(info.requested.milli_cpu, 1000);
        assert_eq!(info.used_ports.len(), 1);
        assert!(info.remove_pod("d/p"));
        assert_eq!(info.requested.milli_cpu, 0);
        assert!(info.used_ports.is_empty());
        assert!(!info.remove_pod("d/p"));
    }
}
