//! A second real client: the `kube` crate (list, watch, create, replace with conflict) against keel's
//! Kubernetes API, and bad input sent as raw requests: each gets upstream's Status reason and HTTP code, and
//! the server keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use keel_testkit::cluster::Options;
use keel_testkit::{keel_bin, Kind, KubeCluster};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{json, Value};

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "kube-client"}},
        "data": {"v": value},
    }))
    .expect("configmap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_client_list_watch_create_replace() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let client = c.client(0).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");

    let created = api
        .create(&PostParams::default(), &cm("a", "1"))
        .await
        .expect("create");
    let rv0 = created.metadata.resource_version.clone().expect("rv");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());

    let list = api
        .list(&ListParams::default().labels("app=kube-client"))
        .await
        .expect("list");
    assert_eq!(list.items.len(), 1);
    let list_rv = list.metadata.resource_version.clone().expect("list rv");

    // A watch from the list's resourceVersion sees exactly the later changes.
    let stream = api
        .watch(
            &WatchParams::default().labels("app=kube-client").timeout(30),
            &list_rv,
        )
        .await
        .expect("watch");
    let mut stream = stream.boxed();

    let mut updated = created.clone();
    updated.data = Some([("v".to_string(), "2".to_string())].into());
    let replaced = api
        .replace("a", &PostParams::default(), &updated)
        .await
        .expect("replace");
    assert_ne!(
        replaced.metadata.resource_version.as_deref(),
        Some(rv0.as_str())
    );

    // Replacing with the old resourceVersion again is a 409 Conflict.
    let err = api
        .replace("a", &PostParams::default(), &updated)
        .await
        .expect_err("stale rv");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    api.create(&PostParams::default(), &cm("b", "1"))
        .await
        .expect("create b");
    api.delete("a", &Default::default())
        .await
        .expect("delete a");

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
            .await
            .expect("watch event in time")
            .expect("watch ok")
            .expect("stream open");
        match ev {
            WatchEvent::Added(o) => {
                seen.push(format!("ADDED {}", o.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Modified(o) => {
                seen.push(format!("MODIFIED {}", o.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Deleted(o) => {
                seen.push(format!("DELETED {}", o.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(seen, vec!["MODIFIED a", "ADDED b", "DELETED a"]);
}

/// Sends a raw request; returns the status code and the body as JSON.
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = ct.map(|ct| ("Content-Type", ct)).into_iter().collect();
    keel_testkit::kube::raw_request(client, method, path, &headers, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_status_errors() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let client = c.client(0).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    // (what, path, content type, body, expected code, expected reason)
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("malformed JSON", cms, Some("application/json"), b"{\"metadata\":".to_vec(), 400, "BadRequest"),
        ("JSON that is not an object", cms, Some("application/json"), b"[1,2]".to_vec(), 400, "BadRequest"),
        ("malformed YAML", cms, Some("application/yaml"), b"metadata: [unclosed".to_vec(), 400, "BadRequest"),
        ("malformed protobuf", cms, Some("application/vnd.kubernetes.protobuf"), b"k8s\0\x0a\xff\xff".to_vec(), 400, "BadRequest"),
        ("protobuf without magic", cms, Some("application/vnd.kubernetes.protobuf"), b"\x0a\x02hi".to_vec(), 400, "BadRequest"),
        ("unknown content type", cms, Some("text/plain"), b"hello".to_vec(), 415, "UnsupportedMediaType"),
        (
            "wrong kind for the URL",
            cms,
            Some("application/json"),
            br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        (
            "wrong type for a field",
            cms,
            Some("application/json"),
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":1}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        (
            "invalid name",
            cms,
            Some("application/json"),
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"NOT valid"}}"#.to_vec(),
            422,
            "Invalid",
        ),
        (
            "namespace mismatch",
            cms,
            Some("application/json"),
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"other"}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        ("unknown resource", "/api/v1/namespaces/default/widgets", Some("application/json"), b"{}".to_vec(), 404, "NotFound"),
        ("unknown group", "/apis/example.com/v1/things", None, Vec::new(), 404, "NotFound"),
        ("bad label selector", "/api/v1/configmaps?labelSelector=a%20in%20b", None, Vec::new(), 400, "BadRequest"),
        ("bad limit", "/api/v1/configmaps?limit=abc", None, Vec::new(), 400, "BadRequest"),
        ("bad continue token", "/api/v1/configmaps?limit=1&continue=garbage", None, Vec::new(), 400, "BadRequest"),
        ("bad resourceVersion", "/api/v1/configmaps?resourceVersion=x", None, Vec::new(), 400, "BadRequest"),
    ];
    for (what, path, ct, body, code, reason) in cases {
        let method = if body.is_empty() && ct.is_none() {
            "GET"
        } else {
            "POST"
        };
        let (got, status) = raw(&client, method, path, ct, body).await;
        assert_eq!(got, code, "{what}: {status}");
        assert_eq!(status["kind"], "Status", "{what}: {status}");
        assert_eq!(status["reason"], reason, "{what}: {status}");
        assert_eq!(status["code"], code, "{what}: {status}");
    }
    let (_, invalid) = raw(
        &client,
        "POST",
        cms,
        Some("application/json"),
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"NOT valid"}}"#.to_vec(),
    )
    .await;
    assert_eq!(invalid["details"]["causes"][0]["field"], "metadata.name");
    assert_eq!(
        invalid["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );
    assert_eq!(invalid["details"]["kind"], "ConfigMap");

    // 3 MiB body: 413, and the connection's server keeps serving.
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                     "data": {"x": "a".repeat(3 * 1024 * 1024)}});
    let (code, status) = raw(
        &client,
        "POST",
        cms,
        Some("application/json"),
        serde_json::to_vec(&big).expect("json"),
    )
    .await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    // 2 MiB: within the HTTP limit but above the store's request limit.
    let mid = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mid"},
                     "data": {"x": "a".repeat(2 * 1024 * 1024)}});
    let (code, status) = raw(
        &client,
        "POST",
        cms,
        Some("application/json"),
        serde_json::to_vec(&mid).expect("json"),
    )
    .await;
    assert_eq!(code, 413, "{status}");

    // Anonymous requests get 401; /version stays public.
    let anon = c.anonymous_client(0).await;
    let (code, status) = raw(&anon, "GET", "/api/v1/namespaces", None, Vec::new()).await;
    assert_eq!(code, 401, "{status}");
    assert_eq!(status["reason"], "Unauthorized");
    let (code, version) = raw(&anon, "GET", "/version", None, Vec::new()).await;
    assert_eq!(code, 200);
    assert_eq!(version["minor"], "32");

    // Still serving after all that.
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("after", "1"))
        .await
        .expect("create after bad input");
}

/// Protobuf bytes of one field (small payloads only).
fn pb_field(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(tag << 3) | 2, payload.len() as u8];
    out.extend_from_slice(payload);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_semantics_protobuf_values_compaction_and_graceful_pods() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let client = c.client(0).await;
    let mut etcd = etcd_client::Client::connect(
        [format!("http://127.0.0.1:{}", c.member(0).client_port)],
        None,
    )
    .await
    .expect("etcd client");

    // An object in upstream's protobuf storage encoding (as restored from a kubeadm/k3s snapshot) is served.
    let meta = [pb_field(1, b"migrated"), pb_field(3, b"default")].concat();
    let entry = [pb_field(1, b"origin"), pb_field(2, b"kubeadm")].concat();
    let object_bytes = [pb_field(1, &meta), pb_field(2, &entry)].concat();
    let type_meta = [pb_field(1, b"v1"), pb_field(2, b"ConfigMap")].concat();
    let mut value = b"k8s\0".to_vec();
    value.extend([pb_field(1, &type_meta), pb_field(2, &object_bytes)].concat());
    etcd.put("/registry/configmaps/default/migrated", value, None)
        .await
        .expect("put");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let got = api
        .get("migrated")
        .await
        .expect("get protobuf-stored object");
    assert_eq!(
        got.data.and_then(|d| d.get("origin").cloned()).as_deref(),
        Some("kubeadm")
    );
    let shown = c.ok(
        0,
        &[
            "get",
            "configmap",
            "migrated",
            "-o",
            "jsonpath={.data.origin}",
        ],
    );
    assert_eq!(shown, "kubeadm");

    // Paging: every page at the first page's revision; a compacted continue token is 410 Expired.
    // The namespace also holds the root-ca publisher's `kube-root-ca.crt`, as every namespace does.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while api
        .get_opt("kube-root-ca.crt")
        .await
        .expect("get")
        .is_none()
    {
        assert!(std::time::Instant::now() < deadline, "no kube-root-ca.crt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("page-{i}"), "x"))
            .await
            .expect("create");
    }
    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(5));
    let token = first.metadata.continue_.clone().expect("continue token");
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(second.items.len(), 2);
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    let old_rv = first.metadata.resource_version.clone().expect("rv");
    // Two writes after the list, then compact: the list's revision + 1 is gone, so resuming after it is 410.
    for name in ["after-list", "after-list-2"] {
        api.create(&PostParams::default(), &cm(name, "x"))
            .await
            .expect("create");
    }
    let rev = etcd
        .get("/", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    etcd.compact(rev, None).await.expect("compact");
    let (code, status) = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}"),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(code, 410, "{status}");
    assert_eq!(status["reason"], "Expired");
    // A watch from a compacted revision gets one ERROR event with a 410 Status.
    let (code, body) = raw_text(
        &client,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={old_rv}&timeoutSeconds=5"),
    )
    .await;
    assert_eq!(code, 200);
    let first_line: Value =
        serde_json::from_str(body.lines().next().unwrap_or("")).expect("event json");
    assert_eq!(first_line["type"], "ERROR", "{body}");
    assert_eq!(first_line["object"]["code"], 410, "{body}");
    // resourceVersion=0 lists are served (kubectl wait/rollout use them).
    let any = api
        .list(&ListParams::default().match_any())
        .await
        .expect("rv=0 list");
    assert!(any.items.len() >= 8);

    // Graceful pod deletion: a pod bound to a node waits for its node; an unscheduled pod goes at once.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    for (name, node) in [("bound", Some("node-a")), ("pending", None)] {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(p).expect("pod"),
        )
        .await
        .expect("create pod");
    }
    pods.delete("pending", &Default::default())
        .await
        .expect("delete pending");
    assert!(pods.get_opt("pending").await.expect("get").is_none());
    pods.delete("bound", &Default::default())
        .await
        .expect("delete bound");
    let bound = pods.get("bound").await.expect("bound pod still there");
    assert!(bound.metadata.deletion_timestamp.is_some());
    assert_eq!(bound.metadata.deletion_grace_period_seconds, Some(30));
    let status = c.ok(0, &["get", "pod", "bound", "-o", "wide"]);
    assert!(
        status.contains("Terminating") && status.contains("node-a"),
        "{status}"
    );
    let dp = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("bound", &dp).await.expect("force delete");
    assert!(pods.get_opt("bound").await.expect("get").is_none());

    // Core events are served as events.k8s.io/v1 too, with its field names.
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
                    "involvedObject": {"kind": "Pod", "name": "bound", "namespace": "default"},
                    "reason": "Started", "message": "hello", "type": "Normal"});
    let (code, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/events",
        Some("application/json"),
        serde_json::to_vec(&ev).expect("json"),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, v1) = raw(
        &client,
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events/e1",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(code, 200, "{v1}");
    assert_eq!(v1["note"], "hello");
    assert_eq!(v1["regarding"]["name"], "bound");
    let described = c.ok(
        0,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=bound",
            "-o",
            "name",
        ],
    );
    assert_eq!(described.trim(), "event/e1");
}

/// GET returning the status and the raw body text (for watch streams).
async fn raw_text(client: &kube::Client, path: &str) -> (u16, String) {
    let req = http::Request::builder()
        .method("GET")
        .uri(path)
        .body(Vec::new())
        .expect("request");
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("send");
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

/// kube-apiserver's compactor runs in keel: with a 1 s interval, history older than the revision seen one tick
/// earlier is compacted, and a watch from a resourceVersion before that is answered 410 Gone (`Expired`), as
/// upstream answers it. Without the compactor nothing is ever compacted and the watch replays history instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watch_from_compacted_resource_version_is_gone() {
    let c = KubeCluster::start_with(
        Options::new(Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--kube-compaction-interval")
            .arg("1s"),
    );
    let client = c.client(0).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &cm("old", "1"))
        .await
        .expect("create");
    let old_rv = created.metadata.resource_version.clone().expect("rv");
    let mut bump = api
        .create(&PostParams::default(), &cm("bump", "0"))
        .await
        .expect("create bump");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    let gone = loop {
        // Keep the revision moving so that each tick's target is past `old_rv`.
        n += 1;
        bump.data = Some([("v".to_string(), n.to_string())].into());
        bump = api
            .replace("bump", &PostParams::default(), &bump)
            .await
            .expect("replace bump");
        match api.watch(&WatchParams::default().timeout(5), &old_rv).await {
            Err(kube::Error::Api(s)) if s.code == 410 => break (s.code, s.reason),
            Err(e) => panic!("watch from {old_rv}: {e:?}"),
            Ok(stream) => {
                let mut stream = stream.boxed();
                let first = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await;
                if let Ok(Ok(Some(WatchEvent::Error(e)))) = first {
                    assert_eq!(e.code, 410, "{e:?}");
                    break (e.code, e.reason);
                }
            }
        }
        if std::time::Instant::now() > deadline {
            c.fail(format!(
                "a watch from resourceVersion {old_rv} still replays history after {n} rounds"
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(gone, (410, "Expired".to_string()));
    // The compaction clock is upstream's key, outside /registry.
    let out = keel_testkit::etcdctl(
        &format!("127.0.0.1:{}", c.member(0).client_port),
        &["get", "compact_rev_key"],
        None,
    );
    assert!(out.stdout.starts_with("compact_rev_key\n"), "{out:?}");
}

/// Over the store's space quota, writes get what kube-apiserver passes through from etcd: HTTP 500, etcd's message,
/// no reason; reads still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_write_over_the_space_quota_is_refused_as_upstream() {
    let c = KubeCluster::start_with(
        Options::new(Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--quota-backend-bytes")
            .arg("2000000"),
    );
    let client = c.client(0).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut refused = None;
    for i in 0..100 {
        // Random-looking data, so compression does not hide it from the quota.
        let data: String = (0..500_000)
            .map(|j: u64| {
                let x = (j ^ (i * 7919)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        match api
            .create(&PostParams::default(), &cm(&format!("big-{i}"), &data))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) => {
                refused = Some(s);
                break;
            }
            Err(e) => panic!("create big-{i}: {e:?}"),
        }
    }
    let s = refused.expect("the quota never refused a create");
    assert_eq!(s.code, 500, "{s:?}");
    assert_eq!(s.message, "etcdserver: mvcc: database space exceeded");
    assert_eq!(s.reason, "", "{s:?}");
    // Reads go on.
    api.list(&ListParams::default()).await.expect("list");
}
