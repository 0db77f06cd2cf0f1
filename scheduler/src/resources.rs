//! Resource amounts as the scheduler counts them: a pod's effective requests (the larger of its app
//! containers' sum and each init container's peak, plus overhead) and a node's allocatable.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;

/// The cpu request a container without one counts as when scoring (upstream's 100m).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory request a container without one counts as when scoring (upstream's 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of every resource the scheduler tracks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// cpu in millicores.
    pub milli_cpu: i64,
    /// memory in bytes.
    pub memory: i64,
    /// ephemeral-storage in bytes.
    pub ephemeral_storage: i64,
    /// Pods (only meaningful for allocatable).
    pub pods: i64,
    /// Extended and hugepages resources, by name, in whole units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Reads a resource list (`requests`, `allocatable`).
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list.into_iter().flatten() {
            r.set(name, &q.0);
        }
        r
    }

    fn set(&mut self, name: &str, q: &str) {
        match name {
            "cpu" => self.milli_cpu = quantity::milli(q).unwrap_or(0),
            "memory" => self.memory = quantity::value(q).unwrap_or(0),
            "ephemeral-storage" => self.ephemeral_storage = quantity::value(q).unwrap_or(0),
            "pods" => self.pods = quantity::value(q).unwrap_or(0),
            other if is_scalar(other) => {
                self.scalar
                    .insert(other.to_string(), quantity::value(q).unwrap_or(0));
            }
            _ => {}
        }
    }

    /// Adds `o` to this amount.
    pub fn add(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(o.milli_cpu);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        self.pods = self.pods.saturating_add(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Takes `o` from this amount.
    pub fn sub(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(o.milli_cpu);
        self.memory = self.memory.saturating_sub(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(o.ephemeral_storage);
        self.pods = self.pods.saturating_sub(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_sub(*v);
        }
    }

    /// Each resource at the larger of the two amounts.
    pub fn max_with(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.pods = self.pods.max(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// Whether nothing at all is asked for (the pod count aside).
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// Extended resources (`example.com/gpu`), hugepages and attachable volumes: counted by name.
fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

fn container_requests(c: &Container, non_zero: bool) -> Resources {
    let mut r = Resources::from_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    if non_zero {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let has = |k: &str| requests.is_some_and(|m| m.contains_key(k));
        if !has("cpu") {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !has("memory") {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    r
}

/// The pod's effective requests (upstream's PodRequests): app containers plus restartable init
/// (sidecar) containers summed, against each ordinary init container's peak with the sidecars started
/// before it, the larger of the two per resource, then the pod overhead added. With `non_zero`, a
/// container missing a cpu or memory request counts the defaults (what scoring uses).
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut total = Resources::default();
    for c in &spec.containers {
        total.add(&container_requests(c, non_zero));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let req = container_requests(c, non_zero);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&req);
            init_peak.max_with(&sidecars);
        } else {
            let mut peak = sidecars.clone();
            peak.add(&req);
            init_peak.max_with(&peak);
        }
    }
    total.add(&sidecars);
    total.max_with(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Resources::from_list(Some(overhead)));
    }
    total
}

/// A node's allocatable (its capacity when allocatable is not reported).
pub fn allocatable(node: &Node) -> Resources {
    let status = node.status.as_ref();
    let list = status
        .and_then(|s| s.allocatable.as_ref())
        .filter(|m| !m.is_empty())
        .or_else(|| status.and_then(|s| s.capacity.as_ref()));
    Resources::from_list(list)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn pod_with(containers: serde_json::Value, init: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": containers, "initContainers": init},
        }))
        .unwrap()
    }

    #[test]
    fn app_containers_sum_and_init_containers_peak() {
        let pod = pod_with(
            json!([
                {"name": "a", "resources": {"requests": {"cpu": "200m", "memory": "100Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "300m"}}},
            ]),
            json!([{"name": "i", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}}]),
        );
        let r = pod_requests(&pod, false);
        assert_eq!(r.milli_cpu, 1000);
        assert_eq!(r.memory, 100 << 20);
        let nz = pod_requests(&pod, true);
        assert_eq!(nz.milli_cpu, 1000);
        assert_eq!(nz.memory, (100 << 20) + DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn sidecars_run_beside_the_app_and_overhead_adds() {
        let mut pod = pod_with(
            json!([{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]),
            json!([
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "i", "resources": {"requests": {"cpu": "550m"}}},
            ]),
        );
        assert_eq!(pod_requests(&pod, false).milli_cpu, 650);
        if let Some(spec) = pod.spec.as_mut() {
            spec.overhead = Some([("cpu".to_string(), Quantity("50m".into()))].into());
        }
        assert_eq!(pod_requests(&pod, false).milli_cpu, 700);
    }

    #[test]
    fn extended_resources_count_by_name() {
        let pod = pod_with(
            json!([{"name": "a", "resources": {"requests": {"example.com/gpu": "2"}}}]),
            json!([]),
        );
        assert_eq!(
            pod_requests(&pod, false).scalar.get("example.com/gpu"),
            Some(&2)
        );
    }
}
