//! The scheduler on a 3-member cluster, seen through the real kubectl and the `kube` crate. Nodes are
//! made by hand (allocatable posted as a kubelet would, kept Ready by a [`Heartbeat`]); the scheduler
//! runs on the Raft leader. The tests share one cluster and take turns (a lock), each removing its
//! nodes when done, so every FailedScheduling message counts only the nodes of the test that reads it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use keel_testkit::heartbeat::Heartbeat;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

static TURN: Mutex<()> = Mutex::new(());

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Nodes a test made: kept Ready while it runs, deleted when it ends.
struct Nodes {
    c: &'static KubeCluster,
    names: Vec<String>,
    beats: Vec<Heartbeat>,
}

impl Nodes {
    fn new(c: &'static KubeCluster) -> Nodes {
        Nodes {
            c,
            names: Vec::new(),
            beats: Vec::new(),
        }
    }

    /// A node with `cpu` and `memory` allocatable (110 pods), `labels` and `taints`, kept Ready.
    fn add(&mut self, name: &str, cpu: &str, memory: &str, labels: Value, taints: Value) {
        make_node(self.c, name, cpu, memory, labels, taints);
        self.names.push(name.to_string());
        self.beats.push(Heartbeat::start(self.c, name));
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for b in self.beats.drain(..) {
            b.stop();
        }
        for n in &self.names {
            let _ = self.c.kubectl(0, &["delete", "node", n, "--wait=false"]);
        }
    }
}

/// Creates a Node and posts its capacity and allocatable as its kubelet would.
fn make_node(c: &KubeCluster, name: &str, cpu: &str, memory: &str, labels: Value, taints: Value) {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
    });
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&node.to_string()));
    let alloc = json!({"cpu": cpu, "memory": memory, "pods": "110"});
    let status = json!({"status": {"capacity": alloc, "allocatable": alloc}});
    rt().block_on(async {
        let nodes: Api<Node> = Api::all(c.client(0).await);
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    });
}

fn namespace(c: &KubeCluster, ns: &str) {
    let _ = c.kubectl(0, &["delete", "namespace", ns, "--wait=true"]);
    c.ok(0, &["create", "namespace", ns]);
}

/// A pod of one pause container requesting `cpu`, with `extra` YAML under `spec`.
fn pod(c: &KubeCluster, ns: &str, name: &str, cpu: &str, extra: &str) {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{extra}  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.9\n    resources:\n      requests:\n        cpu: \"{cpu}\"\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&yaml));
}

fn node_of(c: &KubeCluster, ns: &str, name: &str) -> String {
    c.ok(
        0,
        &[
            "get",
            "pod",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.nodeName}",
        ],
    )
    .trim()
    .to_string()
}

fn wait_bound(c: &KubeCluster, ns: &str, name: &str) -> String {
    let mut node = String::new();
    c.wait_until(&format!("{ns}/{name} bound"), WAIT, || {
        node = node_of(c, ns, name);
        !node.is_empty()
    });
    node
}

fn wait_failed_scheduling(c: &KubeCluster, ns: &str, name: &str, want: &str) {
    c.wait_until(
        &format!("FailedScheduling of {ns}/{name}: {want}"),
        WAIT,
        || {
            c.event_messages(0, ns, name, "FailedScheduling")
                .iter()
                .any(|m| m == want)
        },
    );
}

fn condition(c: &KubeCluster, ns: &str, name: &str) -> Value {
    let v: Value =
        serde_json::from_str(&c.ok(0, &["get", "pod", name, "-n", ns, "-o", "json"])).unwrap();
    v["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled").cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn a_pod_lands_on_the_only_node_that_fits() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "sched-fit");
    let mut nodes = Nodes::new(c);
    nodes.add("fit-small-1", "1", "2Gi", json!({}), json!([]));
    nodes.add("fit-small-2", "1", "2Gi", json!({}), json!([]));
    nodes.add("fit-big", "4", "8Gi", json!({}), json!([]));
    pod(c, "sched-fit", "needs-two", "2", "");
    assert_eq!(wait_bound(c, "sched-fit", "needs-two"), "fit-big");
    let scheduled = condition(c, "sched-fit", "needs-two");
    assert_eq!(scheduled["status"], "True", "{scheduled}");
    c.wait_until("the Scheduled event", WAIT, || {
        c.event_messages(0, "sched-fit", "needs-two", "Scheduled")
            .iter()
            .any(|m| m == "Successfully assigned sched-fit/needs-two to fit-big")
    });
    // The big node now has 2 of 4 cpus left: a second 3-cpu pod fits nowhere.
    pod(c, "sched-fit", "needs-three", "3", "");
    wait_failed_scheduling(
        c,
        "sched-fit",
        "needs-three",
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
    );
    c.ok(0, &["delete", "namespace", "sched-fit", "--wait=false"]);
}

#[test]
fn tolerations_decide_who_goes_on_a_tainted_node() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "sched-taint");
    let mut nodes = Nodes::new(c);
    let taint = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
    nodes.add("taint-1", "4", "8Gi", json!({}), taint.clone());
    nodes.add("taint-2", "4", "8Gi", json!({}), taint);
    pod(c, "sched-taint", "intolerant", "100m", "");
    let want = "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: db}. \
                preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.";
    wait_failed_scheduling(c, "sched-taint", "intolerant", want);
    let cond = condition(c, "sched-taint", "intolerant");
    assert_eq!(cond["status"], "False", "{cond}");
    assert_eq!(cond["reason"], "Unschedulable", "{cond}");
    assert_eq!(cond["message"], want, "{cond}");
    let toleration = "  tolerations:\n  - key: dedicated\n    operator: Equal\n    value: db\n    effect: NoSchedule\n";
    pod(c, "sched-taint", "tolerant", "100m", toleration);
    let node = wait_bound(c, "sched-taint", "tolerant");
    assert!(node.starts_with("taint-"), "{node}");
    // Bound after the intolerant pod was tried and refused: that one is still without a node.
    assert_eq!(node_of(c, "sched-taint", "intolerant"), "");
    c.ok(0, &["delete", "namespace", "sched-taint", "--wait=false"]);
}

#[test]
fn a_too_large_pod_waits_until_a_big_enough_node_comes() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "sched-big");
    let mut nodes = Nodes::new(c);
    nodes.add("big-small", "2", "4Gi", json!({}), json!([]));
    pod(c, "sched-big", "huge", "6", "");
    wait_failed_scheduling(
        c,
        "sched-big",
        "huge",
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
    );
    let pending = c.ok(
        0,
        &[
            "get",
            "pod",
            "huge",
            "-n",
            "sched-big",
            "-o",
            "jsonpath={.status.phase}",
        ],
    );
    assert_eq!(pending.trim(), "Pending");
    // A node add is a cluster event: the pod leaves the unschedulable pods at once.
    nodes.add("big-large", "8", "16Gi", json!({}), json!([]));
    assert_eq!(wait_bound(c, "sched-big", "huge"), "big-large");
    c.ok(0, &["delete", "namespace", "sched-big", "--wait=false"]);
}

#[test]
fn a_node_that_is_not_ready_takes_no_pods_until_it_is() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "sched-ready");
    // Every new Node carries the not-ready NoSchedule taint from admission (a node without conditions
    // loses it at once, as upstream's); with Ready=False the node-lifecycle controller keeps it on, and
    // the pod's FailedScheduling names it, as upstream's.
    make_node(c, "ready-1", "4", "8Gi", json!({}), json!([]));
    rt().block_on(async {
        let nodes: Api<Node> = Api::all(c.client(0).await);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
            "reason": "KubeletNotReady", "message": "starting", "lastHeartbeatTime": now,
            "lastTransitionTime": now}]}});
        nodes
            .patch_status(
                "ready-1",
                &PatchParams::default(),
                &Patch::Merge(&not_ready),
            )
            .await
            .unwrap();
    });
    pod(c, "sched-ready", "waiting", "100m", "");
    wait_failed_scheduling(
        c,
        "sched-ready",
        "waiting",
        "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. \
         preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
    );
    assert_eq!(node_of(c, "sched-ready", "waiting"), "");
    // Ready: the controller takes the taint off and the pod is placed.
    let beat = Heartbeat::start(c, "ready-1");
    assert_eq!(wait_bound(c, "sched-ready", "waiting"), "ready-1");
    let taints = c.ok(
        0,
        &["get", "node", "ready-1", "-o", "jsonpath={.spec.taints}"],
    );
    assert!(!taints.contains("not-ready"), "{taints}");
    beat.stop();
    let _ = c.kubectl(0, &["delete", "node", "ready-1", "--wait=false"]);
    c.ok(0, &["delete", "namespace", "sched-ready", "--wait=false"]);
}

#[test]
fn every_pod_of_a_deployment_gets_a_node() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "sched-deploy");
    let mut nodes = Nodes::new(c);
    nodes.add("deploy-1", "2", "4Gi", json!({}), json!([]));
    nodes.add("deploy-2", "2", "4Gi", json!({}), json!([]));
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: sched-deploy\nspec:\n  replicas: 6\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: c\n        image: registry.k8s.io/pause:3.9\n        resources:\n          requests:\n            cpu: 500m\n";
    c.ok_stdin(0, &["apply", "-f", "-"], Some(deployment));
    let mut placement: Vec<String> = Vec::new();
    c.wait_until("six pods bound", WAIT, || {
        let v: Value =
            serde_json::from_str(&c.ok(0, &["get", "pods", "-n", "sched-deploy", "-o", "json"]))
                .unwrap();
        let pods: Vec<&Value> = v["items"]
            .as_array()
            .map(|a| a.iter().collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        placement = pods
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect();
        pods.len() == 6 && placement.len() == 6
    });
    // 6 × 500m on two 2-cpu nodes: no node may hold more than four.
    for n in ["deploy-1", "deploy-2"] {
        let on = placement.iter().filter(|p| *p == n).count();
        assert!((2..=4).contains(&on), "{n} holds {on}: {placement:?}");
    }
    c.ok(0, &["delete", "namespace", "sched-deploy", "--wait=false"]);
}

#[test]
fn the_scheduler_lease_is_held_by_the_raft_leader() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    let leader_name = || -> Option<String> {
        let statuses: Vec<_> = (0..3).map(|i| c.cluster().status(i).ok()).collect();
        let leader = statuses
            .iter()
            .flatten()
            .map(|s| s.leader)
            .find(|l| *l != 0)?;
        (0..3)
            .find(|i| statuses[*i].as_ref().is_some_and(|s| s.member_id == leader))
            .map(|i| c.member(i).name.clone())
    };
    c.wait_until("the kube-scheduler Lease on the Raft leader", WAIT, || {
        let holder = c.kubectl(
            0,
            &[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-scheduler",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
        );
        holder.ok && Some(holder.stdout.trim().to_string()) == leader_name()
    });
}

#[test]
fn a_second_binding_is_a_conflict_and_other_schedulers_pods_are_left_alone() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster();
    namespace(c, "sched-bind");
    let mut nodes = Nodes::new(c);
    nodes.add("bind-1", "4", "8Gi", json!({}), json!([]));
    pod(
        c,
        "sched-bind",
        "theirs",
        "100m",
        "  schedulerName: other-scheduler\n",
    );
    // A pod for the default scheduler created after it is bound: the other one was seen and skipped.
    pod(c, "sched-bind", "ours", "100m", "");
    assert_eq!(wait_bound(c, "sched-bind", "ours"), "bind-1");
    assert_eq!(node_of(c, "sched-bind", "theirs"), "");
    assert_eq!(condition(c, "sched-bind", "theirs"), Value::Null);
    rt().block_on(async {
        let pods: Api<Pod> = Api::namespaced(c.client_without_retry(1).await, "sched-bind");
        let binding = |node: &str| Binding {
            metadata: ObjectMeta {
                name: Some("theirs".into()),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        };
        pods.create_subresource::<_, kube::core::Status>(
            "binding",
            "theirs",
            &PostParams::default(),
            &binding("bind-1"),
        )
        .await
        .unwrap();
        match pods
            .create_subresource::<_, kube::core::Status>(
                "binding",
                "theirs",
                &PostParams::default(),
                &binding("elsewhere"),
            )
            .await
        {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 409);
                assert_eq!(s.reason, "Conflict");
                assert_eq!(
                    s.message,
                    "Operation cannot be fulfilled on pods/binding \"theirs\": pod theirs is already assigned to node \"bind-1\""
                );
            }
            other => panic!("expected 409, got {other:?}"),
        }
    });
    assert_eq!(node_of(c, "sched-bind", "theirs"), "bind-1");
    assert_eq!(condition(c, "sched-bind", "theirs")["status"], "True");
    let discovery = c.ok(0, &["get", "--raw", "/api/v1"]);
    assert!(discovery.contains("\"pods/binding\""), "{discovery}");
    c.ok(0, &["delete", "namespace", "sched-bind", "--wait=false"]);
}

/// `keel scheduler --kubeconfig` schedules out of process for a member started with `--disable-scheduler`,
/// leading through the Lease.
#[test]
fn the_scheduler_runs_out_of_process_and_leads_through_the_lease() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let c = KubeCluster::start_with(
        keel_testkit::Options::new(keel_testkit::Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--disable-scheduler"),
    );
    make_node(&c, "oop-1", "4", "8Gi", json!({}), json!([]));
    pod(&c, "default", "first", "100m", "");
    // The member schedules nothing; whoever binds the pod below holds the Lease.
    assert_eq!(node_of(&c, "default", "first"), "");
    let mut cmd = std::process::Command::new(keel_bin!());
    cmd.args([
        "scheduler",
        "--name",
        "outside-1",
        "--log-level",
        "info",
        "--kubeconfig",
    ])
    .arg(c.member(0).kubeconfig());
    let _sched = keel_testkit::Process::start(
        &mut cmd,
        keel_testkit::Capture::Log(c.dir().join("scheduler.log")),
        None,
    )
    .unwrap();
    assert_eq!(wait_bound(&c, "default", "first"), "oop-1");
    let holder = c.ok(
        0,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-scheduler",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    assert_eq!(holder.trim(), "outside-1");
}
