//! Namespaces (upstream's `pkg/registry/core/namespace`): RFC 1123 label names, the `kubernetes`
//! finalizer and the `kubernetes.io/metadata.name` label by default, `Active` on create; a delete holds
//! the namespace while `spec.finalizers` is not empty and shows it `Terminating`; `/finalize` writes
//! `spec.finalizers` only.

use serde_json::{json, Value};

use super::{set_status, start_generation, status_only, Strategy, Subresource};
use crate::object;
use crate::resource::ResourceDef;
use crate::validation::defaults::{obj_mut, set_default};
use crate::validation::names::NameRule;

pub(super) struct Namespace;

impl Strategy for Namespace {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "finalizers", json!(["kubernetes"]));
        }
        let name = object::name(obj).to_string();
        let meta = object::meta_mut(obj);
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }

    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        set_status(obj, json!({"phase": "Active"}));
    }

    fn subresource(&self, name: &str) -> Option<&'static dyn Subresource> {
        match name {
            "finalize" => Some(&Finalize),
            _ => status_only(name),
        }
    }

    fn deletion_held(&self, obj: &Value) -> bool {
        object::path(obj, "spec.finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    }

    fn kept_after_finalizers(&self, obj: &Value) -> bool {
        self.deletion_held(obj)
    }

    fn mark_deleting(&self, obj: &mut Value) {
        set_status(obj, json!({"phase": "Terminating"}));
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

/// `/finalize`: the stored namespace with the client's `spec.finalizers`.
struct Finalize;

impl Subresource for Finalize {
    fn prepare_for_update(&self, _def: &ResourceDef, old: &Value, new: Value) -> Value {
        let mut out = old.clone();
        let fins = object::path(&new, "spec.finalizers")
            .cloned()
            .unwrap_or(json!([]));
        if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("finalizers".into(), fins);
        } else if let Some(m) = out.as_object_mut() {
            m.insert("spec".into(), json!({"finalizers": fins}));
        }
        out
    }
}
