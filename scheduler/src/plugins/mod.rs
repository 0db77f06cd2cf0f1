//! The default plugins of this slice, named and weighted as upstream's default profile. Filters run in
//! upstream's order (the first refusal is the node's reason); score weights: TaintToleration 3,
//! NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2, NodeResourcesFit 1,
//! NodeResourcesBalancedAllocation 1, ImageLocality 1.

pub mod balanced_allocation;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use crate::framework::Framework;

/// The default profile's plugins with their weights.
pub fn default_framework() -> Framework {
    Framework::new(vec![
        (Box::new(node_unschedulable::NodeUnschedulable), 0),
        (Box::new(node_name::NodeName), 0),
        (Box::new(taint_toleration::TaintToleration), 3),
        (Box::new(node_affinity::NodeAffinity), 2),
        (Box::new(node_ports::NodePorts), 0),
        (Box::new(node_resources_fit::NodeResourcesFit), 1),
        (Box::new(volume_restrictions::VolumeRestrictions), 0),
        (Box::new(volume_binding::VolumeBinding), 0),
        (Box::new(volume_zone::VolumeZone), 0),
        (
            Box::new(pod_topology_spread::PodTopologySpread::default()),
            2,
        ),
        (Box::new(inter_pod_affinity::InterPodAffinity), 2),
        (Box::new(balanced_allocation::BalancedAllocation), 1),
        (Box::new(image_locality::ImageLocality), 1),
    ])
}

#[cfg(test)]
pub(crate) mod testing {
    //! Crafted nodes and pods for the plugins' tests.

    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Namespace;
    use serde_json::{json, Value};

    use crate::cache::{Cache, NodeInfo, Snapshot};
    use crate::pod_info::PodInfo;

    /// A node named `name` with `cpu`, `memory` and 110 pods allocatable, and `extra` merged into it.
    pub(crate) fn node(name: &str, cpu: &str, memory: &str, extra: Value) -> NodeInfo {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
        });
        merge(&mut n, extra);
        NodeInfo::new(Arc::new(serde_json::from_value(n).unwrap()))
    }

    /// A pod `name` with one container requesting `cpu`/`memory` (None: no request), `extra` merged in.
    pub(crate) fn pod(
        name: &str,
        cpu: Option<&str>,
        memory: Option<&str>,
        extra: Value,
    ) -> PodInfo {
        let mut req = serde_json::Map::new();
        if let Some(c) = cpu {
            req.insert("cpu".into(), json!(c));
        }
        if let Some(m) = memory {
            req.insert("memory".into(), json!(m));
        }
        let mut p = json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": req}}]},
        });
        merge(&mut p, extra);
        PodInfo::new(Arc::new(serde_json::from_value(p).unwrap()))
    }

    fn merge(into: &mut Value, extra: Value) {
        match (into, extra) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    /// A snapshot of `nodes` with `placed` pods bound to the nodes they name.
    pub(crate) fn snapshot(nodes: Vec<NodeInfo>, placed: Vec<PodInfo>) -> Snapshot {
        snapshot_with_namespaces(nodes, placed, Vec::new())
    }

    /// [`snapshot`] with `namespaces` among the cluster objects.
    pub(crate) fn snapshot_with_namespaces(
        nodes: Vec<NodeInfo>,
        placed: Vec<PodInfo>,
        namespaces: Vec<Namespace>,
    ) -> Snapshot {
        let mut cache = Cache::default();
        cache
            .objects_mut()
            .apply(crate::informer::Change::Listed(namespaces));
        for n in nodes {
            if let Some(node) = n.node {
                cache.set_node(node);
            }
        }
        for p in placed {
            cache.add_bound_pod(p);
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        snap
    }
}
