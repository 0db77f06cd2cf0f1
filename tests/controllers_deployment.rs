//! The deployment and replicaset controllers on a 3-member cluster, driven with the real kubectl. No
//! kubelet runs: the tests report pods Ready themselves (`keel_testkit::pods`). One cluster is shared by
//! every test of this file; each test keeps to its own namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::{Background, KubeCluster};
use keel_testkit::pods::{report_all, Report};

const WAIT: Duration = Duration::from_secs(60);

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 3))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Names of the live (not terminating) pods in `ns` matching `selector`.
fn pods(c: &KubeCluster, ns: &str, selector: &str) -> Vec<String> {
    let out = c.ok(0, &["get", "pods", "-n", ns, "-l", selector, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn jsonpath(c: &KubeCluster, ns: &str, what: &str, path: &str) -> String {
    c.ok(0, &["get", what, "-n", ns, "-o", &format!("jsonpath={path}")])
}

fn namespace(c: &KubeCluster, ns: &str) {
    c.ok(0, &["create", "namespace", ns]);
}

/// Reports every pod matching `selector` in `ns` Ready, as their kubelet would.
fn ready(c: &KubeCluster, ns: &str, selector: &str) -> usize {
    rt().block_on(async {
        let client = c.client(0).await;
        report_all(&client, ns, selector, Report::Ready).await.unwrap()
    })
}

/// Runs `kubectl rollout status` while acting as the kubelet for `selector`; returns its output.
fn rollout_status(c: &KubeCluster, ns: &str, deploy: &str, selector: &str) -> String {
    let mut bg = Background::start(
        c,
        0,
        &["rollout", "status", "-n", ns, deploy, "--timeout=60s"],
        &format!("rollout-{ns}-{}", deploy.replace('/', "-")),
    );
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        ready(c, ns, selector);
        if let Some(ok) = bg.exited() {
            let out = bg.output();
            assert!(ok, "rollout status failed: {out}");
            return out;
        }
        if std::time::Instant::now() > deadline {
            c.fail(format!("rollout status did not finish: {}", bg.output()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_demo_deployment_keeps_three_pods() {
    let c = cluster();
    let ns = "dep-demo";
    namespace(c, ns);
    c.ok(
        0,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            ns,
            "--image=registry.k8s.io/pause:3.9",
            "--replicas=3",
        ],
    );
    c.wait_until("3 web pods", WAIT, || pods(c, ns, "app=web").len() == 3);
    let mut watch = Background::start(c, 0, &["get", "pods", "-n", ns, "-l", "app=web", "--watch"], "demo-watch");
    let before = pods(c, ns, "app=web");
    c.wait_until("the watch lists the pods", WAIT, || {
        before.iter().all(|p| watch.output().contains(p.as_str()))
    });
    c.ok(0, &["delete", "pod", "-n", ns, &before[0]]);
    c.wait_until("a replacement pod", WAIT, || {
        let now = pods(c, ns, "app=web");
        now.len() == 3 && !now.contains(&before[0])
    });
    let now = pods(c, ns, "app=web");
    let new: Vec<&String> = now.iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "{before:?} -> {now:?}");
    c.wait_until("the watch shows the replacement", WAIT, || watch.output().contains(new[0].as_str()));
    assert!(watch.exited().is_none(), "the watch ended: {}", watch.output());
    // One ReplicaSet, named <deploy>-<pod-template-hash>, owning the pods.
    let rs = jsonpath(c, ns, "rs", "{.items[*].metadata.name}");
    let hash = jsonpath(c, ns, "rs", "{.items[0].metadata.labels.pod-template-hash}");
    assert_eq!(rs, format!("web-{hash}"));
    let owner = c.ok(0, &["get", "pod", "-n", ns, new[0], "-o", "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}"]);
    assert_eq!(owner, format!("ReplicaSet/{rs}/true"));
    let events = c.ok(0, &["get", "events", "-n", ns]);
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(events.contains(&format!("Scaled up replica set {rs} from 0 to 3")), "{events}");
    // Ready pods make the Deployment available.
    rollout_status(c, ns, "deployment/web", "app=web");
    let status = jsonpath(c, ns, "deployment/web", "{.status.replicas}/{.status.updatedReplicas}/{.status.readyReplicas}/{.status.availableReplicas}");
    assert_eq!(status, "3/3/3/3");
}

#[test]
fn a_replicaset_adopts_orphans_and_releases_pods_that_stop_matching() {
    let c = cluster();
    let ns = "dep-adopt";
    namespace(c, ns);
    let orphan = r#"
apiVersion: v1
kind: Pod
metadata: {name: orphan, labels: {app: cache}}
spec: {containers: [{name: c, image: registry.k8s.io/pause:3.9}]}
"#;
    c.ok_stdin(0, &["apply", "-n", ns, "-f", "-"], Some(orphan));
    let rs = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: cache}
spec:
  replicas: 2
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: c, image: registry.k8s.io/pause:3.9}]}
"#;
    c.ok_stdin(0, &["apply", "-n", ns, "-f", "-"], Some(rs));
    c.wait_until("the orphan adopted", WAIT, || {
        jsonpath(c, ns, "pod/orphan", "{.metadata.ownerReferences[0].name}") == "cache"
    });
    c.wait_until("2 pods", WAIT, || pods(c, ns, "app=cache").len() == 2);
    // Only one pod was created: the orphan counts.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(pods(c, ns, "app=cache").len(), 2);
    let rs_uid = jsonpath(c, ns, "rs/cache", "{.metadata.uid}");
    let owner = jsonpath(c, ns, "pod/orphan", "{.metadata.ownerReferences[0].uid}/{.metadata.ownerReferences[0].blockOwnerDeletion}");
    assert_eq!(owner, format!("{rs_uid}/true"));
    // Relabelled, it is released and replaced.
    c.ok(0, &["label", "pod", "-n", ns, "orphan", "app=other", "--overwrite"]);
    c.wait_until("the pod released", WAIT, || {
        let refs = jsonpath(c, ns, "pod/orphan", "{.metadata.ownerReferences[*].uid}");
        !refs.contains(&rs_uid)
    });
    c.wait_until("a replacement", WAIT, || pods(c, ns, "app=cache").len() == 2);
    ready(c, ns, "app=cache");
    c.wait_until("status counts the ready pods", WAIT, || {
        jsonpath(c, ns, "rs/cache", "{.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}/{.status.fullyLabeledReplicas}") == "2/2/2/2"
    });
}
