//! DaemonSets (upstream's `pkg/registry/apps/daemonset`): history and update strategy defaults; a selector
//! that matches the template and never changes; the template generation, which apps/v1 carries in the
//! `deprecated.daemonset.template.generation` annotation (1 on create, one more for each template change;
//! clients cannot set it).

use serde_json::{json, Value};

use super::{bump_generation, keep_status, start_generation, workload, Strategy};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{obj_mut, set_default, template};

pub(super) struct DaemonSet;

/// The annotation apps/v1 keeps the template generation in.
const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

fn template_generation(obj: &Value) -> i64 {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(TEMPLATE_GENERATION))
        .and_then(Value::as_str)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

fn set_template_generation(obj: &mut Value, generation: i64) {
    if let Some(meta) = obj_mut(obj, "metadata") {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if !annotations.is_object() {
            *annotations = json!({});
        }
        if let Some(a) = annotations.as_object_mut() {
            a.insert(TEMPLATE_GENERATION.into(), json!(generation.to_string()));
        }
    }
}

impl Strategy for DaemonSet {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            );
        }
        template(obj, &["spec", "template"], "Always");
    }

    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        super::set_status(obj, json!({}));
        set_template_generation(obj, 1);
    }

    fn prepare_for_update(&self, def: &ResourceDef, old: &Value, new: &mut Value) {
        keep_status(old, new);
        let mut generation = template_generation(old);
        if old.pointer("/spec/template") != new.pointer("/spec/template") {
            generation += 1;
        }
        if def.tracks_generation && self.generation_changes(def, old, new) {
            bump_generation(old, new);
        }
        set_template_generation(new, generation);
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        workload::validate(obj, false)
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        workload::validate_update(old, new)
    }
}
