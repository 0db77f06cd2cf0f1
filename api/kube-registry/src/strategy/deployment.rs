//! Deployments (upstream's `pkg/registry/apps/deployment`): replica, rollout-strategy and pod template
//! defaults; a selector that matches the template and never changes. Status and generation follow the
//! default rules (a spec change bumps the generation; only `/status` writes the status).

use serde_json::{json, Value};

use super::{workload, Strategy};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{obj_mut, set_default, template};

pub(super) struct Deployment;

impl Strategy for Deployment {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
            if let Some(s) = strategy.as_object_mut() {
                set_default(s, "type", json!("RollingUpdate"));
                if s.get("type") == Some(&json!("RollingUpdate")) {
                    let ru = s.entry("rollingUpdate").or_insert_with(|| json!({}));
                    if let Some(ru) = ru.as_object_mut() {
                        set_default(ru, "maxUnavailable", json!("25%"));
                        set_default(ru, "maxSurge", json!("25%"));
                    }
                }
            }
        }
        template(obj, &["spec", "template"], "Always");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        workload::validate(obj, true)
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        workload::validate_update(old, new)
    }
}
