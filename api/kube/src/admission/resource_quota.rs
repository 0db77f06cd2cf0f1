//! The ResourceQuota admission plugin: a write that consumes what a quota of its namespace limits is
//! charged to that quota's `status.used` before it is stored, and refused (403, upstream's wording) when
//! the charge would pass `status.hard`. The charge is a compare-and-swap on the quota, so two members
//! admitting at once cannot both take the last unit; the resourcequota controller later recounts
//! `used` from what is really stored (a charged write that then failed is given back that way).

use keel_client_kit::quota::{self, list};
use serde_json::Value;

use crate::object;
use crate::resource::{self, ResourceDef};
use crate::status::{ApiError, Target};
use crate::storage::{prefix_end, Storage, Stored, WriteOutcome};

/// How often a charge is retried after another write changed the quota first.
const RETRIES: usize = 8;

/// The write being admitted.
pub enum Operation<'a> {
    /// A create.
    Create,
    /// An update of the object itself, with the stored object.
    Update(&'a Value),
}

/// Whether upstream's evaluator of this kind looks at the operation at all.
fn handles(def: &ResourceDef, op: &Operation<'_>, obj: &Value) -> bool {
    match op {
        Operation::Create => true,
        Operation::Update(old) => match (def.group.as_ref(), def.plural.as_ref()) {
            // A pod's usage changes on update only when its terminating scope does.
            ("", "pods") => quota::scope::terminating(old) != quota::scope::terminating(obj),
            ("", "services") => true,
            // A claim grows (a resize), or its allocation changes.
            ("", "persistentvolumeclaims") => true,
            _ => false,
        },
    }
}

/// Charges `obj` to the quotas of its namespace that count it; `name` names it in a refusal.
pub async fn admit(
    storage: &Storage,
    def: &ResourceDef,
    op: Operation<'_>,
    name: &str,
    obj: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    if !def.namespaced || !handles(def, &op, obj) {
        return Ok(());
    }
    let Some(quotas_def) = resource::find("", "v1", "resourcequotas") else {
        return Ok(());
    };
    let ns = object::namespace(obj);
    let (group, plural) = (def.group.as_ref(), def.plural.as_ref());
    let now = jiff::Timestamp::now().as_second();
    let forbidden = |why: String| ApiError::Forbidden {
        target: Target::new(group, plural, name),
        message: format!("{} {name:?} is forbidden: {why}", def.qualified()),
    };
    let mut delta = quota::usage::of(group, plural, obj, now);
    if let Operation::Update(old) = op {
        delta = list::subtract(&delta, &quota::usage::of(group, plural, old, now));
    }
    if list::remove_zeros(&delta).is_empty() {
        return Ok(());
    }
    let prefix = quotas_def.ns_prefix(ns);
    for _ in 0..RETRIES {
        let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
        let mut charged: Vec<(String, Stored)> = Vec::new();
        for (key, stored) in page.items {
            let q = &stored.object;
            if !quota::matches(q, group, plural, obj) {
                continue;
            }
            let qname = object::name(q).to_string();
            let hard = quota::hard(q);
            let used = quota::used(q);
            let tracked = quota::matching_resources(group, plural, hard.keys());
            quota::constraints(group, plural, &tracked, obj)
                .map_err(|e| forbidden(format!("failed quota: {qname}: {e}")))?;
            if tracked.iter().any(|r| !used.contains_key(r)) {
                return Err(forbidden(format!(
                    "status unknown for quota: {qname}, resources: {}",
                    tracked.join(",")
                )));
            }
            let requested = list::mask(&delta, hard.keys());
            let new_usage = list::add(&used, &requested);
            let masked = list::mask(&new_usage, requested.keys());
            let (allowed, exceeded) = list::less_than_or_equal(&masked, &hard);
            if !allowed {
                return Err(forbidden(format!(
                    "exceeded quota: {qname}, requested: {}, used: {}, limited: {}",
                    list::pretty(&list::mask(&requested, &exceeded)),
                    list::pretty(&list::mask(&used, &exceeded)),
                    list::pretty(&list::mask(&hard, &exceeded)),
                )));
            }
            if list::equals(&new_usage, &used) {
                continue;
            }
            let mut updated = stored;
            if let Some(status) = updated
                .object
                .get_mut("status")
                .and_then(Value::as_object_mut)
            {
                status.insert("used".into(), list::to_value(&new_usage));
            }
            charged.push((String::from_utf8_lossy(&key).into_owned(), updated));
        }
        if dry_run || charged.is_empty() {
            return Ok(());
        }
        let mut lost = false;
        for (key, q) in &charged {
            match storage.put_if(key, &q.object, q.mod_revision).await? {
                WriteOutcome::Done(_) => {}
                WriteOutcome::Lost(_) => {
                    lost = true;
                    break;
                }
            }
        }
        // A quota charged before the one that changed keeps its charge: the controller's recount gives it
        // back, as upstream's does for writes that fail after admission.
        if !lost {
            return Ok(());
        }
    }
    Err(ApiError::Conflict {
        target: Target::new("", "resourcequotas", ""),
        detail: "the quota changed too often while this request was charged to it; try again"
            .into(),
    })
}
