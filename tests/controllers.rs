//! The controller manager on a 3-member cluster, seen through the real kubectl and the `kube` crate: it runs
//! on the Raft leader, holds `kube-system/kube-controller-manager` as that member, and its controllers act.
//! One cluster is shared by every test of this file; each test keeps to its own namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

fn leader_name(c: &KubeCluster) -> String {
    let out = c.ok(
        0,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    out.trim().to_string()
}

#[test]
fn the_raft_leader_holds_the_controller_manager_lease() {
    let c = cluster();
    c.wait_until(
        "the kube-controller-manager Lease",
        Duration::from_secs(30),
        || {
            c.kubectl(
                0,
                &[
                    "get",
                    "lease",
                    "-n",
                    "kube-system",
                    "kube-controller-manager",
                ],
            )
            .ok
        },
    );
    let holder = leader_name(c);
    let lease = c.ok(
        0,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&lease).unwrap();
    assert_eq!(v["spec"]["leaseDurationSeconds"], 15, "{lease}");
    assert!(v["spec"]["renewTime"].is_string(), "{lease}");
    // The holder is a member name, and it is the member Raft elected.
    let names: Vec<String> = (0..3).map(|i| c.member(i).name.clone()).collect();
    assert!(
        names.contains(&holder),
        "holder {holder:?} is not one of {names:?}"
    );
}

#[test]
fn every_namespace_gets_its_default_service_account_and_root_ca() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "ctl-sa"]);
    c.wait_until(
        "kube-root-ca.crt in ctl-sa",
        Duration::from_secs(30),
        || {
            c.kubectl(0, &["get", "configmap", "kube-root-ca.crt", "-n", "ctl-sa"])
                .ok
        },
    );
    let ca = c.ok(
        0,
        &[
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "ctl-sa",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
    );
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    // Deleted or changed, both come back.
    c.ok(
        0,
        &["delete", "configmap", "kube-root-ca.crt", "-n", "ctl-sa"],
    );
    c.ok(0, &["delete", "serviceaccount", "default", "-n", "ctl-sa"]);
    c.wait_until(
        "kube-root-ca.crt recreated",
        Duration::from_secs(30),
        || {
            c.kubectl(0, &["get", "configmap", "kube-root-ca.crt", "-n", "ctl-sa"])
                .ok
        },
    );
    c.wait_until(
        "default ServiceAccount recreated",
        Duration::from_secs(30),
        || {
            c.kubectl(0, &["get", "serviceaccount", "default", "-n", "ctl-sa"])
                .ok
        },
    );
    c.ok(
        0,
        &[
            "patch",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "ctl-sa",
            "--type=merge",
            "-p",
            r#"{"data":{"ca.crt":"x"}}"#,
        ],
    );
    c.wait_until("kube-root-ca.crt restored", Duration::from_secs(30), || {
        c.ok(
            0,
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                "ctl-sa",
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
        )
        .starts_with("-----BEGIN CERTIFICATE-----")
    });
}

/// Events expire `--event-ttl` after their last write, through an etcd lease (visible to etcdctl).
#[test]
fn events_expire_after_the_event_ttl() {
    let c = KubeCluster::start_with(
        keel_testkit::Options::new(keel_testkit::Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--event-ttl")
            .arg("3s"),
    );
    let event = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"ttl-1","namespace":"default"},
        "involvedObject":{"kind":"Pod","name":"p","namespace":"default"},"reason":"Test","message":"m","type":"Normal"}"#;
    c.ok_stdin(0, &["create", "-f", "-"], Some(event));
    let out = keel_testkit::etcdctl(
        &c.member(0).client_url(),
        &["get", "/registry/events/default/ttl-1", "-w", "json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let lease = v["kvs"][0]["lease"].as_i64().unwrap_or(0);
    assert_ne!(lease, 0, "the event's key has no lease: {}", out.stdout);
    c.wait_until("the event expires", Duration::from_secs(30), || {
        c.kubectl(0, &["get", "event", "ttl-1"])
            .stderr
            .contains("NotFound")
    });
    // An object of another kind has no time to live.
    c.ok(0, &["create", "configmap", "no-ttl"]);
    let out = keel_testkit::etcdctl(
        &c.member(0).client_url(),
        &["get", "/registry/configmaps/default/no-ttl", "-w", "json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(
        v["kvs"][0].get("lease").is_none_or(|l| l == 0),
        "{}",
        out.stdout
    );
}

/// `keel controllers --kubeconfig` runs the same controllers out of process against a member started with
/// `--disable-controller-manager`, leading through the Lease.
#[test]
fn the_controllers_run_out_of_process_and_lead_through_the_lease() {
    let c = KubeCluster::start_with(
        keel_testkit::Options::new(keel_testkit::Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--disable-controller-manager"),
    );
    c.ok(0, &["create", "namespace", "ctl-oop"]);
    std::thread::sleep(Duration::from_secs(2));
    // Nothing publishes the root CA while no controller manager runs.
    assert!(
        !c.kubectl(
            0,
            &["get", "configmap", "kube-root-ca.crt", "-n", "ctl-oop"]
        )
        .ok
    );
    let kubeconfig = c.member(0).kubeconfig();
    let mut cmd = std::process::Command::new(keel_bin!());
    cmd.args([
        "controllers",
        "--name",
        "outside-1",
        "--log-level",
        "info",
        "--kubeconfig",
    ])
    .arg(&kubeconfig);
    let _ctl = keel_testkit::Process::start(
        &mut cmd,
        keel_testkit::Capture::Log(c.dir().join("controllers.log")),
        None,
    )
    .unwrap();
    c.wait_until(
        "kube-root-ca.crt from the outside controllers",
        Duration::from_secs(30),
        || {
            c.kubectl(
                0,
                &["get", "configmap", "kube-root-ca.crt", "-n", "ctl-oop"],
            )
            .ok
        },
    );
    let holder = c.ok(
        0,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    assert_eq!(holder.trim(), "outside-1");
    // A second candidate waits while the first holds the Lease.
    let mut cmd = std::process::Command::new(keel_bin!());
    cmd.args(["controllers", "--name", "outside-2", "--kubeconfig"])
        .arg(&kubeconfig);
    let _second = keel_testkit::Process::start(
        &mut cmd,
        keel_testkit::Capture::Log(c.dir().join("controllers-2.log")),
        None,
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let holder = c.ok(
        0,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    assert_eq!(
        holder.trim(),
        "outside-1",
        "the second candidate took a held Lease"
    );
    // The first one stops (killed: no release); the second takes over once the Lease expires.
    drop(_ctl);
    c.wait_until("outside-2 takes the Lease", Duration::from_secs(40), || {
        c.ok(
            0,
            &[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
        )
        .trim()
            == "outside-2"
    });
    let transitions = c.ok(
        0,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "jsonpath={.spec.leaseTransitions}",
        ],
    );
    assert_eq!(transitions.trim(), "1");
}

/// What the controllers' Event recorder writes (events.k8s.io/v1, a series for repeats) is what kubectl
/// shows through core v1: reason, message, the object, and the repeat count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_events_show_in_kubectl_with_their_count() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let c = cluster();
    c.ok(0, &["create", "namespace", "ctl-events"]);
    c.ok(0, &["-n", "ctl-events", "create", "configmap", "subject"]);
    let client = c.client(0).await;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "ctl-events");
    let subject = cms.get("subject").await.unwrap();
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "test-controller".into(),
            instance: Some("m1".into()),
        },
    );
    let reference = kube::Resource::object_ref(&subject, &());
    let ev = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("tested twice".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let listed = c.ok(0, &["-n", "ctl-events", "get", "events", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let items = v["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "one Event for two reports: {listed}");
    let e = &items[0];
    assert_eq!(e["reason"], "Tested", "{e}");
    assert_eq!(e["message"], "tested twice", "{e}");
    assert_eq!(e["involvedObject"]["name"], "subject", "{e}");
    assert_eq!(e["series"]["count"], 2, "{e}");
    assert_eq!(e["reportingComponent"], "test-controller", "{e}");
    let shown = c.ok(0, &["-n", "ctl-events", "get", "events"]);
    assert!(
        shown.contains("Tested") && shown.contains("configmap/subject"),
        "{shown}"
    );
}

/// clusterrole-aggregation: an aggregating ClusterRole holds the union of the rules of the ClusterRoles
/// its selector picks (in name order, each rule once) and follows them when a label goes away.
#[test]
fn an_aggregated_cluster_role_holds_the_union_of_the_roles_it_selects() {
    let c = cluster();
    let label = "rbac.example.com/aggregate-to-monitoring";
    let endpoints = serde_json::json!({"apiGroups": [""], "resources": ["endpoints", "services"], "verbs": ["get", "list"]});
    let pods = serde_json::json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
    let metrics = serde_json::json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]});
    let role = |name: &str, labels: serde_json::Value, rules: serde_json::Value| {
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels}, "rules": rules})
        .to_string()
    };
    let mut aggregating: serde_json::Value = serde_json::from_str(&role(
        "monitoring",
        serde_json::json!({}),
        serde_json::json!([]),
    ))
    .unwrap();
    aggregating["aggregationRule"] =
        serde_json::json!({"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]});
    c.ok_stdin(0, &["create", "-f", "-"], Some(&aggregating.to_string()));
    // The pods rule is in both sources and lands once; the unlabelled role is not picked.
    let picked = serde_json::json!({label: "true"});
    let sources = [
        (
            "monitoring-metrics",
            picked.clone(),
            serde_json::json!([metrics, pods]),
        ),
        (
            "monitoring-endpoints",
            picked,
            serde_json::json!([endpoints, pods]),
        ),
        (
            "monitoring-unpicked",
            serde_json::json!({}),
            serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        ),
    ];
    for (name, labels, rules) in sources {
        c.ok_stdin(0, &["create", "-f", "-"], Some(&role(name, labels, rules)));
    }
    let rules = || -> serde_json::Value {
        let out = c.ok(0, &["get", "clusterrole", "monitoring", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["rules"].clone()
    };
    let union = serde_json::json!([endpoints, pods, metrics]);
    c.wait_until("the union of both roles", Duration::from_secs(30), || {
        rules() == union
    });
    c.ok(
        0,
        &[
            "label",
            "clusterrole",
            "monitoring-metrics",
            &format!("{label}-"),
        ],
    );
    let shrunk = serde_json::json!([endpoints, pods]);
    c.wait_until(
        "the rules of the one role left",
        Duration::from_secs(30),
        || rules() == shrunk,
    );
    c.ok(
        0,
        &[
            "delete",
            "clusterrole",
            "monitoring",
            "monitoring-metrics",
            "monitoring-endpoints",
            "monitoring-unpicked",
        ],
    );
}
