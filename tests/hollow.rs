//! Hollow nodes for real: one keel member, `keel agent --hollow 50` as a child process against its
//! admin kubeconfig, and the real kubectl and `kube` crate looking at the result: 50 Ready nodes with
//! the capacity and zones asked for, Leases that keep being renewed, a Deployment whose 20 pods run with
//! distinct IPs from their nodes' podCIDRs, a pod with an init container, scaling to 0 finishing the
//! graceful deletions, and SIGTERM stopping the process cleanly while the Nodes stay.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::process::{Capture, Process};
use kube::api::{Api, ListParams};
use serde_json::Value;

const NODES: usize = 50;
const ZONES: usize = 3;
const NS: &str = "hollow-test";
/// Bounds on waits, so a broken build fails instead of hanging; never a measure of speed.
const WAIT: Duration = Duration::from_secs(120);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The cluster and the hollow process, whose log tail joins every failure message.
struct World {
    c: KubeCluster,
    hollow: Process,
}

impl World {
    fn fail(&self, msg: impl std::fmt::Display) -> ! {
        let log = self.hollow.stdout();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        self.c
            .fail(format!("{msg}\n--- keel agent --hollow ---\n{tail}"))
    }

    fn wait_until(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + WAIT;
        while !check() {
            if std::time::Instant::now() > deadline {
                self.fail(format!("timed out after {WAIT:?} waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.c.ok(0, args)).unwrap()
    }

    fn nodes(&self) -> Vec<Value> {
        let v = self.json(&[
            "get",
            "nodes",
            "-l",
            "node.keel.io/hollow=hollow",
            "-o",
            "json",
        ]);
        v["items"].as_array().cloned().unwrap_or_default()
    }
}

fn ready(n: &Value) -> bool {
    n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (base, prefix) = cidr.split_once('/').unwrap();
    let (base, prefix): (Ipv4Addr, u32) = (base.parse().unwrap(), prefix.parse().unwrap());
    let mask = u32::MAX << (32 - prefix);
    u32::from(ip.parse::<Ipv4Addr>().unwrap()) & mask == u32::from(base) & mask
}

/// renewTime of every hollow node's Lease.
async fn renew_times(client: &kube::Client) -> BTreeMap<String, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    leases
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|l| {
            l.metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with("hollow-")
        })
        .filter_map(|l| {
            let t = l.spec?.renew_time?;
            Some((l.metadata.name?, t.0.to_string()))
        })
        .collect()
}

#[test]
fn hollow_nodes_register_heartbeat_and_run_pods() {
    keel_testkit::kubectl::require_kubectl();
    // One runtime for the whole test: the client's connections live on it.
    let rt = rt();
    let c = KubeCluster::start(keel_bin!(), 1);
    let mut cmd = std::process::Command::new(keel_bin!());
    cmd.arg("agent")
        .arg("--kubeconfig")
        .arg(c.member(0).kubeconfig())
        .args(["--hollow", &NODES.to_string()])
        .args(["--hollow-zones", &ZONES.to_string()])
        .args([
            "--hollow-cpu",
            "4",
            "--hollow-memory",
            "16Gi",
            "--hollow-pods",
            "50",
        ])
        .args(["--log-level", "info"]);
    let hollow = Process::start(&mut cmd, Capture::Log(c.dir().join("hollow.log")), None)
        .unwrap_or_else(|e| c.fail(format!("cannot start keel agent --hollow: {e}")));
    // From here on the hollow process is killed by PID when `w` drops, on failure too.
    let mut w = World { c, hollow };

    // 50 nodes, Ready, with the capacity, labels and addresses asked for.
    w.wait_until("50 Ready hollow nodes", || {
        let nodes = w.nodes();
        nodes.len() == NODES && nodes.iter().all(ready)
    });
    let nodes = w.nodes();
    let mut internal_ips = HashSet::new();
    let mut per_zone = BTreeMap::new();
    for n in &nodes {
        let name = n["metadata"]["name"].as_str().unwrap();
        let i: usize = name.strip_prefix("hollow-").unwrap().parse().unwrap();
        assert!(i < NODES, "{name}");
        for key in ["capacity", "allocatable"] {
            let r = &n["status"][key];
            assert_eq!(r["cpu"], "4", "{name} {key}");
            assert_eq!(r["memory"], "16Gi", "{name} {key}");
            assert_eq!(r["pods"], "50", "{name} {key}");
        }
        let labels = &n["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/hostname"], name);
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert!(labels["kubernetes.io/arch"].is_string());
        let zone = format!("zone-{}", i % ZONES);
        assert_eq!(
            labels["topology.kubernetes.io/zone"],
            zone.as_str(),
            "{name}"
        );
        assert!(labels["topology.kubernetes.io/region"].is_string());
        *per_zone.entry(zone).or_insert(0) += 1;
        for ty in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            let cond = n["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == ty)
                .unwrap_or_else(|| panic!("{name} has no {ty}"));
            assert_eq!(cond["status"], "False", "{name} {ty}");
        }
        let ip = n["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["type"] == "InternalIP")
            .and_then(|a| a["address"].as_str())
            .unwrap()
            .to_string();
        assert!(
            ip.parse::<Ipv4Addr>().unwrap().is_loopback(),
            "{name}: {ip}"
        );
        assert!(internal_ips.insert(ip), "{name}: InternalIP used twice");
        assert!(n["status"]["nodeInfo"]["kubeletVersion"].is_string());
    }
    assert_eq!(per_zone.len(), ZONES, "{per_zone:?}");
    // kubectl's own view agrees.
    let table = w.c.ok(
        0,
        &["get", "nodes", "-l", "topology.kubernetes.io/zone=zone-0"],
    );
    assert_eq!(
        table.lines().filter(|l| l.contains(" Ready ")).count(),
        NODES.div_ceil(ZONES),
        "{table}"
    );

    // Every Lease is renewed again (the first renewal came with registration).
    let client = rt.block_on(w.c.client(0));
    let first = rt.block_on(renew_times(&client));
    assert_eq!(first.len(), NODES, "{first:?}");
    w.wait_until("every Lease renewed again", || {
        let now = rt.block_on(renew_times(&client));
        first
            .iter()
            .all(|(n, t)| now.get(n).is_some_and(|t2| t2 > t))
    });

    // A Deployment of 20 becomes available, its pods on distinct IPs of their nodes' ranges.
    w.c.ok(0, &["create", "namespace", NS]);
    w.c.ok(
        0,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            NS,
            "--image=registry.k8s.io/pause:3.9",
            "--replicas=20",
        ],
    );
    w.wait_until("deployment web 20/20 available", || {
        let d = w.json(&["get", "deployment", "web", "-n", NS, "-o", "json"]);
        d["status"]["availableReplicas"] == 20 && d["status"]["readyReplicas"] == 20
    });
    let cidrs: BTreeMap<String, String> = w
        .nodes()
        .iter()
        .map(|n| {
            (
                n["metadata"]["name"].as_str().unwrap().to_string(),
                n["spec"]["podCIDR"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = rt
        .block_on(pods.list(&ListParams::default()))
        .unwrap()
        .items;
    assert_eq!(list.len(), 20);
    let mut ips = HashSet::new();
    for p in &list {
        let name = p.metadata.name.clone().unwrap();
        let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
        let st = p.status.as_ref().unwrap();
        assert_eq!(st.phase.as_deref(), Some("Running"), "{name}");
        let ip = st.pod_ip.clone().unwrap();
        let cidr = &cidrs[&node];
        assert!(
            in_cidr(&ip, cidr),
            "{name} on {node}: {ip} is not in {cidr}"
        );
        assert!(ips.insert(ip.clone()), "{name}: {ip} given twice");
        assert!(st.host_ip.as_deref().unwrap().starts_with("127."), "{name}");
        assert!(st.start_time.is_some(), "{name}");
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready && cs.started == Some(true), "{name}: {cs:?}");
        assert!(cs.state.as_ref().unwrap().running.is_some(), "{name}");
        assert!(cs
            .container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://"));
        assert!(cs.image_id.contains("@sha256:"), "{name}: {}", cs.image_id);
        for ty in [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ] {
            assert!(
                st.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == ty && c.status == "True"),
                "{name}: {ty}"
            );
        }
    }

    // A pod with an init container: reported Completed, then the app container running.
    w.c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: with-init\n  namespace: {NS}\nspec:\n  initContainers:\n  - name: setup\n    image: busybox\n  containers:\n  - name: app\n    image: busybox\n"
        )),
    );
    w.wait_until("pod with-init Running", || {
        let p = w.json(&["get", "pod", "with-init", "-n", NS, "-o", "json"]);
        p["status"]["phase"] == "Running"
    });
    let p = w.json(&["get", "pod", "with-init", "-n", NS, "-o", "json"]);
    let init = &p["status"]["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(init["reason"], "Completed", "{p}");
    assert_eq!(init["exitCode"], 0, "{p}");
    let shown = w.c.ok(0, &["get", "pod", "with-init", "-n", NS]);
    assert!(shown.contains("Running"), "{shown}");

    // Scaling to 0 and deleting the pod: the graceful deletions finish (the kubelet's final delete).
    w.c.ok(0, &["scale", "deployment", "web", "-n", NS, "--replicas=0"]);
    w.c.ok(0, &["delete", "pod", "with-init", "-n", NS, "--wait=false"]);
    w.wait_until("every pod of the namespace gone", || {
        rt.block_on(pods.list(&ListParams::default()))
            .unwrap()
            .items
            .is_empty()
    });

    // SIGTERM: a clean exit, no panic anywhere, and the Nodes stay (as a stopped kubelet's do).
    match w.hollow.stop(WAIT) {
        Some((st, false)) if st.success() => {}
        other => w.fail(format!(
            "keel agent --hollow did not stop cleanly: {other:?}"
        )),
    }
    let log = w.hollow.stdout();
    assert!(!log.contains("panicked"), "{log}");
    assert!(log.contains("all hollow nodes registered"), "{log}");
    assert_eq!(w.nodes().len(), NODES);
    w.c.ok(0, &["get", "--raw", "/readyz"]);
    let server_log = w.c.member(0).log();
    assert!(!server_log.contains("panicked"), "the member panicked");
}
