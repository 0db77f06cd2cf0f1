//! StatefulSets, DaemonSets, PodDisruptionBudgets and evictions on a 3-member cluster, through the real
//! kubectl and the `kube` crate. No node agent exists: the tests report pod status as the kubelet would
//! and create Node objects by hand. One cluster is shared by every test; each keeps to its own namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use keel_testkit::heartbeat::Heartbeat;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::pods::{report, Report};

const WAIT: Duration = Duration::from_secs(60);

/// The tests place pods themselves (nodeName, or none to see a pod wait unbound): no scheduler runs.
fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| {
        KubeCluster::start_with(
            keel_testkit::cluster::Options::new(keel_testkit::binaries::Kind::Keel, 3)
                .keel_bin(keel_bin!())
                .arg("--disable-scheduler"),
        )
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// Reports pod `ns/name` as its kubelet would.
fn report_pod(c: &KubeCluster, ns: &str, name: &str, r: Report) {
    rt().block_on(async {
        let cl = c.client(0).await;
        report(&cl, ns, name, r).await.unwrap();
    });
}

/// The names of the pods matching `selector` that are not being deleted, sorted.
fn pods(c: &KubeCluster, ns: &str, selector: &str) -> Vec<String> {
    let out = c.ok(0, &["get", "pods", "-n", ns, "-l", selector, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut names: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn jsonpath(c: &KubeCluster, args: &[&str], path: &str) -> String {
    let jp = format!("jsonpath={path}");
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-o", jp.as_str()]);
    c.ok(0, &a).trim().to_string()
}

fn sts_yaml(ns: &str, replicas: i32, image: &str, partition: i32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web, namespace: {ns}}}
spec:
  serviceName: web
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  updateStrategy: {{type: RollingUpdate, rollingUpdate: {{partition: {partition}}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{{name: c, image: {image}}}]
"#
    )
}

#[test]
fn a_statefulset_scales_up_in_order_and_down_in_reverse() {
    let c = cluster();
    let ns = "sets-order";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&sts_yaml(ns, 3, "busybox:1", 0)),
    );
    let began = Instant::now();
    c.wait_until("web-0", WAIT, || pods(c, ns, "app=web") == ["web-0"]);
    // Without web-0 Ready no other pod comes.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pods(c, ns, "app=web"), ["web-0"]);
    let pod0 = c.ok(0, &["get", "pod", "-n", ns, "web-0", "-o", "json"]);
    let p: serde_json::Value = serde_json::from_str(&pod0).unwrap();
    assert_eq!(p["spec"]["hostname"], "web-0", "{pod0}");
    assert_eq!(p["spec"]["subdomain"], "web", "{pod0}");
    assert_eq!(
        p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
        "web-0"
    );
    assert_eq!(p["metadata"]["labels"]["apps.kubernetes.io/pod-index"], "0");
    let hash = p["metadata"]["labels"]["controller-revision-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(hash.starts_with("web-"), "{hash}");
    let owner = &p["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "StatefulSet");
    assert_eq!(owner["controller"], true);

    report_pod(c, ns, "web-0", Report::Ready);
    c.wait_until("web-1", WAIT, || {
        pods(c, ns, "app=web") == ["web-0", "web-1"]
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pods(c, ns, "app=web"), ["web-0", "web-1"]);
    report_pod(c, ns, "web-1", Report::Ready);
    c.wait_until("web-2", WAIT, || pods(c, ns, "app=web").len() == 3);
    report_pod(c, ns, "web-2", Report::Ready);
    c.wait_until("status 3/3 ready", WAIT, || {
        jsonpath(
            c,
            &["get", "sts", "-n", ns, "web"],
            "{.status.readyReplicas}",
        ) == "3"
    });
    println!(
        "statefulset of 3 Ready (test as kubelet) in {:?}",
        began.elapsed()
    );
    let st = c.ok(0, &["get", "sts", "-n", ns, "web", "-o", "json"]);
    let s: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(s["status"]["replicas"], 3, "{st}");
    assert_eq!(s["status"]["currentRevision"], hash, "{st}");
    assert_eq!(s["status"]["updateRevision"], hash, "{st}");
    assert_eq!(s["status"]["updatedReplicas"], 3, "{st}");
    assert_eq!(s["status"]["observedGeneration"], 1, "{st}");
    // The revision is a ControllerRevision the set controls.
    let revs = c.ok(0, &["get", "controllerrevisions", "-n", ns]);
    assert!(
        revs.contains(&hash) && revs.contains("statefulset.apps/web"),
        "{revs}"
    );

    // Scale down to 1: web-2 goes before web-1.
    c.ok(0, &["scale", "sts", "-n", ns, "web", "--replicas=1"]);
    let mut seen = Vec::new();
    c.wait_until("scale down to web-0", WAIT, || {
        let now = pods(c, ns, "app=web");
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        now == ["web-0"]
    });
    assert!(
        !seen
            .iter()
            .any(|s| s == &["web-0".to_string(), "web-2".to_string()]),
        "web-1 went before web-2: {seen:?}"
    );
    println!("scale-down states seen: {seen:?}");
}

#[test]
fn a_rolling_update_respects_the_partition() {
    let c = cluster();
    let ns = "sets-roll";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&sts_yaml(ns, 3, "busybox:1", 0)),
    );
    for i in 0..3 {
        let name = format!("web-{i}");
        c.wait_until(&name, WAIT, || pods(c, ns, "app=web").contains(&name));
        report_pod(c, ns, &name, Report::Ready);
    }
    c.wait_until("3 ready", WAIT, || {
        jsonpath(
            c,
            &["get", "sts", "-n", ns, "web"],
            "{.status.readyReplicas}",
        ) == "3"
    });
    let old = jsonpath(
        c,
        &["get", "sts", "-n", ns, "web"],
        "{.status.currentRevision}",
    );
    // New image with partition 1: web-2 then web-1 move, web-0 stays.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&sts_yaml(ns, 3, "busybox:2", 1)),
    );
    let image = |p: &str| {
        jsonpath(
            c,
            &["get", "pod", "-n", ns, p],
            "{.spec.containers[0].image}",
        )
    };
    let began = Instant::now();
    for name in ["web-2", "web-1"] {
        c.wait_until(&format!("{name} on the new image"), WAIT, || {
            pods(c, ns, "app=web").contains(&name.to_string())
                && c.kubectl(0, &["get", "pod", "-n", ns, name]).ok
                && image(name) == "busybox:2"
        });
        if name == "web-2" {
            // One at a time: web-1 waits while web-2 is not Ready.
            std::thread::sleep(Duration::from_secs(2));
            assert_eq!(image("web-1"), "busybox:1");
        }
        report_pod(c, ns, name, Report::Ready);
    }
    c.wait_until("2 updated", WAIT, || {
        jsonpath(
            c,
            &["get", "sts", "-n", ns, "web"],
            "{.status.updatedReplicas}",
        ) == "2"
            && jsonpath(
                c,
                &["get", "sts", "-n", ns, "web"],
                "{.status.readyReplicas}",
            ) == "3"
    });
    println!(
        "partitioned rolling update of 2 pods in {:?}",
        began.elapsed()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(image("web-0"), "busybox:1");
    let st = c.ok(0, &["get", "sts", "-n", ns, "web", "-o", "json"]);
    let s: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(s["status"]["currentRevision"], old, "{st}");
    assert_ne!(s["status"]["updateRevision"], old, "{st}");
    assert_eq!(s["status"]["currentReplicas"], 1, "{st}");
    // Partition 0 finishes the rollout; the update revision becomes current.
    c.ok(
        0,
        &[
            "patch",
            "sts",
            "-n",
            ns,
            "web",
            "-p",
            r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}"#,
        ],
    );
    c.wait_until("web-0 on the new image", WAIT, || {
        c.kubectl(0, &["get", "pod", "-n", ns, "web-0"]).ok && image("web-0") == "busybox:2"
    });
    report_pod(c, ns, "web-0", Report::Ready);
    c.wait_until("rollout complete", WAIT, || {
        let s = jsonpath(
            c,
            &["get", "sts", "-n", ns, "web"],
            "{.status.currentRevision} {.status.updateRevision}",
        );
        let parts: Vec<&str> = s.split(' ').collect();
        parts.len() == 2 && parts[0] == parts[1] && parts[0] != old
    });
}

#[test]
fn volume_claim_templates_make_a_claim_per_ordinal() {
    let c = cluster();
    let ns = "sets-pvc";
    c.ok(0, &["create", "namespace", ns]);
    let yaml = format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: {ns}}}
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  persistentVolumeClaimRetentionPolicy: {{whenDeleted: Delete}}
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec: {{containers: [{{name: c, image: busybox}}]}}
  volumeClaimTemplates:
  - metadata: {{name: data, labels: {{tier: db}}}}
    spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
"#
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&yaml));
    c.wait_until("a claim per ordinal", WAIT, || {
        jsonpath(c, &["get", "pvc", "-n", ns], "{.items[*].metadata.name}") == "data-db-0 data-db-1"
    });
    let claim = jsonpath(
        c,
        &["get", "pvc", "-n", ns, "data-db-1"],
        "{.metadata.labels.app} {.metadata.labels.tier} {.metadata.ownerReferences[0].kind} {.spec.storageClassName}",
    );
    assert_eq!(
        claim, "db db StatefulSet local-path",
        "labels, owner (whenDeleted: Delete), default class"
    );
    c.wait_until("the pods mounting their claims", WAIT, || {
        jsonpath(
            c,
            &["get", "pod", "-n", ns, "db-1"],
            "{.spec.volumes[0].name}={.spec.volumes[0].persistentVolumeClaim.claimName}",
        ) == "data=data-db-1"
    });
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(
        events.contains("create Claim data-db-0 Pod db-0 in StatefulSet db success"),
        "{events}"
    );
    c.ok(
        0,
        &["delete", "statefulset", "-n", ns, "db", "--wait=false"],
    );
    c.wait_until("the claims to go with the set", WAIT, || {
        jsonpath(c, &["get", "pvc", "-n", ns], "{.items[*].metadata.name}").is_empty()
    });
}

fn node_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\n")
}

#[test]
fn pdbs_print_their_columns_and_drain_honours_them() {
    let c = cluster();
    let ns = "sets-drain";
    let node = "sets-drain-node";
    c.ok(0, &["create", "namespace", ns]);
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&node_yaml(node)));
    // Without heartbeats the node lifecycle controller would mark the node Unknown after its grace
    // period and its pods not ready, which changes the budget's arithmetic mid-test.
    let heartbeat = Heartbeat::start(c, node);
    for i in 0..2 {
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: {ns}, labels: {{app: db}}}}\n\
             spec: {{nodeName: {node}, terminationGracePeriodSeconds: 0, containers: [{{name: c, image: busybox}}]}}\n"
        );
        c.ok_stdin(0, &["apply", "-f", "-"], Some(&pod));
        report_pod(c, ns, &format!("p{i}"), Report::Ready);
    }
    c.ok(
        0,
        &[
            "create",
            "pdb",
            "-n",
            ns,
            "db",
            "--selector=app=db",
            "--min-available=2",
        ],
    );
    c.wait_until("the budget's status", WAIT, || {
        jsonpath(
            c,
            &["get", "pdb", "-n", ns, "db"],
            "{.status.currentHealthy}/{.status.desiredHealthy}/{.status.expectedPods}",
        ) == "2/2/2"
    });
    let table = c.ok(0, &["get", "pdb", "-n", ns]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["db", "2", "N/A", "0"], "{table}");
    let cond = jsonpath(c, &["get", "pdb", "-n", ns, "db"], "{.status.conditions[0].type}={.status.conditions[0].status}/{.status.conditions[0].reason}");
    assert_eq!(cond, "DisruptionAllowed=False/InsufficientPods");

    // The budget cannot be met: drain keeps retrying and names it, then gives up at its timeout.
    let began = Instant::now();
    let r = c.kubectl(
        0,
        &[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=10s",
        ],
    );
    println!("refused drain took {:?}", began.elapsed());
    assert!(!r.ok, "{} {}", r.stdout, r.stderr);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(said.contains("disruption budget"), "{said}");
    assert_eq!(pods(c, ns, "app=db"), ["p0", "p1"]);
    // The node is cordoned by the attempt.
    assert_eq!(
        jsonpath(c, &["get", "node", node], "{.spec.unschedulable}"),
        "true"
    );

    // Relaxed, the budget lets drain evict one pod at a time as the controller recounts.
    c.ok(
        0,
        &[
            "patch",
            "pdb",
            "-n",
            ns,
            "db",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    c.wait_until("2 disruptions allowed", WAIT, || {
        jsonpath(
            c,
            &["get", "pdb", "-n", ns, "db"],
            "{.status.disruptionsAllowed}",
        ) == "2"
    });
    let began = Instant::now();
    let out = c.ok(
        0,
        &[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=60s",
        ],
    );
    println!("drain of 2 pods took {:?}", began.elapsed());
    assert!(out.contains("evicted") || out.contains("drained"), "{out}");
    assert!(pods(c, ns, "app=db").is_empty());
    heartbeat.stop();
}

#[test]
fn an_eviction_takes_one_disruption_and_a_budget_at_zero_refuses_with_429() {
    let c = cluster();
    let ns = "sets-evict";
    c.ok(0, &["create", "namespace", ns]);
    for i in 0..3 {
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: {ns}, labels: {{app: a}}}}\n\
             spec: {{containers: [{{name: c, image: busybox}}]}}\n"
        );
        c.ok_stdin(0, &["apply", "-f", "-"], Some(&pod));
        report_pod(c, ns, &format!("p{i}"), Report::Ready);
    }
    c.ok(
        0,
        &[
            "create",
            "pdb",
            "-n",
            ns,
            "a",
            "--selector=app=a",
            "--min-available=2",
        ],
    );
    c.wait_until("1 disruption allowed", WAIT, || {
        jsonpath(
            c,
            &["get", "pdb", "-n", ns, "a"],
            "{.status.disruptionsAllowed}",
        ) == "1"
    });
    rt().block_on(async {
        use k8s_openapi::api::core::v1::Pod;
        let cl = c.client_without_retry(0).await;
        let api: kube::Api<Pod> = kube::Api::namespaced(cl, ns);
        api.evict("p0", &Default::default()).await.unwrap();
        // The eviction took the budget's only disruption at once: the next one is refused.
        let err = api.evict("p1", &Default::default()).await.unwrap_err();
        let kube::Error::Api(s) = err else {
            panic!("{err:?}")
        };
        assert_eq!(s.code, 429, "{s:?}");
        assert_eq!(
            s.message,
            "Cannot evict pod as it would violate the pod's disruption budget."
        );
        let missing = api.evict("nope", &Default::default()).await.unwrap_err();
        assert!(
            matches!(missing, kube::Error::Api(ref s) if s.code == 404),
            "{missing:?}"
        );
    });
    let raw = c.ok(
        0,
        &[
            "get",
            "--raw",
            &format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/a"),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert!(
        v["status"]["disruptedPods"]["p0"].is_string() || v["status"]["disruptedPods"].is_null(),
        "{raw}"
    );
    assert_eq!(pods(c, ns, "app=a"), ["p1", "p2"]);
    // The controller recounts without p0: 2 healthy of 2 desired, nothing allowed.
    c.wait_until("the recount", WAIT, || {
        jsonpath(
            c,
            &["get", "pdb", "-n", ns, "a"],
            "{.status.currentHealthy}/{.status.disruptionsAllowed}",
        ) == "2/0"
    });
    let d = c.ok(0, &["get", "--raw", "/api/v1"]);
    assert!(d.contains("pods/eviction"), "{d}");
}

fn ds_yaml(ns: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      nodeSelector: {{sets-role: edge}}
      containers: [{{name: c, image: {image}}}]
"#
    )
}

/// Node name → pod names of the DaemonSet's live pods, by the node their affinity pins them to.
fn daemon_pods(c: &KubeCluster, ns: &str) -> Vec<(String, String)> {
    let out = c.ok(
        0,
        &["get", "pods", "-n", ns, "-l", "app=agent", "-o", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut list: Vec<(String, String)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let node = p["spec"]["affinity"]["nodeAffinity"]
                ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                ["matchFields"][0]["values"][0]
                .as_str()
                .unwrap_or("")
                .to_string();
            (node, p["metadata"]["name"].as_str().unwrap().to_string())
        })
        .collect();
    list.sort();
    list
}

fn on_nodes(c: &KubeCluster, ns: &str) -> Vec<String> {
    daemon_pods(c, ns).into_iter().map(|(n, _)| n).collect()
}

#[test]
fn a_daemonset_follows_the_nodes() {
    let c = cluster();
    let ns = "sets-ds";
    c.ok(0, &["create", "namespace", ns]);
    for n in ["sets-ds-a", "sets-ds-b"] {
        c.ok_stdin(0, &["apply", "-f", "-"], Some(&node_yaml(n)));
    }
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&ds_yaml(ns, "busybox:1")));
    // No node has the label yet: nothing to run.
    c.wait_until("observed", WAIT, || {
        jsonpath(
            c,
            &["get", "ds", "-n", ns, "agent"],
            "{.status.observedGeneration}",
        ) == "1"
    });
    assert!(on_nodes(c, ns).is_empty());

    let began = Instant::now();
    c.ok(0, &["label", "node", "sets-ds-a", "sets-role=edge"]);
    c.wait_until("a pod for sets-ds-a", WAIT, || {
        on_nodes(c, ns) == ["sets-ds-a"]
    });
    println!(
        "daemon pod for a newly labelled node after {:?}",
        began.elapsed()
    );
    let (_, pod) = daemon_pods(c, ns).remove(0);
    let p: serde_json::Value =
        serde_json::from_str(&c.ok(0, &["get", "pod", "-n", ns, &pod, "-o", "json"])).unwrap();
    let tolerations = p["spec"]["tolerations"].to_string();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        assert!(tolerations.contains(key), "{key} missing: {tolerations}");
    }
    assert!(
        !tolerations.contains("network-unavailable"),
        "{tolerations}"
    );
    assert!(
        p["metadata"]["labels"]["controller-revision-hash"].is_string(),
        "{p}"
    );
    // No scheduler exists: the pod waits unbound, pinned by affinity.
    assert!(p["spec"]["nodeName"].is_null(), "{p}");

    c.ok(0, &["label", "node", "sets-ds-b", "sets-role=edge"]);
    c.wait_until("pods on both nodes", WAIT, || {
        on_nodes(c, ns) == ["sets-ds-a", "sets-ds-b"]
    });
    c.wait_until("status counts 2", WAIT, || {
        jsonpath(
            c,
            &["get", "ds", "-n", ns, "agent"],
            "{.status.desiredNumberScheduled}/{.status.currentNumberScheduled}/{.status.updatedNumberScheduled}/{.status.numberMisscheduled}",
        ) == "2/2/2/0"
    });
    let table = c.ok(0, &["get", "ds", "-n", ns, "agent"]);
    assert!(
        table.lines().nth(1).unwrap().split_whitespace().nth(1) == Some("2"),
        "{table}"
    );

    // A NoSchedule taint the pod does not tolerate takes it off the node.
    c.ok(
        0,
        &["taint", "node", "sets-ds-b", "dedicated=db:NoSchedule"],
    );
    c.wait_until("pod off the tainted node", WAIT, || {
        on_nodes(c, ns) == ["sets-ds-a"]
    });
    c.ok(
        0,
        &["taint", "node", "sets-ds-b", "dedicated=db:NoSchedule-"],
    );
    c.wait_until("pod back on the untainted node", WAIT, || {
        on_nodes(c, ns) == ["sets-ds-a", "sets-ds-b"]
    });

    // A new template rolls out (pods are not Ready without a kubelet, so all may go at once).
    let before = daemon_pods(c, ns);
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&ds_yaml(ns, "busybox:2")));
    c.wait_until("rolled pods", WAIT, || {
        let now = daemon_pods(c, ns);
        now.len() == 2 && now.iter().all(|p| !before.contains(p))
    });
    c.wait_until("2 updated", WAIT, || {
        jsonpath(
            c,
            &["get", "ds", "-n", ns, "agent"],
            "{.status.updatedNumberScheduled}/{.status.observedGeneration}",
        ) == "2/2"
    });
    let revs = c.ok(0, &["get", "controllerrevisions", "-n", ns]);
    assert_eq!(revs.lines().count(), 3, "two revisions expected: {revs}");

    // A node that goes away takes its pod with it; a label removed likewise.
    c.ok(0, &["delete", "node", "sets-ds-a"]);
    c.wait_until("pod gone with its node", WAIT, || {
        on_nodes(c, ns) == ["sets-ds-b"]
    });
    c.ok(0, &["label", "node", "sets-ds-b", "sets-role-"]);
    c.wait_until("no pods", WAIT, || on_nodes(c, ns).is_empty());
    assert_eq!(
        jsonpath(
            c,
            &["get", "ds", "-n", ns, "agent"],
            "{.status.desiredNumberScheduled}"
        ),
        "0"
    );
    c.ok(0, &["delete", "node", "sets-ds-b"]);
}
