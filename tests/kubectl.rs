//! The real kubectl (1.32, via the machine's dispatcher) against keel's Kubernetes API: discovery, version,
//! explain, create (protobuf and JSON bodies), get in every output form, watch, describe, label/annotate,
//! apply, delete and wait, namespace lifecycle, upstream's error messages, and a 3-member cluster where a
//! write through one member is seen by a watch on another.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::{Background, KubeCluster};
use serde_json::Value;

const WATCH_WAIT: Duration = Duration::from_secs(20);

#[test]
fn discovery_version_and_explain() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let v = c.ok(0, &["version"]);
    assert!(v.contains("Server Version: v1.32"), "{v}");
    let res = c.ok(0, &["api-resources"]);
    for line in [
        "deployments",
        "deploy",
        "apps/v1",
        "pods",
        "po",
        "configmaps",
        "leases",
        "endpointslices",
    ] {
        assert!(res.contains(line), "api-resources lacks {line}:\n{res}");
    }
    let versions = c.ok(0, &["api-versions"]);
    for gv in [
        "v1",
        "apps/v1",
        "batch/v1",
        "rbac.authorization.k8s.io/v1",
        "coordination.k8s.io/v1",
    ] {
        assert!(
            versions.lines().any(|l| l == gv),
            "api-versions lacks {gv}:\n{versions}"
        );
    }
    let info = c.ok(0, &["cluster-info"]);
    assert!(
        info.contains("Kubernetes control plane") && info.contains(&c.member(0).kube_url()),
        "{info}"
    );
    let explain = c.ok(0, &["explain", "deployment.spec.replicas"]);
    assert!(explain.contains("Number of desired pods"), "{explain}");
    // Every kind's list is in the v2 document too, as the list operation's answer.
    let v2: Value = serde_json::from_str(&c.ok(0, &["get", "--raw", "/openapi/v2"])).unwrap();
    let pod_list = &v2["definitions"]["io.k8s.api.core.v1.PodList"];
    assert_eq!(
        pod_list["properties"]["items"]["items"]["$ref"], "#/definitions/io.k8s.api.core.v1.Pod",
        "{pod_list}"
    );
    assert_eq!(
        pod_list["x-kubernetes-group-version-kind"][0]["kind"],
        "PodList"
    );
    assert_eq!(c.ok(0, &["get", "--raw", "/healthz"]).trim(), "ok");
    let ns = c.ok(0, &["get", "namespaces", "-o", "name"]);
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(ns.contains(&format!("namespace/{n}")), "{ns}");
    }
    c.wait_until("default service accounts", Duration::from_secs(10), || {
        c.kubectl(
            0,
            &["get", "serviceaccount", "default", "-n", "kube-system"],
        )
        .ok
    });
}

#[test]
fn create_get_describe_label_delete() {
    let c = KubeCluster::start(keel_bin!(), 1);
    c.ok(0, &["create", "namespace", "demo"]);
    // Every namespace gets the root-ca publisher's ConfigMap; the listings below include it.
    c.wait_until(
        "kube-root-ca.crt in demo",
        std::time::Duration::from_secs(30),
        || {
            c.kubectl(0, &["-n", "demo", "get", "cm", "kube-root-ca.crt"])
                .ok
        },
    );
    c.ok(
        0,
        &[
            "-n",
            "demo",
            "create",
            "configmap",
            "c1",
            "--from-literal=k=v",
        ],
    );
    c.ok(
        0,
        &[
            "-n",
            "demo",
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=pw=secret",
        ],
    );
    c.ok(
        0,
        &[
            "-n",
            "demo",
            "create",
            "deployment",
            "web",
            "--image=nginx:1.25",
            "--replicas=3",
        ],
    );
    c.ok(
        0,
        &[
            "-n",
            "demo",
            "create",
            "service",
            "clusterip",
            "web",
            "--tcp=80:8080",
        ],
    );
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c2, namespace: demo, labels: {app: web}}\ndata: {a: \"1\", b: \"2\"}\n"),
    );

    let wide = c.ok(0, &["-n", "demo", "get", "deploy", "-o", "wide"]);
    assert!(
        wide.contains("web")
            && wide.contains("0/3")
            && wide.contains("nginx:1.25")
            && wide.contains("app=web"),
        "{wide}"
    );
    let svc = c.ok(0, &["-n", "demo", "get", "svc", "web"]);
    assert!(
        svc.contains("ClusterIP") && svc.contains("10.96.") && svc.contains("80/TCP"),
        "{svc}"
    );
    let yaml = c.ok(0, &["-n", "demo", "get", "deploy", "web", "-o", "yaml"]);
    assert!(
        yaml.contains("replicas: 3") && yaml.contains("imagePullPolicy: IfNotPresent"),
        "{yaml}"
    );
    let json: Value =
        serde_json::from_str(&c.ok(0, &["-n", "demo", "get", "cm", "-o", "json"])).expect("json");
    assert_eq!(json["kind"], "List");
    assert_eq!(
        json["items"].as_array().map(Vec::len),
        Some(3),
        "c1, c2 and kube-root-ca.crt: {json}"
    );
    let jp = c.ok(
        0,
        &[
            "-n",
            "demo",
            "get",
            "secret",
            "s1",
            "-o",
            "jsonpath={.data.pw}",
        ],
    );
    assert_eq!(jp, "c2VjcmV0");
    let all = c.ok(0, &["get", "cm", "-A"]);
    assert!(
        all.lines()
            .any(|l| l.starts_with("demo") && l.contains("c2")),
        "{all}"
    );
    let labels = c.ok(0, &["-n", "demo", "get", "cm", "--show-labels"]);
    assert!(labels.contains("app=web"), "{labels}");
    let selected = c.ok(
        0,
        &["-n", "demo", "get", "cm", "-l", "app=web", "-o", "name"],
    );
    assert_eq!(selected.trim(), "configmap/c2");
    let not_selected = c.ok(
        0,
        &[
            "-n",
            "demo",
            "get",
            "cm",
            "-l",
            "app notin (web)",
            "-o",
            "name",
        ],
    );
    assert!(
        not_selected.contains("configmap/c1") && !not_selected.contains("c2"),
        "{not_selected}"
    );
    let by_field = c.ok(
        0,
        &[
            "-n",
            "demo",
            "get",
            "cm",
            "--field-selector",
            "metadata.name=c1",
            "-o",
            "name",
        ],
    );
    assert_eq!(by_field.trim(), "configmap/c1");
    let bad_field = c.err(
        0,
        &["-n", "demo", "get", "cm", "--field-selector", "spec.nope=1"],
    );
    assert!(
        bad_field.contains("field label not supported: spec.nope"),
        "{bad_field}"
    );
    let sorted = c.ok(
        0,
        &[
            "-n",
            "demo",
            "get",
            "cm",
            "--sort-by=.metadata.name",
            "-o",
            "name",
        ],
    );
    assert_eq!(
        sorted.lines().collect::<Vec<_>>(),
        vec!["configmap/c1", "configmap/c2", "configmap/kube-root-ca.crt"]
    );
    let chunked = c.ok(
        0,
        &["-n", "demo", "get", "cm", "--chunk-size=1", "-o", "name"],
    );
    assert_eq!(chunked.lines().count(), 3, "{chunked}");

    let described = c.ok(0, &["-n", "demo", "describe", "deployment", "web"]);
    assert!(
        described.contains("Replicas:") && described.contains("nginx:1.25"),
        "{described}"
    );
    let described_cm = c.ok(0, &["-n", "demo", "describe", "cm", "c1"]);
    assert!(
        described_cm.contains("Data") && described_cm.contains("k:"),
        "{described_cm}"
    );

    c.ok(0, &["-n", "demo", "label", "cm", "c1", "tier=fe"]);
    c.ok(0, &["-n", "demo", "annotate", "cm", "c1", "note=hello"]);
    let err = c.err(0, &["-n", "demo", "label", "cm", "c1", "tier=be"]);
    assert!(err.contains("already has a value"), "{err}");
    c.ok(
        0,
        &["-n", "demo", "label", "cm", "c1", "tier=be", "--overwrite"],
    );
    let meta = c.ok(
        0,
        &[
            "-n",
            "demo",
            "get",
            "cm",
            "c1",
            "-o",
            "jsonpath={.metadata.labels.tier} {.metadata.annotations.note}",
        ],
    );
    assert_eq!(meta, "be hello");

    // Delete and wait: an object held by a finalizer stays until the finalizer goes.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, namespace: demo, finalizers: [example.com/hold]}\n"),
    );
    c.ok(0, &["-n", "demo", "delete", "cm", "held", "--wait=false"]);
    let ts = c.ok(
        0,
        &[
            "-n",
            "demo",
            "get",
            "cm",
            "held",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    );
    assert!(!ts.is_empty(), "deletionTimestamp must be set");
    let mut waiter = Background::start(
        &c,
        0,
        &[
            "-n",
            "demo",
            "wait",
            "--for=delete",
            "cm/held",
            "--timeout=30s",
        ],
        "wait",
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        waiter.exited(),
        None,
        "wait returned before the object was gone: {}",
        waiter.output()
    );
    c.ok(
        0,
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    c.wait_until("kubectl wait --for=delete to succeed", WATCH_WAIT, || {
        waiter.exited() == Some(true)
    });
    c.ok(
        0,
        &["-n", "demo", "delete", "deployment", "web", "--wait=true"],
    );
    let gone = c.err(0, &["-n", "demo", "get", "deployment", "web"]);
    assert!(
        gone.contains("Error from server (NotFound): deployments.apps \"web\" not found"),
        "{gone}"
    );

    // Namespace lifecycle: deleting it deletes its content, then itself.
    c.ok(
        0,
        &[
            "delete",
            "namespace",
            "demo",
            "--wait=true",
            "--timeout=30s",
        ],
    );
    let r = c.err(0, &["get", "namespace", "demo"]);
    assert!(r.contains("not found"), "{r}");
    let missing = c.err(0, &["-n", "demo", "create", "configmap", "late"]);
    assert!(
        missing.contains("namespaces \"demo\" not found"),
        "{missing}"
    );
}

#[test]
fn errors_print_upstream_messages() {
    let c = KubeCluster::start(keel_bin!(), 1);
    c.ok(0, &["create", "configmap", "one"]);
    let exists = c.err(0, &["create", "configmap", "one"]);
    assert!(
        exists.contains("configmaps \"one\" already exists"),
        "{exists}"
    );
    let nf = c.err(0, &["get", "configmap", "nope"]);
    assert!(
        nf.contains("Error from server (NotFound): configmaps \"nope\" not found"),
        "{nf}"
    );
    let invalid = c.err(0, &["create", "configmap", "Bad_Name"]);
    assert!(
        invalid.contains("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"),
        "{invalid}"
    );
    let bad_deploy = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some(r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"selector":{"matchLabels":{"app":"a"}},"template":{"metadata":{"labels":{"app":"b"}},"spec":{"containers":[{"name":"c"}]}}}}"#),
    );
    assert!(
        bad_deploy.contains("The Deployment \"d\" is invalid"),
        "{bad_deploy}"
    );
    assert!(
        bad_deploy.contains("spec.template.metadata.labels"),
        "{bad_deploy}"
    );
    assert!(
        bad_deploy.contains("spec.template.spec.containers[0].image: Required value"),
        "{bad_deploy}"
    );

    // Unknown fields: kubectl asks for strict field validation by default.
    let typo = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo}\ndatta: {a: b}\n"),
    );
    assert!(
        typo.contains("strict decoding error: unknown field \"datta\""),
        "{typo}"
    );
    let lax = c.ok_stdin(
        0,
        &["create", "--validate=false", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo}\ndatta: {a: b}\n"),
    );
    assert!(lax.contains("configmap/typo created"), "{lax}");
    let stored = c.ok(0, &["get", "configmap", "typo", "-o", "json"]);
    assert!(
        !stored.contains("datta"),
        "unknown fields are dropped: {stored}"
    );

    // Conflict: replace with a resourceVersion that is no longer current.
    let stale = c.ok(0, &["get", "configmap", "one", "-o", "json"]);
    c.ok(0, &["label", "configmap", "one", "x=1"]);
    let conflict = c.err_stdin(0, &["replace", "-f", "-"], Some(&stale));
    assert!(
        conflict.contains("Operation cannot be fulfilled on configmaps \"one\": the object has been modified; please apply your changes to the latest version and try again"),
        "{conflict}"
    );
    let unknown = c.err(0, &["get", "widgets"]);
    assert!(
        unknown.contains("the server doesn't have a resource type \"widgets\""),
        "{unknown}"
    );
}

#[test]
fn watch_sees_changes_from_another_client() {
    let c = KubeCluster::start(keel_bin!(), 1);
    c.ok(0, &["create", "configmap", "first"]);
    let mut w = Background::start(&c, 0, &["get", "configmaps", "-w"], "watch");
    c.wait_until("the watch to list the existing object", WATCH_WAIT, || {
        w.output().contains("first")
    });
    c.ok(0, &["create", "configmap", "second", "--from-literal=a=b"]);
    c.wait_until("the watch to see the new object", WATCH_WAIT, || {
        w.output().contains("second")
    });
    c.ok(0, &["delete", "configmap", "first"]);
    let mut wj = Background::start(
        &c,
        0,
        &[
            "get",
            "configmaps",
            "-w",
            "-o",
            "json",
            "--output-watch-events",
        ],
        "watchjson",
    );
    c.wait_until("the JSON watch to start", WATCH_WAIT, || {
        wj.output().contains("second")
    });
    c.ok(0, &["label", "configmap", "second", "seen=yes"]);
    c.wait_until("a MODIFIED event", WATCH_WAIT, || {
        let out = wj.output();
        out.contains("\"MODIFIED\"") && out.contains("seen")
    });
    assert_eq!(w.exited(), None, "watch ended early: {}", w.output());
    assert_eq!(wj.exited(), None, "watch ended early: {}", wj.output());
}

#[test]
fn three_members_share_objects_and_watches() {
    let c = KubeCluster::start(keel_bin!(), 3);
    let mut w = Background::start(
        &c,
        2,
        &["get", "configmaps", "-w", "-o", "name"],
        "watch-m3",
    );
    std::thread::sleep(Duration::from_millis(500));
    c.ok(0, &["create", "configmap", "from-m1", "--from-literal=a=b"]);
    c.wait_until(
        "member 3's watch to see a write made through member 1",
        WATCH_WAIT,
        || w.output().contains("configmap/from-m1"),
    );
    let got = c.ok(
        1,
        &["get", "configmap", "from-m1", "-o", "jsonpath={.data.a}"],
    );
    assert_eq!(got, "b");
    // Every member's kubeconfig works against every member (one cluster CA, SANs for all).
    let other = c
        .kubectl_cmd(
            0,
            &[
                "--server",
                &c.member(1).kube_url(),
                "get",
                "configmap",
                "from-m1",
                "-o",
                "name",
            ],
        )
        .output()
        .expect("kubectl");
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    c.ok(2, &["create", "deployment", "web", "--image=nginx"]);
    let listed = c.ok(0, &["get", "deployments", "-o", "name"]);
    assert_eq!(listed.trim(), "deployment.apps/web");
    assert_eq!(w.exited(), None, "{}", w.output());
}

const APPLY_V1: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels: {app: app}
spec:
  replicas: 2
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports: [{containerPort: 80}]
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
      - name: sidecar
        image: busybox:1.36
        args: [sleep, "3600"]
"#;

const APPLY_V2: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels: {app: app, tier: fe}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: web
        image: nginx:1.26
        ports: [{containerPort: 80}, {containerPort: 443}]
        env: [{name: A, value: "1"}]
"#;

#[test]
fn client_side_apply_converges_and_patches_merge_by_key() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let out = c.ok_stdin(0, &["apply", "-f", "-"], Some(APPLY_V1));
    assert!(out.contains("deployment.apps/app created"), "{out}");
    let out = c.ok_stdin(0, &["apply", "-f", "-"], Some(APPLY_V2));
    assert!(out.contains("deployment.apps/app configured"), "{out}");
    let d: Value =
        serde_json::from_str(&c.ok(0, &["get", "deploy", "app", "-o", "json"])).expect("json");
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "sidecar removed: {d}");
    assert_eq!(containers[0]["image"], "nginx:1.26");
    assert_eq!(
        containers[0]["env"],
        serde_json::json!([{"name": "A", "value": "1"}])
    );
    assert_eq!(
        containers[0]["ports"].as_array().map(Vec::len),
        Some(2),
        "{d}"
    );
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["labels"]["tier"], "fe");
    assert_eq!(d["metadata"]["generation"], 2);
    // What a write by kubectl would change: the generation, the last-applied configuration and kubectl's
    // managedFields entry. (The resourceVersion is no measure: the deployment controller writes status.)
    let mine = |d: &Value| {
        let kubectl = d["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["manager"] == "kubectl-client-side-apply")
            .cloned()
            .collect::<Vec<_>>();
        (
            d["metadata"]["generation"].clone(),
            d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .clone(),
            kubectl,
        )
    };
    let before = mine(&d);
    // Re-applying the same manifest changes nothing.
    let out = c.ok_stdin(0, &["apply", "-f", "-"], Some(APPLY_V2));
    assert!(out.contains("deployment.apps/app unchanged"), "{out}");
    let again: Value =
        serde_json::from_str(&c.ok(0, &["get", "deploy", "app", "-o", "json"])).expect("json");
    assert_eq!(mine(&again), before);
    let diff = c.kubectl_stdin(0, &["diff", "-f", "-"], Some(APPLY_V2));
    assert!(
        diff.ok && diff.stdout.is_empty(),
        "kubectl diff after apply: {} {}",
        diff.stdout,
        diff.stderr
    );

    // Other writers: set image and a strategic patch keep what they do not mention; scale uses /scale.
    c.ok(0, &["set", "image", "deployment/app", "web=nginx:1.27"]);
    c.ok(0, &["patch", "deployment", "app", "--type=strategic", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"C","value":"3"}]}]}}}}"#]);
    c.ok(0, &["scale", "deployment", "app", "--replicas=5"]);
    let d: Value =
        serde_json::from_str(&c.ok(0, &["get", "deploy", "app", "-o", "json"])).expect("json");
    let web = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(web["image"], "nginx:1.27");
    // As upstream's strategic merge: the patch's items first, in patch order, then the live-only ones.
    assert_eq!(
        web["env"],
        serde_json::json!([{"name": "C", "value": "3"}, {"name": "A", "value": "1"}])
    );
    assert_eq!(web["ports"].as_array().map(Vec::len), Some(2));
    assert_eq!(d["spec"]["replicas"], 5);
    let scale = c.ok(
        0,
        &[
            "get",
            "--raw",
            "/apis/apps/v1/namespaces/default/deployments/app/scale",
        ],
    );
    let scale: Value = serde_json::from_str(&scale).expect("scale json");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["selector"], "app=app");
}

#[test]
fn patch_types_edit_status_subresource_and_dry_run() {
    let c = KubeCluster::start(keel_bin!(), 1);
    c.ok_stdin(0, &["apply", "-f", "-"], Some(APPLY_V1));
    c.ok(0, &["patch", "deploy", "app", "--type=json", "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":4},{"op":"add","path":"/metadata/labels/j","value":"p"}]"#]);
    c.ok(
        0,
        &[
            "patch",
            "deploy",
            "app",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"m":"p"}}}"#,
        ],
    );
    let bad = c.err(
        0,
        &[
            "patch",
            "deploy",
            "app",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/spec/replicas","value":9}]"#,
        ],
    );
    assert!(bad.contains("Invalid") || bad.contains("invalid"), "{bad}");
    // kubectl edit with a scripted editor.
    let editor = c.dir().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/replicas: 4/replicas: 6/' \"$1\"\n",
    )
    .expect("editor");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let edit = c
        .kubectl_cmd(0, &["edit", "deploy", "app"])
        .env("EDITOR", &editor)
        .output()
        .expect("edit");
    assert!(
        edit.status.success(),
        "{}",
        String::from_utf8_lossy(&edit.stderr)
    );
    let d: Value =
        serde_json::from_str(&c.ok(0, &["get", "deploy", "app", "-o", "json"])).expect("json");
    assert_eq!(d["spec"]["replicas"], 6);
    assert_eq!(d["metadata"]["labels"]["j"], "p");
    assert_eq!(d["metadata"]["labels"]["m"], "p");
    let generation = d["metadata"]["generation"].as_i64().expect("generation");

    // /status changes only status (and leaves generation alone); the main resource ignores status.
    c.ok(
        0,
        &[
            "patch",
            "deploy",
            "app",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":7},"spec":{"replicas":1}}"#,
        ],
    );
    c.ok(
        0,
        &[
            "patch",
            "deploy",
            "app",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":1}}"#,
        ],
    );
    let d: Value =
        serde_json::from_str(&c.ok(0, &["get", "deploy", "app", "-o", "json"])).expect("json");
    // The patch of the main resource left status alone; the status patch's 7 stands until the deployment
    // controller writes the replicas it observes (6), as upstream's would.
    let replicas = d["status"]["replicas"].as_i64();
    assert!(
        matches!(replicas, Some(6) | Some(7)),
        "status.replicas: {replicas:?}"
    );
    assert_eq!(d["spec"]["replicas"], 6);
    assert_eq!(d["metadata"]["generation"].as_i64(), Some(generation));

    // Server-side dry run writes nothing.
    c.ok(0, &["create", "configmap", "dry", "--dry-run=server"]);
    assert!(!c.kubectl(0, &["get", "configmap", "dry"]).ok);
    c.ok(0, &["delete", "deploy", "app", "--dry-run=server"]);
    assert!(c.kubectl(0, &["get", "deploy", "app"]).ok);
    c.ok(
        0,
        &["scale", "deploy", "app", "--replicas=2", "--dry-run=server"],
    );
    assert_eq!(
        c.ok(
            0,
            &["get", "deploy", "app", "-o", "jsonpath={.spec.replicas}"]
        ),
        "6"
    );
}

/// One revision of the manifest `client_side_apply_through_five_revisions` applies.
fn revision(labels: Value, replicas: u32, containers: Value, volumes: Option<Value>) -> Value {
    let mut spec = serde_json::json!({"containers": containers});
    if let Some(v) = volumes {
        spec["volumes"] = v;
    }
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "rev", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "rev"}},
            "template": {"metadata": {"labels": {"app": "rev"}}, "spec": spec}
        }
    })
}

/// What the test compares between a manifest and the stored object: labels, replicas, and per container its
/// image, env, container ports and volume mounts, plus the volumes' names (the server adds only defaults).
fn applied_view(d: &Value) -> Value {
    let pod = &d["spec"]["template"]["spec"];
    let containers: Vec<Value> = pod["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let ports: Vec<Value> = c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["containerPort"].clone())
                .collect();
            serde_json::json!({
                "name": c["name"], "image": c["image"],
                "env": c.get("env").cloned().unwrap_or(Value::Null),
                "ports": ports,
                "mounts": c.get("volumeMounts").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    let volumes: Vec<Value> = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v["name"].clone())
        .collect();
    serde_json::json!({
        "labels": d["metadata"]["labels"], "replicas": d["spec"]["replicas"],
        "containers": containers, "volumes": volumes,
    })
}

/// Client-side `kubectl apply` of one deployment through five revisions that add, change and remove fields,
/// containers, env entries, ports, volume mounts and volumes: after each the stored object is exactly the
/// manifest (plus defaults), `kubectl diff` is empty, and the last-applied annotation is the manifest.
#[test]
fn client_side_apply_through_five_revisions() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let revisions = [
        revision(
            serde_json::json!({"app": "rev"}),
            1,
            serde_json::json!([{"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80}],
                 "env": [{"name": "A", "value": "1"}]}]),
            None,
        ),
        revision(
            serde_json::json!({"app": "rev", "tier": "fe"}),
            3,
            serde_json::json!([{"name": "web", "image": "nginx:1.26", "ports": [{"containerPort": 80}, {"containerPort": 443}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "sidecar", "image": "busybox:1.36"}]),
            None,
        ),
        revision(
            serde_json::json!({"app": "rev", "tier": "fe"}),
            3,
            serde_json::json!([{"name": "web", "image": "nginx:1.26", "ports": [{"containerPort": 443}],
                 "env": [{"name": "B", "value": "3"}],
                 "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
                {"name": "sidecar", "image": "busybox:1.36"}]),
            Some(serde_json::json!([{"name": "cache", "emptyDir": {}}])),
        ),
        revision(
            serde_json::json!({"app": "rev"}),
            2,
            serde_json::json!([{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 443}, {"containerPort": 8080}],
                 "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                 "volumeMounts": [{"name": "cache", "mountPath": "/cache"}, {"name": "conf", "mountPath": "/etc/conf"}]}]),
            Some(
                serde_json::json!([{"name": "cache", "emptyDir": {}}, {"name": "conf", "emptyDir": {}}]),
            ),
        ),
        revision(
            serde_json::json!({"app": "rev", "stage": "prod"}),
            4,
            serde_json::json!([{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]},
                {"name": "metrics", "image": "busybox:1.37", "ports": [{"containerPort": 9090}]}]),
            None,
        ),
    ];
    for (i, manifest) in revisions.iter().enumerate() {
        let text = manifest.to_string();
        let out = c.ok_stdin(0, &["apply", "-f", "-"], Some(&text));
        let verb = if i == 0 { "created" } else { "configured" };
        assert!(
            out.contains(&format!("deployment.apps/rev {verb}")),
            "revision {i}: {out}"
        );
        let d: Value =
            serde_json::from_str(&c.ok(0, &["get", "deploy", "rev", "-o", "json"])).expect("json");
        assert_eq!(
            applied_view(&d),
            applied_view(manifest),
            "revision {i}: stored {d}"
        );
        let last: Value = d["metadata"]["annotations"]
            ["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null);
        assert_eq!(
            applied_view(&last),
            applied_view(manifest),
            "revision {i}: last-applied"
        );
        let diff = c.kubectl_stdin(0, &["diff", "-f", "-"], Some(&text));
        assert!(
            diff.ok && diff.stdout.is_empty(),
            "revision {i}: kubectl diff after apply: {} {}",
            diff.stdout,
            diff.stderr
        );
    }
}

/// The cluster the `kind: List` tests share (each keeps to its own namespace).
fn shared() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 1))
}

/// A `kind: List` of a Pod and a ConfigMap, as `kubectl get -o yaml` writes several objects, with extra
/// lines for the container and the ConfigMap.
fn pod_and_configmap(container_extra: &str, configmap_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: List\nitems:\n\
         - apiVersion: v1\n  kind: Pod\n  metadata: {{name: lp}}\n  spec:\n    containers:\n\
         \x20   - name: c\n      image: nginx:1.25\n      ports: [{{containerPort: 80, name: http}}]\n\
         \x20     resources: {{limits: {{cpu: 1, memory: 64Mi}}}}\n{container_extra}\
         - apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: lc}}\n  data: {{k: v}}\n{configmap_extra}"
    )
}

// kubectl cannot ask the server to validate a List (it is no resource), so it validates it itself against
// /openapi/v2, fetched as protobuf.
#[test]
fn list_manifests_are_validated_on_the_client_and_created() {
    let c = shared();
    c.ok(0, &["create", "namespace", "list-ok"]);
    let list = pod_and_configmap("", "");
    let r = c.kubectl_stdin(
        0,
        &["-n", "list-ok", "create", "-f", "-", "-v=6"],
        Some(&list),
    );
    assert!(r.ok, "kubectl create: {}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("pod/lp created") && r.stdout.contains("configmap/lc created"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("GET") && l.contains("/openapi/v2") && l.contains("200 OK")),
        "kubectl did not read /openapi/v2: {}",
        r.stderr
    );
    // apply validates the same way, then merges each object.
    let relabelled = list.replace(
        "metadata: {name: lc}",
        "metadata: {name: lc, labels: {a: b}}",
    );
    let applied = c.ok_stdin(0, &["-n", "list-ok", "apply", "-f", "-"], Some(&relabelled));
    assert!(applied.contains("configmap/lc configured"), "{applied}");
    assert_eq!(
        c.ok(
            0,
            &[
                "-n",
                "list-ok",
                "get",
                "cm",
                "lc",
                "-o",
                "jsonpath={.metadata.labels.a}"
            ]
        ),
        "b"
    );
    let explain = c.ok(
        0,
        &[
            "explain",
            "--output",
            "plaintext-openapiv2",
            "configmap.data",
        ],
    );
    assert!(
        explain.contains("FIELD:    data <map[string]string>"),
        "{explain}"
    );
}

#[test]
fn list_with_unknown_fields_is_refused_by_client_validation() {
    let c = shared();
    c.ok(0, &["create", "namespace", "list-bad"]);
    let list = pod_and_configmap("      imagee: typo\n", "  datta: {a: b}\n");
    let err = c.err_stdin(0, &["-n", "list-bad", "create", "-f", "-"], Some(&list));
    assert!(
        err.contains(
            "error validating data: [ValidationError(Pod.spec.containers[0]): unknown field \"imagee\" in \
             io.k8s.api.core.v1.Container, ValidationError(ConfigMap): unknown field \"datta\" in \
             io.k8s.api.core.v1.ConfigMap]; if you choose to ignore these errors, turn validation off with \
             --validate=false"
        ),
        "{err}"
    );
    let bad_meta = list.replace("metadata: {name: lc}", "metadata: {name: lc, labelz: {}}");
    let err = c.err_stdin(0, &["-n", "list-bad", "apply", "-f", "-"], Some(&bad_meta));
    assert!(
        err.contains(
            "ValidationError(ConfigMap.metadata): unknown field \"labelz\" in \
             io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        ),
        "{err}"
    );
    // Nothing was created: validation comes before the first request.
    let none = c.ok(
        0,
        &["-n", "list-bad", "get", "pods,configmaps", "-o", "name"],
    );
    assert!(
        !none.contains("pod/lp") && !none.contains("configmap/lc"),
        "{none}"
    );
}

// Upstream's BeforeCreate uses generateName only when the name is empty, so resending an answer (which
// carries both) is a 409, not a second object.
#[test]
fn generate_name_only_without_a_name() {
    let c = shared();
    c.ok(0, &["create", "namespace", "gen-name"]);
    let both = "apiVersion: v1\nkind: Pod\nmetadata: {name: fixed, generateName: gen-}\n\
                spec:\n  containers: [{name: c, image: busybox}]\n";
    let first = c.ok_stdin(0, &["-n", "gen-name", "create", "-f", "-"], Some(both));
    assert!(first.contains("pod/fixed created"), "{first}");
    let again = c.err_stdin(0, &["-n", "gen-name", "create", "-f", "-"], Some(both));
    assert!(
        again.contains(
            "Error from server (AlreadyExists): error when creating \"STDIN\": pods \"fixed\" already \
             exists, the server was not able to generate a unique name for the object"
        ),
        "{again}"
    );
    let only = both.replace("name: fixed, ", "");
    let named = c.ok_stdin(0, &["-n", "gen-name", "create", "-f", "-"], Some(&only));
    assert!(
        named.starts_with("pod/gen-") && named.contains(" created"),
        "{named}"
    );
    let pods = c.ok(0, &["-n", "gen-name", "get", "pods", "-o", "name"]);
    let mut names: Vec<&str> = pods.lines().collect();
    names.sort_unstable();
    assert_eq!(names.len(), 2, "{pods}");
    assert_eq!(names[0], "pod/fixed", "{pods}");
    assert!(
        names[1].starts_with("pod/gen-") && names[1].len() == "pod/gen-".len() + 5,
        "{pods}"
    );
}

/// `bytes` in base64 wrapped at 76 columns, one line per row, as Python's `base64.encodebytes` writes it.
fn wrapped_base64(bytes: &[u8]) -> String {
    use base64::Engine;
    let one_line = base64::engine::general_purpose::STANDARD.encode(bytes);
    one_line
        .as_bytes()
        .chunks(76)
        .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
        .collect()
}

// `[]byte` fields are decoded by Go's rules (line breaks skipped, padding required) in JSON and YAML bodies,
// stored as bytes and read back in one line; what Go refuses is refused with Go's text.
#[test]
fn base64_byte_fields_follow_go() {
    use base64::Engine;
    let c = shared();
    c.ok(0, &["create", "namespace", "bytes"]);
    let raw: Vec<u8> = (0..=255u8).cycle().take(300).collect();
    let wrapped = wrapped_base64(&raw);
    assert!(wrapped.lines().count() > 1 && wrapped.lines().next().map(str::len) == Some(76));
    // YAML: a literal block keeps the line breaks, as a manifest written from encodebytes does.
    let block: String = wrapped.lines().map(|l| format!("    {l}\n")).collect();
    let yaml = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: wrapped}}\ndata:\n  key: |\n{block}"
    );
    let out = c.ok_stdin(0, &["-n", "bytes", "create", "-f", "-"], Some(&yaml));
    assert!(out.contains("secret/wrapped created"), "{out}");
    // JSON: the same text as a string with \n and \r\n.
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "wrapped"},
        "binaryData": {"key": wrapped.replace('\n', "\r\n")},
    });
    let out = c.ok_stdin(
        0,
        &["-n", "bytes", "create", "-f", "-"],
        Some(&json.to_string()),
    );
    assert!(out.contains("configmap/wrapped created"), "{out}");
    let one_line = base64::engine::general_purpose::STANDARD.encode(&raw);
    for (kind, path) in [
        ("secret", "{.data.key}"),
        ("configmap", "{.binaryData.key}"),
    ] {
        let back = c.ok(
            0,
            &[
                "-n",
                "bytes",
                "get",
                kind,
                "wrapped",
                "-o",
                &format!("jsonpath={path}"),
            ],
        );
        assert_eq!(back, one_line, "{kind}");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(back.as_bytes())
            .expect("base64 answer");
        assert_eq!(decoded, raw, "{kind}: read back byte for byte");
    }
    // Go refuses a missing padding and a character outside the alphabet, at their offsets.
    let bad = |value: &str| {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"k": value},
        });
        c.err_stdin(
            0,
            &["-n", "bytes", "create", "-f", "-"],
            Some(&body.to_string()),
        )
    };
    let err = bad("YWJjZA");
    assert!(
        err.contains(
            "Error from server (BadRequest): error when creating \"STDIN\": Secret in version \"v1\" \
             cannot be handled as a Secret: illegal base64 data at input byte 4"
        ),
        "{err}"
    );
    let err = bad("YWJj\nZG-m");
    assert!(err.contains("illegal base64 data at input byte 7"), "{err}");
}

// What a create takes from the body and what the server sets, as upstream's BeforeCreate: the URL's namespace
// (a different one in the body is refused; cluster-scoped objects have none), a fresh uid and
// creationTimestamp whatever the body says, and no resourceVersion.
#[test]
fn create_takes_server_metadata_as_upstream() {
    let c = shared();
    c.ok(0, &["create", "namespace", "meta-a"]);
    let post = |path: &str, body: &serde_json::Value| {
        let file = c.dir().join("create-meta.json");
        std::fs::write(&file, body.to_string()).unwrap();
        c.kubectl(0, &["create", "--raw", path, "-f", file.to_str().unwrap()])
    };
    let cms = "/api/v1/namespaces/meta-a/configmaps";
    let other = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "elsewhere", "namespace": "meta-b"}});
    let r = post(cms, &other);
    assert!(
        !r.ok
            && r.stderr.contains(
                "the namespace of the provided object does not match the namespace sent on the request"
            ),
        "{r:?}"
    );
    let sent = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "stamped", "uid": "not-a-server-uid",
                     "creationTimestamp": "2000-01-01T00:00:00Z"}});
    let r = post(cms, &sent);
    assert!(r.ok, "{r:?}");
    let made: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(made["metadata"]["namespace"], "meta-a", "{made}");
    assert_ne!(made["metadata"]["uid"], "not-a-server-uid", "{made}");
    assert_eq!(
        made["metadata"]["uid"].as_str().map(str::len),
        Some(36),
        "{made}"
    );
    assert_ne!(
        made["metadata"]["creationTimestamp"], "2000-01-01T00:00:00Z",
        "{made}"
    );
    // A resourceVersion that parses as a number fails the create (500, no reason); another is ignored.
    let versioned = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "versioned", "resourceVersion": "5"}});
    let r = post(cms, &versioned);
    assert!(
        !r.ok
            && r.stderr.contains(
                "Error from server: resourceVersion should not be set on objects to be created"
            ),
        "{r:?}"
    );
    let odd = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "odd-version", "resourceVersion": "x"}});
    let r = post(cms, &odd);
    assert!(r.ok, "{r:?}");
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "meta-cluster", "namespace": "meta-a"}});
    let r = post("/api/v1/namespaces", &ns);
    assert!(r.ok, "{r:?}");
    let made: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(made["metadata"]["namespace"].is_null(), "{made}");
}

/// Ingresses and IngressClasses as kubectl knows them: `kubectl create ingress`, the default class filled
/// in by admission, the Table columns, `describe`, `explain`, and upstream's validation messages.
#[test]
fn ingresses_get_the_default_class_and_upstream_validation() {
    let c = shared();
    c.ok(0, &["create", "namespace", "ing"]);
    let classes = "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: alpha\n\
        \x20 annotations: {ingressclass.kubernetes.io/is-default-class: \"true\"}\n\
        spec: {controller: example.com/alpha, parameters: {apiGroup: example.com, kind: Config, name: p}}\n\
        ---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: beta}\n\
        spec: {controller: example.com/beta}\n";
    c.ok_stdin(0, &["apply", "-f", "-"], Some(classes));
    let table = c.ok(0, &["get", "ingressclasses"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "CONTROLLER", "PARAMETERS", "AGE"],
        "{table}"
    );
    assert!(
        table.contains("example.com/alpha") && table.contains("Config.example.com/p"),
        "{table}"
    );
    // Scope defaults to Cluster.
    let scope = c.ok(
        0,
        &[
            "get",
            "ingressclass",
            "alpha",
            "-o",
            "jsonpath={.spec.parameters.scope}",
        ],
    );
    assert_eq!(scope, "Cluster");

    c.ok(
        0,
        &[
            "-n",
            "ing",
            "create",
            "ingress",
            "web",
            "--rule=a.example.com/=web:80",
            "--rule=b.example.com/api*=api:http,tls=b-tls",
        ],
    );
    let class = c.ok(
        0,
        &[
            "-n",
            "ing",
            "get",
            "ingress",
            "web",
            "-o",
            "jsonpath={.spec.ingressClassName}",
        ],
    );
    assert_eq!(class, "alpha", "the default class is filled in");
    c.ok(
        0,
        &[
            "-n",
            "ing",
            "create",
            "ingress",
            "named",
            "--class=beta",
            "--rule=c.example.com/=web:80",
        ],
    );
    let table = c.ok(0, &["-n", "ing", "get", "ingress"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
        "{table}"
    );
    let web = table
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or_default();
    let cells: Vec<&str> = web.split_whitespace().collect();
    assert_eq!(
        cells[..3],
        ["web", "alpha", "a.example.com,b.example.com"],
        "{table}"
    );
    assert_eq!(cells[3..5], ["80,", "443"], "{table}");
    assert!(table.contains("named") && table.contains("beta"), "{table}");
    let described = c.ok(0, &["-n", "ing", "describe", "ingress", "web"]);
    for want in [
        "Ingress Class:    alpha",
        "b-tls terminates b.example.com",
        "/api",
        "api:http",
    ] {
        assert!(
            described.contains(want),
            "describe lacks {want:?}:\n{described}"
        );
    }
    let explain = c.ok(0, &["explain", "ingress.spec.rules.http.paths.pathType"]);
    assert!(explain.contains("pathType"), "{explain}");

    // Upstream's messages.
    let e = c.err(
        0,
        &[
            "-n",
            "ing",
            "create",
            "ingress",
            "ip",
            "--rule=1.2.3.4/=web:80",
        ],
    );
    assert!(
        e.contains(
            "spec.rules[0].host: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address"
        ),
        "{e}"
    );
    let bad = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: bad, namespace: ing}\n\
        spec:\n  rules:\n  - http:\n      paths:\n      - path: /x\n        backend: {service: {name: web, port: {number: 80}}}\n";
    let e = c.err_stdin(0, &["create", "-f", "-"], Some(bad));
    assert!(
        e.contains(
            "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"
        ),
        "{e}"
    );
    let empty = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: empty, namespace: ing}\nspec: {}\n";
    let e = c.err_stdin(0, &["create", "-f", "-"], Some(empty));
    assert!(
        e.contains("either `defaultBackend` or `rules` must be specified"),
        "{e}"
    );
    let e = c.err(
        0,
        &[
            "patch",
            "ingressclass",
            "beta",
            "--type=merge",
            "-p",
            r#"{"spec":{"controller":"example.com/gamma"}}"#,
        ],
    );
    assert!(
        e.contains("spec.controller: Invalid value: \"example.com/gamma\": field is immutable"),
        "{e}"
    );
    c.ok(0, &["delete", "namespace", "ing", "--wait=false"]);
    c.ok(0, &["delete", "ingressclass", "alpha", "beta"]);
}
