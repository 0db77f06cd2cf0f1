//! The scheduler's plugins and preemption end to end, on hollow nodes (`keel agent --hollow`, which
//! registers nodes, renews their Leases, reports bound pods Running and completes graceful deletion):
//! tolerations, a pod too large until a node that fits joins, required anti-affinity, a zone spread
//! constraint, preemption by a higher PriorityClass, and a burst
//! of pods across a SIGKILL of the Raft leader, every pod bound exactly once. Everything is seen
//! through the real kubectl. Tests on the shared 3-member cluster take turns, each with its own hollow
//! process whose nodes it deletes when done.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

static TURN: Mutex<()> = Mutex::new(());

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

/// A `keel agent --hollow` process and the nodes it registered; both gone when dropped.
struct Hollow {
    kubeconfig: std::path::PathBuf,
    log: std::path::PathBuf,
    child: Child,
    nodes: Vec<String>,
}

impl Hollow {
    /// `n` hollow nodes `<prefix>-<i>` of `cpu` cpus over `zones` zones, registered through member
    /// `member`, waited for until Ready.
    fn start(
        c: &KubeCluster,
        member: usize,
        prefix: &str,
        n: usize,
        cpu: &str,
        zones: usize,
    ) -> Hollow {
        let log_path = c.dir().join(format!("hollow-{prefix}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(keel_bin!())
            .args([
                "agent",
                "--hollow",
                &n.to_string(),
                "--hollow-prefix",
                prefix,
            ])
            .args(["--hollow-cpu", cpu, "--hollow-zones", &zones.to_string()])
            .arg("--kubeconfig")
            .arg(c.member(member).kubeconfig())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let h = Hollow {
            kubeconfig: c.member(member).kubeconfig(),
            log: log_path,
            child,
            nodes: (0..n).map(|i| format!("{prefix}-{i}")).collect(),
        };
        for node in &h.nodes {
            c.wait_until(&format!("hollow node {node} Ready"), WAIT, || {
                c.kubectl(
                    0,
                    &[
                        "get",
                        "node",
                        node,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                    ],
                )
                .stdout
                .trim()
                    == "True"
            });
        }
        h
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Hollow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "node", "--wait=false", "--request-timeout=20s"])
            .args(&self.nodes)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn namespace(c: &KubeCluster, ns: &str) {
    let _ = c.kubectl(0, &["delete", "namespace", ns, "--wait=true"]);
    c.ok(0, &["create", "namespace", ns]);
}

/// The pods of `ns` through member `i`; none while the member cannot answer (an election).
fn pods(c: &KubeCluster, i: usize, ns: &str) -> Vec<Value> {
    let r = c.kubectl(i, &["get", "pods", "-n", ns, "-o", "json"]);
    if !r.ok {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

fn node_labels(c: &KubeCluster, label: &str) -> BTreeMap<String, String> {
    let v: Value = serde_json::from_str(&c.ok(0, &["get", "nodes", "-o", "json"])).unwrap();
    v["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|n| {
            Some((
                n["metadata"]["name"].as_str()?.to_string(),
                n["metadata"]["labels"][label].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// `phase/nodeName` of pod `name` in `ns` (`/` while it has neither).
fn placement(c: &KubeCluster, ns: &str, name: &str) -> String {
    c.kubectl(
        0,
        &[
            "get",
            "pod",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.status.phase}/{.spec.nodeName}",
        ],
    )
    .stdout
    .trim()
    .to_string()
}

fn apply(c: &KubeCluster, yaml: &str) {
    c.ok_stdin(0, &["apply", "-f", "-"], Some(yaml));
}

#[test]
fn required_anti_affinity_puts_one_replica_per_node() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "anti");
    let _h = Hollow::start(c, 0, "anti", 3, "8", 0);
    apply(
        c,
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: anti}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
      containers: [{name: c, image: registry.k8s.io/pause:3.9}]
"#,
    );
    let mut placed = Vec::new();
    let mut pending = Vec::new();
    c.wait_until("three replicas Running and one Pending", WAIT, || {
        let ps = pods(c, 0, "anti");
        placed = ps
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect();
        pending = ps
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        placed.len() == 3 && pending.len() == 1
    });
    let distinct: BTreeSet<&String> = placed.iter().collect();
    assert_eq!(distinct.len(), 3, "one replica per node: {placed:?}");
    // The tests take turns and delete their nodes, so these three are all the cluster has.
    let want = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
                preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.";
    let name = pending[0].clone();
    c.wait_until(&format!("FailedScheduling of {name}: {want}"), WAIT, || {
        c.event_messages(0, "anti", &name, "FailedScheduling")
            .iter()
            .any(|m| m == want)
    });
    c.ok(0, &["delete", "namespace", "anti", "--wait=false"]);
}

#[test]
fn a_zone_spread_constraint_evens_out_the_zones() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "spread");
    // Two big nodes in zone-0, which LeastAllocated alone would fill first, and one small node in
    // each of zone-1 and zone-2 (plus a small one in zone-0).
    let _big = Hollow::start(c, 0, "big", 2, "64", 1);
    let _small = Hollow::start(c, 0, "small", 4, "2", 3);
    let zones = node_labels(c, "topology.kubernetes.io/zone");
    assert_eq!(zones.get("big-1").map(String::as_str), Some("zone-0"));
    assert_eq!(zones.get("small-1").map(String::as_str), Some("zone-1"));
    apply(
        c,
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: spread}
spec:
  replicas: 9
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: spread}}
      containers:
      - name: c
        image: registry.k8s.io/pause:3.9
        resources: {requests: {cpu: 100m}}
"#,
    );
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    c.wait_until("nine pods Running", WAIT, || {
        let running: Vec<String> = pods(c, 0, "spread")
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect();
        per_zone.clear();
        for n in &running {
            *per_zone
                .entry(zones.get(n).cloned().unwrap_or_default())
                .or_default() += 1;
        }
        running.len() == 9
    });
    assert_eq!(
        per_zone,
        BTreeMap::from([
            ("zone-0".to_string(), 3),
            ("zone-1".to_string(), 3),
            ("zone-2".to_string(), 3)
        ])
    );
    c.ok(0, &["delete", "namespace", "spread", "--wait=false"]);
}

#[test]
fn a_higher_priority_pod_preempts_a_lower_one() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "preempt");
    let _ = c.kubectl(0, &["delete", "priorityclass", "bench-low", "bench-high"]);
    c.ok(0, &["create", "priorityclass", "bench-low", "--value=100"]);
    c.ok(
        0,
        &["create", "priorityclass", "bench-high", "--value=1000"],
    );
    let h = Hollow::start(c, 0, "pre", 1, "2", 0);
    let pod = |name: &str, class: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: preempt}}\nspec:\n  priorityClassName: {class}\n  \
             nodeSelector: {{kubernetes.io/hostname: pre-0}}\n  \
             containers: [{{name: c, image: registry.k8s.io/pause:3.9, resources: {{requests: {{cpu: 1500m}}}}}}]\n"
        )
    };
    apply(c, &pod("low", "bench-low"));
    c.wait_until("low Running on pre-0", WAIT, || {
        placement(c, "preempt", "low") == "Running/pre-0"
    });
    assert_eq!(
        c.ok(
            0,
            &[
                "get",
                "pod",
                "low",
                "-n",
                "preempt",
                "-o",
                "jsonpath={.spec.priority}"
            ]
        )
        .trim(),
        "100"
    );
    apply(c, &pod("high", "bench-high"));
    let uid = c
        .ok(
            0,
            &[
                "get",
                "pod",
                "high",
                "-n",
                "preempt",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
        )
        .trim()
        .to_string();
    c.wait_until("high Running on pre-0", WAIT, || {
        placement(c, "preempt", "high") == "Running/pre-0"
    });
    let gone = c.kubectl(0, &["get", "pod", "low", "-n", "preempt"]);
    assert!(!gone.ok, "the victim is deleted: {}", gone.stdout);
    assert_eq!(
        c.event_messages(0, "preempt", "low", "Preempted"),
        vec![format!("Preempted by pod {uid} on node pre-0")],
        "hollow log:\n{}",
        h.log()
    );
    let failed = c.event_messages(0, "preempt", "high", "FailedScheduling");
    assert!(
        failed
            .iter()
            .any(|m| m == "0/1 nodes are available: 1 Insufficient cpu."),
        "the preemptor's first attempt failed without a preemption part: {failed:?}"
    );
    // The leader's /metrics counted the preemption, its victim and the scheduled attempts.
    let scraped: Vec<String> = (0..3)
        .map(|i| c.ok(i, &["get", "--raw", "/metrics"]))
        .collect();
    let value = |text: &str, series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    };
    assert!(
        scraped
            .iter()
            .any(|t| value(t, "scheduler_preemption_attempts_total ") >= 1.0
                && value(t, "scheduler_preemption_victims_count ") >= 1.0
                && value(
                    t,
                    "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} "
                ) >= 2.0),
        "no member shows the preemption in /metrics"
    );
    drop(h);
    c.ok(0, &["delete", "namespace", "preempt", "--wait=false"]);
    c.ok(0, &["delete", "priorityclass", "bench-low", "bench-high"]);
}

#[test]
fn only_pods_that_tolerate_the_taint_land_on_the_tainted_node() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "taint");
    let _h = Hollow::start(c, 0, "taint", 2, "8", 0);
    c.ok(0, &["taint", "node", "taint-0", "dedicated=db:NoSchedule"]);
    let pod = |name: &str, node: &str, tolerate: bool| {
        let toleration = if tolerate {
            "  tolerations: [{key: dedicated, operator: Equal, value: db, effect: NoSchedule}]\n"
        } else {
            ""
        };
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: taint}}\nspec:\n{toleration}  \
             nodeSelector: {{kubernetes.io/hostname: {node}}}\n  \
             containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]\n"
        )
    };
    apply(c, &pod("tolerant", "taint-0", true));
    apply(c, &pod("plain", "taint-0", false));
    apply(c, &pod("elsewhere", "taint-1", false));
    for name in ["tolerant", "elsewhere"] {
        c.wait_until(&format!("{name} Running"), WAIT, || {
            placement(c, "taint", name).starts_with("Running/")
        });
    }
    let want = "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
                1 node(s) had untolerated taint {dedicated: db}. preemption: 0/2 nodes are available: \
                2 Preemption is not helpful for scheduling.";
    c.wait_until(&format!("FailedScheduling of plain: {want}"), WAIT, || {
        c.event_messages(0, "taint", "plain", "FailedScheduling")
            .iter()
            .any(|m| m == want)
    });
    assert_eq!(
        c.ok(
            0,
            &[
                "get",
                "pod",
                "plain",
                "-n",
                "taint",
                "-o",
                "jsonpath={.spec.nodeName}"
            ]
        )
        .trim(),
        ""
    );
    c.ok(0, &["delete", "namespace", "taint", "--wait=false"]);
}

#[test]
fn a_too_large_pod_waits_for_a_node_that_fits() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "large");
    let _small = Hollow::start(c, 0, "small", 2, "2", 0);
    apply(
        c,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: large}\nspec:\n  \
         containers: [{name: c, image: registry.k8s.io/pause:3.9, resources: {requests: {cpu: '6'}}}]\n",
    );
    let want = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: \
                2 No preemption victims found for incoming pod.";
    c.wait_until(&format!("FailedScheduling of big: {want}"), WAIT, || {
        c.event_messages(0, "large", "big", "FailedScheduling")
            .iter()
            .any(|m| m == want)
    });
    let condition = c.ok(
        0,
        &[
            "get",
            "pod",
            "big",
            "-n",
            "large",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        ],
    );
    assert_eq!(condition.trim(), "Unschedulable");
    // A node big enough joins: the pod is scheduled there without being touched.
    let _big = Hollow::start(c, 0, "huge", 1, "8", 0);
    c.wait_until("big Running on huge-0", WAIT, || {
        placement(c, "large", "big") == "Running/huge-0"
    });
    c.ok(0, &["delete", "namespace", "large", "--wait=false"]);
}

/// kill -9 of the leader while a burst of pods is scheduled: the new leader's scheduler picks up
/// where the old one stopped and every pod is bound once, to one node, with at most one `Scheduled`
/// Event (the old leader may have bound a pod and died before its Event).
#[test]
fn a_burst_survives_the_leader_being_killed_and_binds_every_pod_once() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = KubeCluster::start(keel_bin!(), 3);
    let leader = c.cluster_mut().leader().expect("a leader");
    let s = (leader + 1) % 3;
    c.ok(s, &["create", "namespace", "burst"]);
    let h = Hollow::start(&c, s, "burst", 10, "8", 0);
    let total = 150;
    // One YAML stream of pods (a `kind: List` would make kubectl validate against the protobuf
    // OpenAPI v2 document, which keel does not serve).
    let list: String = (0..total)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: burst}}\nspec:\n  \
                 containers: [{{name: c, image: registry.k8s.io/pause:3.9, resources: {{requests: {{cpu: 10m}}}}}}]\n"
            )
        })
        .collect();
    c.ok_stdin(s, &["create", "-f", "-"], Some(&list));
    // Kill as soon as the scheduler has started binding.
    c.wait_until("the first bindings", WAIT, || {
        pods(&c, s, "burst")
            .iter()
            .any(|p| !p["spec"]["nodeName"].is_null())
    });
    c.cluster_mut().kill9(leader);
    c.wait_until("every pod Running", Duration::from_secs(180), || {
        pods(&c, s, "burst")
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
            == total
    });
    let ps = pods(&c, s, "burst");
    assert_eq!(ps.len(), total);
    let v: Value =
        serde_json::from_str(&c.ok(s, &["get", "events", "-n", "burst", "-o", "json"])).unwrap();
    let mut scheduled: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in v["items"].as_array().cloned().unwrap_or_default() {
        if e["reason"] == "Scheduled" {
            scheduled
                .entry(
                    e["involvedObject"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
                .or_default()
                .push(e["message"].as_str().unwrap_or("").to_string());
        }
    }
    for p in &ps {
        let name = p["metadata"]["name"].as_str().unwrap();
        let node = p["spec"]["nodeName"].as_str().unwrap();
        let evs = scheduled.get(name).cloned().unwrap_or_default();
        assert!(evs.len() <= 1, "{name} scheduled more than once: {evs:?}");
        for m in evs {
            assert_eq!(m, format!("Successfully assigned burst/{name} to {node}"));
        }
    }
    drop(h);
    c.cluster_mut().restart(leader);
}
