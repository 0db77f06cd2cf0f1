//! Pod priority (upstream's `scheduling.k8s.io` PriorityClasses and the `Priority` admission plugin).
//!
//! - The built-in classes `system-node-critical` (2000001000) and `system-cluster-critical` (2000000000)
//!   are created by every member at start when missing ([`bootstrap`], upstream's post-start hook
//!   `scheduling/bootstrap-system-priority-classes`); `/readyz` waits for it. Names with the `system-`
//!   prefix are reserved for them and values above 1000000000 for them alone (the strategy in
//!   `strategy/priorityclass.rs`); a DELETE of one of them alone is refused, as upstream's registry does
//!   (a collection delete is not checked, as upstream's is not).
//! - Admission of a new pod ([`admit_create`]): `spec.priorityClassName` is resolved to `spec.priority`
//!   and `spec.preemptionPolicy` (403 for an unknown class); a pod without a class gets the `globalDefault`
//!   class's name, value and policy, or 0 and `PreemptLowerPriority`; a pod that sets either field to
//!   something else is refused. An update keeps what the stored pod has when the client leaves the fields
//!   out ([`admit_update`]); pod validation refuses any change of them.
//! - Admission of PriorityClasses ([`validate_write`]): at most one class with `globalDefault: true`.
//!
//! Classes are read from this member's store, as upstream's plugin reads its informer's cache; a class
//! name not found locally is read again linearizably, so a class created through another member a moment
//! ago is found. The critical classes may be used in every namespace: upstream restricts them only through
//! the ResourceQuota plugin's `limitedResources` configuration, which a default kube-apiserver does not set.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::{debug, info};

use crate::apply::managed::{self, Owner};
use crate::apply::shape::Shape;
use crate::object::{self, path};
use crate::resource::{self, ResourceDef};
use crate::status::{ApiError, Target};
use crate::storage::{prefix_end, Storage, WriteOutcome};
use crate::strategy::priorityclass::{SystemClass, PREEMPT_LOWER_PRIORITY, SYSTEM_CLASSES};
use std::sync::atomic::AtomicBool;

/// Upstream's name of the post-start hook that creates the built-in classes (in `/readyz?verbose`).
pub(crate) const HOOK: &str = "poststarthook/scheduling/bootstrap-system-priority-classes";

fn classes_def() -> Result<Arc<ResourceDef>, ApiError> {
    resource::find("scheduling.k8s.io", "v1", "priorityclasses")
        .ok_or_else(|| ApiError::Internal("priorityclasses are not served".into()))
}

fn text<'a>(obj: &'a Value, p: &str) -> &'a str {
    path(obj, p).and_then(Value::as_str).unwrap_or("")
}

fn value_of(pc: &Value) -> i64 {
    pc.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn is_global_default(pc: &Value) -> bool {
    pc.get("globalDefault").and_then(Value::as_bool) == Some(true)
}

/// upstream's admission.NewForbidden: `<resource> "<name>" is forbidden: <reason>`.
fn forbidden(group: &str, plural: &str, name: &str, reason: &str) -> ApiError {
    let target = Target::new(group, plural, name);
    ApiError::Forbidden {
        message: format!("{} \"{name}\" is forbidden: {reason}", target.qualified()),
        target,
    }
}

/// Every stored class, from this member's store.
fn all_classes(storage: &Storage) -> Result<Vec<Value>, ApiError> {
    let prefix = classes_def()?.prefix();
    let end = prefix_end(prefix.as_bytes());
    let page = storage.range(prefix.as_bytes(), &end, 0, 0)?;
    Ok(page.items.into_iter().map(|(_, s)| s.object).collect())
}

/// The global default class: the lowest value among those marked (two may exist after a race).
fn default_class(classes: Vec<Value>) -> Option<Value> {
    classes
        .into_iter()
        .filter(is_global_default)
        .min_by_key(value_of)
}

/// The class `name`: from this member's store, then linearizably when it is not there.
async fn find_class(storage: &Storage, name: &str) -> Result<Option<Value>, ApiError> {
    let key = classes_def()?.key(None, name);
    if let Some(st) = storage.get(&key, false).await? {
        return Ok(Some(st.object));
    }
    Ok(storage.get(&key, true).await?.map(|st| st.object))
}

/// The Priority plugin on a create (mutating; runs after defaulting, before validation). Only pods
/// change: their priority and preemption policy are resolved from their class. `name` is the name
/// errors carry (the `generateName` prefix when the server picks the name, as upstream's).
pub(crate) async fn admit_create(
    storage: &Storage,
    def: &ResourceDef,
    name: &str,
    obj: &mut Value,
) -> Result<(), ApiError> {
    if def.gk() != ("", "Pod") {
        return Ok(());
    }
    let class = text(obj, "spec.priorityClassName").to_string();
    let (class, priority, policy) = if class.is_empty() {
        match default_class(all_classes(storage)?) {
            Some(pc) => (
                object::name(&pc).to_string(),
                value_of(&pc),
                pc.get("preemptionPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            None => (String::new(), 0, Some(PREEMPT_LOWER_PRIORITY.to_string())),
        }
    } else {
        match find_class(storage, &class).await? {
            Some(pc) => (
                class,
                value_of(&pc),
                pc.get("preemptionPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            None => {
                return Err(forbidden(
                    "",
                    "pods",
                    name,
                    &format!("no PriorityClass with name {class} was found"),
                ))
            }
        }
    };
    let Some(spec) = crate::validation::defaults::obj_mut(obj, "spec") else {
        return Ok(());
    };
    if !class.is_empty() {
        spec.insert("priorityClassName".into(), json!(class));
    }
    // A pod may carry the value its class gives (a copy of another pod's spec), but no other.
    if let Some(sent) = spec.get("priority").filter(|v| !v.is_null()) {
        let sent = sent.as_i64().unwrap_or(0);
        if sent != priority {
            return Err(forbidden(
                "",
                "pods",
                name,
                &format!(
                    "the integer value of priority ({sent}) must not be provided in pod spec; \
                     priority admission controller computed {priority} from the given PriorityClass name"
                ),
            ));
        }
    }
    spec.insert("priority".into(), json!(priority));
    if let Some(policy) = policy {
        if let Some(sent) = spec.get("preemptionPolicy").filter(|v| !v.is_null()) {
            let sent = sent.as_str().unwrap_or("");
            if sent != policy {
                return Err(forbidden(
                    "",
                    "pods",
                    name,
                    &format!(
                        "the string value of PreemptionPolicy ({sent}) must not be provided in pod spec; \
                         priority admission controller computed {policy} from the given PriorityClass name"
                    ),
                ));
            }
        }
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}

/// The Priority plugin on an update of an object itself (mutating): a pod written without its priority
/// or preemption policy keeps the stored ones (pod validation then refuses any other change of them).
pub(crate) fn admit_update(def: &ResourceDef, old: &Value, new: &mut Value) {
    if def.gk() != ("", "Pod") {
        return;
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["priority", "preemptionPolicy"] {
        let unset = spec.get(field).is_none_or(Value::is_null);
        if let Some(v) = old
            .get("spec")
            .and_then(|s| s.get(field))
            .filter(|v| !v.is_null() && unset)
        {
            spec.insert(field.into(), v.clone());
        }
    }
}

/// The Priority plugin's validation of a PriorityClass create or update (after the kind's own
/// validation): a class may be marked `globalDefault` only while no other class is.
pub(crate) async fn validate_write(
    storage: &Storage,
    def: &ResourceDef,
    obj: &Value,
    update: bool,
) -> Result<(), ApiError> {
    if def.gk() != ("scheduling.k8s.io", "PriorityClass") || !is_global_default(obj) {
        return Ok(());
    }
    // Class writes are rare: read the current set rather than this member's possibly older view.
    storage.barrier().await?;
    let name = object::name(obj);
    if let Some(dpc) = default_class(all_classes(storage)?) {
        let other = object::name(&dpc);
        if !update || other != name {
            return Err(forbidden(
                &def.group,
                &def.plural,
                name,
                &format!("PriorityClass {other} is already marked as default. Only one default can exist"),
            ));
        }
    }
    Ok(())
}

/// A built-in class as the API would create it through the loopback client: defaulted, generation 1,
/// its fields owned by `kube-apiserver`.
pub(crate) fn system_class_object(c: &SystemClass) -> Value {
    let api_version = "scheduling.k8s.io/v1";
    let mut obj = json!({
        "apiVersion": api_version,
        "kind": "PriorityClass",
        "metadata": {
            "name": c.name,
            "uid": object::new_uid(),
            "creationTimestamp": object::now_rfc3339(),
            "generation": 1,
        },
        "value": c.value,
        "description": c.description,
        "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
    });
    let owner = Owner {
        manager: "kube-apiserver".into(),
        api_version: api_version.into(),
        subresource: String::new(),
    };
    managed::record_create(
        &mut obj,
        Shape::of_kind(api_version, "PriorityClass"),
        &owner,
        false,
    );
    obj
}

/// One pass of the bootstrap: creates each built-in class that does not exist (an existing one is left
/// as it is, as upstream leaves it).
pub(crate) async fn ensure_system_classes(storage: &Storage) -> Result<(), ApiError> {
    let def = classes_def()?;
    for c in SYSTEM_CLASSES {
        let key = def.key(None, c.name);
        if storage.get(&key, true).await?.is_some() {
            continue;
        }
        if let WriteOutcome::Done(_) = storage.put_if(&key, &system_class_object(c), 0).await? {
            info!(
                name = c.name,
                value = c.value,
                "created the built-in PriorityClass"
            );
        }
    }
    Ok(())
}

/// Runs [`ensure_system_classes`] until it succeeds (it needs a quorum), then marks the hook done for
/// `/readyz`. Every member runs it once at start, as every kube-apiserver runs its post-start hook.
pub(crate) async fn bootstrap(
    storage: Storage,
    ready: Arc<AtomicBool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut delay = Duration::from_millis(200);
    loop {
        match ensure_system_classes(&storage).await {
            Ok(()) => {
                ready.store(true, Ordering::Release);
                return;
            }
            Err(e) => debug!(error = %e, "creating the built-in PriorityClasses failed; retrying"),
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        // Short steps: `/readyz` waits for this, and a quorum usually appears within a second or two.
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_default_wins_a_race() {
        let pc = |n: &str, v: i64, d: bool| json!({"metadata": {"name": n}, "value": v, "globalDefault": d});
        let got = default_class(vec![pc("a", 10, true), pc("b", 5, true), pc("c", 1, false)]);
        assert_eq!(got.map(|p| object::name(&p).to_string()), Some("b".into()));
        assert!(default_class(vec![pc("c", 1, false)]).is_none());
    }

    #[test]
    fn updates_keep_the_stored_priority_when_left_out() {
        let def = resource::find("", "v1", "pods").expect("pods");
        let old = json!({"spec": {"priority": 7, "preemptionPolicy": "Never"}});
        let mut new = json!({"spec": {"containers": []}});
        admit_update(&def, &old, &mut new);
        assert_eq!(new["spec"]["priority"], 7);
        assert_eq!(new["spec"]["preemptionPolicy"], "Never");
        let mut changed = json!({"spec": {"priority": 9}});
        admit_update(&def, &old, &mut changed);
        assert_eq!(changed["spec"]["priority"], 9);
    }

    #[test]
    fn built_in_objects_are_defaulted_and_owned() {
        let o = system_class_object(&SYSTEM_CLASSES[1]);
        assert_eq!(o["value"], 2_000_000_000);
        assert_eq!(o["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(o["metadata"]["generation"], 1);
        assert_eq!(
            o["metadata"]["managedFields"][0]["manager"],
            "kube-apiserver"
        );
    }
}
