//! Server-side apply and managedFields with the real kubectl (1.32): a deployment applied through several
//! revisions, conflicts between field managers (and with `kubectl scale`), forced applies, removal of fields
//! an applier dropped, the upgrade from client-side apply, and bad apply requests sent raw. Also the order a
//! strategic merge patch (`kubectl patch`) leaves a merged list in.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use keel_testkit::{keel_bin, KubeCluster};
use serde_json::{json, Value};

/// The deployment `web` with the given labels, replicas and containers (as YAML-compatible JSON).
fn web(labels: Value, replicas: i64, containers: Value) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}},
        },
    })
    .to_string()
}

fn get_json(c: &KubeCluster, what: &[&str]) -> Value {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    let out = c.ok(0, &args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl get: {e}: {out}"))
}

/// The managedFields entry of a manager and operation.
fn entry<'a>(obj: &'a Value, manager: &str, op: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == op)
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}/{}{}",
                        e["manager"].as_str().unwrap_or(""),
                        e["operation"].as_str().unwrap_or(""),
                        e["subresource"]
                            .as_str()
                            .map(|s| format!("/{s}"))
                            .unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Containers with the server's defaults taken out, to compare with a manifest.
fn without_defaults(containers: &Value) -> Value {
    let mut cs = containers.clone();
    for c in cs.as_array_mut().into_iter().flatten() {
        if let Some(m) = c.as_object_mut() {
            for d in [
                "imagePullPolicy",
                "resources",
                "terminationMessagePath",
                "terminationMessagePolicy",
            ] {
                m.remove(d);
            }
            for p in m
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if p["protocol"] == "TCP" {
                    p.as_object_mut().map(|p| p.remove("protocol"));
                }
            }
        }
    }
    cs
}

fn apply(c: &KubeCluster, manifest: &str, extra: &[&str]) -> String {
    let mut args = vec!["apply", "--server-side", "-f", "-"];
    args.extend_from_slice(extra);
    c.ok_stdin(0, &args, Some(manifest))
}

fn apply_err(c: &KubeCluster, manifest: &str, extra: &[&str]) -> String {
    let mut args = vec!["apply", "--server-side", "-f", "-"];
    args.extend_from_slice(extra);
    c.err_stdin(0, &args, Some(manifest))
}

#[test]
fn deployment_through_revisions() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let revisions = [
        // 1: two env entries, one port.
        web(
            json!({"app": "web", "tier": "front"}),
            2,
            json!([{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]),
        ),
        // 2: new image and replicas.
        web(
            json!({"app": "web", "tier": "front"}),
            3,
            json!([{"name": "c", "image": "nginx:1.26", "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]),
        ),
        // 3: a second container, one more env entry and port.
        web(
            json!({"app": "web", "tier": "front"}),
            3,
            json!([{"name": "c", "image": "nginx:1.26",
                    "ports": [{"containerPort": 80}, {"containerPort": 443}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]},
                   {"name": "side", "image": "busybox:1.36", "args": ["sleep", "3600"]}]),
        ),
        // 4: the second container, env A and port 80 gone.
        web(
            json!({"app": "web", "tier": "front"}),
            3,
            json!([{"name": "c", "image": "nginx:1.26", "ports": [{"containerPort": 443}],
                    "env": [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]}]),
        ),
        // 5: a label removed, fewer replicas, no env at all.
        web(
            json!({"app": "web"}),
            1,
            json!([{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 443}]}]),
        ),
    ];
    for (i, manifest) in revisions.iter().enumerate() {
        let out = apply(&c, manifest, &[]);
        assert!(
            out.contains("deployment.apps/web serverside-applied"),
            "{out}"
        );
        let want: Value = serde_json::from_str(manifest).expect("manifest");
        let got = get_json(&c, &["deployment", "web"]);
        assert_eq!(
            got["metadata"]["labels"],
            want["metadata"]["labels"],
            "revision {}",
            i + 1
        );
        assert_eq!(got["spec"]["replicas"], want["spec"]["replicas"]);
        assert_eq!(
            without_defaults(&got["spec"]["template"]["spec"]["containers"]),
            want["spec"]["template"]["spec"]["containers"],
            "revision {}: {got}",
            i + 1
        );
        // Defaults are there, owned by nobody.
        assert_eq!(got["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(
            got["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        let mine = entry(&got, "kubectl", "Apply")
            .unwrap_or_else(|| panic!("no kubectl Apply entry: {got}"));
        assert_eq!(mine["apiVersion"], "apps/v1");
        assert_eq!(mine["fieldsType"], "FieldsV1");
        let fields = &mine["fieldsV1"];
        assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
        assert_eq!(fields["f:spec"]["f:selector"], json!({}));
        assert!(fields["f:spec"].get("f:strategy").is_none(), "{fields}");
        let first = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"];
        assert_eq!(first["."], json!({}));
        assert_eq!(first["f:image"], json!({}));
        assert!(first.get("f:imagePullPolicy").is_none());
        let has_side = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]
            .get("k:{\"name\":\"side\"}")
            .is_some();
        assert_eq!(has_side, i == 2, "revision {}: {fields}", i + 1);
        let port443 = first["f:ports"]
            .get("k:{\"containerPort\":443,\"protocol\":\"TCP\"}")
            .is_some();
        assert_eq!(port443, i >= 2);
        assert_eq!(first.get("f:env").is_some(), i < 4, "{first}");
    }
    // The same manifest again changes nothing: same resourceVersion.
    let before = get_json(&c, &["deployment", "web"]);
    apply(&c, &revisions[4], &[]);
    let after = get_json(&c, &["deployment", "web"]);
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    assert_eq!(managers(&after)[0], "kubectl/Apply");
}

#[test]
fn conflicts_between_managers_scale_and_force() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let containers = json!([{"name": "c", "image": "nginx:1.25"}]);
    let two = web(json!({"app": "web"}), 2, containers.clone());
    let four = web(json!({"app": "web"}), 4, containers.clone());
    apply(&c, &two, &["--field-manager=a"]);
    let err = apply_err(&c, &four, &["--field-manager=b"]);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"),
        "{err}"
    );
    assert!(err.contains("--force-conflicts"), "{err}");
    assert_eq!(get_json(&c, &["deployment", "web"])["spec"]["replicas"], 2);
    // The same values: b shares ownership, no conflict.
    apply(&c, &two, &["--field-manager=b"]);
    let shared = get_json(&c, &["deployment", "web"]);
    for m in ["a", "b"] {
        let e = entry(&shared, m, "Apply").unwrap_or_else(|| panic!("{m}: {shared}"));
        assert_eq!(e["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
    }
    // Shared by a and b: a different value conflicts with both.
    let err = apply_err(&c, &four, &["--field-manager=b2"]);
    assert!(
        err.contains("Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.replicas\nconflicts with \"b\":\n- .spec.replicas"),
        "{err}"
    );
    let out = apply(&c, &four, &["--field-manager=b", "--force-conflicts"]);
    assert!(out.contains("serverside-applied"), "{out}");
    let forced = get_json(&c, &["deployment", "web"]);
    assert_eq!(forced["spec"]["replicas"], 4);
    let a = entry(&forced, "a", "Apply").expect("a keeps its other fields");
    assert!(a["fieldsV1"]["f:spec"].get("f:replicas").is_none(), "{a}");
    assert!(a["fieldsV1"]["f:spec"].get("f:selector").is_some(), "{a}");
    let b = entry(&forced, "b", "Apply").expect("b");
    assert_eq!(b["fieldsV1"]["f:spec"]["f:replicas"], json!({}));

    // `kubectl scale` takes replicas (an Update through /scale); re-applying the manifest conflicts.
    c.ok(0, &["scale", "deployment", "web", "--replicas=6"]);
    let scaled = get_json(&c, &["deployment", "web"]);
    let s = scaled["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["subresource"] == "scale"))
        .unwrap_or_else(|| panic!("no scale entry: {scaled}"));
    assert_eq!(s["manager"], "kubectl");
    assert_eq!(s["operation"], "Update");
    assert_eq!(s["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    let err = apply_err(&c, &four, &["--field-manager=b"]);
    assert!(
        err.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl\" with subresource \"scale\" using apps/v1: .spec.replicas"
        ),
        "{err}"
    );
    apply(&c, &four, &["--field-manager=b", "--force-conflicts"]);
    let back = get_json(&c, &["deployment", "web"]);
    assert_eq!(back["spec"]["replicas"], 4);
    assert!(
        !managers(&back).iter().any(|m| m.ends_with("/scale")),
        "{:?}",
        managers(&back)
    );
}

#[test]
fn dropped_fields_go_unless_another_manager_owns_them() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let cm = |data: Value, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "labels": labels}, "data": data})
        .to_string()
    };
    apply(
        &c,
        &cm(
            json!({"x": "1", "y": "2", "z": "3"}),
            json!({"a": "1", "b": "2"}),
        ),
        &["--field-manager=one"],
    );
    // `two` applies y with the same value (shared) and adds its own w.
    apply(
        &c,
        &cm(json!({"y": "2", "w": "4"}), json!({"b": "2"})),
        &["--field-manager=two"],
    );
    // `one` stops applying x, y and label b: x goes, y and b stay (two owns them), z stays (still applied).
    apply(
        &c,
        &cm(json!({"z": "3"}), json!({"a": "1"})),
        &["--field-manager=one"],
    );
    let got = get_json(&c, &["configmap", "cfg"]);
    assert_eq!(got["data"], json!({"y": "2", "w": "4", "z": "3"}), "{got}");
    assert_eq!(got["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    // A field another manager set with an update (kubectl label) is not removed by an applier either.
    c.ok(0, &["label", "configmap", "cfg", "extra=yes"]);
    apply(
        &c,
        &cm(json!({"z": "3"}), json!({})),
        &["--field-manager=one"],
    );
    let got = get_json(&c, &["configmap", "cfg"]);
    assert_eq!(got["metadata"]["labels"], json!({"b": "2", "extra": "yes"}));
    let label = entry(&got, "kubectl-label", "Update").expect("kubectl label entry");
    assert_eq!(
        label["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:extra": {}}}})
    );
    // `two` gives up everything: y, w and label b disappear; `two`'s entry is gone.
    apply(
        &c,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}).to_string(),
        &["--field-manager=two"],
    );
    let got = get_json(&c, &["configmap", "cfg"]);
    assert_eq!(got["data"], json!({"z": "3"}), "{got}");
    assert_eq!(got["metadata"]["labels"], json!({"extra": "yes"}));
    assert!(entry(&got, "two", "Apply").is_none(), "{got}");
}

#[test]
fn server_side_apply_after_client_side_apply() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let containers = json!([{"name": "c", "image": "nginx:1.25"}]);
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&web(json!({"app": "web"}), 2, containers.clone())),
    );
    let csa = get_json(&c, &["deployment", "web"]);
    assert!(
        entry(&csa, "kubectl-client-side-apply", "Update").is_some(),
        "{csa}"
    );
    // Changing replicas: kubectl takes over what client-side apply set without a conflict.
    let out = apply(&c, &web(json!({"app": "web"}), 3, containers.clone()), &[]);
    assert!(out.contains("serverside-applied"), "{out}");
    let got = get_json(&c, &["deployment", "web"]);
    assert_eq!(got["spec"]["replicas"], 3);
    assert!(
        entry(&got, "kubectl-client-side-apply", "Update").is_none(),
        "{:?}",
        managers(&got)
    );
    assert!(entry(&got, "kubectl", "Apply").is_some());
    let last: Value = serde_json::from_str(
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap_or("{}"),
    )
    .expect("annotation");
    assert_eq!(last["spec"]["replicas"], 3);
    // Client-side apply afterwards still works against the same object.
    let out = c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(&web(json!({"app": "web"}), 3, containers)),
    );
    assert!(
        out.contains("unchanged") || out.contains("configured"),
        "{out}"
    );
}

/// Issue 17: `kubectl patch` adding an env entry puts it before the live ones, as upstream does (`W X Z`, not
/// `X Z W`); order matters because `$(VAR)` resolves only against earlier entries.
#[test]
fn strategic_patch_puts_a_new_env_entry_first() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let app = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
        "spec": {
            "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": [
                {"name": "a", "image": "busybox:1.36",
                 "env": [{"name": "X", "value": "1"}, {"name": "Z", "value": "$(X)"}]}]}},
        },
    });
    c.ok_stdin(0, &["create", "-f", "-"], Some(&app.to_string()));
    c.ok(
        0,
        &[
            "patch",
            "deploy",
            "app",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"a","env":[{"name":"W","value":"9"}]}]}}}}"#,
        ],
    );
    let got = get_json(&c, &["deployment", "app"]);
    let env = &got["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        *env,
        json!([{"name": "W", "value": "9"}, {"name": "X", "value": "1"}, {"name": "Z", "value": "$(X)"}]),
        "{got}"
    );
}

/// Sends a raw request; returns the status code and the body as JSON.
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: &str,
    body: &str,
) -> (u16, Value) {
    let headers = [
        ("Content-Type", ct),
        ("User-Agent", "kube-client-test/0.1 (linux)"),
    ];
    keel_testkit::kube::raw_request(client, method, path, &headers, body.as_bytes().to_vec()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_apply_requests() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let client = c.client(0).await;
    let base = "/api/v1/namespaces/default/configmaps/raw";
    let apply = "application/apply-patch+yaml";
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\ndata:\n  k: v\n";

    // Missing fieldManager: 422 from PatchOptions, as upstream.
    let (code, s) = raw(&client, "PATCH", base, apply, yaml).await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let long = "m".repeat(129);
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{base}?fieldManager={long}"),
        apply,
        yaml,
    )
    .await;
    assert_eq!(code, 422, "{s}");
    let q = format!("{base}?fieldManager=raw");
    // Not YAML, not an object, wrong kind, wrong version, wrong name, managedFields set: 400.
    for (body, msg) in [
        ("{ not: [yaml", "error decoding YAML"),
        ("- a\n- b\n", "error decoding YAML"),
        (
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: raw\n",
            "does not match the expected kind",
        ),
        (
            "apiVersion: apps/v1\nkind: ConfigMap\nmetadata:\n  name: raw\n",
            "Incorrect version specified in apply patch",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n",
            "does not match the name on the URL",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\n  managedFields: [{manager: x}]\n",
            "metadata.managedFields must be nil",
        ),
    ] {
        let (code, s) = raw(&client, "PATCH", &q, apply, body).await;
        assert_eq!(code, 400, "{body}: {s}");
        assert!(
            s["message"].as_str().unwrap_or("").contains(msg),
            "{body}: {s}"
        );
    }
    // dryRun=All creates nothing.
    let (code, s) = raw(&client, "PATCH", &format!("{q}&dryRun=All"), apply, yaml).await;
    assert_eq!(code, 201, "{s}");
    let (code, _) = raw(&client, "GET", base, "application/json", "").await;
    assert_eq!(code, 404);
    // Apply creates (201) with a JSON body too, then updates (200).
    let (code, s) = raw(&client, "PATCH", &q, apply, yaml).await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["metadata"]["managedFields"][0]["manager"], "raw");
    assert_eq!(s["metadata"]["managedFields"][0]["operation"], "Apply");
    let body =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"raw"},"data":{"k":"v2"}}"#;
    let (code, s) = raw(&client, "PATCH", &q, apply, body).await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["data"]["k"], "v2");
    // A conflict as a Status: 409, reason Conflict, one cause per field.
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{base}?fieldManager=other"),
        apply,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\ndata:\n  k: v3\n",
    )
    .await;
    assert_eq!(code, 409, "{s}");
    assert_eq!(s["reason"], "Conflict");
    assert_eq!(
        s["message"],
        "Apply failed with 1 conflict: conflict with \"raw\": .data.k"
    );
    assert_eq!(
        s["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"raw\"", "field": ".data.k"}])
    );
    // Updates record their manager from fieldManager or the User-Agent; `force` is only for apply.
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{base}?fieldManager=merger"),
        "application/merge-patch+json",
        r#"{"data":{"k":"v4"}}"#,
    )
    .await;
    assert_eq!(code, 200, "{s}");
    let upd = s["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == "merger").cloned())
        .unwrap_or(Value::Null);
    assert_eq!(upd["operation"], "Update", "{s}");
    assert_eq!(upd["fieldsV1"], json!({"f:data": {"f:k": {}}}));
    // `raw` owned only data.k: its entry is gone.
    let names: Vec<&str> = s["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert_eq!(names, vec!["merger"], "{s}");
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{base}?force=true"),
        "application/merge-patch+json",
        r#"{"data":{"k":"v5"}}"#,
    )
    .await;
    assert_eq!(code, 422, "{s}");
    // Too long a fieldManager on any write is a 422 naming the options kind.
    let (code, s) = raw(
        &client,
        "POST",
        &format!("/api/v1/namespaces/default/configmaps?fieldManager={long}"),
        "application/json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"long"}}"#,
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes"
    );
    // A status write records `subresource: status` and owns only status.
    let deploy = "/apis/apps/v1/namespaces/default/deployments/st";
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{deploy}?fieldManager=owner"),
        apply,
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"st"},"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"x"}]}}}}"#,
    )
    .await;
    assert_eq!(code, 201, "{s}");
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{deploy}/status"),
        "application/merge-patch+json",
        r#"{"status":{"observedGeneration":1,"replicas":1},"spec":{"replicas":9}}"#,
    )
    .await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["spec"]["replicas"], 1, "{s}");
    let st = s["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["subresource"] == "status").cloned())
        .unwrap_or(Value::Null);
    assert_eq!(st["manager"], "kube-client-test", "{s}");
    assert_eq!(
        st["fieldsV1"],
        json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}})
    );
    // Apply through /scale: the Scale's replicas, owned by the manager with `subresource: scale`.
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{deploy}/scale?fieldManager=scaler"),
        apply,
        "apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: st\nspec:\n  replicas: 3\n",
    )
    .await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["kind"], "Scale");
    assert_eq!(s["spec"]["replicas"], 3);
    let (_, d) = raw(&client, "GET", deploy, "application/json", "").await;
    let sc = d["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == "scaler").cloned())
        .unwrap_or(Value::Null);
    assert_eq!(sc["operation"], "Apply", "{d}");
    assert_eq!(sc["subresource"], "scale");
    assert_eq!(sc["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    let (code, s) = raw(
        &client,
        "PATCH",
        &format!("{deploy}?fieldManager=owner"),
        apply,
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"st"},"spec":{"replicas":1,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"x"}]}}}}"#,
    )
    .await;
    assert_eq!(code, 409, "{s}");
    assert_eq!(
        s["message"],
        "Apply failed with 1 conflict: conflict with \"scaler\" with subresource \"scale\": .spec.replicas"
    );
    // A PUT with `managedFields: []` resets them; without the field they are kept.
    let (_, mut cur) = raw(&client, "GET", base, "application/json", "").await;
    cur["data"]["k"] = json!("v6");
    cur["metadata"]
        .as_object_mut()
        .map(|m| m.remove("managedFields"));
    let (code, s) = raw(&client, "PUT", base, "application/json", &cur.to_string()).await;
    assert_eq!(code, 200, "{s}");
    // The PUT took data.k from `merger`; its manager comes from the User-Agent (no fieldManager).
    let entries = s["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(entries.len(), 1, "{s}");
    assert_eq!(entries[0]["manager"], "kube-client-test", "{s}");
    cur["metadata"]["managedFields"] = json!([]);
    cur["metadata"]["resourceVersion"] = s["metadata"]["resourceVersion"].clone();
    cur["data"]["k"] = json!("v7");
    let (code, s) = raw(&client, "PUT", base, "application/json", &cur.to_string()).await;
    assert_eq!(code, 200, "{s}");
    assert!(s["metadata"].get("managedFields").is_none(), "{s}");
}
