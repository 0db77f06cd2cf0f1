//! What the collector does with a work item (upstream's attemptToDeleteItem, processDeletingDependentsItem
//! and attemptToOrphan): every decision rests on a live read of the object and of its owners, and every
//! write is conditional (a uid precondition on deletes, the resourceVersion on patches), so a stale graph
//! or a new leader half-way through never removes the wrong thing.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::runtime::events::{Event, EventType};
use serde_json::{json, Value};
use tracing::{debug, info};

use super::graph::{Kind, Node, Work, FOREGROUND, ORPHAN};
use super::Gc;
use crate::error::{is_conflict, is_not_found, Error, Result};

/// How many times a conditional patch is tried again after losing a race.
const RETRIES: usize = 5;

/// Processes one work item.
pub async fn process(gc: &Arc<Gc>, w: &Work) -> Result<()> {
    match w {
        Work::Delete(uid) => attempt_to_delete(gc, uid).await,
        Work::Orphan(uid) => orphan(gc, uid).await,
    }
}

/// What an ownerReference points at, as seen from its dependent.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
    /// It exists.
    Solid,
    /// It does not exist, or another object has the name (its uid differs).
    Dangling,
    /// It exists and is deleting its dependents first.
    Waiting,
    /// A cluster-scoped dependent names a namespaced owner: never valid, never retried.
    Invalid,
}

fn api(gc: &Gc, kind: &Kind, ns: Option<&str>) -> Api<DynamicObject> {
    let client = gc.ctx.client.clone();
    match ns {
        Some(ns) if kind.namespaced => Api::namespaced_with(client, ns, &kind.ar),
        _ => Api::all_with(client, &kind.ar),
    }
}

/// The object of `node` as the API server has it now, if it is still that object.
async fn live(gc: &Gc, node: &Node) -> Result<Option<PartialObjectMeta<DynamicObject>>> {
    let api = api(gc, &node.kind, node.namespace.as_deref());
    match api.get_metadata(&node.name).await {
        Ok(m) if m.metadata.uid.as_deref() == Some(node.uid.as_str()) => Ok(Some(m)),
        Ok(_) => Ok(None),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn attempt_to_delete(gc: &Arc<Gc>, uid: &str) -> Result<()> {
    let Some(item) = gc.node(uid) else {
        return Ok(());
    };
    if item.deleting && !item.deleting_dependents() {
        return Ok(());
    }
    let Some(latest) = live(gc, &item).await? else {
        // Gone already (the watch will say so too): its dependents need a look now.
        gc.deleted(uid);
        return Ok(());
    };
    let meta = latest.metadata;
    let finalizers = meta.finalizers.unwrap_or_default();
    let has = |f: &str| finalizers.iter().any(|x| x == f);
    if meta.deletion_timestamp.is_some() && has(FOREGROUND) {
        return deleting_dependents(gc, &item).await;
    }
    let owners = meta.owner_references.unwrap_or_default();
    if owners.is_empty() {
        return Ok(());
    }
    let (mut solid, mut dangling, mut waiting) = (0, HashSet::new(), HashSet::new());
    for r in &owners {
        match owner(gc, &item, r).await? {
            Owner::Solid => solid += 1,
            Owner::Dangling => {
                dangling.insert(r.uid.clone());
            }
            Owner::Waiting => {
                waiting.insert(r.uid.clone());
            }
            Owner::Invalid => {
                invalid_namespace(gc, &item, r).await;
                return Ok(());
            }
        }
    }
    if solid > 0 {
        if dangling.is_empty() && waiting.is_empty() {
            return Ok(());
        }
        // Another owner keeps it: only the references to the gone and the deleting owners go.
        debug!(object = %item.name, "garbage collector: removing dangling ownerReferences");
        return edit_owners(gc, &item, |refs| {
            refs.retain(|r| !dangling.contains(&r.uid) && !waiting.contains(&r.uid))
        })
        .await;
    }
    if !waiting.is_empty() && !gc.dependents(uid).is_empty() {
        // An owner waits for it and it has dependents of its own: it goes in the foreground too. If one
        // of those waits for it as well, its own references stop blocking so the two cannot deadlock.
        if gc.dependents(uid).iter().any(Node::deleting_dependents) {
            edit_owners(gc, &item, |refs| {
                for r in refs.iter_mut() {
                    if r.block_owner_deletion == Some(true) {
                        r.block_owner_deletion = Some(false);
                    }
                }
            })
            .await?;
        }
        return delete(gc, &item, PropagationPolicy::Foreground).await;
    }
    let policy = if has(ORPHAN) {
        PropagationPolicy::Orphan
    } else if has(FOREGROUND) {
        PropagationPolicy::Foreground
    } else {
        PropagationPolicy::Background
    };
    delete(gc, &item, policy).await
}

/// Classifies one ownerReference of `item` by reading the owner (in `item`'s namespace when the owner's
/// type is namespaced).
async fn owner(gc: &Arc<Gc>, item: &Node, r: &OwnerReference) -> Result<Owner> {
    let Some(kind) = gc.kind_of(&r.api_version, &r.kind).await else {
        return Err(Error::Invalid(format!(
            "cannot look up owner {} {}/{}: the API server does not serve it",
            r.api_version, r.kind, r.name
        )));
    };
    if item.namespace.is_none() && kind.namespaced {
        return Ok(Owner::Invalid);
    }
    let ns = if kind.namespaced {
        item.namespace.as_deref()
    } else {
        None
    };
    let found = match api(gc, &kind, ns).get_metadata(&r.name).await {
        Ok(o) => Some(o),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e.into()),
    };
    let Some(o) = found.filter(|o| o.metadata.uid.as_deref() == Some(r.uid.as_str())) else {
        // The uid may be a namespaced object of another namespace: the reference is wrong there.
        let elsewhere = gc
            .node(&r.uid)
            .is_some_and(|n| n.kind.namespaced && n.namespace != item.namespace);
        if elsewhere {
            invalid_namespace(gc, item, r).await;
        }
        return Ok(Owner::Dangling);
    };
    let deleting_dependents = o.metadata.deletion_timestamp.is_some()
        && o.metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == FOREGROUND);
    Ok(if deleting_dependents {
        Owner::Waiting
    } else {
        Owner::Solid
    })
}

/// An owner deleting in the foreground: once no dependent blocks it, its finalizer goes; until then
/// the blocking dependents are looked at.
async fn deleting_dependents(gc: &Arc<Gc>, item: &Node) -> Result<()> {
    let blocking: Vec<Node> = gc
        .dependents(&item.uid)
        .into_iter()
        .filter(|d| d.blocks(&item.uid))
        .collect();
    if blocking.is_empty() {
        info!(object = %item.name, kind = %item.kind.ar.kind, "garbage collector: dependents gone; removing foregroundDeletion");
        return remove_finalizer(gc, item, FOREGROUND).await;
    }
    for d in blocking {
        if !d.deleting_dependents() {
            gc.queue.add(Work::Delete(d.uid));
        }
    }
    Ok(())
}

async fn orphan(gc: &Arc<Gc>, uid: &str) -> Result<()> {
    let Some(owner) = gc.node(uid) else {
        return Ok(());
    };
    for d in gc.dependents(uid) {
        edit_owners(gc, &d, |refs| refs.retain(|r| r.uid != uid)).await?;
    }
    info!(object = %owner.name, kind = %owner.kind.ar.kind, "garbage collector: dependents orphaned; removing orphan");
    remove_finalizer(gc, &owner, ORPHAN).await
}

/// Deletes `item` (if it is still that uid) with `policy`.
async fn delete(gc: &Gc, item: &Node, policy: PropagationPolicy) -> Result<()> {
    info!(object = %item.name, namespace = ?item.namespace, kind = %item.kind.ar.kind, ?policy, "garbage collector: deleting");
    let dp = DeleteParams {
        propagation_policy: Some(policy),
        preconditions: Some(Preconditions {
            uid: Some(item.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api(gc, &item.kind, item.namespace.as_deref())
        .delete(&item.name, &dp)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A conditional merge patch of `item`'s metadata, built from its live state; retried on conflict.
async fn patch_meta<F>(gc: &Gc, item: &Node, mut change: F) -> Result<()>
where
    F: FnMut(&PartialObjectMeta<DynamicObject>) -> Option<Value>,
{
    let api = api(gc, &item.kind, item.namespace.as_deref());
    for _ in 0..RETRIES {
        let Some(m) = live(gc, item).await? else {
            return Ok(());
        };
        let Some(mut meta) = change(&m) else {
            return Ok(());
        };
        if let Some(o) = meta.as_object_mut() {
            o.insert("resourceVersion".into(), json!(m.metadata.resource_version));
        }
        let patch = json!({ "metadata": meta });
        match api
            .patch(&item.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => continue,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Invalid(format!(
        "{} {} kept changing while the garbage collector wrote it",
        item.kind.ar.kind, item.name
    )))
}

async fn remove_finalizer(gc: &Gc, item: &Node, finalizer: &str) -> Result<()> {
    patch_meta(gc, item, |m| {
        let fins = m.metadata.finalizers.clone().unwrap_or_default();
        fins.iter().any(|f| f == finalizer).then(|| {
            let kept: Vec<&String> = fins.iter().filter(|f| *f != finalizer).collect();
            json!({ "finalizers": kept })
        })
    })
    .await
}

async fn edit_owners<F>(gc: &Gc, item: &Node, edit: F) -> Result<()>
where
    F: Fn(&mut Vec<OwnerReference>),
{
    patch_meta(gc, item, |m| {
        let before = m.metadata.owner_references.clone().unwrap_or_default();
        let mut after = before.clone();
        edit(&mut after);
        (after != before).then(|| {
            let refs = if after.is_empty() {
                Value::Null
            } else {
                json!(after)
            };
            json!({ "ownerReferences": refs })
        })
    })
    .await
}

/// Upstream's OwnerRefInvalidNamespace warning on the dependent.
async fn invalid_namespace(gc: &Gc, item: &Node, r: &OwnerReference) {
    let ns = item.namespace.clone().unwrap_or_default();
    let ev = Event {
        type_: EventType::Warning,
        reason: "OwnerRefInvalidNamespace".into(),
        note: Some(format!(
            "ownerRef [{}/{}, namespace: {}, name: {}, uid: {}] does not exist in namespace {:?}",
            r.api_version, r.kind, ns, r.name, r.uid, ns
        )),
        action: "GarbageCollect".into(),
        secondary: None,
    };
    let reference = ObjectReference {
        api_version: Some(item.kind.ar.api_version.clone()),
        kind: Some(item.kind.ar.kind.clone()),
        name: Some(item.name.clone()),
        namespace: item.namespace.clone(),
        uid: Some(item.uid.clone()),
        ..ObjectReference::default()
    };
    if let Err(e) = gc.recorder.publish(&ev, &reference).await {
        debug!(error = %e, "garbage collector: event not recorded");
    }
}
