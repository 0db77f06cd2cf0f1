//! Jobs (upstream's `pkg/registry/batch/job`): completions, parallelism, back-off and pod template defaults
//! (restart policy `Never`); on create a generated selector and matching template labels unless
//! `spec.manualSelector`; the selector and completions never change.

use serde_json::{json, Value};

use super::{set_status, start_generation, Strategy};
use crate::admission::defaults::{job_spec, obj_mut, template};
use crate::admission::validate::{check_selector_template, immutable};
use crate::object::{self, path};
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

    /// As upstream: the status a client sent is dropped (the job controller owns it), then the selector.
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        set_status(obj, json!({}));
        job_selector(obj);
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

/// Jobs get a generated selector and matching template labels (`controller-uid`, `job-name`).
fn job_selector(obj: &mut Value) {
    let uid = object::uid(obj).to_string();
    let name = object::name(obj).to_string();
    let manual = object::path(obj, "spec.manualSelector") == Some(&json!(true));
    if manual {
        return;
    }
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
        "controller-uid": uid, "job-name": name,
    });
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        let tmpl = spec.entry("template").or_insert_with(|| json!({}));
        let tm = object::meta_mut(tmpl);
        let l = tm.entry("labels").or_insert_with(|| json!({}));
        if let (Some(l), Some(add)) = (l.as_object_mut(), labels.as_object()) {
            for (k, v) in add {
                l.insert(k.clone(), v.clone());
            }
        }
    }
}
