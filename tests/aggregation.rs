//! APIServices and the aggregation layer with the real kubectl (1.32) and the `kube` crate: Local
//! APIServices for the built-in groups and for a CRD (added and removed with it), upstream's validation
//! messages, and a real aggregated API: an HTTPS server in this test process (its own CA, requiring the
//! API server's front-proxy client certificate) behind a selector-less Service and a hand-made
//! EndpointSlice on 127.0.0.1, reached through `kubectl get --raw`, discovery (`api-resources`) and
//! `kubectl get`, with the user passed in `X-Remote-User`; when it stops, the APIService goes
//! `Available=False` with `FailedDiscoveryCheck`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use keel_testkit::https::{self, HttpsServer, TestCa};
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use serde_json::{json, Value};

fn cluster() -> &'static KubeCluster {
    KubeCluster::shared(|| KubeCluster::start(keel_bin!(), 1))
}

fn apiservice_json(c: &KubeCluster, name: &str) -> Value {
    let out = c.ok(0, &["get", "apiservice", name, "-o", "json"]);
    serde_json::from_str(&out).unwrap()
}

fn available(v: &Value) -> (String, String, String) {
    let conds = v["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = conds
        .iter()
        .find(|c| c["type"] == "Available")
        .cloned()
        .unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    (s("status"), s("reason"), s("message"))
}

#[test]
fn local_apiservices_for_builtins_and_crds() {
    let c = cluster();
    c.wait_until("v1.apps registered", Duration::from_secs(30), || {
        c.kubectl(0, &["get", "apiservice", "v1.apps"]).ok
    });
    let table = c.ok(0, &["get", "apiservices"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"], "{table}");
    for name in [
        "v1.",
        "v1.apps",
        "v1.batch",
        "v1.apiextensions.k8s.io",
        "v1.apiregistration.k8s.io",
        "v1.rbac.authorization.k8s.io",
        "v1beta1.metrics.k8s.io",
    ] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{table}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1..3], ["Local", "True"], "{table}");
    }
    let core = apiservice_json(c, "v1.");
    assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
    assert_eq!(core["spec"]["versionPriority"], 1);
    assert!(core["spec"].get("service").is_none(), "{core}");
    assert_eq!(
        available(&core),
        (
            "True".into(),
            "Local".into(),
            "Local APIServices are always available".into()
        )
    );
    let apps = apiservice_json(c, "v1.apps");
    assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
    assert_eq!(apps["spec"]["versionPriority"], 15);
    assert_eq!(apps["spec"]["group"], "apps");
    // Discovery lists the group, as upstream does.
    let res = c.ok(0, &["api-resources", "--api-group=apiregistration.k8s.io"]);
    assert!(
        res.contains("apiservices") && res.contains("APIService"),
        "{res}"
    );

    // A CRD's group-version gets a Local APIService, and loses it with the CRD.
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.agg.example.com}
spec:
  group: agg.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;
    c.ok_stdin(0, &["apply", "-f", "-"], Some(crd));
    c.wait_until("the CRD's APIService", Duration::from_secs(30), || {
        c.kubectl(0, &["get", "apiservice", "v1beta1.agg.example.com"])
            .ok
    });
    let a = apiservice_json(c, "v1beta1.agg.example.com");
    assert_eq!(a["spec"]["groupPriorityMinimum"], 1000);
    assert_eq!(a["spec"]["versionPriority"], 100);
    assert_eq!(
        a["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "true"
    );
    c.ok(
        0,
        &["delete", "crd", "gadgets.agg.example.com", "--wait=true"],
    );
    c.wait_until(
        "the CRD's APIService removed",
        Duration::from_secs(30),
        || {
            !c.kubectl(0, &["get", "apiservice", "v1beta1.agg.example.com"])
                .ok
        },
    );
}

#[test]
fn apiservice_validation_messages() {
    let c = cluster();
    let bad = r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.wrong.example.com}
spec:
  group: right.example.com
  version: v1
  groupPriorityMinimum: 0
  versionPriority: 1001
  insecureSkipTLSVerify: true
  caBundle: YWJj
  service: {name: "", port: 70000}
"#;
    let err = c.err_stdin(0, &["create", "-f", "-"], Some(bad));
    for want in [
        r#"The APIService "v1.wrong.example.com" is invalid"#,
        r#"metadata.name: Invalid value: "v1.wrong.example.com": must be `spec.version+"."+spec.group`: "v1.right.example.com""#,
        "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
        "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
        "spec.service.namespace: Required value",
        "spec.service.name: Required value",
        "spec.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive",
        "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    let local = r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v2.}
spec: {version: v2, groupPriorityMinimum: 1, versionPriority: 1, insecureSkipTLSVerify: true}
"#;
    let err = c.err_stdin(0, &["create", "-f", "-"], Some(local));
    assert!(
        err.contains("spec.group: Required value: only v1 may have an empty group and it better be legacy kube")
            && err.contains("spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify"),
        "{err}"
    );
    // The port defaults to 443; a remote APIService without a backend is unavailable, with the reason.
    let ok = r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.nowhere.example.com}
spec:
  group: nowhere.example.com
  version: v1
  groupPriorityMinimum: 10
  versionPriority: 10
  insecureSkipTLSVerify: true
  service: {namespace: default, name: nowhere}
"#;
    c.ok_stdin(0, &["create", "-f", "-"], Some(ok));
    let a = apiservice_json(c, "v1.nowhere.example.com");
    assert_eq!(a["spec"]["service"]["port"], 443, "{a}");
    c.wait_until("ServiceNotFound", Duration::from_secs(30), || {
        available(&apiservice_json(c, "v1.nowhere.example.com")).1 == "ServiceNotFound"
    });
    let (st, _, msg) = available(&apiservice_json(c, "v1.nowhere.example.com"));
    assert_eq!(
        (st.as_str(), msg.as_str()),
        ("False", r#"service/nowhere in "default" is not present"#)
    );
    let table = c.ok(0, &["get", "apiservice", "v1.nowhere.example.com"]);
    assert!(
        table.contains("default/nowhere") && table.contains("False (ServiceNotFound)"),
        "{table}"
    );
    // Its group-version answers 503 while unavailable.
    let err = c.err(0, &["get", "--raw", "/apis/nowhere.example.com/v1"]);
    assert!(
        err.contains("ServiceUnavailable") || err.contains("503"),
        "{err}"
    );
    c.ok(0, &["delete", "apiservice", "v1.nowhere.example.com"]);
}

/// The aggregated server's state, shared with the test.
#[derive(Default)]
struct Seen {
    users: Vec<String>,
    groups: Vec<Vec<String>>,
}

const GROUP: &str = "metrics.agg-test.example.com";

fn backend_answer(req: &Request<hyper::body::Incoming>) -> Value {
    let path = req.uri().path();
    let wants_table = req
        .headers()
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"));
    if path == format!("/apis/{GROUP}/v1alpha1") {
        return json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/v1alpha1"),
            "resources": [{"name": "samples", "singularName": "sample", "namespaced": true,
                           "kind": "Sample", "verbs": ["get", "list"], "shortNames": ["smp"]}],
        });
    }
    let item = json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Sample",
                      "metadata": {"name": "cpu-load", "namespace": "agg-test",
                                   "creationTimestamp": "2026-01-01T00:00:00Z"},
                      "value": "42m"});
    if wants_table {
        return json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
            "columnDefinitions": [
                {"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0},
                {"name": "Value", "type": "string", "format": "", "description": "", "priority": 0}],
            "rows": [{"cells": ["cpu-load", "42m"], "object": item}],
        });
    }
    json!({"kind": "SampleList", "apiVersion": format!("{GROUP}/v1alpha1"), "metadata": {},
           "items": [item]})
}

/// Starts the aggregated server on 127.0.0.1 (a free port): HTTPS with a certificate for
/// `metrics-sample.agg-test.svc` from its own CA, requiring a client certificate from the cluster CA.
/// Returns the server (stopped when dropped) and its CA (PEM).
async fn start_backend(cluster_ca: &str, seen: Arc<Mutex<Seen>>) -> (HttpsServer, String) {
    let ca = TestCa::new("agg-test-ca");
    let handler = move |req: Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        async move {
            let h = req.headers();
            let user = h
                .get("x-remote-user")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let groups: Vec<String> = h
                .get_all("x-remote-group")
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect();
            {
                let mut s = seen.lock().unwrap();
                s.users.push(user);
                s.groups.push(groups);
            }
            let body = serde_json::to_vec(&backend_answer(&req)).unwrap();
            Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap()
        }
    };
    let server = https::serve(
        &ca,
        &["metrics-sample.agg-test.svc"],
        Some(cluster_ca),
        handler,
    )
    .await;
    (server, ca.pem.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_api_through_kubectl() {
    let c = cluster();
    let ca_path = c
        .member(0)
        .kubeconfig()
        .parent()
        .unwrap()
        .join("pki/ca.crt");
    let cluster_ca = std::fs::read_to_string(&ca_path).unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (server, backend_ca) = start_backend(&cluster_ca, seen.clone()).await;
    let port = server.port;
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(backend_ca.as_bytes());
    let service = https::loopback_service("agg-test", "metrics-sample", port);
    let manifests = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: agg-test}}
---
{service}---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1alpha1.{GROUP}}}
spec:
  group: {GROUP}
  version: v1alpha1
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: {ca_b64}
  service: {{namespace: agg-test, name: metrics-sample, port: 443}}
"#
    );
    let name = format!("v1alpha1.{GROUP}");
    let run = {
        let name = name.clone();
        move || {
            c.ok_stdin(0, &["apply", "-f", "-"], Some(&manifests));
            c.wait_until("the APIService available", Duration::from_secs(30), || {
                available(&apiservice_json(c, &name)).0 == "True"
            });
            let a = apiservice_json(c, &name);
            assert_eq!(
                available(&a),
                ("True".into(), "Passed".into(), "all checks passed".into())
            );
            let table = c.ok(0, &["get", "apiservice", &name]);
            assert!(
                table.contains("agg-test/metrics-sample") && table.contains("True"),
                "{table}"
            );

            // Raw requests reach the backend, with the user in X-Remote-User.
            let raw = c.ok(0, &["get", "--raw", &format!("/apis/{GROUP}/v1alpha1")]);
            assert!(raw.contains("\"samples\""), "{raw}");
            let raw = c.ok(
                0,
                &[
                    "get",
                    "--raw",
                    &format!("/apis/{GROUP}/v1alpha1/namespaces/agg-test/samples"),
                ],
            );
            assert!(raw.contains("cpu-load") && raw.contains("42m"), "{raw}");

            // Discovery: legacy and aggregated (kubectl api-resources), then kubectl get by kind.
            let groups = c.ok(0, &["get", "--raw", "/apis"]);
            assert!(groups.contains(&format!("{GROUP}/v1alpha1")), "{groups}");
            let res = c.ok(0, &["api-resources", &format!("--api-group={GROUP}")]);
            assert!(
                res.contains("samples") && res.contains("smp") && res.contains("Sample"),
                "{res}"
            );
            let got = c.ok(0, &["get", "samples", "-n", "agg-test"]);
            let header: Vec<&str> = got
                .lines()
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            assert_eq!(header, ["NAME", "VALUE"], "{got}");
            assert!(got.contains("cpu-load") && got.contains("42m"), "{got}");
        }
    };
    tokio::task::spawn_blocking(run).await.unwrap();
    {
        let s = seen.lock().unwrap();
        assert!(
            s.users.iter().any(|u| u == "kubernetes-admin"),
            "users seen: {:?}",
            s.users
        );
        let i = s
            .users
            .iter()
            .position(|u| u == "kubernetes-admin")
            .unwrap();
        assert!(
            s.groups[i].iter().any(|g| g == "system:masters"),
            "{:?}",
            s.groups[i]
        );
        // The availability check identifies itself as the aggregator.
        assert!(
            s.users.iter().any(|u| u == "system:kube-aggregator"),
            "{:?}",
            s.users
        );
    }

    // A client cannot pass its own X-Remote-User through.
    {
        let client = c.client(0).await;
        let req = http::Request::get(format!(
            "/apis/{GROUP}/v1alpha1/namespaces/agg-test/samples"
        ))
        .header("X-Remote-User", "mallory")
        .body(Vec::new())
        .unwrap();
        let text = client.request_text(req).await.unwrap();
        assert!(text.contains("cpu-load"), "{text}");
        assert!(!seen.lock().unwrap().users.iter().any(|u| u == "mallory"));
    }

    // The backend stops: the APIService goes unavailable with the discovery check's reason.
    drop(server);
    let run = {
        let name = name.clone();
        move || {
            c.wait_until(
                "the APIService unavailable",
                Duration::from_secs(30),
                || available(&apiservice_json(c, &name)).0 == "False",
            );
            let (_, reason, msg) = available(&apiservice_json(c, &name));
            assert_eq!(reason, "FailedDiscoveryCheck", "{msg}");
            assert!(
                msg.starts_with(&format!(
                    "failing or missing response from https://127.0.0.1:{port}/apis/{GROUP}/v1alpha1:"
                )),
                "{msg}"
            );
            let table = c.ok(0, &["get", "apiservice", &name]);
            assert!(table.contains("False (FailedDiscoveryCheck)"), "{table}");
            // No endpoints: the reason says so.
            c.ok(
                0,
                &[
                    "delete",
                    "endpointslice",
                    "-n",
                    "agg-test",
                    "metrics-sample-1",
                ],
            );
            c.wait_until("EndpointsNotFound", Duration::from_secs(30), || {
                available(&apiservice_json(c, &name)).1 == "EndpointsNotFound"
            });
            c.ok(0, &["delete", "apiservice", &name]);
            c.ok(0, &["delete", "namespace", "agg-test", "--wait=false"]);
        }
    };
    tokio::task::spawn_blocking(run).await.unwrap();
}

/// One row of `kubectl api-resources -o wide`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ApiResource {
    short: String,
    namespaced: String,
    kind: String,
    verbs: String,
    categories: String,
}

/// The rows of `kubectl api-resources -o wide`, by `name apiVersion`: columns cut at the header's offsets
/// (empty cells are blanks in kubectl's table).
fn api_resources(table: &str) -> std::collections::BTreeMap<String, ApiResource> {
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let cols = [
        "NAME",
        "SHORTNAMES",
        "APIVERSION",
        "NAMESPACED",
        "KIND",
        "VERBS",
        "CATEGORIES",
    ];
    let at: Vec<usize> = cols.iter().map(|c| header.find(c).unwrap()).collect();
    let mut out = std::collections::BTreeMap::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let cell = |i: usize| -> String {
            let start = at[i].min(line.len());
            let end = at.get(i + 1).copied().unwrap_or(line.len()).min(line.len());
            line[start..end].trim().to_string()
        };
        out.insert(
            format!("{} {}", cell(0), cell(2)),
            ApiResource {
                short: cell(1),
                namespaced: cell(3),
                kind: cell(4),
                verbs: cell(5),
                categories: cell(6),
            },
        );
    }
    out
}

/// Discovery against kube-apiserver 1.32's (`tests/data/api-resources-1.32.txt`, a default server's
/// `kubectl api-resources -o wide`): every difference, a resource missing, one keel adds or a column that
/// differs, is listed in docs/kubernetes-api.md with its reason, and nothing else is.
#[test]
fn discovery_matches_kube_apiserver_1_32_but_for_documented_differences() {
    let c = cluster();
    let theirs: std::collections::BTreeMap<String, ApiResource> =
        include_str!("data/api-resources-1.32.txt")
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (
                    format!("{} {}", f[0], f[2]),
                    ApiResource {
                        short: f[1].to_string(),
                        namespaced: f[3].to_string(),
                        kind: f[4].to_string(),
                        verbs: f[5].to_string(),
                        categories: f[6].to_string(),
                    },
                )
            })
            .collect();
    // The other tests of this binary add APIs of their own, all in groups under example.com.
    let mut ours = api_resources(&c.ok(0, &["api-resources", "-o", "wide"]));
    ours.retain(|k, _| !k.contains(".example.com/"));
    let mut found = std::collections::BTreeSet::new();
    for (key, want) in &theirs {
        match ours.get(key) {
            None => {
                found.insert(format!("{key} missing"));
            }
            Some(have) => {
                for (field, a, b) in [
                    ("shortnames", &want.short, &have.short),
                    ("namespaced", &want.namespaced, &have.namespaced),
                    ("kind", &want.kind, &have.kind),
                    ("verbs", &want.verbs, &have.verbs),
                    ("categories", &want.categories, &have.categories),
                ] {
                    if a != b {
                        found.insert(format!("{key} {field}"));
                    }
                }
            }
        }
    }
    for key in ours.keys().filter(|k| !theirs.contains_key(*k)) {
        found.insert(format!("{key} extra"));
    }
    // The documented differences: `| name | apiVersion | difference | why |` rows between the markers.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/kubernetes-api.md"
    ))
    .unwrap();
    let (begin, end) = (
        "<!-- api-resources-differences:begin -->",
        "<!-- api-resources-differences:end -->",
    );
    let table = &doc[doc.find(begin).unwrap() + begin.len()..doc.find(end).unwrap()];
    let documented: std::collections::BTreeSet<String> = table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(|c| c.trim().trim_matches('`')).collect();
            format!("{} {} {}", cells[1], cells[2], cells[3])
        })
        .collect();
    let undocumented: Vec<&String> = found.difference(&documented).collect();
    let stale: Vec<&String> = documented.difference(&found).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "discovery differs from kube-apiserver 1.32 where docs/kubernetes-api.md does not say so: {undocumented:#?}\n\
         documented differences that no longer hold: {stale:#?}\nkeel's api-resources: {ours:#?}"
    );
}
