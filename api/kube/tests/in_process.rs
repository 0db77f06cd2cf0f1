//! The Kubernetes API as an in-process tower `Service`: a `kube::Client` made from `ApiServer::service`
//! lists, watches, creates and replaces (with a conflict) through the same path an HTTPS client takes, on a
//! real single-member keel (Raft, WAL and store in a temp dir; no TLS, no Kubernetes socket).

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test: a failed step should stop it loudly

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use keel_kube_api::authn::Identity;
use keel_kube_api::{ApiServer, KubeOptions, Storage};
use keel_raft::node::{Node, NodeConfig};
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};

use keel_testkit::free_port;

async fn start() -> (tempfile::TempDir, std::sync::Arc<Node>, ApiServer) {
    let dir = tempfile::tempdir().expect("temp dir");
    let peer = format!("http://127.0.0.1:{}", free_port());
    let mut cfg = NodeConfig::new("m1", dir.path().join("m1"));
    cfg.peer_urls = vec![peer.clone()];
    cfg.listen_peer_urls = vec![peer];
    let node = Node::start(cfg).await.expect("member starts");
    let opts = KubeOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        advertise_url: "https://127.0.0.1:6443".into(),
        data_dir: dir.path().join("m1"),
        extra_sans: Vec::new(),
        token_file: None,
        encryption_config: None,
        audit_log: None,
        audit_policy: None,
        compaction_interval: keel_kube_api::compaction::DEFAULT_INTERVAL,
        event_ttl: keel_kube_api::DEFAULT_EVENT_TTL,
        leaf_cert_days: keel_kube_api::pki::LEAF_DAYS,
        initial_pki: None,
        member_tls_hosts: None,
    };
    let api = tokio::time::timeout(
        Duration::from_secs(30),
        ApiServer::start(Storage::new(node.clone()), opts),
    )
    .await
    .expect("API server starts in time")
    .expect("API server starts");
    (dir, node, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_client_lists_watches_creates_and_conflicts() {
    let (_dir, node, api) = start().await;
    // keel's controller manager acts with the privileged group (one client for every controller).
    let identity = Identity {
        user: "system:kube-controller-manager".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    };
    let client = Client::new(api.service(identity), "default");

    // The default namespace appears once the leader's lifecycle pass ran.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut found = false;
    for _ in 0..100 {
        let list = namespaces
            .list(&ListParams::default())
            .await
            .expect("list namespaces");
        if list
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
        {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "the default namespace was never created");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let listed = cms
        .list(&ListParams::default())
        .await
        .expect("list configmaps");
    let rv = listed
        .metadata
        .resource_version
        .clone()
        .expect("list resourceVersion");
    let mut watch = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch starts")
        .boxed();

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("c1".into());
    cm.data = Some([("k".to_string(), "v1".to_string())].into());
    let created = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");

    // managedFields name the in-process client's identity as the field manager.
    let managers: Vec<String> = created
        .metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["kube-controller-manager".to_string()]);

    let event = tokio::time::timeout(Duration::from_secs(10), watch.try_next())
        .await
        .expect("a watch event in time")
        .expect("watch stream ok")
        .expect("watch stream open");
    match event {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("c1")),
        other => panic!("expected ADDED, got {other:?}"),
    }

    // A replace from a stale resourceVersion is a 409 Conflict with upstream's reason.
    let mut fresh = created.clone();
    fresh.data = Some([("k".to_string(), "v2".to_string())].into());
    cms.replace("c1", &PostParams::default(), &fresh)
        .await
        .expect("replace at the current resourceVersion");
    let mut stale = created;
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    match cms.replace("c1", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert!(
                s.message.contains("the object has been modified"),
                "message: {}",
                s.message
            );
        }
        other => panic!("expected a 409 Conflict, got {other:?}"),
    }
    let got = cms.get("c1").await.expect("get");
    assert_eq!(
        got.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("v2")
    );

    drop(watch);
    api.stop();
    node.shutdown().await;
}

/// `pods/{name}/binding` sets the node once: the second binding is upstream's 409 on `pods/binding`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_assigns_a_pod_once() {
    use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
    let (_dir, node, api) = start().await;
    // The pod is an administrator's; the bindings are the scheduler's (RBAC lets it bind, not create).
    let admin = Identity {
        user: "kubernetes-admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    };
    let identity = Identity {
        user: "system:kube-scheduler".into(),
        groups: vec!["system:authenticated".into()],
    };
    let scheduler: Api<Pod> =
        Api::namespaced(Client::new(api.service(identity), "default"), "default");
    let pods: Api<Pod> = Api::namespaced(Client::new(api.service(admin), "default"), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }))
    .expect("pod");
    let mut created = None;
    for _ in 0..100 {
        // The default namespace appears once the leader's lifecycle pass ran.
        match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => {
                created = Some(p);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(created.is_some(), "the pod was never created");
    let binding = |node: &str| Binding {
        metadata: kube::api::ObjectMeta {
            name: Some("p1".into()),
            annotations: Some([("scheduled-by".to_string(), "test".to_string())].into()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    let status: kube::core::Status = scheduler
        .create_subresource("binding", "p1", &PostParams::default(), &binding("n1"))
        .await
        .expect("first binding");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    let got = pods.get("p1").await.expect("get");
    assert_eq!(
        got.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("n1")
    );
    assert_eq!(
        got.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("scheduled-by"))
            .map(String::as_str),
        Some("test")
    );
    let scheduled = got
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| c.status);
    assert_eq!(scheduled.as_deref(), Some("True"));

    match pods
        .create_subresource::<_, kube::core::Status>(
            "binding",
            "p1",
            &PostParams::default(),
            &binding("n2"),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert_eq!(
                s.message,
                "Operation cannot be fulfilled on pods/binding \"p1\": pod p1 is already assigned to node \"n1\""
            );
        }
        other => panic!("expected a 409 Conflict, got {other:?}"),
    }
    api.stop();
    node.shutdown().await;
}
