//! DefaultStorageClass: a claim created without a class (no `spec.storageClassName`, not even `""`,
//! and no beta class annotation) gets the StorageClass marked
//! `storageclass.kubernetes.io/is-default-class: "true"` (or the beta form); when several are marked,
//! the newest one (then the first by name), as upstream chooses since 1.26.

use serde_json::{json, Value};

use super::default_ingress_class::{all_of, newest_marked, set_spec_field};
use crate::object;
use crate::status::ApiError;
use crate::storage::Storage;
use crate::table::storage::{is_default_class, BETA_CLASS};

/// The default StorageClass's name among `classes`, if one is marked.
fn default_of(classes: &[Value]) -> Option<&str> {
    newest_marked(classes, is_default_class)
}

/// Sets the default class on a new claim that names none.
pub async fn admit_create(storage: &Storage, claim: &mut Value) -> Result<(), ApiError> {
    let named = object::path(claim, "spec.storageClassName").is_some_and(|v| !v.is_null());
    let legacy = object::path(claim, "metadata.annotations")
        .and_then(|a| a.get(BETA_CLASS))
        .is_some();
    if named || legacy {
        return Ok(());
    }
    let classes = all_of(storage, "storage.k8s.io", "storageclasses")?;
    set_spec_field(claim, "storageClassName", default_of(&classes));
    Ok(())
}

/// PersistentVolumeClaimResize: a larger storage request is refused unless the claim is Bound and
/// its class (the same before and after) sets `allowVolumeExpansion`.
pub async fn admit_resize(
    storage: &Storage,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let request = |o: &Value| {
        object::path(o, "spec.resources.requests.storage")
            .and_then(Value::as_str)
            .and_then(keel_client_kit::quantity::Quantity::parse)
            .map(|q| q.milli())
    };
    let (Some(before), Some(after)) = (request(old), request(new)) else {
        return Ok(());
    };
    if after <= before {
        return Ok(());
    }
    let refuse = |why: &str| {
        let target = crate::status::Target::new("", "persistentvolumeclaims", name);
        ApiError::Forbidden {
            message: format!("{} {name:?} is forbidden: {why}", target.qualified()),
            target,
        }
    };
    if object::path(old, "status.phase").and_then(Value::as_str) != Some("Bound") {
        return Err(refuse(
            "Only bound persistent volume claims can be expanded",
        ));
    }
    let class_of = |o: &Value| {
        object::path(o, "metadata.annotations")
            .and_then(|a| a.get(BETA_CLASS))
            .or_else(|| object::path(o, "spec.storageClassName"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (a, b) = (class_of(old), class_of(new));
    let class = if a.is_empty() || a != b {
        None
    } else {
        storage
            .get(&format!("/registry/storageclasses/{a}"), false)
            .await?
    };
    let allows = class
        .is_some_and(|sc| object::path(&sc.object, "allowVolumeExpansion") == Some(&json!(true)));
    if !allows {
        return Err(refuse(
            "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
        ));
    }
    Ok(())
}

/// StorageObjectInUseProtection: a new claim or volume carries the finalizer its protection controller
/// removes once nothing uses it.
pub fn protect(claim_or_volume: &mut Value, finalizer: &str) {
    let Some(meta) = claim_or_volume
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(list) = list.as_array_mut() {
        if !list.iter().any(|f| f.as_str() == Some(finalizer)) {
            list.push(json!(finalizer));
        }
    } else {
        *list = json!([finalizer]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::storage::DEFAULT_CLASS;

    fn class(name: &str, created: &str, default: bool) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if default {
            c["metadata"]["annotations"] = json!({DEFAULT_CLASS: "true"});
        }
        c
    }

    #[test]
    fn the_newest_marked_class_is_the_default() {
        let classes = [
            class("old", "2026-01-01T00:00:00Z", true),
            class("new-b", "2026-02-01T00:00:00Z", true),
            class("new-a", "2026-02-01T00:00:00Z", true),
            class("newest-unmarked", "2026-03-01T00:00:00Z", false),
        ];
        assert_eq!(default_of(&classes), Some("new-a"));
        assert_eq!(default_of(&classes[3..]), None);
    }

    #[test]
    fn protection_adds_its_finalizer_once() {
        let mut c = json!({"metadata": {"name": "x", "finalizers": ["a"]}});
        protect(&mut c, "kubernetes.io/pvc-protection");
        protect(&mut c, "kubernetes.io/pvc-protection");
        assert_eq!(
            c["metadata"]["finalizers"],
            json!(["a", "kubernetes.io/pvc-protection"])
        );
    }
}
