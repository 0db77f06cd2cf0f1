//! The official Kubernetes Python client (`kubernetes` on PyPI, installed by this test into a venv
//! under `target/`) against one keel member: watches and informer-style list+watch with the client's
//! own defaults (it sends `watch=True`), a conflict's error body byte for byte, typed create/read of a
//! DaemonSet and a ReplicationController (the client refuses objects missing Go's zero values), and APIServices.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;

/// The client release for Kubernetes 1.32, the version keel serves.
const CLIENT: &str = "kubernetes==32.*";

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 1))
}

/// The venv's python, made once per test binary (and kept in `target/` between runs).
fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-client-venv");
        let py = venv.join("bin").join("python");
        let ready = venv.join(".installed");
        if !ready.exists() {
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 must be on PATH (scripts/setup.sh installs it)");
            assert!(made.success(), "python3 -m venv failed");
            let pip = Command::new(&py)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    CLIENT,
                ])
                .status()
                .expect("pip");
            assert!(pip.success(), "pip install {CLIENT} failed");
            std::fs::write(&ready, CLIENT).unwrap();
        }
        py
    })
}

/// Runs `script` with the venv's python, the member's kubeconfig and `ns` as arguments; returns stdout.
fn run(c: &KubeCluster, ns: &str, script: &str) -> String {
    let kubeconfig = c.member(0).kubeconfig();
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(&kubeconfig)
        .arg(ns)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const PRELUDE: &str = r#"
import json, sys, threading, time
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
ns = sys.argv[2]
core = client.CoreV1Api()
apps = client.AppsV1Api()
def cm(name, v):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": v})
def wait_for(pred, what):
    deadline = time.time() + 60
    while not pred():
        if time.time() > deadline:
            raise SystemExit("timed out waiting for " + what)
        time.sleep(0.05)
"#;

#[test]
fn a_watch_with_the_clients_defaults_sees_added_modified_deleted() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "py-watch"]);
    let script = format!(
        "{PRELUDE}{}",
        r#"
core.create_namespaced_config_map(ns, cm("w", "1"))
seen = []
def run():
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, ns, field_selector="metadata.name=w", timeout_seconds=60):
        seen.append([ev["type"], ev["object"].metadata.name, ev["object"].data])
        if ev["type"] == "DELETED":
            w.stop()
t = threading.Thread(target=run)
t.start()
wait_for(lambda: any(s[0] == "ADDED" for s in seen), "ADDED")
core.patch_namespaced_config_map("w", ns, {"data": {"v": "2"}})
wait_for(lambda: any(s[0] == "MODIFIED" for s in seen), "MODIFIED")
core.delete_namespaced_config_map("w", ns)
t.join(60)
print(json.dumps(seen))
"#
    );
    let seen: serde_json::Value = serde_json::from_str(run(c, "py-watch", &script).trim()).unwrap();
    assert_eq!(
        seen,
        serde_json::json!([
            ["ADDED", "w", {"v": "1"}],
            ["MODIFIED", "w", {"v": "2"}],
            ["DELETED", "w", {"v": "2"}]
        ])
    );
}

#[test]
fn an_informer_lists_then_watches_from_the_lists_resource_version() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "py-informer"]);
    let script = format!(
        "{PRELUDE}{}",
        r#"
core.create_namespaced_config_map(ns, cm("before", "0"))
listed = core.list_namespaced_config_map(ns)
names = sorted(i.metadata.name for i in listed.items)
rv = listed.metadata.resource_version
seen = []
def run():
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=60):
        seen.append([ev["type"], ev["object"].metadata.name])
        if ev["type"] == "DELETED":
            w.stop()
t = threading.Thread(target=run)
t.start()
core.create_namespaced_config_map(ns, cm("after", "1"))
wait_for(lambda: len(seen) >= 1, "ADDED")
core.patch_namespaced_config_map("after", ns, {"data": {"v": "2"}})
wait_for(lambda: len(seen) >= 2, "MODIFIED")
core.delete_namespaced_config_map("after", ns)
t.join(60)
print(json.dumps({"listed": [n for n in names if n != "kube-root-ca.crt"], "seen": seen}))
"#
    );
    let out: serde_json::Value =
        serde_json::from_str(run(c, "py-informer", &script).trim()).unwrap();
    assert_eq!(
        out,
        serde_json::json!({
            "listed": ["before"],
            "seen": [["ADDED", "after"], ["MODIFIED", "after"], ["DELETED", "after"]]
        })
    );
}

#[test]
fn a_conflicts_error_body_is_upstreams_byte_for_byte() {
    let c = cluster();
    c.ok(0, &["create", "namespace", "py-conflict"]);
    let script = format!(
        "{PRELUDE}{}",
        r#"
core.create_namespaced_config_map(ns, cm("dup", "1"))
try:
    core.create_namespaced_config_map(ns, cm("dup", "1"))
    raise SystemExit("the second create succeeded")
except ApiException as e:
    sys.stdout.write(json.dumps({"status": e.status, "body": e.body}))
"#
    );
    let out: serde_json::Value =
        serde_json::from_str(run(c, "py-conflict", &script).trim()).unwrap();
    assert_eq!(out["status"], 409);
    // Written from upstream's metav1.Status field order, not from keel's output.
    assert_eq!(
        out["body"].as_str().unwrap(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"configmaps \\\"dup\\\" already exists\",\"reason\":\"AlreadyExists\",\
         \"details\":{\"name\":\"dup\",\"kind\":\"configmaps\"},\"code\":409}\n"
    );
}

#[test]
fn typed_daemonset_and_replication_controller_round_trip() {
    let c = cluster();
    let ns = "py-typed";
    c.ok(0, &["create", "namespace", ns]);
    let script = format!(
        "{PRELUDE}{}",
        r#"
tmpl = client.V1PodTemplateSpec(
    metadata=client.V1ObjectMeta(labels={"app": "d"}),
    spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="registry.k8s.io/pause:3.9")]))
ds = apps.create_namespaced_daemon_set(ns, client.V1DaemonSet(
    metadata=client.V1ObjectMeta(name="d"),
    spec=client.V1DaemonSetSpec(selector=client.V1LabelSelector(match_labels={"app": "d"}), template=tmpl)))
got = apps.read_namespaced_daemon_set("d", ns)
rc = core.create_namespaced_replication_controller(ns, client.V1ReplicationController(
    metadata=client.V1ObjectMeta(name="r"),
    spec=client.V1ReplicationControllerSpec(replicas=1, template=client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": "r"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="registry.k8s.io/pause:3.9")])))))
print(json.dumps({
    "ds": [ds.status.current_number_scheduled, ds.status.number_misscheduled,
           ds.status.desired_number_scheduled, ds.status.number_ready, got.metadata.name],
    "rc": [rc.spec.selector, rc.spec.replicas, rc.metadata.labels],
}))
"#
    );
    let out: serde_json::Value = serde_json::from_str(run(c, ns, &script).trim()).unwrap();
    assert_eq!(out["ds"], serde_json::json!([0, 0, 0, 0, "d"]));
    assert_eq!(
        out["rc"],
        serde_json::json!([{"app": "r"}, 1, {"app": "r"}])
    );

    // kubectl scales it; the Python client reads the new size and, once the controller acted, the pods.
    c.ok(0, &["scale", "rc", "r", "-n", ns, "--replicas=2"]);
    let script = format!(
        "{PRELUDE}{}",
        r#"
rc = core.read_namespaced_replication_controller("r", ns)
wait_for(lambda: len(core.list_namespaced_pod(ns, label_selector="app=r").items) == 2, "2 pods")
scale = core.read_namespaced_replication_controller_scale("r", ns)
print(json.dumps([rc.spec.replicas, scale.spec.replicas, scale.status.selector]))
"#
    );
    let out: serde_json::Value = serde_json::from_str(run(c, ns, &script).trim()).unwrap();
    assert_eq!(out, serde_json::json!([2, 2, "app=r"]));
}

#[test]
fn typed_apiservices_round_trip() {
    let c = cluster();
    let ns = "py-apiservice";
    c.ok(0, &["create", "namespace", ns]);
    let script = format!(
        "{PRELUDE}{}",
        r#"
reg = client.ApiregistrationV1Api()
local = reg.read_api_service("v1.apps")
made = reg.create_api_service(client.V1APIService(
    metadata=client.V1ObjectMeta(name="v1alpha1.py.example.com"),
    spec=client.V1APIServiceSpec(group="py.example.com", version="v1alpha1",
        group_priority_minimum=1000, version_priority=15, insecure_skip_tls_verify=True,
        service=client.ApiregistrationV1ServiceReference(namespace=ns, name="nowhere"))))
def reason():
    s = reg.read_api_service("v1alpha1.py.example.com").status
    conds = (s.conditions or []) if s else []
    return [c.reason for c in conds if c.type == "Available" and c.status == "False"]
wait_for(lambda: reason() == ["ServiceNotFound"], "Available=False ServiceNotFound")
names = [a.metadata.name for a in reg.list_api_service().items]
reg.delete_api_service("v1alpha1.py.example.com")
print(json.dumps({
    "local": [local.spec.group, local.spec.version, local.spec.service,
              [(c.type, c.status, c.reason) for c in local.status.conditions]],
    "made": [made.spec.service.port, made.spec.group_priority_minimum],
    "listed": ["v1.apps" in names, "v1alpha1.py.example.com" in names],
}))
"#
    );
    let out: serde_json::Value = serde_json::from_str(run(c, ns, &script).trim()).unwrap();
    assert_eq!(
        out["local"],
        serde_json::json!(["apps", "v1", null, [["Available", "True", "Local"]]])
    );
    // The port defaults to 443, as upstream's defaulting does.
    assert_eq!(out["made"], serde_json::json!([443, 1000]));
    assert_eq!(out["listed"], serde_json::json!([true, true]));
}
