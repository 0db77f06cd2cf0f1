//! Namespace lifecycle, run by the API server itself: the default namespaces and no new content in a
//! missing or terminating namespace. Terminating a deleted namespace is the namespace controller's.
//!
//! The loop runs on the Raft leader only, so one member does the work; every step is a conditional write,
//! so a leader change in the middle is harmless.

use std::time::Duration;

use serde_json::{json, Value};

use super::leader;
use super::object;
use super::status::{ApiError, Target};
use super::storage::{Storage, Stored};

/// Namespaces every cluster has.
pub(crate) const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];
/// How often the leader looks for work.
const PERIOD: Duration = Duration::from_millis(500);

/// Whether the default namespaces exist yet (readiness: kubectl's first command needs `default`).
pub(crate) async fn bootstrapped(storage: &Storage) -> bool {
    for ns in DEFAULT_NAMESPACES {
        if !matches!(
            storage
                .get(&format!("/registry/namespaces/{ns}"), false)
                .await,
            Ok(Some(_))
        ) {
            return false;
        }
    }
    true
}

/// Refuses content in a namespace that is missing (404) or terminating (403).
pub(crate) async fn check_namespace_open(storage: &Storage, ns: &str) -> Result<(), ApiError> {
    let key = format!("/registry/namespaces/{ns}");
    match storage.get(&key, false).await? {
        None => match storage.get(&key, true).await? {
            None => Err(ApiError::NotFound(Target::new("", "namespaces", ns))),
            Some(_) => Ok(()),
        },
        Some(n) if object::is_deleting(&n.object) => Err(ApiError::Forbidden {
            target: Target::new("", "namespaces", ns),
            message: format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        }),
        Some(_) => Ok(()),
    }
}

fn new_object(api_version: &str, kind: &str, name: &str, ns: Option<&str>) -> Value {
    let mut meta =
        json!({"name": name, "uid": object::new_uid(), "creationTimestamp": object::now_rfc3339()});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": meta})
}

/// A fresh namespace object as the API would create it.
pub(crate) fn namespace_object(name: &str) -> Value {
    let mut ns = new_object("v1", "Namespace", name, None);
    ns["metadata"]["labels"] = json!({"kubernetes.io/metadata.name": name});
    ns["spec"] = json!({"finalizers": ["kubernetes"]});
    ns["status"] = json!({"phase": "Active"});
    ns
}

async fn ensure(storage: &Storage, key: &str, obj: &Value) -> Result<(), ApiError> {
    if storage.get(key, false).await?.is_none() {
        let _ = storage.put_if(key, obj, 0).await?;
    }
    Ok(())
}

/// During a cascading purge (namespace or CRD deletion), an object with finalizers is marked
/// deleting once and left to its controllers, as upstream does. Returns whether it was left.
pub(crate) async fn left_to_finalizers(
    storage: &Storage,
    key: &str,
    st: &Stored,
) -> Result<bool, ApiError> {
    if object::finalizers(&st.object).is_empty() {
        return Ok(false);
    }
    if !object::is_deleting(&st.object) {
        let mut o = st.object.clone();
        let m = object::meta_mut(&mut o);
        m.insert("deletionTimestamp".into(), json!(object::now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        let _ = storage.put_if(key, &o, st.mod_revision).await?;
    }
    Ok(true)
}

/// The IngressClass of the agents' built-in Ingress controller, the cluster's default class (as k3s
/// ships Traefik's). Kept like the default namespaces: a deleted one comes back, an edited one (say,
/// without the default annotation) is left as it is.
pub(crate) fn keel_ingress_class() -> Value {
    let mut c = new_object("networking.k8s.io/v1", "IngressClass", "keel", None);
    c["metadata"]["generation"] = json!(1);
    c["metadata"]["annotations"] = json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    c["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "keel"});
    c["spec"] = json!({"controller": "keel.io/ingress"});
    c
}

/// The StorageClass of the agents' built-in local-path provisioner, the cluster's default class (as k3s
/// ships `local-path`): a directory on the node that first uses the claim, removed with the claim. Kept
/// like the IngressClass.
pub(crate) fn local_path_storage_class() -> Value {
    let mut c = new_object("storage.k8s.io/v1", "StorageClass", "local-path", None);
    c["metadata"]["annotations"] = json!({"storageclass.kubernetes.io/is-default-class": "true"});
    c["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "keel"});
    c["provisioner"] = json!("keel.io/local-path");
    c["reclaimPolicy"] = json!("Delete");
    c["volumeBindingMode"] = json!("WaitForFirstConsumer");
    c
}

/// One pass: the default namespaces, the `keel` IngressClass and the `local-path` StorageClass. (The namespace controller terminates
/// deleted namespaces and the serviceaccount controller makes the `default` ServiceAccounts.)
pub(crate) async fn reconcile(storage: &Storage) -> Result<(), ApiError> {
    for ns in DEFAULT_NAMESPACES {
        ensure(
            storage,
            &format!("/registry/namespaces/{ns}"),
            &namespace_object(ns),
        )
        .await?;
    }
    ensure(
        storage,
        "/registry/ingressclasses/keel",
        &keel_ingress_class(),
    )
    .await?;
    ensure(
        storage,
        "/registry/storageclasses/local-path",
        &local_path_storage_class(),
    )
    .await
}

/// Runs [`reconcile`] while this member leads, until `stop` fires.
pub(crate) async fn run(storage: Storage, stop: tokio::sync::watch::Receiver<bool>) {
    let st = &storage;
    leader::while_leading(st, "namespace lifecycle", PERIOD, stop, || reconcile(st)).await
}
