//! Jobs (upstream's `pkg/registry/batch/job`): completions, parallelism, back-off and pod template defaults
//! (restart policy `Never`); the selector and completions never change.

use serde_json::{json, Value};

use super::Strategy;
use crate::admission::defaults::{job_spec, obj_mut, template};
use crate::admission::validate::{check_selector_template, immutable};
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct Job;

impl Strategy for Job {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            job_spec(spec);
        }
        template(obj, &["spec", "template"], "Never");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        check_selector_template(obj, &mut causes, "spec.template", false);
        let rp = path(obj, "spec.template.spec.restartPolicy").and_then(Value::as_str);
        if let Some(rp) = rp {
            if !["OnFailure", "Never"].contains(&rp) {
                causes.push(Cause::not_supported(
                    "spec.template.spec.restartPolicy",
                    &json!(rp),
                    &["OnFailure", "Never"],
                ));
            }
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        immutable(old, new, "spec.selector", &mut causes);
        immutable(old, new, "spec.completions", &mut causes);
        causes
    }
}
