//! ReplicationControllers (core/v1; upstream's `pkg/registry/core/replicationcontroller`): the older
//! ReplicaSet, whose selector is a plain label map. Upstream's defaulter fills an empty selector and
//! empty object labels from the template's labels; the selector may change on update.

use serde_json::{json, Value};

use super::{ScalePaths, SelectorForm, Strategy};
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{obj_mut, set_default, template};
use crate::validation::validate::{check_containers, check_replicas};

pub(super) struct ReplicationController;

/// A label map with at least one entry, if `v` is one.
fn non_empty_map(v: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
    v.and_then(Value::as_object).filter(|m| !m.is_empty())
}

impl Strategy for ReplicationController {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let labels = non_empty_map(path(obj, "spec.template.metadata.labels")).cloned();
        if let Some(labels) = labels {
            if non_empty_map(path(obj, "spec.selector")).is_none() {
                if let Some(spec) = obj_mut(obj, "spec") {
                    spec.insert("selector".into(), Value::Object(labels.clone()));
                }
            }
            if non_empty_map(path(obj, "metadata.labels")).is_none() {
                if let Some(meta) = obj_mut(obj, "metadata") {
                    meta.insert("labels".into(), Value::Object(labels));
                }
            }
        }
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "replicas", json!(1));
        }
        template(obj, &["spec", "template"], "Always");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        validate_spec(obj)
    }

    fn validate_update(&self, _def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        // Unlike apps/v1 ReplicaSets, a ReplicationController's selector may change.
        validate_spec(new)
    }

    fn scale_paths(&self, _def: &ResourceDef) -> ScalePaths {
        ScalePaths {
            spec: "spec.replicas".into(),
            status: "status.replicas".into(),
            selector: Some("spec.selector".into()),
            selector_form: SelectorForm::Map,
        }
    }
}

/// Upstream's ValidateReplicationControllerSpec: replicas and minReadySeconds not negative, a
/// non-empty selector that the template's labels satisfy, a template whose pods always restart.
fn validate_spec(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    check_replicas(obj, &mut causes);
    if let Some(m) = path(obj, "spec.minReadySeconds").and_then(Value::as_i64) {
        if m < 0 {
            causes.push(Cause::invalid(
                "spec.minReadySeconds",
                &json!(m),
                "must be greater than or equal to 0",
            ));
        }
    }
    let selector = non_empty_map(path(obj, "spec.selector"));
    if selector.is_none() {
        causes.push(Cause::required("spec.selector"));
    }
    let Some(tmpl) = path(obj, "spec.template").filter(|t| !t.is_null()) else {
        causes.push(Cause::required("spec.template"));
        return causes;
    };
    let labels = path(tmpl, "metadata.labels").and_then(Value::as_object);
    if let Some(sel) = selector {
        let matched = sel
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !matched {
            causes.push(Cause::invalid(
                "spec.template.metadata.labels",
                &json!(labels.map(|l| Value::Object(l.clone()).to_string())),
                "`selector` does not match template `labels`",
            ));
        }
    }
    match path(tmpl, "spec") {
        Some(spec) => {
            check_containers(spec, "spec.template.spec", &mut causes);
            let restart = spec
                .get("restartPolicy")
                .and_then(Value::as_str)
                .unwrap_or("Always");
            if restart != "Always" {
                causes.push(Cause::not_supported(
                    "spec.template.spec.restartPolicy",
                    &json!(restart),
                    &["Always"],
                ));
            }
        }
        None => causes.push(Cause::required("spec.template.spec.containers")),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn def() -> std::sync::Arc<ResourceDef> {
        resource::find("", "v1", "replicationcontrollers").expect("served")
    }

    #[test]
    fn selector_and_labels_default_from_the_template() {
        let mut rc = json!({"metadata": {"name": "web"}, "spec": {"template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        ReplicationController.set_defaults(&def(), &mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(rc["spec"]["replicas"], 1);
        assert!(ReplicationController.validate(&def(), &rc).is_empty());
    }

    #[test]
    fn a_selector_the_template_does_not_match_is_refused() {
        let rc = json!({"spec": {"replicas": -1, "selector": {"app": "db"}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "nginx"}]}}}});
        let fields: Vec<String> = ReplicationController
            .validate(&def(), &rc)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.replicas",
                "spec.template.metadata.labels",
                "spec.template.spec.restartPolicy"
            ]
        );
    }
}
