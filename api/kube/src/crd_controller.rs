//! The CRD controller, run by the API server on the Raft leader only (like namespace lifecycle): it sets
//! a CRD's status (`acceptedNames`, `storedVersions`, conditions `NamesAccepted` and `Established`), and
//! when a CRD is deleted it deletes every object of it, then removes the cleanup finalizer and the CRD.
//!
//! Every step is a conditional write on the object's mod revision, so a leader change mid-way is harmless.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use serde_json::{json, Value};
use tracing::{debug, info};

use crate::crd::registry::Registry;
use crate::crd::{CLEANUP_FINALIZER, CRD_PREFIX};
use crate::lifecycle::left_to_finalizers;
use crate::object;
use crate::resource;
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage, WatchBatch, WriteOutcome};

/// How often the leader looks for work.
const PERIOD: Duration = Duration::from_millis(300);

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// Merges wanted conditions into the current ones, keeping `lastTransitionTime` of unchanged ones.
fn merge_conditions(current: &[Value], wanted: Vec<Value>) -> Vec<Value> {
    let now = object::now_rfc3339();
    wanted
        .into_iter()
        .map(|mut w| {
            let old = current.iter().find(|c| c.get("type") == w.get("type"));
            let same = old.is_some_and(|o| o.get("status") == w.get("status"));
            let ts = match old.and_then(|o| o.get("lastTransitionTime")) {
                Some(t) if same => t.clone(),
                _ => json!(now),
            };
            w["lastTransitionTime"] = ts;
            w
        })
        .collect()
}

/// Which other CRD or built-in already serves a name this CRD asks for (upstream: NamesAccepted=False).
fn name_conflict(crd: &Value, all: &[Value]) -> Option<String> {
    let group = object::path(crd, "spec.group").and_then(Value::as_str)?;
    let plural = object::path(crd, "spec.names.plural").and_then(Value::as_str)?;
    let kind = object::path(crd, "spec.names.kind").and_then(Value::as_str)?;
    if resource::BUILTIN
        .iter()
        .any(|d| d.group == group && d.plural == plural)
    {
        return Some(format!("{plural:?} is already in use"));
    }
    let created = object::meta_str(crd, "creationTimestamp");
    let me = object::name(crd);
    for other in all {
        if object::name(other) == me
            || object::path(other, "spec.group").and_then(Value::as_str) != Some(group)
        {
            continue;
        }
        let older = object::meta_str(other, "creationTimestamp") < created;
        if !older {
            continue;
        }
        if object::path(other, "spec.names.plural").and_then(Value::as_str) == Some(plural) {
            return Some(format!("{plural:?} is already in use"));
        }
        if object::path(other, "spec.names.kind").and_then(Value::as_str) == Some(kind) {
            return Some(format!("{kind:?} is already in use"));
        }
    }
    None
}

/// The status a live CRD should have.
fn wanted_status(crd: &Value, all: &[Value]) -> Value {
    let current = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let conds: Vec<Value> = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status = current.clone();
    let wanted = match name_conflict(crd, all) {
        Some(msg) => vec![
            condition("NamesAccepted", false, "NameConflict", &msg),
            condition(
                "Established",
                false,
                "NotAccepted",
                "not all names are accepted",
            ),
        ],
        None => {
            let names = object::path(crd, "spec.names")
                .cloned()
                .unwrap_or_else(|| json!({}));
            status["acceptedNames"] = names;
            vec![
                condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
                condition(
                    "Established",
                    true,
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                ),
            ]
        }
    };
    status["conditions"] = json!(merge_conditions(&conds, wanted));
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage_version = object::path(crd, "spec.versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v.get("storage") == Some(&json!(true))))
        .and_then(|v| v.get("name"))
        .cloned();
    if let Some(v) = storage_version {
        if !stored.contains(&v) {
            stored.push(v);
        }
    }
    status["storedVersions"] = json!(stored);
    if status.get("acceptedNames").is_none() {
        status["acceptedNames"] = json!({"plural": "", "kind": ""});
    }
    status
}

/// Deletes the objects of a deleted CRD; returns how many remain.
async fn purge(storage: &Storage, crd: &Value) -> Result<usize, ApiError> {
    let group = object::path(crd, "spec.group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = object::path(crd, "spec.names.plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() || plural.is_empty() {
        return Ok(0);
    }
    let prefix = format!("/registry/{group}/{plural}/");
    let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    let mut remaining = 0;
    for (key, st) in page.items {
        remaining += 1;
        let key = String::from_utf8_lossy(&key).to_string();
        if left_to_finalizers(storage, &key, &st).await? {
            continue;
        }
        if let WriteOutcome::Done(_) = storage.delete_if(&key, st.mod_revision, &[]).await? {
            remaining -= 1;
        }
    }
    Ok(remaining)
}

async fn finish_deleted(
    storage: &Storage,
    key: &str,
    crd: &Value,
    rev: i64,
) -> Result<(), ApiError> {
    let mut o = crd.clone();
    let conds: Vec<Value> = object::path(crd, "status.conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let remaining = purge(storage, crd).await?;
    if remaining > 0 {
        let mut wanted: Vec<Value> = conds
            .iter()
            .filter(|c| c.get("type") != Some(&json!("Terminating")))
            .cloned()
            .collect();
        wanted.push(condition(
            "Terminating",
            true,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ));
        let merged = merge_conditions(&conds, wanted);
        if Some(&json!(merged)) != object::path(crd, "status.conditions") {
            o["status"]["conditions"] = json!(merged);
            let _ = storage.put_if(key, &o, rev).await?;
        }
        return Ok(());
    }
    let fins: Vec<Value> = object::finalizers(crd)
        .into_iter()
        .filter(|f| f != CLEANUP_FINALIZER)
        .map(Value::from)
        .collect();
    if fins.is_empty() {
        let _ = storage.delete_if(key, rev, &[]).await?;
        info!(
            crd = object::name(crd),
            "custom resource definition deleted"
        );
    } else {
        object::meta_mut(&mut o).insert("finalizers".into(), json!(fins));
        let _ = storage.put_if(key, &o, rev).await?;
    }
    Ok(())
}

/// One pass over every CRD.
pub(crate) async fn reconcile(storage: &Storage) -> Result<(), ApiError> {
    let page = storage.range(
        CRD_PREFIX.as_bytes(),
        &prefix_end(CRD_PREFIX.as_bytes()),
        0,
        0,
    )?;
    let all: Vec<Value> = page.items.iter().map(|(_, s)| s.object.clone()).collect();
    for (key, st) in &page.items {
        let key = String::from_utf8_lossy(key).to_string();
        if object::is_deleting(&st.object) {
            finish_deleted(storage, &key, &st.object, st.mod_revision).await?;
            continue;
        }
        let status = wanted_status(&st.object, &all);
        if st.object.get("status") != Some(&status) {
            let mut o = st.object.clone();
            o["status"] = status;
            match storage.put_if(&key, &o, st.mod_revision).await? {
                WriteOutcome::Done(_) => debug!(crd = object::name(&o), "CRD status updated"),
                WriteOutcome::Lost(_) => {}
            }
        }
    }
    Ok(())
}

/// Runs [`reconcile`] while this member leads, until `stop` fires: every [`PERIOD`], and at once after
/// any change of a CRD, so that a new CRD has its conditions before a client that created it looks again
/// (`kubectl wait --for condition=established` fails on the `null` the create answers).
pub(crate) async fn run(
    storage: Storage,
    _registry: Arc<Registry>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let wake = Arc::new(Notify::new());
    let watcher = tokio::spawn(wake_on_changes(storage.clone(), wake.clone()));
    let st = &storage;
    crate::leader::while_leading_woken(st, "CRD status", PERIOD, stop, &wake, || reconcile(st))
        .await;
    watcher.abort();
}

/// Notifies `wake` of every change under the CRD prefix, watching again after a watch ends.
async fn wake_on_changes(storage: Storage, wake: Arc<Notify>) {
    let end = prefix_end(CRD_PREFIX.as_bytes());
    loop {
        if let Ok(mut w) = storage.watch(CRD_PREFIX.as_bytes(), &end, 0, false).await {
            loop {
                match w.next().await {
                    WatchBatch::Events(_) => wake.notify_one(),
                    WatchBatch::Progress(_) => {}
                    WatchBatch::Compacted(_) | WatchBatch::Ended => break,
                }
            }
        }
        // The member is stopping or the watch was cut: the periodic pass covers the gap.
        tokio::time::sleep(PERIOD).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, plural: &str, created: &str) -> Value {
        json!({"metadata": {"name": format!("{plural}.example.com"), "creationTimestamp": created},
               "spec": {"group": "example.com", "names": {"plural": plural, "kind": name},
                        "versions": [{"name": "v1", "served": true, "storage": true}]}})
    }

    #[test]
    fn status_of_a_fresh_crd_is_established() {
        let c = crd("Widget", "widgets", "2026-01-01T00:00:00Z");
        let s = wanted_status(&c, std::slice::from_ref(&c));
        assert_eq!(s["conditions"][1]["type"], "Established");
        assert_eq!(s["conditions"][1]["status"], "True");
        assert_eq!(s["storedVersions"], json!(["v1"]));
        assert_eq!(s["acceptedNames"]["kind"], "Widget");
        // A second pass with the written status changes nothing (no write loop).
        let mut c2 = c.clone();
        c2["status"] = s.clone();
        assert_eq!(wanted_status(&c2, &[c2.clone()]), s);
    }

    #[test]
    fn a_younger_crd_with_a_taken_kind_is_not_accepted() {
        let old = crd("Widget", "widgets", "2026-01-01T00:00:00Z");
        let young = crd("Widget", "gadgets", "2026-01-02T00:00:00Z");
        let s = wanted_status(&young, &[old.clone(), young.clone()]);
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "NameConflict");
        let s = wanted_status(&old, &[old.clone(), young]);
        assert_eq!(s["conditions"][0]["status"], "True");
    }
}
