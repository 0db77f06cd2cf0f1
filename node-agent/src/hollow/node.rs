//! One hollow node as the API sees it: its name (`<prefix>-<i>`), labels (the kubelet's, a zone and
//! region when asked, and [`LABEL`]), the status a kubelet registers with (capacity = allocatable as
//! given, the four conditions, nodeInfo, a loopback InternalIP), registration, and status writes.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use super::Options;
use crate::error::{Error, Result};
use crate::node::machine::Machine;
use crate::node::pressure::Signals;
use crate::node::register::{self, NodeConfig};
use crate::node::status::{self, RuntimeHealth};

/// The label every hollow node carries, valued with its prefix (the one Node watch selects on it).
pub const LABEL: &str = "node.keel.io/hollow";
/// The zone label (`--hollow-zones`).
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// The region label, set with the zone.
pub const REGION: &str = "topology.kubernetes.io/region";
/// The one region every zoned hollow node is in.
pub const REGION_NAME: &str = "region-0";
/// What nodeInfo says of the runtime: containerd's scheme, and a version that says it is not one.
pub const RUNTIME_VERSION: &str = "containerd://1.6.20-hollow";
/// Ephemeral storage each node offers (not configurable: nothing is ever written).
pub const EPHEMERAL_STORAGE: &str = "100Gi";
/// The conditions a hollow node owns, as the kubelet does; anything else in `status.conditions` is someone else's.
const OWNED: [(&str, &str); 4] = [
    ("MemoryPressure", "False"),
    ("DiskPressure", "False"),
    ("PIDPressure", "False"),
    ("Ready", "True"),
];

/// The name of node `i`.
pub fn name(prefix: &str, i: u32) -> String {
    format!("{prefix}-{i}")
}

/// The index of the node called `name`, when it is one of the `count` nodes of `prefix`.
pub fn index(prefix: &str, count: u32, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('-')?;
    // "07" is not node 7: only the canonical spelling names a node.
    if rest.len() > 1 && rest.starts_with('0') {
        return None;
    }
    rest.parse::<u32>().ok().filter(|i| *i < count)
}

/// The InternalIP of node `i`: 127.1.0.1 onwards, never a `.0` or `.255`, so whatever dials a
/// hollow node stays on this machine. Distinct for `i` below [`MAX_NODES`].
pub fn internal_ip(i: u32) -> Ipv4Addr {
    let host = (i % 254 + 1) as u8;
    let rest = i / 254;
    let third = (rest % 256) as u8;
    let second = (1 + rest / 256).min(255) as u8;
    Ipv4Addr::new(127, second, third, host)
}

/// How many nodes one process may simulate (the loopback addresses run out well after this).
pub const MAX_NODES: u32 = 1_000_000;

/// Labels of node `i`: the kubelet's, the zone and region when `zones` > 0, and [`LABEL`].
pub fn labels(opts: &Options, i: u32) -> BTreeMap<String, String> {
    let mut extra = BTreeMap::from([(LABEL.to_string(), opts.prefix.clone())]);
    if opts.zones > 0 {
        extra.insert(ZONE.into(), format!("zone-{}", i % opts.zones));
        extra.insert(REGION.into(), REGION_NAME.into());
    }
    register::standard_labels(&config(opts, i, extra))
}

fn config(opts: &Options, i: u32, labels: BTreeMap<String, String>) -> NodeConfig {
    NodeConfig {
        name: name(&opts.prefix, i),
        internal_ip: internal_ip(i).to_string(),
        pod_cidr: None,
        labels,
        taints: vec![],
        port: opts.kubelet_port,
    }
}

fn hex_digest(data: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn uuid_of(hex: &str) -> String {
    let h = |r: std::ops::Range<usize>| hex.get(r).unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}",
        h(0..8),
        h(8..12),
        h(12..16),
        h(16..20),
        h(20..32)
    )
}

/// What the machine-wide parts of every node's status need: this machine's kernel and OS, and a
/// token standing for this boot of the process (nodeInfo.bootID changes when a kubelet's machine reboots).
#[derive(Debug, Clone)]
pub struct Host {
    /// This machine, for kernelVersion and osImage.
    pub machine: Machine,
    /// Distinct per start of the process.
    pub boot: String,
}

/// The status node `i` reports; its conditions turned what they are at `since`.
pub fn status(opts: &Options, host: &Host, i: u32, since: Timestamp) -> NodeStatus {
    let name = name(&opts.prefix, i);
    let id = hex_digest(&name);
    let machine = Machine {
        machine_id: id.get(..32).unwrap_or_default().to_string(),
        system_uuid: uuid_of(&id),
        boot_id: uuid_of(&hex_digest(&format!("{name}/{}", host.boot))),
        ..host.machine.clone()
    };
    let rt = RuntimeHealth {
        version: RUNTIME_VERSION.into(),
        not_ready: None,
        images: vec![],
    };
    let cfg = config(opts, i, BTreeMap::new());
    let mut s = status::compute(&machine, &cfg, &rt, &Signals::default(), None);
    for c in s.conditions.iter_mut().flatten() {
        c.last_transition_time = Some(Time(since));
    }
    let resources = BTreeMap::from([
        ("cpu".to_string(), Quantity(opts.cpu.clone())),
        ("memory".to_string(), Quantity(opts.memory.clone())),
        ("pods".to_string(), Quantity(opts.pods.to_string())),
        (
            "ephemeral-storage".to_string(),
            Quantity(EPHEMERAL_STORAGE.into()),
        ),
        ("hugepages-1Gi".to_string(), Quantity("0".into())),
        ("hugepages-2Mi".to_string(), Quantity("0".into())),
    ]);
    s.capacity = Some(resources.clone());
    s.allocatable = Some(resources);
    s
}

/// The Node object node `i` registers with, status included (a Node may be created with its status).
pub fn initial(opts: &Options, host: &Host, i: u32, now: Timestamp) -> Node {
    let mut n = register::initial_node(&config(opts, i, BTreeMap::new()));
    n.metadata.labels = Some(labels(opts, i));
    n.status = Some(status(opts, host, i, now));
    n
}

/// Whether the conditions a kubelet owns say what a hollow node says (someone else, such as the node
/// lifecycle controller marking them Unknown, may have changed them).
pub fn conditions_hold(node: &Node) -> bool {
    let conds = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    OWNED
        .iter()
        .all(|(ty, want)| conds.iter().any(|c| c.type_ == *ty && c.status == *want))
}

/// The Node's pod CIDR, when the cluster has set one.
pub fn pod_cidr(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidr.as_deref())
        .filter(|c| !c.is_empty())
}

/// Whether an API error is worth retrying (the server is busy or away) rather than a refusal.
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        _ => true,
    }
}

/// Creates node `i`, or adopts the Node of that name (labels and status brought up to date, as a
/// restarted kubelet does); returns it.
pub async fn register(client: &Client, opts: &Options, host: &Host, i: u32) -> Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = Timestamp::now();
    let node = initial(opts, host, i, now);
    let name = name(&opts.prefix, i);
    match nodes.create(&PostParams::default(), &node).await {
        Ok(n) => Ok(n),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let what = || format!("adopting node {name}");
            let patch = json!({"metadata": {"labels": labels(opts, i)}});
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::kube(what(), e))?;
            write_status(client, &name, &status(opts, host, i, now)).await
        }
        Err(e) => Err(Error::kube(format!("registering node {name}"), e)),
    }
}

/// Writes `status` to the Node as the kubelet does: a strategic merge patch, so conditions merge by
/// type and those of others stay.
pub async fn write_status(client: &Client, name: &str, status: &NodeStatus) -> Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({ "status": status })),
        )
        .await
        .map_err(|e| Error::kube(format!("updating node {name} status"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(zones: u32) -> Options {
        Options {
            zones,
            ..Options::new(5000)
        }
    }

    #[test]
    fn names_and_indexes_round_trip() {
        assert_eq!(name("hollow", 7), "hollow-7");
        assert_eq!(index("hollow", 10, "hollow-7"), Some(7));
        assert_eq!(index("hollow", 10, "hollow-10"), None);
        assert_eq!(index("hollow", 10, "hollow-07"), None);
        assert_eq!(index("hollow", 10, "hollow-0"), Some(0));
        assert_eq!(index("hollow", 10, "hollowx-1"), None);
        assert_eq!(index("hollow", 10, "hollow-"), None);
        assert_eq!(index("hollow", 10, "hollow--1"), None);
        assert_eq!(index("hol", 10, "hollow-1"), None);
    }

    #[test]
    fn internal_ips_are_loopback_distinct_and_never_0_or_255() {
        let mut seen = std::collections::HashSet::new();
        for i in (0..200_000).chain(MAX_NODES - 1000..MAX_NODES) {
            let ip = internal_ip(i);
            assert!(ip.is_loopback());
            let last = ip.octets()[3];
            assert!(last != 0 && last != 255, "{ip}");
            assert!(seen.insert(ip), "{ip} twice");
        }
        assert_eq!(internal_ip(0), Ipv4Addr::new(127, 1, 0, 1));
        assert_eq!(internal_ip(254), Ipv4Addr::new(127, 1, 1, 1));
    }

    #[test]
    fn labels_carry_zones_when_asked() {
        let l = labels(&opts(3), 7);
        assert_eq!(l["kubernetes.io/hostname"], "hollow-7");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert!(l.contains_key("kubernetes.io/arch"));
        assert_eq!(l[ZONE], "zone-1");
        assert_eq!(l[REGION], REGION_NAME);
        assert_eq!(l[LABEL], "hollow");
        assert!(!labels(&opts(0), 7).contains_key(ZONE));
    }

    #[test]
    fn status_is_a_ready_kubelets() {
        let host = Host {
            machine: Machine::read(std::path::Path::new("/")),
            boot: "b".into(),
        };
        let since = Timestamp::from_second(1_700_000_000).unwrap();
        let s = status(&opts(0), &host, 3, since);
        let cap = s.capacity.clone().unwrap();
        assert_eq!(cap["cpu"].0, "8");
        assert_eq!(cap["memory"].0, "32Gi");
        assert_eq!(cap["pods"].0, "110");
        assert_eq!(s.allocatable, s.capacity);
        let node = Node {
            status: Some(s.clone()),
            ..Default::default()
        };
        assert!(conditions_hold(&node));
        for c in s.conditions.as_deref().unwrap() {
            assert_eq!(c.last_transition_time, Some(Time(since)));
        }
        let addrs = s.addresses.unwrap();
        assert_eq!(addrs[0].type_, "InternalIP");
        assert_eq!(addrs[0].address, "127.1.0.4");
        let info = s.node_info.unwrap();
        assert_eq!(info.container_runtime_version, RUNTIME_VERSION);
        assert_eq!(info.machine_id.len(), 32);
        let other = status(&opts(0), &host, 4, since).node_info.unwrap();
        assert_ne!(info.system_uuid, other.system_uuid);
        assert_ne!(info.boot_id, other.boot_id);
        let mut unknown = node.clone();
        for c in unknown
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
        {
            if c.type_ == "Ready" {
                c.status = "Unknown".into();
            }
        }
        assert!(!conditions_hold(&unknown));
    }
}
