//! A pod with what the scheduler computes from it once: its key, priority, effective requests and host
//! ports. The queue, the cache and every plugin read this instead of re-reading the pod.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::plugins::inter_pod_affinity::PodAffinityTerms;
use crate::resources::{pod_requests, Resources};

/// The scheduler name pods get when they name none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// One host port a pod asks for (protocol, host IP, port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The host IP (`0.0.0.0` when unset).
    pub ip: String,
    /// The host port.
    pub port: i32,
}

/// A pod and what the scheduler derives from it.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The pod as last seen.
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Effective requests (what Filter checks).
    pub requests: Resources,
    /// Requests with the cpu/memory defaults for containers without any (what scoring counts).
    pub non_zero: Resources,
    /// Host ports of its containers.
    pub ports: Vec<HostPort>,
    /// Whether it declares pod affinity or anti-affinity (InterPodAffinity looks at such pods only).
    pub has_affinity: bool,
    /// Whether it declares required pod anti-affinity (which binds pods that come after it).
    pub has_required_anti_affinity: bool,
    /// Its pod (anti-)affinity terms, parsed once (None when it declares none).
    pub affinity_terms: Option<Arc<PodAffinityTerms>>,
}

/// `namespace/name` of a pod.
pub fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

impl PodInfo {
    /// Computes the derived fields of `pod`.
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let spec = pod.spec.as_ref();
        let mut ports = Vec::new();
        let init_sidecars = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let containers = spec.map(|s| s.containers.iter()).into_iter().flatten();
        for c in containers.chain(init_sidecars) {
            for p in c.ports.iter().flatten() {
                if let Some(hp) = p.host_port.filter(|hp| *hp > 0) {
                    ports.push(HostPort {
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        ip: p
                            .host_ip
                            .clone()
                            .filter(|ip| !ip.is_empty())
                            .unwrap_or_else(|| "0.0.0.0".into()),
                        port: hp,
                    });
                }
            }
        }
        let affinity = spec.and_then(|s| s.affinity.as_ref());
        let has_affinity =
            affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some());
        let has_required_anti_affinity = affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|t| !t.is_empty());
        let affinity_terms = PodAffinityTerms::of(&pod).map(Arc::new);
        PodInfo {
            affinity_terms,
            has_affinity,
            has_required_anti_affinity,
            key: key_of(&pod),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            requests: pod_requests(&pod, false),
            non_zero: pod_requests(&pod, true),
            ports,
            pod,
        }
    }

    /// `spec.nodeName`, empty when unassigned.
    pub fn node_name(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("")
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or("")
    }
}

/// Whether the pod has finished (its resources are free again).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Whether this scheduler is responsible for `pod` (its `spec.schedulerName`, default-scheduler when
/// unset).
pub fn is_ours(pod: &Pod, scheduler_name: &str) -> bool {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_SCHEDULER_NAME);
    name == scheduler_name
}

/// Whether `spec.schedulingGates` holds the pod back.
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}
