//! DefaultIngressClass: an Ingress created without a class (neither `spec.ingressClassName` nor the
//! legacy `kubernetes.io/ingress.class` annotation) gets the IngressClass marked
//! `ingressclass.kubernetes.io/is-default-class: "true"`; when several are marked, the newest one (then
//! the first by name), as upstream chooses.

use serde_json::{json, Value};

use crate::object;
use crate::resource;
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage};

/// The annotation that marks the default IngressClass.
pub const DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";
/// The annotation older Ingresses name their class with.
const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";

/// Whether an IngressClass is marked as the default.
fn marked(c: &Value) -> bool {
    object::path(c, "metadata.annotations")
        .and_then(|a| a.get(DEFAULT_CLASS))
        .and_then(Value::as_str)
        == Some("true")
}

/// The default IngressClass's name among `classes`, if one is marked.
fn default_of(classes: &[Value]) -> Option<&str> {
    newest_marked(classes, marked)
}

/// Among `classes`, the name of the newest one `marked` accepts (then the first by name), as upstream
/// picks a default class (IngressClass and StorageClass alike).
pub(crate) fn newest_marked(classes: &[Value], marked: impl Fn(&Value) -> bool) -> Option<&str> {
    classes
        .iter()
        .filter(|c| marked(c))
        .max_by(|a, b| {
            let created = |c: &Value| {
                object::path(c, "metadata.creationTimestamp")
                    .and_then(Value::as_str)
                    .and_then(object::parse_time)
            };
            // Newest wins; among equals, the first name (so the later name orders lower).
            created(a)
                .cmp(&created(b))
                .then_with(|| object::name(b).cmp(object::name(a)))
        })
        .map(object::name)
}

/// Sets `spec.<field>` to `value`, when there is one.
pub(crate) fn set_spec_field(obj: &mut Value, field: &str, value: Option<&str>) {
    let Some(v) = value else {
        return;
    };
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert(field.into(), json!(v));
    } else if let Some(o) = obj.as_object_mut() {
        o.insert("spec".into(), json!({ field: v }));
    }
}

/// Every stored object of a built-in resource (the classes a default is picked from).
pub(crate) fn all_of(storage: &Storage, group: &str, plural: &str) -> Result<Vec<Value>, ApiError> {
    let Some(def) = resource::find(group, "v1", plural) else {
        return Ok(Vec::new());
    };
    let prefix = def.prefix();
    let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    Ok(page.items.into_iter().map(|(_, s)| s.object).collect())
}

/// Sets the default class on a new Ingress that names none.
pub async fn admit_create(storage: &Storage, ingress: &mut Value) -> Result<(), ApiError> {
    let named = object::path(ingress, "spec.ingressClassName").is_some_and(|v| !v.is_null());
    let legacy = object::path(ingress, "metadata.annotations")
        .and_then(|a| a.get(LEGACY_CLASS))
        .is_some();
    if named || legacy {
        return Ok(());
    }
    let classes = all_of(storage, "networking.k8s.io", "ingressclasses")?;
    set_spec_field(ingress, "ingressClassName", default_of(&classes));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: bool) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if default {
            c["metadata"]["annotations"] = json!({DEFAULT_CLASS: "true"});
        }
        c
    }

    #[test]
    fn the_newest_marked_class_is_the_default() {
        assert_eq!(default_of(&[]), None);
        let a = class("a", "2026-01-01T00:00:00Z", true);
        let b = class("b", "2026-02-01T00:00:00Z", true);
        let c = class("c", "2026-03-01T00:00:00Z", false);
        assert_eq!(default_of(&[a.clone(), b.clone(), c.clone()]), Some("b"));
        assert_eq!(default_of(&[c]), None);
        let a2 = class("a2", "2026-02-01T00:00:00Z", true);
        assert_eq!(default_of(&[b, a2]), Some("a2"), "same age: the first name");
        assert_eq!(default_of(&[a]), Some("a"));
    }
}
