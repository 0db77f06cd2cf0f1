//! DELETE of one object and of a collection: DeleteOptions (preconditions, grace period, propagation
//! policy), finalizers and `deletionTimestamp`; grace periods, held deletions (namespaces, CRDs) and the
//! answer are the kind's strategy's.

use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::read::{list_objects, respond_object};
use super::{list_item, Call};
use crate::body::respond;
use crate::object;
use crate::status::{delete_success, ApiError};
use crate::storage::WriteOutcome;
use crate::strategy;

/// `metav1.DeleteOptions` (body or query).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    pub preconditions: Option<Preconditions>,
    pub orphan_dependents: Option<bool>,
    #[serde(default)]
    pub dry_run: Vec<String>,
}

/// Preconditions a delete checks first.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

pub(crate) fn options(call: &Call) -> Result<DeleteOptions, ApiError> {
    let mut o: DeleteOptions = if call.body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        serde_json::from_slice(&call.body)
            .map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
    };
    if let Some(g) = call.params.int("gracePeriodSeconds")? {
        o.grace_period_seconds = Some(g);
    }
    if let Some(p) = call.params.get("propagationPolicy") {
        o.propagation_policy = Some(p.to_string());
    }
    if let Some(orphan) = call.params.opt_flag("orphanDependents") {
        o.orphan_dependents = Some(orphan);
    }
    if let Some(p) = &o.propagation_policy {
        if !["Background", "Foreground", "Orphan"].contains(&p.as_str()) {
            return Err(ApiError::BadRequest(format!(
                "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    }
    if o.propagation_policy.is_some() && o.orphan_dependents.is_some() {
        return Err(ApiError::Invalid {
            target: crate::status::Target::new("meta.k8s.io", "DeleteOptions", ""),
            causes: vec![crate::status::Cause::invalid(
                "propagationPolicy",
                &json!(o.propagation_policy),
                "orphanDependents and deletionPropagation cannot be both set",
            )],
        });
    }
    if o.dry_run.iter().any(|d| d != "All") {
        return Err(ApiError::BadRequest(
            "Invalid dryRun value: supported values: \"All\"".into(),
        ));
    }
    Ok(o)
}

/// The garbage collector's finalizer: delete the dependents first (Foreground).
pub const FOREGROUND: &str = "foregroundDeletion";
/// The garbage collector's finalizer: strip the dependents' ownerReferences first (Orphan).
pub const ORPHAN: &str = "orphan";

/// Whether the dependents are to be orphaned: an explicit option wins, then a finalizer already on the
/// object; every kind keel serves defaults to Background (upstream's shouldOrphanDependents).
fn orphans(opts: &DeleteOptions, finalizers: &[String]) -> bool {
    if let Some(o) = opts.orphan_dependents {
        return o;
    }
    if let Some(p) = &opts.propagation_policy {
        return p == "Orphan";
    }
    for f in finalizers {
        match f.as_str() {
            ORPHAN => return true,
            FOREGROUND => return false,
            _ => {}
        }
    }
    false
}

/// Whether the dependents are to be deleted first (upstream's shouldDeleteDependents).
fn deletes_dependents_first(opts: &DeleteOptions, finalizers: &[String]) -> bool {
    if opts.orphan_dependents.is_some() {
        return false;
    }
    if let Some(p) = &opts.propagation_policy {
        return p == "Foreground";
    }
    finalizers.iter().any(|f| f == FOREGROUND)
}

/// The object's finalizers as the delete's propagation policy wants them: both garbage collector
/// finalizers dropped, then the one asked for added (other finalizers stay as they are).
pub fn propagation_finalizers(opts: &DeleteOptions, finalizers: &[String]) -> Vec<String> {
    let mut out: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != ORPHAN && *f != FOREGROUND)
        .cloned()
        .collect();
    if orphans(opts, finalizers) {
        out.push(ORPHAN.into());
    }
    if deletes_dependents_first(opts, finalizers) {
        out.push(FOREGROUND.into());
    }
    out
}

/// What deleting one object did.
pub(crate) enum Deleted {
    /// Gone; the last state.
    Gone(Value),
    /// Marked for deletion (finalizers, grace period); the updated object.
    Pending(Value),
}

/// A delete passes the admission webhooks that match it (mutating ones first, then the validating
/// ones), with the stored object as `oldObject`.
async fn admit_delete(call: &Call, name: &str, old: &Value, dry_run: bool) -> Result<(), ApiError> {
    let requested = &call.route.def;
    let stored = keel_kube_registry::convert::storage_def(requested);
    let req = crate::admission::webhook::Request {
        operation: crate::admission::webhook::Operation::Delete,
        requested,
        stored: &stored,
        namespace: call.ns(),
        name,
        subresource: None,
        dry_run,
        identity: &call.identity,
        old: Some(old),
        authz: Some(&call.state.authz),
    };
    let hooks = &call.state.webhooks;
    let mut scratch = old.clone();
    hooks
        .mutate(&call.state.storage, &req, &mut scratch)
        .await?;
    crate::admission::policy::validate(&call.state.storage, &call.state.registry, &req, None)
        .await?;
    hooks.validate(&call.state.storage, &req, None).await?;
    Ok(())
}

pub(crate) async fn delete_one(
    call: &Call,
    key: &str,
    name: &str,
    opts: &DeleteOptions,
    dry_run: bool,
) -> Result<Deleted, ApiError> {
    let def = &call.route.def;
    let strategy = strategy::of(def);
    let storage = &call.state.storage;
    let target = crate::status::Target::new(&def.group, &def.plural, name);
    let mut current = storage.get(key, true).await?;
    for _ in 0..8 {
        let Some(cur) = current.take() else {
            return Err(ApiError::NotFound(target));
        };
        crate::admission::node_restriction::admit(
            &call.identity,
            def,
            None,
            crate::admission::node_restriction::Operation::Delete,
            Some(&cur.object),
            None,
        )?;
        admit_delete(call, name, &cur.object, dry_run).await?;
        if let Some(p) = &opts.preconditions {
            let uid = object::uid(&cur.object);
            if let Some(want) = p.uid.as_deref().filter(|u| *u != uid) {
                return Err(ApiError::Conflict {
                    target,
                    detail: format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
                });
            }
            if let Some(rv) = p
                .resource_version
                .as_deref()
                .filter(|r| r.parse::<i64>().ok() != Some(cur.mod_revision))
            {
                return Err(ApiError::Conflict {
                    target,
                    detail: format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        cur.mod_revision
                    ),
                });
            }
        }
        let grace = strategy.graceful_delete(&cur.object, opts.grace_period_seconds);
        let mut obj = cur.object.clone();
        let already = object::is_deleting(&obj);
        let pending_grace = object::path(&obj, "metadata.deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        // As upstream, a graceful deletion under way takes no new finalizers; otherwise the policy
        // decides the garbage collector's finalizers, even on an object already being deleted.
        let fins = object::finalizers(&obj);
        let wanted = propagation_finalizers(opts, &fins);
        let gc_changed = !(already && pending_grace > 0) && {
            let mut a = fins.clone();
            let mut b = wanted.clone();
            a.sort();
            b.sort();
            a != b
        };
        if gc_changed {
            let meta = object::meta_mut(&mut obj);
            if wanted.is_empty() {
                meta.remove("finalizers");
            } else {
                meta.insert("finalizers".into(), json!(wanted));
            }
        }
        let pending =
            !object::finalizers(&obj).is_empty() || grace > 0 || strategy.deletion_held(&obj);
        if pending {
            strategy.prepare_for_delete(&mut obj);
            let deadline = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(grace))
                .unwrap_or_else(|_| jiff::Timestamp::now());
            let new_ts = object::timestamp(deadline);
            let earlier = object::meta_str(&obj, "deletionTimestamp")
                .parse::<jiff::Timestamp>()
                .map(|t| t > deadline)
                .unwrap_or(true);
            if already && !earlier && !gc_changed {
                return Ok(Deleted::Pending(obj));
            }
            if !already || earlier {
                let meta = object::meta_mut(&mut obj);
                meta.insert("deletionTimestamp".into(), json!(new_ts));
                meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if !already {
                strategy.mark_deleting(&mut obj);
            }
            if dry_run {
                return Ok(Deleted::Pending(obj));
            }
            match storage.put_if(key, &obj, cur.mod_revision).await? {
                WriteOutcome::Done(rev) => {
                    object::set_resource_version(&mut obj, rev);
                    return Ok(Deleted::Pending(obj));
                }
                WriteOutcome::Lost(now) => {
                    current = now;
                    continue;
                }
            }
        }
        if dry_run {
            return Ok(Deleted::Gone(cur.object));
        }
        let release = strategy.claims(&cur.object);
        match storage.delete_if(key, cur.mod_revision, &release).await? {
            WriteOutcome::Done(_) => return Ok(Deleted::Gone(cur.object)),
            WriteOutcome::Lost(now) => current = now,
        }
    }
    Err(ApiError::Conflict {
        target,
        detail: "the object kept changing while it was being deleted; try again".into(),
    })
}

/// DELETE of one object.
pub async fn delete(call: Call) -> Result<Response, ApiError> {
    let opts = options(&call)?;
    let dry_run = call.params.dry_run()? || !opts.dry_run.is_empty();
    let def = &call.route.def;
    if let Some(reason) = strategy::of(def).delete_forbidden(call.name()) {
        let target = crate::status::Target::new(&def.group, &def.plural, call.name());
        return Err(ApiError::Forbidden {
            message: format!(
                "{} \"{}\" is forbidden: {reason}",
                target.qualified(),
                call.name()
            ),
            target,
        });
    }
    match delete_one(&call, &call.key(), call.name(), &opts, dry_run).await? {
        Deleted::Pending(obj) => {
            let obj = super::versions::served_one(&call.state, def, obj).await?;
            let mut r = respond_object(&call, obj)?;
            // Upstream answers 202 for a delete that waits on its dependents only when asked with the
            // legacy orphanDependents=false (older clients expect 200 otherwise).
            if opts.orphan_dependents == Some(false) {
                *r.status_mut() = StatusCode::ACCEPTED;
            }
            Ok(r)
        }
        Deleted::Gone(obj) => {
            if strategy::of(def).returns_deleted_object() {
                let obj = super::versions::served_one(&call.state, def, obj).await?;
                return respond_object(&call, obj);
            }
            Ok(respond(
                StatusCode::OK,
                &delete_success(&def.group, &def.plural, call.name(), object::uid(&obj)),
            ))
        }
    }
}

/// DELETE of a collection: every object the selectors match; answers the list of what was deleted.
pub async fn delete_collection(call: Call) -> Result<Response, ApiError> {
    let opts = options(&call)?;
    let dry_run = call.params.dry_run()? || !opts.dry_run.is_empty();
    let def = &call.route.def;
    let listed = list_objects(&call).await?;
    let mut items = Vec::new();
    for st in listed.items {
        let ns = object::namespace(&st.object).to_string();
        let name = object::name(&st.object).to_string();
        let key = def.key((!ns.is_empty()).then_some(ns.as_str()), &name);
        match delete_one(&call, &key, &name, &opts, dry_run).await {
            Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(o)) => {
                items.push(list_item(
                    super::versions::served_one(&call.state, def, o).await?,
                ));
            }
            Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let list = json!({
        "kind": def.list_kind(),
        "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": call.state.storage.revision().to_string()},
        "items": items,
    });
    Ok(respond(StatusCode::OK, &list))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(policy: Option<&str>, orphan: Option<bool>) -> DeleteOptions {
        DeleteOptions {
            propagation_policy: policy.map(str::to_string),
            orphan_dependents: orphan,
            ..DeleteOptions::default()
        }
    }

    fn fins(list: &[&str]) -> Vec<String> {
        list.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn the_policy_sets_the_collector_finalizers_next_to_the_others() {
        let none = fins(&[]);
        assert!(propagation_finalizers(&opts(None, None), &none).is_empty());
        assert!(propagation_finalizers(&opts(Some("Background"), None), &none).is_empty());
        assert_eq!(
            propagation_finalizers(&opts(Some("Foreground"), None), &fins(&["a"])),
            fins(&["a", FOREGROUND])
        );
        assert_eq!(
            propagation_finalizers(&opts(Some("Orphan"), None), &fins(&["a", FOREGROUND])),
            fins(&["a", ORPHAN])
        );
        assert_eq!(
            propagation_finalizers(&opts(None, Some(true)), &none),
            fins(&[ORPHAN])
        );
        // orphanDependents=false is neither policy; with no option the finalizer already there stays.
        assert!(propagation_finalizers(&opts(None, Some(false)), &fins(&[ORPHAN])).is_empty());
        assert_eq!(
            propagation_finalizers(&opts(None, None), &fins(&[FOREGROUND])),
            fins(&[FOREGROUND])
        );
        assert_eq!(
            propagation_finalizers(&opts(Some("Background"), None), &fins(&[ORPHAN, "a"])),
            fins(&["a"])
        );
    }
}
