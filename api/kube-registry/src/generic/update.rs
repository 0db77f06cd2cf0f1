//! Update: the stored object read, the client's change applied to it, then defaults, mutating admission,
//! field ownership, allocation, validation (the object's or its subresource's), the completion step,
//! validating admission and a Txn on the mod revision read; a lost race reads again and retries unless
//! the client pinned a resourceVersion.

use serde_json::Value;

use super::{conflict, Admitted, Operation, Tracking, Write, RETRIES, SERVER_META};
use crate::alloc::Reallocation;
use crate::apply::managed;
use crate::apply::shape::Shape;
use crate::convert::storage_def;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Cause, Target};
use crate::storage::{Stored, WriteOutcome};
use crate::strategy::{self, Strategy};
use crate::validation::validate;

/// What an update did.
pub enum Updated {
    /// Stored (or unchanged) object, RV set.
    Object(Value),
    /// The last finalizer of a deleting object was removed: the object is gone.
    Deleted(Value),
}

/// Whether two objects are the same but for `metadata.resourceVersion` (compared in place: an update asks
/// twice, and cloning both objects to strip the field was a measurable share of a status PATCH).
fn same(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| match b.get(k) {
            Some(w) if k == "metadata" => same_metadata(v, w),
            Some(w) => v == w,
            None => false,
        })
}

/// Two `metadata` values equal but for `resourceVersion`.
fn same_metadata(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let counted = |m: &serde_json::Map<String, Value>| {
        m.len() - usize::from(m.contains_key("resourceVersion"))
    };
    counted(a) == counted(b)
        && a.iter()
            .filter(|(k, _)| *k != "resourceVersion")
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Builds the object an update stores from the stored one and the client's: a subresource's rules take
/// what it owns from the client; an update of the object itself keeps the server-owned metadata, then
/// follows the kind's rules (status kept, generation bumped).
fn merge_update(
    strategy: &dyn Strategy,
    def: &ResourceDef,
    sub: Option<&str>,
    old: &Value,
    mut new: Value,
) -> Value {
    if let Some(rules) = sub.and_then(|s| strategy.subresource(s)) {
        return rules.prepare_for_update(def, old, new);
    }
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let kept = |f: &str| old_meta.and_then(|m| m.get(f));
    let meta = object::meta_mut(&mut new);
    for f in SERVER_META {
        meta.remove(*f);
        if let Some(v) = kept(f) {
            meta.insert((*f).to_string(), v.clone());
        }
    }
    if !meta.contains_key("managedFields") {
        if let Some(mf) = kept("managedFields") {
            meta.insert("managedFields".into(), mf.clone());
        }
    }
    strategy.prepare_for_update(def, old, &mut new);
    new
}

/// Applies `change` to the current object and writes it, retrying lost races unless the client pinned a
/// resourceVersion. `change` gets the stored object and returns the client's new version of it with the
/// resourceVersion it pinned, if any. Returns what happened and the warnings validating admission raised.
pub async fn update<F>(
    w: &Write<'_>,
    tracking: Tracking,
    mut change: F,
) -> Result<(Updated, Vec<String>), ApiError>
where
    F: FnMut(&Stored) -> Result<(Value, Option<String>), ApiError>,
{
    let def = &storage_def(w.def);
    let strategy = strategy::of(def);
    let shape = Shape::of_kind(&def.api_version(), &def.kind);
    let key = w.key();
    let sub = w.subresource;
    let sub_rules = sub.and_then(|s| strategy.subresource(s));
    let mut warnings: Vec<String> = Vec::new();
    let mut current = w.storage.get(&key, true).await?;
    for _ in 0..RETRIES {
        let Some(cur) = current.take() else {
            return Err(ApiError::NotFound(w.target()));
        };
        let (new, client_rv) = change(&cur)?;
        if let Some(rv) = &client_rv {
            if rv.parse::<i64>().ok() != Some(cur.mod_revision) {
                return Err(conflict(w.target()));
            }
        }
        let applied_fields = match tracking {
            Tracking::Applied => object::path(&new, "metadata.managedFields").cloned(),
            Tracking::Update(_) => None,
        };
        let mut new = merge_update(strategy, def, sub, &cur.object, new);
        if sub.is_none() {
            strategy.set_defaults(def, &mut new);
        }
        // Mutating plugins run before the change is known; none of them looks at `changed`.
        let admitted = Admitted {
            def,
            requested: w.def,
            namespace: w.namespace,
            subresource: sub,
            op: Operation::Update {
                old: &cur.object,
                changed: true,
            },
            name: w.name,
            dry_run: w.dry_run,
        };
        w.admission.mutate(&admitted, &mut new).await?;
        match &tracking {
            Tracking::Update(o) => {
                managed::record_update(&cur.object, &mut new, shape, o, def.status)
            }
            Tracking::Applied => {
                let meta = object::meta_mut(&mut new);
                match applied_fields {
                    Some(mf) => meta.insert("managedFields".into(), mf),
                    None => meta.remove("managedFields"),
                };
            }
        }
        // Allocations first, as upstream's BeginUpdate: validation then sees the values they fill in
        // and the fields they clear. Nothing is claimed until the Txn below writes the object.
        let realloc = match sub {
            None => {
                strategy
                    .allocate_update(w.storage, def, &cur.object, &mut new)
                    .await?
            }
            Some(_) => Reallocation::default(),
        };
        let causes = match sub_rules {
            Some(rules) => rules.validate_update(def, &cur.object, &new),
            None => strategy::validate_update(def, &cur.object, &new),
        };
        validate::invalid(w.def, w.name, causes)?;
        w.admission.complete(&admitted, &mut new).await?;
        let admitted = Admitted {
            op: Operation::Update {
                old: &cur.object,
                changed: !same(&new, &cur.object),
            },
            ..admitted
        };
        for warning in w.admission.validate(&admitted, &new).await? {
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
        }
        if object::is_deleting(&cur.object) {
            let added = object::finalizers(&new)
                .into_iter()
                .any(|f| !object::finalizers(&cur.object).contains(&f));
            if added {
                return Err(ApiError::Invalid {
                    target: Target::new(&w.def.group, &w.def.kind, w.name),
                    causes: vec![Cause::forbidden(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    )],
                });
            }
        }
        strategy.canonicalize(&mut new);
        crate::encode::as_stored(&def.api_version(), &def.kind, &mut new);
        if same(&new, &cur.object) {
            return Ok((Updated::Object(cur.object), warnings));
        }
        if w.dry_run {
            return Ok((Updated::Object(new), warnings));
        }
        // As upstream's ShouldDeleteDuringUpdate, an update removes the object only once its grace
        // period is over: a pod in graceful deletion takes its agent's final status and stays until the
        // agent deletes it.
        let grace_over = object::path(&cur.object, "metadata.deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(0);
        if object::is_deleting(&new)
            && grace_over
            && object::finalizers(&new).is_empty()
            && !strategy.kept_after_finalizers(&new)
        {
            // What the stored object holds is what goes; the update's own allocations are never made.
            let release = strategy.claims(&cur.object);
            match w
                .storage
                .delete_if(&key, cur.mod_revision, &release)
                .await?
            {
                WriteOutcome::Done(_) => return Ok((Updated::Deleted(new), warnings)),
                WriteOutcome::Lost(now) => {
                    if client_rv.is_some() {
                        return Err(conflict(w.target()));
                    }
                    current = now;
                    continue;
                }
            }
        }
        let lease = w.ttl_lease(&def.storage).await?;
        match w
            .storage
            .update_claiming(
                &key,
                &new,
                cur.mod_revision,
                &realloc.take,
                &realloc.release,
                lease,
            )
            .await?
        {
            WriteOutcome::Done(rev) => {
                object::set_resource_version(&mut new, rev);
                return Ok((Updated::Object(new), warnings));
            }
            WriteOutcome::Lost(now) => {
                // The object unchanged means a claim was taken by another write meanwhile: allocate
                // again even for a client that pinned the resourceVersion, which is still current.
                let claim_lost = now
                    .as_ref()
                    .is_some_and(|n| n.mod_revision == cur.mod_revision);
                if client_rv.is_some() && !claim_lost {
                    return Err(conflict(w.target()));
                }
                current = now;
            }
        }
    }
    Err(conflict(w.target()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;
    use serde_json::json;

    #[test]
    fn same_ignores_only_the_resource_version() {
        let a = json!({"metadata": {"name": "n", "resourceVersion": "5"}, "data": {"k": "v"}});
        assert!(same(
            &a,
            &json!({"metadata": {"name": "n", "resourceVersion": "9"}, "data": {"k": "v"}})
        ));
        assert!(same(
            &a,
            &json!({"metadata": {"name": "n"}, "data": {"k": "v"}})
        ));
        assert!(!same(
            &a,
            &json!({"metadata": {"name": "n", "resourceVersion": "5"}, "data": {"k": "w"}})
        ));
        assert!(!same(
            &a,
            &json!({"metadata": {"name": "m", "resourceVersion": "5"}, "data": {"k": "v"}})
        ));
        assert!(!same(
            &a,
            &json!({"metadata": {"name": "n", "uid": "u"}, "data": {"k": "v"}})
        ));
        assert!(!same(&a, &json!({"metadata": {"name": "n"}})));
        assert!(!same(
            &json!({"metadata": {"name": "n", "uid": "u"}}),
            &json!({"metadata": {"name": "n", "resourceVersion": "1"}})
        ));
    }

    #[test]
    fn main_resource_update_keeps_status_and_bumps_generation() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let old = json!({"metadata": {"name": "d", "uid": "u1", "generation": 1}, "spec": {"replicas": 1},
                         "status": {"replicas": 1}});
        let new = json!({"metadata": {"name": "d", "uid": "evil"}, "spec": {"replicas": 2}, "status": {"replicas": 9}});
        let out = merge_update(strategy::of(def), def, None, &old, new);
        assert_eq!(out["metadata"]["uid"], "u1");
        assert_eq!(out["metadata"]["generation"], 2);
        assert_eq!(out["status"]["replicas"], 1);
        let st = merge_update(
            strategy::of(def),
            def,
            Some("status"),
            &old,
            json!({"spec": {"replicas": 5}, "status": {"replicas": 3}}),
        );
        assert_eq!(st["spec"]["replicas"], 1);
        assert_eq!(st["status"]["replicas"], 3);
    }
}
