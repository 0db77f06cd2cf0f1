//! Admission webhooks with the real kubectl (1.32) against 3 members: webhook servers in this test
//! process (HTTPS from a CA the test makes), reached through a selector-less Service and a hand-made
//! EndpointSlice on 127.0.0.1, or by URL. A validating webhook refuses labelled pods with upstream's text
//! and warns about the others; two mutating webhooks label pods and the first, reinvoked, sees the
//! second's label; namespaceSelector and objectSelector skip what they should; failurePolicy Fail
//! refuses writes while a webhook is down and Ignore lets them through; a webhook slower than its
//! timeoutSeconds is cut off; a DELETE reaches webhooks with the old object; the metrics count it all;
//! and creates checked by a webhook survive kill -9 of the Raft leader. A CRD served as v1alpha1 and v1
//! (stored as v1) with a conversion webhook: objects written in one version are read, listed, patched and
//! watched in the other, and reads fail with upstream's text while the webhook is down.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use keel_testkit::binaries::Kind;
use keel_testkit::cluster::Options;
use keel_testkit::https::{self, TestCa};
use keel_testkit::keel_bin;
use keel_testkit::kube::KubeCluster;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// What the webhook servers saw: (path, AdmissionReview request) per call.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

fn labels(obj: &Value) -> serde_json::Map<String, Value> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// A JSON Patch adding `key=value` to the object's labels.
fn add_label(obj: &Value, key: &str, value: &str) -> Value {
    if obj.pointer("/metadata/labels").is_some() {
        json!([{"op": "add", "path": format!("/metadata/labels/{key}"), "value": value}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {key: value}}])
    }
}

/// The webhooks, by path: `/deny` refuses pods labelled `deny=yes` (403) and warns about the others;
/// `/first` and `/second` label pods; `/slow` answers after 5 s; `/protect` refuses deleting objects
/// labelled `protected=yes`; `/allow` lets everything through.
/// The conversion webhook: v1alpha1's `spec.size` (a string) is v1's `spec.replicas` (a number).
fn convert(review: &Value) -> Value {
    let req = &review["request"];
    let desired = req["desiredAPIVersion"].as_str().unwrap_or("").to_string();
    let objects: Vec<Value> = req["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut o| {
            let spec = o["spec"].as_object_mut().unwrap();
            if desired.ends_with("/v1") {
                if let Some(size) = spec.remove("size") {
                    let n: i64 = size.as_str().unwrap_or("0").parse().unwrap_or(0);
                    spec.insert("replicas".into(), json!(n));
                }
            } else if let Some(n) = spec.remove("replicas") {
                spec.insert("size".into(), json!(n.to_string()));
            }
            o["apiVersion"] = json!(desired);
            o
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "response": {"uid": req["uid"], "convertedObjects": objects, "result": {"status": "Success"}}})
}

async fn answer(path: &str, review: &Value) -> Value {
    if path == "/convert" {
        return convert(review);
    }
    let req = &review["request"];
    let uid = req["uid"].clone();
    let obj = &req["object"];
    let mut resp = json!({"uid": uid, "allowed": true});
    match path {
        "/deny" => {
            if labels(obj).get("deny") == Some(&json!("yes")) {
                resp = json!({"uid": uid, "allowed": false,
                    "status": {"code": 403, "message": "pods labelled deny=yes are refused"}});
            } else {
                resp["warnings"] = json!(["checked by deny.keel.test"]);
                resp["auditAnnotations"] = json!({"checked": "yes"});
            }
        }
        "/first" => {
            let p = add_label(obj, "first", "yes");
            resp["patchType"] = json!("JSONPatch");
            resp["patch"] =
                json!(base64::engine::general_purpose::STANDARD
                    .encode(serde_json::to_vec(&p).unwrap()));
        }
        "/second" => {
            let mut p = add_label(obj, "second", "yes");
            // A sidecar as injectors add them: a bare container the API server must default.
            if labels(obj).get("inject") == Some(&json!("sidecar")) {
                if let Some(ops) = p.as_array_mut() {
                    ops.push(json!({"op": "add", "path": "/spec/containers/-",
                        "value": {"name": "sidecar", "image": "busybox"}}));
                }
            }
            resp["patchType"] = json!("JSONPatch");
            resp["patch"] =
                json!(base64::engine::general_purpose::STANDARD
                    .encode(serde_json::to_vec(&p).unwrap()));
        }
        "/slow" => tokio::time::sleep(Duration::from_secs(5)).await,
        "/noexec" => {
            resp = json!({"uid": uid, "allowed": false,
                "status": {"code": 403, "message": "exec is not allowed here"}});
        }
        "/protect" => {
            let old = &req["oldObject"];
            if labels(old).get("protected") == Some(&json!("yes")) {
                resp = json!({"uid": uid, "allowed": false,
                    "status": {"message": "protected objects stay"}});
            }
        }
        _ => {}
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
}

async fn start_webhooks(ca: &TestCa, seen: Seen) -> https::HttpsServer {
    let handler = move |req: Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        async move {
            let path = req.uri().path().to_string();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            seen.lock()
                .unwrap()
                .push((path.clone(), review["request"].clone()));
            let out = answer(&path, &review).await;
            Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(serde_json::to_vec(&out).unwrap())))
                .unwrap()
        }
    };
    https::serve(ca, &["webhook.hooks.svc", "127.0.0.1"], None, handler).await
}

/// The audit log every member appends to.
fn audit_log() -> std::path::PathBuf {
    keel_testkit::scratch_dir("webhooks-test").join("audit.log")
}

/// The annotations of the audit event of `verb` on `resource` `ns/name`, once a member logged it.
fn audit_annotations(env: &Env, verb: &str, resource: &str, ns: &str, name: &str) -> Value {
    let mut found = Value::Null;
    env.c
        .wait_until("the audit event", Duration::from_secs(10), || {
            let log = std::fs::read_to_string(audit_log()).unwrap_or_default();
            found = log
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .rfind(|e| {
                    e["verb"] == verb
                        && e["objectRef"]["resource"] == resource
                        && e["objectRef"]["namespace"] == ns
                        && e["objectRef"]["name"] == name
                })
                .map(|e| e["annotations"].clone())
                .unwrap_or(Value::Null);
            !found.is_null()
        });
    found
}

struct Env {
    c: KubeCluster,
    seen: Seen,
    ca_b64: String,
    via: usize,
}

impl Env {
    fn ok(&self, args: &[&str]) -> String {
        self.ok_stdin(args, None)
    }

    /// A request that fails between leaders wrote nothing: tried again for a while.
    fn ok_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.c.ok_stdin_retrying(self.via, args, stdin)
    }

    /// What kubectl wrote to stderr on success (its warnings).
    fn warned(&self, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.c.kubectl_stdin(self.via, args, stdin);
        if !r.ok {
            self.c.fail(format!("kubectl {args:?}: {}", r.stderr));
        }
        r.stderr
    }

    fn err(&self, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.c.kubectl_stdin(self.via, args, stdin);
        if r.ok {
            self.c
                .fail(format!("kubectl {args:?} succeeded: {}", r.stdout));
        }
        r.stderr
    }

    fn calls(&self, path: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }

    fn client_config(&self, path: &str) -> String {
        format!(
            "{{service: {{namespace: hooks, name: webhook, path: {path}}}, caBundle: {}}}",
            self.ca_b64
        )
    }

    fn pod_labels(&self, ns: &str, name: &str) -> serde_json::Map<String, Value> {
        let out = self.ok(&["get", "pod", "-n", ns, name, "-o", "json"]);
        labels(&serde_json::from_str(&out).unwrap())
    }
}

/// A webhook configuration of `kind` named `name` with one webhook, `<hook>.keel.test`, reached through
/// `client` (a clientConfig in flow YAML), for `ops` on core `resource`; `extra` adds lines to the webhook.
fn one_hook(
    kind: &str,
    name: &str,
    hook: &str,
    client: &str,
    ops: &str,
    resource: &str,
    extra: &str,
) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nwebhooks:\n\
         - name: {hook}.keel.test\n  clientConfig: {client}\n  \
         rules: [{{operations: [{ops}], apiGroups: [\"\"], apiVersions: [v1], resources: [{resource}]}}]\n\
         {extra}  sideEffects: None\n  admissionReviewVersions: [v1]\n"
    )
}

fn pod(ns: &str, name: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}\n\
         spec: {{containers: [{{name: c, image: busybox}}]}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_webhooks_through_kubectl() {
    let ca = TestCa::new("webhook-test-ca");
    let seen: Seen = Arc::default();
    let server = start_webhooks(&ca, seen.clone()).await;
    let port = server.port;
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(ca.pem.as_bytes());
    let run = move || {
        let c = KubeCluster::start_with(
            Options::new(Kind::Keel, 3)
                .keel_bin(keel_bin!())
                .arg(&format!("--audit-log-path={}", audit_log().display())),
        );
        let mut env = Env {
            c,
            seen,
            ca_b64,
            via: 0,
        };
        setup(&env, port);
        validating_refuses_and_warns(&env);
        mutating_and_reinvoked(&env);
        failure_policy(&env);
        timeout_cuts_off(&env);
        delete_reaches_webhooks(&env);
        connect_reaches_webhooks(&env);
        metrics_count_calls(&env);
        crd_conversion_webhook(&env);
        validating_admission_policy(&env);
        leader_killed_while_webhooks_run(&mut env);
    };
    tokio::task::spawn_blocking(run).await.unwrap();
    drop(server);
}

fn setup(env: &Env, port: u16) {
    let manifests = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: hooks, labels: {{webhooks: \"on\"}}}}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {{name: plain}}\n---\n{}",
        https::loopback_service("hooks", "webhook", port)
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&manifests));
}

fn validating_refuses_and_warns(env: &Env) {
    let config = one_hook(
        "ValidatingWebhookConfiguration",
        "deny",
        "deny",
        &env.client_config("/deny"),
        "CREATE",
        "pods",
        "  namespaceSelector: {matchLabels: {webhooks: \"on\"}}\n",
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&config));
    // Defaults as upstream's; the table counts the webhooks.
    let stored: Value = serde_json::from_str(&env.ok(&[
        "get",
        "validatingwebhookconfiguration",
        "deny",
        "-o",
        "json",
    ]))
    .unwrap();
    let h = &stored["webhooks"][0];
    assert_eq!(h["failurePolicy"], "Fail", "{h}");
    assert_eq!(h["timeoutSeconds"], 10, "{h}");
    assert_eq!(h["matchPolicy"], "Equivalent", "{h}");
    assert_eq!(h["clientConfig"]["service"]["port"], 443, "{h}");
    let table = env.ok(&["get", "validatingwebhookconfigurations"]);
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "WEBHOOKS", "AGE"]),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["deny", "1"])),
        "{table}"
    );

    let e = env.err(
        &["apply", "-f", "-"],
        Some(&pod("hooks", "evil", "deny: \"yes\"")),
    );
    assert!(
        e.contains("admission webhook \"deny.keel.test\" denied the request: pods labelled deny=yes are refused"),
        "{e}"
    );
    let out = env.warned(
        &["apply", "-f", "-"],
        Some(&pod("hooks", "good", "app: good")),
    );
    assert!(out.contains("Warning: checked by deny.keel.test"), "{out}");
    // The webhook's audit annotations reach the request's audit event under its name.
    let notes = audit_annotations(env, "create", "pods", "hooks", "good");
    assert_eq!(notes["deny.keel.test/checked"], "yes", "{notes}");
    // namespaceSelector: a namespace without the label is not sent to the webhook.
    let before = env.calls("/deny").len();
    env.ok_stdin(
        &["apply", "-f", "-"],
        Some(&pod("plain", "evil", "deny: \"yes\"")),
    );
    assert_eq!(
        env.calls("/deny").len(),
        before,
        "the plain namespace reached the webhook"
    );
    // What the webhook was sent.
    let last = env.calls("/deny").last().cloned().unwrap();
    assert_eq!(last["operation"], "CREATE");
    assert_eq!(
        last["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(last["namespace"], "hooks");
    assert_eq!(last["name"], "good");
    assert_eq!(last["userInfo"]["username"], "kubernetes-admin");
    assert_eq!(last["options"]["kind"], "CreateOptions");
    assert_eq!(last["object"]["kind"], "Pod");
}

fn mutating_and_reinvoked(env: &Env) {
    let first = one_hook(
        "MutatingWebhookConfiguration",
        "a-first",
        "first",
        &env.client_config("/first"),
        "CREATE",
        "pods",
        "  objectSelector: {matchExpressions: [{key: skip-first, operator: DoesNotExist}]}\n  reinvocationPolicy: IfNeeded\n",
    );
    let second = one_hook(
        "MutatingWebhookConfiguration",
        "b-second",
        "second",
        &env.client_config("/second"),
        "CREATE",
        "pods",
        "  matchConditions:\n  - name: not-opted-out\n    expression: \"!has(object.metadata.labels) || !('no-second' in object.metadata.labels)\"\n",
    );
    let config = format!("{first}---\n{second}");
    env.ok_stdin(&["apply", "-f", "-"], Some(&config));
    let before = env.calls("/first").len();
    env.ok_stdin(
        &["apply", "-f", "-"],
        Some(&pod("hooks", "mutated", "app: m")),
    );
    let l = env.pod_labels("hooks", "mutated");
    assert_eq!(
        (l.get("first"), l.get("second")),
        (Some(&json!("yes")), Some(&json!("yes"))),
        "{l:?}"
    );
    // Each call is in the audit event: round, place among the webhooks, and whether it changed the object.
    let notes = audit_annotations(env, "create", "pods", "hooks", "mutated");
    let call = |k: &str| -> Value {
        let key = format!("mutation.webhook.admission.k8s.io/{k}");
        serde_json::from_str(notes[&key].as_str().unwrap_or("null")).unwrap()
    };
    assert_eq!(
        call("round_0_index_0"),
        json!({"configuration": "a-first", "webhook": "first.keel.test", "mutated": true}),
        "{notes}"
    );
    assert_eq!(
        call("round_0_index_1")["webhook"],
        "second.keel.test",
        "{notes}"
    );
    assert_eq!(call("round_1_index_0")["mutated"], false, "{notes}");
    // The first webhook ran, the second changed the object after it, so it ran once more and saw that.
    let first: Vec<Value> = env.calls("/first")[before..].to_vec();
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(labels(&first[0]["object"]).get("second").is_none());
    assert_eq!(
        labels(&first[1]["object"]).get("second"),
        Some(&json!("yes"))
    );
    // A container a webhook adds is defaulted as one a client sends.
    env.ok_stdin(
        &["apply", "-f", "-"],
        Some(&pod("hooks", "injected", "inject: sidecar")),
    );
    let injected: Value =
        serde_json::from_str(&env.ok(&["get", "pod", "-n", "hooks", "injected", "-o", "json"]))
            .unwrap();
    let sidecar = &injected["spec"]["containers"][1];
    assert_eq!(sidecar["name"], "sidecar", "{injected}");
    assert_eq!(sidecar["imagePullPolicy"], "Always", "{sidecar}");
    assert_eq!(
        sidecar["terminationMessagePath"], "/dev/termination-log",
        "{sidecar}"
    );
    // objectSelector: the first webhook skips pods labelled skip-first; the second still labels them.
    let before = env.calls("/first").len();
    env.ok_stdin(
        &["apply", "-f", "-"],
        Some(&pod("hooks", "skipped", "skip-first: \"1\"")),
    );
    assert_eq!(env.calls("/first").len(), before);
    let l = env.pod_labels("hooks", "skipped");
    assert_eq!(
        (l.get("first"), l.get("second")),
        (None, Some(&json!("yes"))),
        "{l:?}"
    );
    // matchConditions (CEL): a pod that opts out never reaches the second webhook.
    let before = env.calls("/second").len();
    env.ok_stdin(
        &["apply", "-f", "-"],
        Some(&pod("hooks", "opted-out", "no-second: \"1\"")),
    );
    assert_eq!(env.calls("/second").len(), before);
    let l = env.pod_labels("hooks", "opted-out");
    assert_eq!(
        (l.get("first"), l.get("second")),
        (Some(&json!("yes")), None),
        "{l:?}"
    );
    env.ok(&[
        "delete",
        "mutatingwebhookconfiguration",
        "a-first",
        "b-second",
    ]);
}

fn failure_policy(env: &Env) {
    // A port nothing listens on.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = down.local_addr().unwrap().port();
    drop(down);
    let config = |policy: &str| {
        one_hook(
            "ValidatingWebhookConfiguration",
            "down",
            "down",
            &format!(
                "{{url: \"https://127.0.0.1:{port}/check\", caBundle: {}}}",
                env.ca_b64
            ),
            "CREATE",
            "configmaps",
            &format!("  namespaceSelector: {{matchLabels: {{webhooks: \"on\"}}}}\n  failurePolicy: {policy}\n"),
        )
    };
    env.ok_stdin(&["apply", "-f", "-"], Some(&config("Fail")));
    let e = env.err(&["create", "configmap", "-n", "hooks", "refused"], None);
    let want = format!(
        "Internal error occurred: failed calling webhook \"down.keel.test\": failed to call webhook: Post \"https://127.0.0.1:{port}/check?timeout=10s\": dial tcp 127.0.0.1:{port}: "
    );
    assert!(e.contains(&want) && e.contains("connection refused"), "{e}");
    assert!(env
        .c
        .kubectl(env.via, &["get", "configmap", "-n", "hooks", "refused"])
        .stderr
        .contains("NotFound"));
    env.ok_stdin(&["apply", "-f", "-"], Some(&config("Ignore")));
    env.ok(&["create", "configmap", "-n", "hooks", "let-through"]);
    env.ok(&["delete", "validatingwebhookconfiguration", "down"]);
}

fn timeout_cuts_off(env: &Env) {
    let config = one_hook(
        "ValidatingWebhookConfiguration",
        "slow",
        "slow",
        &env.client_config("/slow"),
        "CREATE",
        "secrets",
        "  namespaceSelector: {matchLabels: {webhooks: \"on\"}}\n  timeoutSeconds: 1\n",
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&config));
    let e = env.err(
        &[
            "create",
            "secret",
            "generic",
            "-n",
            "hooks",
            "late",
            "--from-literal=a=b",
        ],
        None,
    );
    assert!(
        e.contains("failed calling webhook \"slow.keel.test\": failed to call webhook: Post \"https://webhook.hooks.svc:443/slow?timeout=1s\": context deadline exceeded"),
        "{e}"
    );
    env.ok(&["delete", "validatingwebhookconfiguration", "slow"]);
}

fn delete_reaches_webhooks(env: &Env) {
    let config = one_hook(
        "ValidatingWebhookConfiguration",
        "protect",
        "protect",
        &env.client_config("/protect"),
        "DELETE",
        "configmaps",
        "  objectSelector: {matchLabels: {protected: \"yes\"}}\n",
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&config));
    env.ok(&["create", "configmap", "-n", "plain", "keep"]);
    env.ok(&["label", "configmap", "-n", "plain", "keep", "protected=yes"]);
    let e = env.err(&["delete", "configmap", "-n", "plain", "keep"], None);
    assert!(
        e.contains(
            "admission webhook \"protect.keel.test\" denied the request: protected objects stay"
        ),
        "{e}"
    );
    let last = env.calls("/protect").last().cloned().unwrap();
    assert_eq!(last["operation"], "DELETE");
    assert_eq!(last["options"]["kind"], "DeleteOptions");
    assert!(last["object"].is_null());
    assert_eq!(last["oldObject"]["metadata"]["name"], "keep");
    env.ok(&["label", "configmap", "-n", "plain", "keep", "protected-"]);
    env.ok(&["delete", "configmap", "-n", "plain", "keep"]);
}

fn metrics_count_calls(env: &Env) {
    // The member that answered the refusals counted them; any member may have, so read them all.
    let mut text = String::new();
    for i in 0..3 {
        text.push_str(&env.ok_i(i, &["get", "--raw", "/metrics"]));
    }
    for want in [
        "apiserver_admission_webhook_rejection_count{name=\"deny.keel.test\",type=\"validating\",operation=\"CREATE\",error_type=\"no_error\",rejection_code=\"403\"}",
        "apiserver_admission_webhook_rejection_count{name=\"down.keel.test\",type=\"validating\",operation=\"CREATE\",error_type=\"calling_webhook_error\",rejection_code=\"0\"}",
        "apiserver_admission_webhook_fail_open_count{name=\"down.keel.test\",type=\"validating\"}",
        "apiserver_admission_webhook_request_total{name=\"second.keel.test\",type=\"admit\",operation=\"CREATE\",code=\"200\",rejected=\"false\"}",
        "apiserver_admission_webhook_admission_duration_seconds_bucket{le=\"25\",name=\"deny.keel.test\",type=\"validating\",operation=\"CREATE\",rejected=\"false\"}",
    ] {
        let near: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("admission_webhook"))
            .collect();
        assert!(text.contains(want), "{want} missing from:\n{}", near.join("\n"));
    }
}

impl Env {
    fn ok_i(&self, i: usize, args: &[&str]) -> String {
        let r = self.c.kubectl(i, args);
        if !r.ok {
            self.c
                .fail(format!("kubectl {args:?} on member {i}: {}", r.stderr));
        }
        r.stdout
    }
}

/// Pods checked by the validating webhook, created while the Raft leader is killed: every create
/// kubectl acknowledged is there afterwards.
fn leader_killed_while_webhooks_run(env: &mut Env) {
    let leader = env.c.cluster_mut().wait_leader(WAIT);
    env.via = (leader + 1) % 3;
    let mut acknowledged = BTreeSet::new();
    for i in 0..30 {
        if i == 10 {
            env.c.cluster_mut().kill9(leader);
        }
        let name = format!("burst-{i}");
        // A create refused while the members elect a leader is sent again; AlreadyExists means an
        // earlier try went through.
        let deadline = Instant::now() + WAIT;
        loop {
            let r = env.c.kubectl_stdin(
                env.via,
                &["create", "-f", "-"],
                Some(&pod("hooks", &name, "app: burst")),
            );
            if r.ok || r.stderr.contains("AlreadyExists") {
                acknowledged.insert(name);
                break;
            }
            if Instant::now() > deadline {
                env.c.fail(format!("{name} never created: {}", r.stderr));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    env.c.cluster_mut().restart(leader);
    env.c.cluster_mut().wait_leader(WAIT);
    let deadline = Instant::now() + WAIT;
    loop {
        let r = env.c.kubectl(
            env.via,
            &[
                "get",
                "pods",
                "-n",
                "hooks",
                "-l",
                "app=burst",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
        );
        let have: BTreeSet<String> = r.stdout.split_whitespace().map(str::to_string).collect();
        if r.ok && acknowledged.is_subset(&have) {
            break;
        }
        if Instant::now() > deadline {
            env.c.fail(format!(
                "acknowledged creates lost: {:?}",
                acknowledged.difference(&have).collect::<Vec<_>>()
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // Every acknowledged pod was seen by the webhook.
    let checked: BTreeSet<String> = env
        .calls("/deny")
        .iter()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    assert!(
        acknowledged.is_subset(&checked),
        "a create skipped the webhook"
    );
}

/// A CRD served as v1alpha1 (`spec.size`, a string) and v1 (`spec.replicas`, stored), converted by the
/// test's webhook: what is written in one version reads in the other, lists, patches and watches convert,
/// and a bad conversion config is refused.
fn crd_conversion_webhook(env: &Env) {
    let crd = |strategy: &str| {
        format!(
            r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: gizmos.conv.example.com}}
spec:
  group: conv.example.com
  scope: Namespaced
  names: {{plural: gizmos, singular: gizmo, kind: Gizmo}}
  conversion: {strategy}
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema: {{openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{size: {{type: string}}}}}}}}}}}}
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{replicas: {{type: integer}}}}}}}}}}}}
"#
        )
    };
    let e = env.err(
        &["apply", "-f", "-"],
        Some(&crd(
            "{strategy: Webhook, webhook: {clientConfig: {url: \"https://127.0.0.1/convert\"}}}",
        )),
    );
    assert!(
        e.contains("spec.conversion.webhook.conversionReviewVersions: Required value: must specify one of v1, v1beta1"),
        "{e}"
    );
    let hooked = format!(
        "{{strategy: Webhook, webhook: {{conversionReviewVersions: [v1], clientConfig: {}}}}}",
        env.client_config("/convert")
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&crd(&hooked)));
    env.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=30s",
        "crd/gizmos.conv.example.com",
    ]);
    let get = |version: &str, name: &str| -> Value {
        serde_json::from_str(&env.ok(&[
            "get",
            &format!("gizmos.{version}.conv.example.com"),
            "-n",
            "plain",
            name,
            "-o",
            "json",
        ]))
        .unwrap()
    };
    // Written as v1alpha1, stored and read as v1; written as v1, read as v1alpha1.
    let old = "apiVersion: conv.example.com/v1alpha1\nkind: Gizmo\nmetadata: {name: a, namespace: plain}\nspec: {size: \"3\"}\n";
    env.ok_stdin(&["create", "-f", "-"], Some(old));
    let new = "apiVersion: conv.example.com/v1\nkind: Gizmo\nmetadata: {name: b, namespace: plain}\nspec: {replicas: 5}\n";
    env.ok_stdin(&["create", "-f", "-"], Some(new));
    let a = get("v1", "a");
    assert_eq!(
        (a["apiVersion"].as_str(), &a["spec"]),
        (Some("conv.example.com/v1"), &json!({"replicas": 3})),
        "{a}"
    );
    let b = get("v1alpha1", "b");
    assert_eq!(
        (b["apiVersion"].as_str(), &b["spec"]),
        (Some("conv.example.com/v1alpha1"), &json!({"size": "5"})),
        "{b}"
    );
    // A list in v1alpha1 converts every item; a merge patch in v1alpha1 lands in v1.
    let list: Value = serde_json::from_str(&env.ok(&[
        "get",
        "gizmos.v1alpha1.conv.example.com",
        "-n",
        "plain",
        "-o",
        "json",
    ]))
    .unwrap();
    let sizes: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["spec"]["size"])
        .collect();
    assert_eq!(sizes, [&json!("3"), &json!("5")], "{list}");
    env.ok(&[
        "patch",
        "gizmos.v1alpha1.conv.example.com",
        "-n",
        "plain",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":"4"}}"#,
    ]);
    assert_eq!(get("v1", "a")["spec"], json!({"replicas": 4}));
    // A watch in v1alpha1 sees a change written in v1, converted.
    let mut watch = keel_testkit::kube::Background::start(
        &env.c,
        env.via,
        &[
            "get",
            "gizmos.v1alpha1.conv.example.com",
            "-n",
            "plain",
            "b",
            "--watch",
            "-o",
            "jsonpath={.spec.size}{\"\\n\"}",
        ],
        "watch-gizmo",
    );
    env.c.wait_until("the watch's first event", WAIT, || {
        watch.output().contains('5')
    });
    env.ok(&[
        "patch",
        "gizmos.v1.conv.example.com",
        "-n",
        "plain",
        "b",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":6}}"#,
    ]);
    env.c
        .wait_until("the watch to see the change in v1alpha1", WAIT, || {
            watch.output().contains('6')
        });
    assert!(watch.exited().is_none() || watch.output().lines().all(|l| l.parse::<i64>().is_ok()));
    drop(watch);
    // With the webhook unreachable, a read in the other version fails as upstream's does.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_port = down.local_addr().unwrap().port();
    drop(down);
    let unreachable = format!(
        "{{strategy: Webhook, webhook: {{conversionReviewVersions: [v1], clientConfig: {{url: \"https://127.0.0.1:{down_port}/convert\", caBundle: {}}}}}}}",
        env.ca_b64
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&crd(&unreachable)));
    env.c.wait_until("reads in v1alpha1 to fail", WAIT, || {
        let r = env.c.kubectl(env.via, &["get", "gizmos.v1alpha1.conv.example.com", "-n", "plain", "a"]);
        !r.ok && r.stderr.contains(&format!(
            "conversion webhook for conv.example.com/v1, Kind=Gizmo failed: Post \"https://127.0.0.1:{down_port}/convert?timeout=30s\": dial tcp 127.0.0.1:{down_port}: connect: connection refused"
        ))
    });
    // The storage version needs no webhook.
    assert_eq!(get("v1", "a")["spec"], json!({"replicas": 4}));
    env.ok(&["delete", "crd", "gizmos.conv.example.com"]);
}

/// A ValidatingAdmissionPolicy limiting Deployments' replicas to a ConfigMap's `maxReplicas`, bound twice:
/// with Deny in one namespace (the create is refused with the message) and with Warn in another (the
/// create passes with kubectl's warning). A policy whose CEL does not compile is refused, and a binding
/// to a parameter that does not exist denies with upstream's text.
fn validating_admission_policy(env: &Env) {
    let setup = r#"
apiVersion: v1
kind: Namespace
metadata: {name: vap-deny, labels: {policy: deny}}
---
apiVersion: v1
kind: Namespace
metadata: {name: vap-warn, labels: {policy: warn}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: replica-limit, namespace: plain}
data: {maxReplicas: "3"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
  - expression: object.spec.replicas <= int(params.data.maxReplicas)
    messageExpression: "'replicas must be at most ' + params.data.maxReplicas"
  auditAnnotations:
  - key: replicas
    valueExpression: "string(object.spec.replicas)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-deny}
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef: {name: replica-limit, namespace: plain, parameterNotFoundAction: Deny}
  matchResources: {namespaceSelector: {matchLabels: {policy: deny}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-warn}
spec:
  policyName: replica-limit
  validationActions: [Warn, Audit]
  paramRef: {name: replica-limit, namespace: plain, parameterNotFoundAction: Deny}
  matchResources: {namespaceSelector: {matchLabels: {policy: warn}}}
"#;
    env.ok_stdin(&["apply", "-f", "-"], Some(setup));
    let table = env.ok(&["get", "validatingadmissionpolicies"]);
    assert!(
        table.lines().any(|l| l.split_whitespace().take(3).eq([
            "replica-limit",
            "1",
            "v1/ConfigMap"
        ])),
        "{table}"
    );
    let table = env.ok(&["get", "validatingadmissionpolicybindings"]);
    assert!(
        table.lines().any(|l| l.split_whitespace().take(3).eq([
            "replica-limit-deny",
            "replica-limit",
            "plain/replica-limit"
        ])),
        "{table}"
    );
    let e = env.err(
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "vap-deny",
            "--image=busybox",
            "--replicas=5",
        ],
        None,
    );
    assert!(
        e.contains("deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-deny' denied request: replicas must be at most 3"),
        "{e}"
    );
    env.ok(&[
        "create",
        "deployment",
        "small",
        "-n",
        "vap-deny",
        "--image=busybox",
        "--replicas=2",
    ]);
    let warned = env.warned(
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "vap-warn",
            "--image=busybox",
            "--replicas=5",
        ],
        None,
    );
    assert!(
        warned.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-warn': replicas must be at most 3"),
        "{warned}"
    );
    // Audit: the failure and the policy's audit annotation are in the request's audit event.
    let notes = audit_annotations(env, "create", "deployments", "vap-warn", "web");
    assert_eq!(notes["replica-limit/replicas"], "5", "{notes}");
    let failures: Value = serde_json::from_str(
        notes["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap_or("null"),
    )
    .unwrap();
    assert_eq!(
        failures,
        json!([{"message": "replicas must be at most 3", "policy": "replica-limit",
            "binding": "replica-limit-warn", "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}]),
        "{notes}"
    );
    // Raising replicas past the limit is an UPDATE the policy also refuses (`kubectl scale` writes the
    // `deployments/scale` subresource, which this policy's rules, as upstream's, do not name).
    let e = env.err(
        &[
            "patch",
            "deployment",
            "small",
            "-n",
            "vap-deny",
            "-p",
            r#"{"spec":{"replicas":4}}"#,
        ],
        None,
    );
    assert!(
        e.contains("denied request: replicas must be at most 3"),
        "{e}"
    );
    // A parameter that is not there denies, as parameterNotFoundAction says.
    env.ok(&["delete", "configmap", "-n", "plain", "replica-limit"]);
    let e = env.err(
        &[
            "create",
            "deployment",
            "late",
            "-n",
            "vap-deny",
            "--image=busybox",
        ],
        None,
    );
    assert!(
        e.contains("ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-deny' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{e}"
    );
    // CEL that does not compile is refused when the policy is written.
    let bad = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
  - expression: "object.spec.replicas <="
"#;
    let e = env.err(&["apply", "-f", "-"], Some(bad));
    assert!(
        e.contains("spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: "),
        "{e}"
    );
    // An expression whose nested loops could run long on a large object is stopped before it runs, and
    // the policy's failurePolicy (Fail) refuses the write; on a small object it runs.
    let costly = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: costly}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "object.data.all(a, object.data.all(b, object.data.all(c, a != '')))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: costly}
spec:
  policyName: costly
  validationActions: [Deny]
  matchResources: {namespaceSelector: {matchLabels: {policy: deny}}}
"#;
    env.ok_stdin(&["apply", "-f", "-"], Some(costly));
    env.ok(&[
        "create",
        "configmap",
        "small",
        "-n",
        "vap-deny",
        "--from-literal=a=1",
    ]);
    let big: Vec<String> = (0..300).map(|i| format!("--from-literal=k{i}=v")).collect();
    let mut args = vec!["create", "configmap", "big", "-n", "vap-deny"];
    args.extend(big.iter().map(String::as_str));
    let e = env.err(&args, None);
    assert!(
        e.contains("resulted in error: operation cancelled: cost limit exceeded"),
        "{e}"
    );
    env.ok(&["delete", "validatingadmissionpolicybinding", "costly"]);
    env.ok(&["delete", "validatingadmissionpolicy", "costly"]);
    // An expression that compiles but reads a field Deployments do not have is reported in the policy's
    // status.typeChecking by the leader.
    let typo = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: typo}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
  - expression: "object.spec.replicaz <= 3"
"#;
    env.ok_stdin(&["apply", "-f", "-"], Some(typo));
    let mut status = Value::Null;
    env.c.wait_until("the typo's type checking", WAIT, || {
        status = serde_json::from_str::<Value>(&env.ok(&[
            "get",
            "validatingadmissionpolicy",
            "typo",
            "-o",
            "json",
        ]))
        .map(|v| v["status"].clone())
        .unwrap_or(Value::Null);
        status["observedGeneration"] == 1
    });
    assert_eq!(
        status["typeChecking"]["expressionWarnings"],
        json!([{"fieldRef": "spec.validations[0].expression",
                "warning": "apps/v1, Kind=Deployment: ERROR: <input>: undefined field 'replicaz'\n"}]),
        "{status}"
    );
    env.ok(&["delete", "validatingadmissionpolicy", "typo"]);
    env.ok(&[
        "delete",
        "validatingadmissionpolicybinding",
        "replica-limit-deny",
        "replica-limit-warn",
    ]);
    env.ok(&["delete", "validatingadmissionpolicy", "replica-limit"]);
    policy_libraries(env);
}

/// Kubernetes' CEL libraries in a policy: the authorizer (what the requesting user may do decides), and
/// quantities and URLs read from the object.
fn policy_libraries(env: &Env) {
    let setup = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: guarded}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.metadata.labels) || !('restricted' in object.metadata.labels) || authorizer.group('').resource('secrets').namespace(request.namespace).check('get').allowed()"
    message: only users who may read secrets create restricted configmaps
  - expression: "!has(object.data) || !has(object.data.size) || quantity(object.data.size).isLessThan(quantity('1Gi'))"
    message: size must be under 1Gi
  - expression: "!has(object.data) || !has(object.data.endpoint) || url(object.data.endpoint).getScheme() == 'https'"
    message: endpoint must use https
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: guarded}
spec:
  policyName: guarded
  validationActions: [Deny]
  matchResources: {namespaceSelector: {matchLabels: {policy: deny}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: configmap-writer, namespace: vap-deny}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-writes, namespace: vap-deny}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: Role, name: configmap-writer, apiGroup: rbac.authorization.k8s.io}
"#;
    env.ok_stdin(&["apply", "-f", "-"], Some(setup));
    let cm = |name: &str, labels: &str, data: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: vap-deny, labels: {{{labels}}}}}\ndata: {{{data}}}\n")
    };
    let as_alice = ["--as=alice", "create", "-f", "-"];
    // The admin may read secrets; alice may not, so only her restricted configmap is refused.
    env.ok_stdin(
        &["create", "-f", "-"],
        Some(&cm("by-admin", "restricted: \"yes\"", "")),
    );
    let e = env.err(&as_alice, Some(&cm("by-alice", "restricted: \"yes\"", "")));
    assert!(
        e.contains("ValidatingAdmissionPolicy 'guarded' with binding 'guarded' denied request: only users who may read secrets create restricted configmaps"),
        "{e}"
    );
    env.ok_stdin(&as_alice, Some(&cm("plain-by-alice", "", "")));
    // Quantities compare by value, whatever their suffix.
    let e = env.err(
        &["create", "-f", "-"],
        Some(&cm("oversized", "", "size: 2048Mi")),
    );
    assert!(e.contains("size must be under 1Gi"), "{e}");
    env.ok_stdin(
        &["create", "-f", "-"],
        Some(&cm("sized", "", "size: 512Mi")),
    );
    // URLs split into their parts.
    let e = env.err(
        &["create", "-f", "-"],
        Some(&cm("plain-http", "", "endpoint: \"http://example.com/x\"")),
    );
    assert!(e.contains("endpoint must use https"), "{e}");
    env.ok_stdin(
        &["create", "-f", "-"],
        Some(&cm("tls", "", "endpoint: \"https://example.com:8443/x\"")),
    );
    env.ok(&["delete", "validatingadmissionpolicybinding", "guarded"]);
    env.ok(&["delete", "validatingadmissionpolicy", "guarded"]);
}

/// `kubectl exec` is a CONNECT of `pods/exec`: a validating webhook for it sees the PodExecOptions and
/// its refusal reaches kubectl before anything is relayed to a node.
fn connect_reaches_webhooks(env: &Env) {
    let config = one_hook(
        "ValidatingWebhookConfiguration",
        "noexec",
        "noexec",
        &env.client_config("/noexec"),
        "CONNECT",
        "pods/exec",
        "  namespaceSelector: {matchLabels: {webhooks: \"on\"}}\n",
    );
    env.ok_stdin(&["apply", "-f", "-"], Some(&config));
    let e = env.err(&["exec", "-n", "hooks", "good", "--", "ls", "/"], None);
    assert!(
        e.contains(
            "admission webhook \"noexec.keel.test\" denied the request: exec is not allowed here"
        ),
        "{e}"
    );
    let last = env.calls("/noexec").last().cloned().unwrap();
    assert_eq!(last["operation"], "CONNECT");
    assert_eq!(last["subResource"], "exec");
    assert_eq!(last["object"]["kind"], "PodExecOptions");
    assert_eq!(last["object"]["command"], json!(["ls", "/"]));
    assert!(last["options"].is_null());
    env.ok(&["delete", "validatingwebhookconfiguration", "noexec"]);
}
