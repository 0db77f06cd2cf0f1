//! The scheduler's cache of nodes and of the pods placed on them, fed by the watches. A pod the
//! scheduler decided on but has not yet seen bound is *assumed*: it counts against its node at once, so
//! the next decision already sees the resources taken, until the watch confirms the binding or the
//! binding fails and the pod is forgotten.
//!
//! Each scheduling cycle reads a [`Snapshot`]: the node list as of that moment, rebuilt only when the
//! cache changed (NodeInfos are shared, copied on write).

pub mod node_info;
pub mod objects;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

pub use node_info::NodeInfo;
pub use objects::ClusterObjects;

use crate::pod_info::PodInfo;

/// Where the cache has a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placed {
    node: String,
    uid: String,
    assumed: bool,
}

/// Nodes and placed pods.
#[derive(Debug, Default)]
pub struct Cache {
    nodes: BTreeMap<String, Arc<NodeInfo>>,
    pods: HashMap<String, Placed>,
    objects: Arc<ClusterObjects>,
    /// Pods nominated to a node by preemption, by pod key.
    nominations: BTreeMap<String, (String, PodInfo)>,
    image_node_counts: Arc<HashMap<String, usize>>,
    generation: u64,
}

/// The nodes one scheduling cycle works on.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Nodes that exist, in a stable order (by name).
    pub nodes: Vec<Arc<NodeInfo>>,
    /// The other objects plugins read.
    pub objects: Arc<ClusterObjects>,
    /// Pods nominated to each node (preemptors waiting for their victims to go).
    pub nominated: Arc<BTreeMap<String, Vec<PodInfo>>>,
    /// How many nodes have each image (by normalised name; ImageLocality's spread).
    pub image_node_counts: Arc<HashMap<String, usize>>,
    generation: u64,
}

impl Snapshot {
    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.nodes
            .binary_search_by(|n| n.name().cmp(name))
            .ok()
            .and_then(|i| self.nodes.get(i))
    }

    /// The pods nominated to `node`.
    pub fn nominated_on(&self, node: &str) -> &[PodInfo] {
        self.nominated.get(node).map(Vec::as_slice).unwrap_or(&[])
    }
}

impl Cache {
    /// Adds or replaces a node.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let before = match self.nodes.get_mut(&name) {
            Some(info) => {
                // A NodeInfo kept only for its pods has no images counted.
                let before = info.node.as_ref().map(|_| info.images.clone());
                Arc::make_mut(info).set_node(node);
                before
            }
            None => {
                self.nodes
                    .insert(name.clone(), Arc::new(NodeInfo::new(node)));
                None
            }
        };
        if let Some(after) = self.nodes.get(&name).map(|n| n.images.clone()) {
            // Most updates are status heartbeats with the same images: no recount.
            if before.as_ref().is_none_or(|b| !Arc::ptr_eq(b, &after)) {
                self.count_images(before.as_deref(), -1);
                self.count_images(Some(&after), 1);
            }
        }
        self.generation += 1;
    }

    fn count_images(&mut self, images: Option<&HashMap<String, i64>>, n: isize) {
        let Some(images) = images.filter(|i| !i.is_empty()) else {
            return;
        };
        let counts = Arc::make_mut(&mut self.image_node_counts);
        for name in images.keys() {
            let now = counts
                .get(name)
                .copied()
                .unwrap_or(0)
                .saturating_add_signed(n);
            if now == 0 {
                counts.remove(name);
            } else {
                counts.insert(name.clone(), now);
            }
        }
    }

    /// Forgets a node (its pods stay accounted to the name until they go).
    pub fn remove_node(&mut self, name: &str) {
        let Some(info) = self.nodes.get_mut(name) else {
            return;
        };
        let images = info.node.as_ref().map(|_| info.images.clone());
        if info.pods.is_empty() {
            self.nodes.remove(name);
        } else {
            let info = Arc::make_mut(info);
            info.node = None;
            info.images = Arc::default();
        }
        self.count_images(images.as_deref(), -1);
        self.generation += 1;
    }

    /// The node object named `name`, if the cache has it.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(name).and_then(|n| n.node.clone())
    }

    /// Names of every node and every placed pod's key (to find what a re-list no longer has).
    pub fn node_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.node.is_some())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Keys of every pod placed (bound or assumed).
    pub fn pod_keys(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    fn place(&mut self, pod: PodInfo, node: &str, assumed: bool) {
        self.remove_pod(&pod.key);
        self.nominations.remove(&pod.key);
        self.pods.insert(
            pod.key.clone(),
            Placed {
                node: node.to_string(),
                uid: pod.uid.clone(),
                assumed,
            },
        );
        let info = self.nodes.entry(node.to_string()).or_default();
        Arc::make_mut(info).add_pod(pod);
        self.generation += 1;
    }

    /// A pod the watch shows bound to its node (confirms an assumed pod).
    pub fn add_bound_pod(&mut self, pod: PodInfo) {
        let node = pod.node_name().to_string();
        self.place(pod, &node, false);
    }

    /// Counts a pod against `node` before its binding is confirmed.
    pub fn assume(&mut self, pod: PodInfo, node: &str) {
        self.place(pod, node, true);
    }

    /// Whether the cache has `key` on a node (bound or assumed).
    pub fn has_pod(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Whether `key` is assumed and not yet confirmed.
    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|p| p.assumed)
    }

    /// Drops an assumed pod whose binding failed (a confirmed pod stays).
    pub fn forget(&mut self, key: &str) {
        if self.is_assumed(key) {
            self.remove_pod(key);
        }
    }

    /// Takes a pod off its node; returns whether it was placed.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        if self.nominations.remove(key).is_some() {
            self.generation += 1;
        }
        let Some(placed) = self.pods.remove(key) else {
            return false;
        };
        if let Some(info) = self.nodes.get_mut(&placed.node) {
            let info = Arc::make_mut(info);
            info.remove_pod(key);
            if info.node.is_none() && info.pods.is_empty() {
                self.nodes.remove(&placed.node);
            }
        }
        self.generation += 1;
        true
    }

    /// Records that `pod` waits for `node` (preemption chose it); replaces an earlier nomination.
    pub fn nominate(&mut self, pod: PodInfo, node: &str) {
        if self
            .nominations
            .get(&pod.key)
            .is_some_and(|(n, p)| n == node && p.pod == pod.pod)
        {
            return;
        }
        self.nominations
            .insert(pod.key.clone(), (node.to_string(), pod));
        self.generation += 1;
    }

    /// Drops the nomination of `key`, if any.
    pub fn unnominate(&mut self, key: &str) {
        if self.nominations.remove(key).is_some() {
            self.generation += 1;
        }
    }

    /// The node `key` is nominated to.
    pub fn nominated_node(&self, key: &str) -> Option<&str> {
        self.nominations.get(key).map(|(n, _)| n.as_str())
    }

    /// The cluster objects for changing (the next snapshot sees the change).
    pub fn objects_mut(&mut self) -> &mut ClusterObjects {
        self.generation += 1;
        Arc::make_mut(&mut self.objects)
    }

    /// The cluster objects as they are now.
    pub fn objects(&self) -> &ClusterObjects {
        &self.objects
    }

    /// Refreshes `snap` if the cache changed since it was taken.
    pub fn update_snapshot(&self, snap: &mut Snapshot) {
        if snap.generation == self.generation && self.generation != 0 {
            return;
        }
        snap.nodes = self
            .nodes
            .values()
            .filter(|n| n.node.is_some())
            .cloned()
            .collect();
        snap.objects = self.objects.clone();
        let mut nominated: BTreeMap<String, Vec<PodInfo>> = BTreeMap::new();
        for (node, pod) in self.nominations.values() {
            nominated.entry(node.clone()).or_default().push(pod.clone());
        }
        snap.nominated = Arc::new(nominated);
        snap.image_node_counts = self.image_node_counts.clone();
        snap.generation = self.generation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"}}}))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: &str) -> PodInfo {
        PodInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d", "uid": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}))
            .unwrap(),
        ))
    }

    #[test]
    fn assumed_pods_count_until_confirmed_or_forgotten() {
        let mut cache = Cache::default();
        cache.set_node(node("n1"));
        let mut snap = Snapshot::default();
        cache.assume(pod("a", ""), "n1");
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.nodes[0].requested.milli_cpu, 1000);
        assert!(cache.is_assumed("d/a"));
        cache.add_bound_pod(pod("a", "n1"));
        assert!(!cache.is_assumed("d/a"));
        cache.forget("d/a");
        cache.update_snapshot(&mut snap);
        assert_eq!(
            snap.nodes[0].requested.milli_cpu, 1000,
            "a confirmed pod stays"
        );
        cache.assume(pod("b", ""), "n1");
        cache.forget("d/b");
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.nodes[0].requested.milli_cpu, 1000);
        assert_eq!(snap.nodes[0].pods.len(), 1);
    }

    fn imaged(name: &str, images: &[&str]) -> Arc<Node> {
        let images: Vec<_> = images
            .iter()
            .map(|i| json!({"names": [i], "sizeBytes": 1}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"images": images}}))
            .unwrap(),
        )
    }

    #[test]
    fn image_counts_follow_node_updates_and_removals() {
        let mut cache = Cache::default();
        let mut snap = Snapshot::default();
        cache.set_node(imaged("n1", &["nginx", "redis:7"]));
        cache.set_node(imaged("n2", &["docker.io/library/nginx:latest"]));
        cache.update_snapshot(&mut snap);
        let count = |snap: &Snapshot, image: &str| snap.image_node_counts.get(image).copied();
        assert_eq!(count(&snap, "docker.io/library/nginx:latest"), Some(2));
        assert_eq!(count(&snap, "docker.io/library/redis:7"), Some(1));
        cache.set_node(imaged("n1", &["nginx", "redis:7"]));
        cache.set_node(imaged("n2", &["redis:7"]));
        cache.add_bound_pod(pod("a", "n2"));
        cache.update_snapshot(&mut snap);
        assert_eq!(count(&snap, "docker.io/library/nginx:latest"), Some(1));
        assert_eq!(count(&snap, "docker.io/library/redis:7"), Some(2));
        cache.remove_node("n2");
        cache.remove_node("n1");
        cache.update_snapshot(&mut snap);
        assert!(snap.image_node_counts.is_empty());
        cache.set_node(imaged("n2", &["redis:7"]));
        cache.update_snapshot(&mut snap);
        assert_eq!(count(&snap, "docker.io/library/redis:7"), Some(1));
    }

    #[test]
    fn a_snapshot_keeps_its_view_while_the_cache_moves_on() {
        let mut cache = Cache::default();
        cache.set_node(node("n1"));
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        cache.add_bound_pod(pod("a", "n1"));
        assert_eq!(snap.nodes[0].requested.milli_cpu, 0);
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.nodes[0].requested.milli_cpu, 1000);
        cache.remove_node("n1");
        cache.update_snapshot(&mut snap);
        assert!(snap.nodes.is_empty());
        cache.set_node(node("n1"));
        cache.update_snapshot(&mut snap);
        assert_eq!(
            snap.nodes[0].pods.len(),
            1,
            "the pods stay with the node's name"
        );
    }
}
