//! Namespace lifecycle, run by the API server itself: the default namespaces, a `default` ServiceAccount
//! in every active namespace, no new content in a missing or terminating namespace, and termination (a
//! deleted namespace's content is deleted, then its `kubernetes` finalizer removed, then the namespace).
//!
//! The loop runs on the Raft leader only, so one member does the work; every step is a conditional write,
//! so a leader change in the middle is harmless.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::debug;

use super::alloc;
use super::crd::registry::Registry;
use super::leader;
use super::object;
use super::resource::{self, ResourceDef};
use super::status::{ApiError, Target};
use super::storage::{prefix_end, Storage, Stored, WriteOutcome};

/// Namespaces every cluster has.
pub const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];
/// How often the leader looks for work.
const PERIOD: Duration = Duration::from_millis(500);

/// Whether the default namespaces exist yet (readiness: kubectl's first command needs `default`).
pub async fn bootstrapped(storage: &Storage) -> bool {
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
pub async fn check_namespace_open(storage: &Storage, ns: &str) -> Result<(), ApiError> {
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
pub fn namespace_object(name: &str) -> Value {
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

/// Every namespaced storage, once: built-ins and custom resources (all versions of a CRD share one).
fn namespaced_defs(registry: &Registry) -> Vec<Arc<ResourceDef>> {
    let mut out: Vec<Arc<ResourceDef>> = Vec::new();
    for d in registry.all() {
        // events.k8s.io shares storage with core events.
        if d.namespaced && d.group != "events.k8s.io" && !out.iter().any(|o| o.storage == d.storage)
        {
            out.push(d);
        }
    }
    out
}

/// During a cascading purge (namespace or CRD deletion), an object with finalizers is marked
/// deleting once and left to its controllers, as upstream does. Returns whether it was left.
pub async fn left_to_finalizers(
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

/// Deletes what is in a terminating namespace; returns how many objects remain.
async fn purge(storage: &Storage, registry: &Registry, ns: &str) -> Result<usize, ApiError> {
    let mut remaining = 0;
    for def in namespaced_defs(registry) {
        let prefix = def.ns_prefix(ns);
        let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
        for (key, st) in page.items {
            remaining += 1;
            let key = String::from_utf8_lossy(&key).to_string();
            if left_to_finalizers(storage, &key, &st).await? {
                continue;
            }
            let bound_pod = def.kind == "Pod"
                && !object::path(&st.object, "spec.nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                && !matches!(
                    object::path(&st.object, "status.phase").and_then(Value::as_str),
                    Some("Succeeded") | Some("Failed")
                );
            if bound_pod {
                // The node agent finishes graceful deletion; mark it once.
                if !object::is_deleting(&st.object) {
                    let mut o = st.object.clone();
                    let grace = object::path(&o, "spec.terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(30);
                    let at = jiff::Timestamp::now()
                        .checked_add(jiff::SignedDuration::from_secs(grace))
                        .unwrap_or_else(|_| jiff::Timestamp::now());
                    let m = object::meta_mut(&mut o);
                    m.insert("deletionTimestamp".into(), json!(object::timestamp(at)));
                    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                    let _ = storage.put_if(&key, &o, st.mod_revision).await?;
                }
                continue;
            }
            let release = alloc::claims_of(&def, &st.object);
            if let WriteOutcome::Done(_) =
                storage.delete_if(&key, st.mod_revision, &release).await?
            {
                remaining -= 1;
            }
        }
    }
    Ok(remaining)
}

async fn finish_namespace(
    storage: &Storage,
    registry: &Registry,
    name: &str,
) -> Result<(), ApiError> {
    let key = format!("/registry/namespaces/{name}");
    let Some(st) = storage.get(&key, true).await? else {
        return Ok(());
    };
    if purge(storage, registry, name).await? > 0 {
        return Ok(());
    }
    let mut o = st.object.clone();
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("finalizers".into(), json!([]));
    }
    if object::finalizers(&o).is_empty() {
        let _ = storage.delete_if(&key, st.mod_revision, &[]).await?;
        debug!(namespace = name, "namespace deleted");
    } else if o != st.object {
        let _ = storage.put_if(&key, &o, st.mod_revision).await?;
    }
    Ok(())
}

/// One pass: default namespaces, default ServiceAccounts, terminating namespaces.
pub async fn reconcile(storage: &Storage, registry: &Registry) -> Result<(), ApiError> {
    for ns in DEFAULT_NAMESPACES {
        ensure(
            storage,
            &format!("/registry/namespaces/{ns}"),
            &namespace_object(ns),
        )
        .await?;
    }
    let Some(nsdef) = resource::find("", "v1", "namespaces") else {
        return Ok(());
    };
    let prefix = nsdef.prefix();
    let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    for (_, st) in page.items {
        let name = object::name(&st.object).to_string();
        if object::is_deleting(&st.object) {
            finish_namespace(storage, registry, &name).await?;
            continue;
        }
        let sa_key = format!("/registry/serviceaccounts/{name}/default");
        ensure(
            storage,
            &sa_key,
            &new_object("v1", "ServiceAccount", "default", Some(&name)),
        )
        .await?;
    }
    Ok(())
}

/// Runs [`reconcile`] while this member leads, until `stop` fires.
pub async fn run(
    storage: Storage,
    registry: Arc<Registry>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let st = &storage;
    let reg = &registry;
    leader::while_leading(st, "namespace lifecycle", PERIOD, stop, || {
        reconcile(st, reg)
    })
    .await
}
