//! The Node's `status` as the kubelet computes it: capacity and allocatable from the machine (memory
//! less the 100 Mi hard-eviction threshold, storage less 10 %, 110 pods), addresses, the agent's port,
//! nodeInfo, the runtime's images (50 largest), and the Ready / MemoryPressure / DiskPressure /
//! PIDPressure conditions. Written every 10 s when it changed and at least every 5 min; a condition's
//! lastTransitionTime moves only when its status does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tracing::{debug, warn};

use super::machine::Machine;
use super::register::NodeConfig;
use crate::cri::Cri;
use crate::error::{Error, Result};

/// How often the status is computed.
pub const UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// How often it is written even when nothing changed.
pub const REPORT_FREQUENCY: Duration = Duration::from_secs(300);
/// The agent's version, as `/version` of the API server says it.
pub const KUBELET_VERSION: &str = "v1.32.0-keel";
/// Pods per node.
pub const MAX_PODS: u64 = 110;

const OWNED: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The runtime's state as the Ready condition needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeHealth {
    /// `containerd://1.6.20`.
    pub version: String,
    /// Empty when ready, else the reason the node is not.
    pub not_ready: Option<String>,
    /// The runtime's images.
    pub images: Vec<ContainerImage>,
}

/// Asks the runtime how it is.
pub async fn runtime_health(cri: &Cri, network_ready_needed: bool) -> RuntimeHealth {
    let version = match cri.version().await {
        Ok(v) => format!("{}://{}", v.runtime_name, v.runtime_version),
        Err(e) => {
            return RuntimeHealth {
                version: String::new(),
                not_ready: Some(format!("container runtime is down: {e}")),
                images: vec![],
            }
        }
    };
    let not_ready = match cri.status().await {
        Err(e) => Some(format!(
            "container runtime status check may not have completed yet: {e}"
        )),
        Ok(st) => {
            let cond = |t: &str| st.conditions.iter().find(|c| c.r#type == t).cloned();
            match (cond("RuntimeReady"), cond("NetworkReady")) {
                (Some(r), _) if !r.status => Some(format!(
                    "container runtime not ready: RuntimeReady=false reason:{} message:{}",
                    r.reason, r.message
                )),
                (_, Some(n)) if !n.status && network_ready_needed => Some(format!(
                    "container runtime network not ready: NetworkReady=false reason:{} message:{}",
                    n.reason, n.message
                )),
                _ => None,
            }
        }
    };
    let mut images: Vec<ContainerImage> = cri
        .list_images()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let mut names: Vec<String> = i.repo_digests.clone();
            names.extend(i.repo_tags.clone());
            ContainerImage {
                names: Some(names),
                size_bytes: i64::try_from(i.size).ok(),
            }
        })
        .collect();
    images.sort_by_key(|i| std::cmp::Reverse(i.size_bytes));
    images.truncate(50);
    RuntimeHealth {
        version,
        not_ready,
        images,
    }
}

fn q(s: String) -> Quantity {
    Quantity(s)
}

/// Capacity and allocatable of `m`.
pub fn resources(m: &Machine) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let cap = BTreeMap::from([
        ("cpu".to_string(), q(m.cpus.to_string())),
        (
            "memory".to_string(),
            q(format!("{}Ki", m.memory_bytes / 1024)),
        ),
        (
            "ephemeral-storage".to_string(),
            q(format!("{}Ki", m.storage_bytes / 1024)),
        ),
        ("pods".to_string(), q(MAX_PODS.to_string())),
        ("hugepages-2Mi".to_string(), q("0".into())),
    ]);
    let mem = m.memory_bytes.saturating_sub(100 << 20);
    let storage = m.storage_bytes / 10 * 9;
    let mut alloc = cap.clone();
    alloc.insert("memory".into(), q(format!("{}Ki", mem / 1024)));
    alloc.insert("ephemeral-storage".into(), q(storage.to_string()));
    (cap, alloc)
}

/// The status `m`, `cfg` and the runtime add up to; conditions keep their transition times from `prev`.
pub fn compute(
    m: &Machine,
    cfg: &NodeConfig,
    rt: &RuntimeHealth,
    signals: &super::pressure::Signals,
    prev: Option<&NodeStatus>,
) -> NodeStatus {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let prev_conds = prev.and_then(|p| p.conditions.clone()).unwrap_or_default();
    let cond = |ty: &str, status: &str, reason: &str, message: String| {
        let transition = prev_conds
            .iter()
            .find(|c| c.type_ == ty && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        NodeCondition {
            type_: ty.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(transition),
        }
    };
    let mut conditions = vec![
        match &signals.memory {
            None => cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available".into(),
            ),
            Some(why) => cond(
                "MemoryPressure",
                "True",
                "KubeletHasInsufficientMemory",
                why.clone(),
            ),
        },
        match &signals.disk {
            None => cond(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure".into(),
            ),
            Some(why) => cond(
                "DiskPressure",
                "True",
                "KubeletHasDiskPressure",
                why.clone(),
            ),
        },
        match &signals.pid {
            None => cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available".into(),
            ),
            Some(why) => cond(
                "PIDPressure",
                "True",
                "KubeletHasInsufficientPID",
                why.clone(),
            ),
        },
        match &rt.not_ready {
            None => cond(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status".into(),
            ),
            Some(why) => cond("Ready", "False", "KubeletNotReady", why.clone()),
        },
    ];
    // Conditions someone else owns (NetworkUnavailable) stay as they are.
    conditions.extend(
        prev_conds
            .iter()
            .filter(|c| !OWNED.contains(&c.type_.as_str()))
            .cloned(),
    );
    let (capacity, allocatable) = resources(m);
    NodeStatus {
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        conditions: Some(conditions),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: cfg.internal_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: cfg.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: cfg.port }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: crate::image::oci::oci_arch().into(),
            boot_id: m.boot_id.clone(),
            container_runtime_version: rt.version.clone(),
            kernel_version: m.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: m.machine_id.clone(),
            operating_system: "linux".into(),
            os_image: m.os_image.clone(),
            system_uuid: m.system_uuid.clone(),
        }),
        images: Some(rt.images.clone()),
        ..Default::default()
    }
}

/// Whether two statuses differ in more than heartbeat times.
pub fn changed(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// Writes `status` to the Node.
pub async fn write(client: &Client, name: &str, status: &NodeStatus) -> Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .map_err(|e| Error::kube(format!("updating node {name} status"), e))
}

/// Keeps the Node's status current for ever; `network_ready_needed` says whether NetworkReady counts.
pub async fn run(
    client: Client,
    cri: Cri,
    m: Machine,
    cfg: NodeConfig,
    mut last: Option<NodeStatus>,
) {
    let mut last_write: Option<Instant> = None;
    loop {
        let rt = runtime_health(&cri, true).await;
        let signals = super::pressure::read(&m.root, m.memory_bytes);
        let next = compute(&m, &cfg, &rt, &signals, last.as_ref());
        let due = last_write.is_none_or(|t| t.elapsed() >= REPORT_FREQUENCY)
            || last.as_ref().is_none_or(|l| changed(l, &next));
        if due {
            match write(&client, &cfg.name, &next).await {
                Ok(n) => {
                    debug!(node = %cfg.name, "node status written");
                    last = n.status;
                    last_write = Some(Instant::now());
                }
                Err(e) => warn!(node = %cfg.name, error = %e, "node status not written"),
            }
        }
        tokio::time::sleep(UPDATE_FREQUENCY).await;
    }
}
