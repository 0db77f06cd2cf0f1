//! Namespaces (upstream's `pkg/registry/core/namespace`): RFC 1123 label names, the `kubernetes`
//! finalizer and the `kubernetes.io/metadata.name` label by default.

use serde_json::{json, Value};

use super::Strategy;
use crate::admission::defaults::{obj_mut, set_default};
use crate::admission::names::NameRule;
use crate::object;
use crate::resource::ResourceDef;

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
}
