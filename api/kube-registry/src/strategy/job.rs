//! Jobs (upstream's `pkg/registry/batch/job`): completions, parallelism, back-off and pod template defaults
//! (restart policy `Never`); on create a generated selector and matching template labels unless
//! `spec.manualSelector`; the selector and completions never change.

use serde_json::{json, Value};

use super::{set_status, start_generation, Strategy};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{job_spec, obj_mut, template};
use crate::validation::validate::{check_selector_template, immutable};

pub(super) struct Job;

impl Strategy for Job {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            job_spec(spec);
        }
        template(obj, &["spec", "template"], "Never");
        labels_from_template(obj);
    }

    /// As upstream: the status a client sent is dropped (the job controller owns it), then the selector.
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        set_status(obj, json!({}));
        job_selector(obj);
        // Upstream defaults the stored Job again when it reads it back, so a Job created without
        // labels answers (and is read) with the generated template labels.
        labels_from_template(obj);
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

/// A Job without labels of its own takes its pod template's (SetDefaults_Job).
fn labels_from_template(obj: &mut Value) {
    let own = path(obj, "metadata.labels")
        .and_then(Value::as_object)
        .is_some_and(|l| !l.is_empty());
    if own {
        return;
    }
    if let Some(labels) = path(obj, "spec.template.metadata.labels")
        .filter(|l| l.is_object())
        .cloned()
    {
        object::meta_mut(obj).insert("labels".into(), labels);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn a_job_without_labels_takes_the_generated_template_labels() {
        let Some(def) = resource::find("batch", "v1", "jobs") else {
            panic!("jobs are served")
        };
        let mut j = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}], "restartPolicy": "Never"}}}});
        Job.set_defaults(&def, &mut j);
        assert_eq!(j["spec"]["manualSelector"], false);
        assert_eq!(j["metadata"].get("labels"), None);
        Job.prepare_for_create(&def, &mut j);
        let want = json!({"batch.kubernetes.io/controller-uid": "u1", "batch.kubernetes.io/job-name": "j",
                          "controller-uid": "u1", "job-name": "j"});
        assert_eq!(j["spec"]["template"]["metadata"]["labels"], want);
        assert_eq!(j["metadata"]["labels"], want);
    }
}
