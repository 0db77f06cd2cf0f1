//! A container's resources as CRI takes them: cpu requests as cgroup shares, cpu limits as a CFS
//! quota over a 100 ms period, memory limits in bytes; the pod's QoS class and its cgroup parent.

use k8s_cri::v1::LinuxContainerResources;
use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use keel_client_kit::qos::{self, QosClass};
use keel_client_kit::quantity;

use crate::error::{Error, Result};

fn get(c: &Container, which: &str, res: &str) -> Option<String> {
    let r = c.resources.as_ref()?;
    let m = if which == "limits" {
        r.limits.as_ref()?
    } else {
        r.requests.as_ref()?
    };
    m.get(res).map(|q| q.0.clone())
}

/// CRI resources of `c`.
pub fn linux(c: &Container) -> LinuxContainerResources {
    let req_cpu = get(c, "requests", "cpu").or_else(|| get(c, "limits", "cpu"));
    let shares = req_cpu
        .and_then(|q| quantity::milli(&q))
        .map_or(2, |m| (m * 1024 / 1000).max(2));
    let (quota, period) = match get(c, "limits", "cpu").and_then(|q| quantity::milli(&q)) {
        Some(m) => ((m * 100_000 / 1000).max(1000), 100_000),
        None => (0, 0),
    };
    let mem = get(c, "limits", "memory")
        .and_then(|q| quantity::value(&q))
        .unwrap_or(0);
    LinuxContainerResources {
        cpu_shares: shares,
        cpu_quota: quota,
        cpu_period: period,
        memory_limit_in_bytes: mem,
        oom_score_adj: 0,
        ..Default::default()
    }
}

/// The class the API server recorded in `status.qosClass`, else computed by the same rule
/// (`keel_client_kit::qos`), as upstream's kubelet reads it.
pub fn qos_class(pod: &Pod) -> &'static str {
    let recorded = pod.status.as_ref().and_then(|s| s.qos_class.as_deref());
    match recorded {
        Some("Guaranteed") => QosClass::Guaranteed,
        Some("Burstable") => QosClass::Burstable,
        Some("BestEffort") => QosClass::BestEffort,
        _ => pod.spec.as_ref().map_or(QosClass::BestEffort, qos::of_spec),
    }
    .as_str()
}

/// The pod's cgroup parent under the cgroupfs driver.
pub fn cgroup_parent(pod: &Pod) -> String {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    match qos_class(pod) {
        "Guaranteed" => format!("/kubepods/pod{uid}"),
        "Burstable" => format!("/kubepods/burstable/pod{uid}"),
        _ => format!("/kubepods/besteffort/pod{uid}"),
    }
}

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Removes the pod-level cgroups of pod `uid` (the runtime removes the containers' own, the pod's
/// directories are the agent's to remove, as the kubelet's). Works on v1 (one hierarchy per controller)
/// and v2 (one unified tree); a cgroup still holding processes stays, and is reported.
pub fn remove_pod_cgroups(uid: &str) -> usize {
    if uid.is_empty() || uid.contains('/') || uid.contains("..") {
        return 0;
    }
    let mut hierarchies = vec![std::path::PathBuf::from(CGROUP_ROOT)];
    if let Ok(entries) = std::fs::read_dir(CGROUP_ROOT) {
        hierarchies.extend(entries.flatten().map(|e| e.path()));
    }
    let mut removed = 0;
    for h in hierarchies {
        for qos in ["", "burstable/", "besteffort/"] {
            let dir = h.join(format!("kubepods/{qos}pod{uid}"));
            if !dir.is_dir() {
                continue;
            }
            match std::fs::remove_dir(&dir) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::debug!(cgroup = %dir.display(), error = %e, "pod cgroup not removed")
                }
            }
        }
    }
    removed
}

/// What a resourceFieldRef names, in its divisor (default 1); a missing limit is the node's capacity.
pub fn field(
    c: &Container,
    r: &ResourceFieldSelector,
    node_cpus: u64,
    node_mem: u64,
) -> Result<String> {
    let (which, res) = r
        .resource
        .split_once('.')
        .ok_or_else(|| Error::Config(format!("unsupported resourceFieldRef {:?}", r.resource)))?;
    let divisor = r
        .divisor
        .as_ref()
        .map(|d| d.0.clone())
        .unwrap_or_else(|| "1".into());
    let raw = get(c, which, res);
    let out = match res {
        "cpu" => {
            let milli = raw
                .and_then(|q| quantity::milli(&q))
                .unwrap_or(node_cpus as i64 * 1000);
            let div = quantity::milli(&divisor).filter(|d| *d > 0).unwrap_or(1000);
            (milli + div - 1) / div
        }
        _ => {
            let v = raw
                .and_then(|q| quantity::value(&q))
                .unwrap_or(if res == "memory" { node_mem as i64 } else { 0 });
            let div = quantity::value(&divisor).filter(|d| *d > 0).unwrap_or(1);
            (v + div - 1) / div
        }
    };
    Ok(out.to_string())
}
