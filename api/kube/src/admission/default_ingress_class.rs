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

/// The default IngressClass's name among `classes`, if one is marked.
fn default_of(classes: &[Value]) -> Option<&str> {
    classes
        .iter()
        .filter(|c| {
            object::path(c, "metadata.annotations")
                .and_then(|a| a.get(DEFAULT_CLASS))
                .and_then(Value::as_str)
                == Some("true")
        })
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

/// Sets the default class on a new Ingress that names none.
pub async fn admit_create(storage: &Storage, ingress: &mut Value) -> Result<(), ApiError> {
    let named = object::path(ingress, "spec.ingressClassName").is_some_and(|v| !v.is_null());
    let legacy = object::path(ingress, "metadata.annotations")
        .and_then(|a| a.get(LEGACY_CLASS))
        .is_some();
    if named || legacy {
        return Ok(());
    }
    let Some(def) = resource::find("networking.k8s.io", "v1", "ingressclasses") else {
        return Ok(());
    };
    let prefix = def.prefix();
    let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    let classes: Vec<Value> = page.items.into_iter().map(|(_, s)| s.object).collect();
    if let Some(name) = default_of(&classes) {
        if let Some(spec) = ingress.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("ingressClassName".into(), json!(name));
        } else if let Some(o) = ingress.as_object_mut() {
            o.insert("spec".into(), json!({"ingressClassName": name}));
        }
    }
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
