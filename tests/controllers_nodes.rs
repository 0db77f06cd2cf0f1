//! The network and node controllers on a 3-member cluster, seen through the real kubectl and the `kube`
//! crate, with the test acting as the kubelets: EndpointSlices and Endpoints follow a Service's pods;
//! a node that stops renewing its Lease turns Unknown and is tainted, its pods go not ready and are
//! evicted as their tolerations say; a node that comes back is untainted; the pods of a deleted node are
//! garbage-collected. The cluster runs with `--node-monitor-grace-period 8s` and is shared by every test
//! of this file; each test keeps to its own namespace and nodes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use keel_testkit::binaries::Kind;
use keel_testkit::cluster::Options;
use keel_testkit::heartbeat::Heartbeat;
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use keel_testkit::pods::{report_with_ip, Report};
use serde_json::Value;

const GRACE: &str = "8s";

/// The tests place pods on nodes themselves (nodeName): no scheduler runs.
fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| {
        KubeCluster::start_with(
            Options::new(Kind::Keel, 3)
                .keel_bin(keel_bin!())
                .arg("--node-monitor-grace-period")
                .arg(GRACE)
                .arg("--disable-scheduler"),
        )
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn json_of(c: &KubeCluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.ok(0, &all)).unwrap()
}

fn create_node(c: &KubeCluster, name: &str, zone: &str) {
    let yaml = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n    topology.kubernetes.io/zone: {zone}\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&yaml));
}

fn pod_yaml(
    ns: &str,
    name: &str,
    app: &str,
    node: Option<&str>,
    port: (&str, u16),
    extra: &str,
) -> String {
    let node = node
        .map(|n| format!("  nodeName: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: \"{app}\"\nspec:\n{node}  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.9\n    ports:\n    - name: {}\n      containerPort: {}\n{extra}",
        port.0, port.1
    )
}

fn node_json(c: &KubeCluster, name: &str) -> Value {
    json_of(c, &["get", "node", name])
}

fn condition(node: &Value, ty: &str) -> Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty).cloned())
        .unwrap_or(Value::Null)
}

fn taint_keys(node: &Value) -> Vec<String> {
    let mut keys: Vec<String> = node["spec"]["taints"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    format!(
                        "{}:{}",
                        t["key"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

fn pod_json(c: &KubeCluster, ns: &str, name: &str) -> Option<Value> {
    let r = c.kubectl(0, &["get", "pod", "-n", ns, name, "-o", "json"]);
    r.ok.then(|| serde_json::from_str(&r.stdout).unwrap())
}

fn pod_ready(pod: &Value) -> String {
    condition(pod, "Ready")["status"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// `ip → (ready, serving, terminating, port)` over the Service's slices.
fn slice_endpoints(c: &KubeCluster, ns: &str, svc: &str) -> Vec<(String, bool, bool, bool, i64)> {
    let label = format!("kubernetes.io/service-name={svc}");
    let list = json_of(c, &["get", "endpointslices", "-n", ns, "-l", &label]);
    let mut out = Vec::new();
    for s in list["items"].as_array().unwrap() {
        let port = s["ports"][0]["port"].as_i64().unwrap_or(0);
        for e in s["endpoints"].as_array().cloned().unwrap_or_default() {
            let cond = |k: &str| e["conditions"][k].as_bool().unwrap_or(false);
            out.push((
                e["addresses"][0].as_str().unwrap().to_string(),
                cond("ready"),
                cond("serving"),
                cond("terminating"),
                port,
            ));
        }
    }
    out.sort();
    out
}

/// `(ready ips, not ready ips, port)` per subset of the Service's Endpoints.
fn endpoints_subsets(c: &KubeCluster, ns: &str, svc: &str) -> Vec<(Vec<String>, Vec<String>, i64)> {
    let r = c.kubectl(0, &["get", "endpoints", "-n", ns, svc, "-o", "json"]);
    if !r.ok {
        return Vec::new();
    }
    let ep: Value = serde_json::from_str(&r.stdout).unwrap();
    let ips = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["ip"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: Vec<_> = ep["subsets"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                ips(&s["addresses"]),
                ips(&s["notReadyAddresses"]),
                s["ports"][0]["port"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn endpointslices_and_endpoints_follow_the_services_pods() {
    let c = cluster();
    let ns = "eps";
    c.ok(0, &["create", "namespace", ns]);
    create_node(c, "eps-node", "zone-a");
    let kubelet = Heartbeat::start(c, "eps-node");
    let svc = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\n  labels:\n    tier: front\nspec:\n  selector:\n    app: web\n  ports:\n  - name: http\n    port: 80\n    targetPort: http\n"
    );
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&svc));
    // web-0 and web-1 name port http 8080; web-2 names it 9090 (its own slice); web-3 never gets an IP.
    for (name, port) in [
        ("web-0", 8080),
        ("web-1", 8080),
        ("web-2", 9090),
        ("web-3", 8080),
    ] {
        c.ok_stdin(
            0,
            &["apply", "-f", "-"],
            Some(&pod_yaml(
                ns,
                name,
                "web",
                Some("eps-node"),
                ("http", port),
                "",
            )),
        );
    }
    // A pod of another app is never an endpoint.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "other",
            "db",
            Some("eps-node"),
            ("http", 8080),
            "",
        )),
    );
    let started = Instant::now();
    let rt = rt();
    rt.block_on(async {
        let client = c.client(0).await;
        report_with_ip(&client, ns, "web-0", Report::Ready, "10.42.1.1")
            .await
            .unwrap();
        report_with_ip(&client, ns, "web-1", Report::NotReady, "10.42.1.2")
            .await
            .unwrap();
        report_with_ip(&client, ns, "web-2", Report::Ready, "10.42.1.3")
            .await
            .unwrap();
        report_with_ip(&client, ns, "other", Report::Ready, "10.42.1.9")
            .await
            .unwrap();
    });
    let want = vec![
        ("10.42.1.1".to_string(), true, true, false, 8080),
        ("10.42.1.2".to_string(), false, false, false, 8080),
        ("10.42.1.3".to_string(), true, true, false, 9090),
    ];
    c.wait_until(
        "the slices list the pods with IPs",
        Duration::from_secs(30),
        || slice_endpoints(c, ns, "web") == want,
    );
    println!(
        "endpointslices after the pods reported: {:?}",
        started.elapsed()
    );
    let slices = json_of(
        c,
        &[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            "kubernetes.io/service-name=web",
        ],
    );
    let items = slices["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "one slice per port set: {slices}");
    for s in items {
        assert_eq!(s["addressType"], "IPv4");
        assert_eq!(
            s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert_eq!(
            s["metadata"]["labels"]["tier"], "front",
            "the Service's labels are copied"
        );
        assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "Service");
        assert_eq!(s["metadata"]["ownerReferences"][0]["name"], "web");
        assert_eq!(s["ports"][0]["name"], "http");
        assert_eq!(s["ports"][0]["protocol"], "TCP");
        for e in s["endpoints"].as_array().unwrap() {
            assert_eq!(e["nodeName"], "eps-node");
            assert_eq!(e["zone"], "zone-a");
            assert_eq!(e["targetRef"]["kind"], "Pod");
        }
    }
    let table = c.ok(0, &["get", "endpointslices", "-n", ns]);
    println!("{table}");
    assert!(table.contains("8080") && table.contains("9090"), "{table}");
    let want_ep = vec![
        (
            vec!["10.42.1.1".to_string()],
            vec!["10.42.1.2".to_string()],
            8080,
        ),
        (vec!["10.42.1.3".to_string()], vec![], 9090),
    ];
    c.wait_until(
        "the Endpoints list the pods",
        Duration::from_secs(30),
        || endpoints_subsets(c, ns, "web") == want_ep,
    );
    let table = c.ok(0, &["get", "endpoints", "-n", ns, "web"]);
    println!("{table}");
    assert!(table.contains("10.42.1.1:8080"), "{table}");
    let ep = json_of(c, &["get", "endpoints", "-n", ns, "web"]);
    assert_eq!(
        ep["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );

    // web-1 becomes ready; web-0 begins terminating (graceful: its node has to confirm).
    rt.block_on(async {
        let client = c.client(0).await;
        report_with_ip(&client, ns, "web-1", Report::Ready, "10.42.1.2")
            .await
            .unwrap();
    });
    c.ok(0, &["delete", "pod", "-n", ns, "web-0", "--wait=false"]);
    let want = vec![
        ("10.42.1.1".to_string(), false, true, true, 8080),
        ("10.42.1.2".to_string(), true, true, false, 8080),
        ("10.42.1.3".to_string(), true, true, false, 9090),
    ];
    c.wait_until(
        "a terminating endpoint serving but not ready",
        Duration::from_secs(30),
        || slice_endpoints(c, ns, "web") == want,
    );
    let want_ep = vec![
        (vec!["10.42.1.2".to_string()], vec![], 8080),
        (vec!["10.42.1.3".to_string()], vec![], 9090),
    ];
    c.wait_until(
        "the Endpoints drop the terminating pod",
        Duration::from_secs(30),
        || endpoints_subsets(c, ns, "web") == want_ep,
    );

    // The kubelet confirms web-0's end; web-2 leaves: its slice goes.
    c.ok(
        0,
        &[
            "delete",
            "pod",
            "-n",
            ns,
            "web-0",
            "--grace-period=0",
            "--force",
        ],
    );
    c.ok(
        0,
        &[
            "delete",
            "pod",
            "-n",
            ns,
            "web-2",
            "--grace-period=0",
            "--force",
        ],
    );
    c.wait_until("only web-1 is left", Duration::from_secs(30), || {
        slice_endpoints(c, ns, "web") == vec![("10.42.1.2".to_string(), true, true, false, 8080)]
    });
    c.wait_until("a stale slice is deleted", Duration::from_secs(30), || {
        json_of(
            c,
            &[
                "get",
                "endpointslices",
                "-n",
                ns,
                "-l",
                "kubernetes.io/service-name=web",
            ],
        )["items"]
            .as_array()
            .map(Vec::len)
            == Some(1)
    });

    // publishNotReadyAddresses: a not-ready pod is ready for the Service.
    rt.block_on(async {
        let client = c.client(0).await;
        report_with_ip(&client, ns, "web-1", Report::NotReady, "10.42.1.2")
            .await
            .unwrap();
    });
    c.wait_until("web-1 not ready", Duration::from_secs(30), || {
        slice_endpoints(c, ns, "web") == vec![("10.42.1.2".to_string(), false, false, false, 8080)]
    });
    c.ok(
        0,
        &[
            "patch",
            "service",
            "-n",
            ns,
            "web",
            "-p",
            r#"{"spec":{"publishNotReadyAddresses":true}}"#,
        ],
    );
    c.wait_until(
        "published though not ready",
        Duration::from_secs(30),
        || {
            slice_endpoints(c, ns, "web")
                == vec![("10.42.1.2".to_string(), true, true, false, 8080)]
                && endpoints_subsets(c, ns, "web")
                    == vec![(vec!["10.42.1.2".to_string()], vec![], 8080)]
        },
    );

    // The Services without a selector are left alone: default/kubernetes keeps the API server's slice.
    let k = json_of(
        c,
        &[
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            "kubernetes.io/service-name=kubernetes",
        ],
    );
    for s in k["items"].as_array().unwrap() {
        assert_ne!(
            s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io",
            "{s}"
        );
    }

    // Deleting the Service removes its slices and Endpoints.
    c.ok(0, &["delete", "service", "-n", ns, "web"]);
    c.wait_until(
        "the slices and Endpoints go with the Service",
        Duration::from_secs(30),
        || {
            json_of(c, &["get", "endpointslices", "-n", ns])["items"]
                .as_array()
                .map(Vec::len)
                == Some(0)
                && !c.kubectl(0, &["get", "endpoints", "-n", ns, "web"]).ok
        },
    );
    kubelet.stop();
}

#[test]
fn a_silent_node_is_tainted_its_pods_evicted_and_a_deleted_nodes_pods_collected() {
    let c = cluster();
    let ns = "nodes";
    c.ok(0, &["create", "namespace", ns]);
    // Two more healthy nodes in the zone, so that one silent node is not a full disruption (in which
    // the controller would assume it is itself cut off and evict nothing).
    for n in ["alive-1", "drain-1", "dead-1"] {
        create_node(c, n, "zone-b");
    }
    let alive = Heartbeat::start(c, "alive-1");
    let drain = Heartbeat::start(c, "drain-1");
    let dead = Heartbeat::start(c, "dead-1");
    let tolerant = "  tolerations:\n  - key: node.kubernetes.io/unreachable\n    operator: Exists\n    effect: NoExecute\n    tolerationSeconds: 5\n";
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "tolerant",
            "n",
            Some("dead-1"),
            ("http", 80),
            tolerant,
        )),
    );
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "patient",
            "n",
            Some("dead-1"),
            ("http", 80),
            "",
        )),
    );
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "intolerant",
            "n",
            Some("drain-1"),
            ("http", 80),
            "",
        )),
    );
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "bystander",
            "n",
            Some("alive-1"),
            ("http", 80),
            "",
        )),
    );
    // DefaultTolerationSeconds: 300 s for what the pod does not tolerate itself.
    let patient = pod_json(c, ns, "patient").unwrap();
    let tols = patient["spec"]["tolerations"].as_array().unwrap();
    assert_eq!(tols.len(), 2, "{tols:?}");
    assert!(tols
        .iter()
        .all(|t| t["tolerationSeconds"] == 300 && t["effect"] == "NoExecute"));
    let tols = pod_json(c, ns, "tolerant").unwrap()["spec"]["tolerations"].clone();
    assert_eq!(tols.as_array().unwrap().len(), 2, "{tols}");
    assert_eq!(tols[0]["tolerationSeconds"], 5);
    let rt = rt();
    rt.block_on(async {
        let client = c.client(0).await;
        for (p, ip) in [
            ("tolerant", "10.42.2.1"),
            ("patient", "10.42.2.2"),
            ("intolerant", "10.42.2.3"),
            ("bystander", "10.42.2.4"),
        ] {
            report_with_ip(&client, ns, p, Report::Ready, ip)
                .await
                .unwrap();
        }
    });
    // A healthy node stays Ready and untainted past the grace period.
    std::thread::sleep(Duration::from_secs(10));
    let n = node_json(c, "dead-1");
    assert_eq!(condition(&n, "Ready")["status"], "True", "{n}");
    assert!(taint_keys(&n).is_empty(), "{n}");

    // dead-1 falls silent.
    let silent = Instant::now();
    dead.stop();
    c.wait_until("dead-1 Unknown", Duration::from_secs(60), || {
        condition(&node_json(c, "dead-1"), "Ready")["status"] == "Unknown"
    });
    println!(
        "dead-1 Unknown {:?} after its last renewal (grace {GRACE})",
        silent.elapsed()
    );
    let n = node_json(c, "dead-1");
    for ty in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        let cond = condition(&n, ty);
        assert_eq!(cond["status"], "Unknown", "{ty}: {cond}");
        assert_eq!(cond["reason"], "NodeStatusUnknown");
        assert_eq!(cond["message"], "Kubelet stopped posting node status.");
    }
    c.wait_until(
        "dead-1 tainted unreachable",
        Duration::from_secs(30),
        || {
            taint_keys(&node_json(c, "dead-1"))
                == vec![
                    "node.kubernetes.io/unreachable:NoExecute".to_string(),
                    "node.kubernetes.io/unreachable:NoSchedule".to_string(),
                ]
        },
    );
    println!(
        "dead-1 tainted {:?} after its last renewal",
        silent.elapsed()
    );
    c.wait_until("dead-1's pods not ready", Duration::from_secs(30), || {
        ["tolerant", "patient"]
            .iter()
            .all(|p| pod_json(c, ns, p).is_some_and(|p| pod_ready(&p) == "False"))
    });
    assert_eq!(pod_ready(&pod_json(c, ns, "bystander").unwrap()), "True");
    let tainted = Instant::now();
    c.wait_until(
        "the pod tolerating 5 s is evicted",
        Duration::from_secs(30),
        || {
            pod_json(c, ns, "tolerant")
                .is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null())
        },
    );
    println!(
        "tolerant evicted {:?} after the taint was seen",
        tainted.elapsed()
    );
    let p = pod_json(c, ns, "tolerant").unwrap();
    let dt = condition(&p, "DisruptionTarget");
    assert_eq!(dt["status"], "True", "{p}");
    assert_eq!(dt["reason"], "DeletionByTaintManager");
    let patient = pod_json(c, ns, "patient").unwrap();
    assert!(
        patient["metadata"]["deletionTimestamp"].is_null(),
        "300 s have not passed: {patient}"
    );

    // A NoExecute taint drain-1's pod does not tolerate evicts it at once.
    let t0 = Instant::now();
    c.ok(
        0,
        &[
            "taint",
            "node",
            "drain-1",
            "example.com/drain=now:NoExecute",
        ],
    );
    c.wait_until(
        "the intolerant pod is evicted",
        Duration::from_secs(30),
        || {
            pod_json(c, ns, "intolerant")
                .is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null())
        },
    );
    println!("intolerant evicted {:?} after the taint", t0.elapsed());
    assert!(pod_json(c, ns, "bystander").unwrap()["metadata"]["deletionTimestamp"].is_null());
    // Taints the controller does not own stay.
    let d = node_json(c, "drain-1");
    assert_eq!(
        taint_keys(&d),
        vec!["example.com/drain:NoExecute".to_string()],
        "{d}"
    );

    // dead-1 comes back: its taints go.
    let back = Instant::now();
    let revived = Heartbeat::start(c, "dead-1");
    c.wait_until("dead-1 untainted", Duration::from_secs(30), || {
        let n = node_json(c, "dead-1");
        condition(&n, "Ready")["status"] == "True" && taint_keys(&n).is_empty()
    });
    println!("dead-1 untainted {:?} after it came back", back.elapsed());
    revived.stop();

    // dead-1 is deleted: PodGC force-deletes its pods (the terminating one too) after its quarantine.
    let deleted = Instant::now();
    c.ok(0, &["delete", "node", "dead-1"]);
    c.wait_until(
        "dead-1's pods are collected",
        Duration::from_secs(150),
        || pod_json(c, ns, "tolerant").is_none() && pod_json(c, ns, "patient").is_none(),
    );
    println!(
        "pods of the deleted node collected {:?} after",
        deleted.elapsed()
    );
    assert!(pod_json(c, ns, "bystander").is_some());
    alive.stop();
    drain.stop();
}

#[test]
fn terminating_pods_of_an_out_of_service_node_are_force_deleted() {
    let c = cluster();
    let ns = "oos";
    c.ok(0, &["create", "namespace", ns]);
    create_node(c, "oos-1", "zone-c");
    let kubelet = Heartbeat::start(c, "oos-1");
    let long_grace = "  terminationGracePeriodSeconds: 600\n";
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&pod_yaml(
            ns,
            "stuck",
            "s",
            Some("oos-1"),
            ("http", 80),
            long_grace,
        )),
    );
    c.ok(0, &["delete", "pod", "-n", ns, "stuck", "--wait=false"]);
    kubelet.stop();
    c.wait_until("oos-1 not ready", Duration::from_secs(60), || {
        condition(&node_json(c, "oos-1"), "Ready")["status"] == "Unknown"
    });
    // Terminating on a silent node, the pod waits for a kubelet that will not come.
    let p = pod_json(c, ns, "stuck").expect("still terminating");
    assert!(!p["metadata"]["deletionTimestamp"].is_null(), "{p}");
    let t0 = Instant::now();
    c.ok(
        0,
        &[
            "taint",
            "node",
            "oos-1",
            "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
        ],
    );
    c.wait_until("the pod is force-deleted", Duration::from_secs(60), || {
        pod_json(c, ns, "stuck").is_none()
    });
    println!(
        "terminating pod on an out-of-service node collected {:?} after the taint",
        t0.elapsed()
    );
}
