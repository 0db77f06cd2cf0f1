//! `node.k8s.io/v1` RuntimeClasses and core PodTemplates.
//!
//! A RuntimeClass names the CRI runtime handler pods of the class run with: a DNS label, fixed once
//! written. Its `overhead.podFixed` quantities are not negative and its `scheduling.nodeSelector` is a
//! label map. A PodTemplate is a pod template on its own, defaulted and checked as a workload's is.

use keel_client_kit::quantity::Quantity;
use serde_json::{json, Value};

use super::{str_at as s, Strategy};
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults;
use crate::validation::names::{self, NameRule};
use crate::validation::validate::{check_containers, immutable};

pub(super) struct RuntimeClass;
pub(super) struct PodTemplate;

impl Strategy for RuntimeClass {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        // Upstream checks an empty handler as a bad label, not a missing field.
        let h = s(obj, "handler").unwrap_or("");
        if let Err(e) = names::check(NameRule::Label, h) {
            causes.push(Cause::invalid("handler", &json!(h), &e));
        }
        if let Some(fixed) = path(obj, "overhead.podFixed").and_then(Value::as_object) {
            for (name, q) in fixed {
                let f = format!("overhead.podFixed[{name}]");
                match q.as_str().and_then(Quantity::parse) {
                    Some(v) if v.is_negative() => {
                        causes.push(Cause::invalid(&f, q, "must be greater than or equal to 0"))
                    }
                    Some(_) => {}
                    None => causes.push(Cause::invalid(&f, q, "must be a quantity")),
                }
            }
        }
        if let Some(sel) = path(obj, "scheduling.nodeSelector").and_then(Value::as_object) {
            for (k, v) in sel {
                if let Err(e) = names::check_qualified_name(k) {
                    causes.push(Cause::invalid("scheduling.nodeSelector", &json!(k), &e));
                }
                if let Err(e) = names::check_label_value(v.as_str().unwrap_or("")) {
                    causes.push(Cause::invalid("scheduling.nodeSelector", v, &e));
                }
            }
        }
        causes
    }

    fn validate_update(&self, def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = self.validate(def, new);
        immutable(old, new, "handler", &mut causes);
        causes
    }
}

impl Strategy for PodTemplate {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        defaults::template(obj, &["template"], "Always");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        match path(obj, "template.spec") {
            Some(spec) => check_containers(spec, "template.spec", &mut causes),
            None => causes.push(Cause::required("template.spec.containers")),
        }
        causes
    }

    fn validate_update(&self, def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        self.validate(def, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn a_runtime_class_handler_is_a_fixed_dns_label() {
        let def = resource::find("node.k8s.io", "v1", "runtimeclasses").expect("served");
        let ok = json!({"metadata": {"name": "gvisor"}, "handler": "runsc"});
        assert!(RuntimeClass.validate(&def, &ok).is_empty());
        let bad = json!({"metadata": {"name": "x"}, "handler": "Run_SC",
            "overhead": {"podFixed": {"cpu": "-1"}}});
        let fields: Vec<String> = RuntimeClass
            .validate(&def, &bad)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["handler", "overhead.podFixed[cpu]"]);
        let moved = json!({"metadata": {"name": "gvisor"}, "handler": "kata"});
        let causes = RuntimeClass.validate_update(&def, &ok, &moved);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(causes[0].message.contains("field is immutable"));
    }

    #[test]
    fn a_pod_template_is_defaulted_and_needs_containers() {
        let def = resource::find("", "v1", "podtemplates").expect("served");
        let mut t = json!({"metadata": {"name": "t"}, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}});
        PodTemplate.set_defaults(&def, &mut t);
        assert_eq!(t["template"]["spec"]["restartPolicy"], "Always");
        assert!(PodTemplate.validate(&def, &t).is_empty());
        let empty = json!({"metadata": {"name": "t"}, "template": {"spec": {"containers": []}}});
        assert_eq!(
            PodTemplate.validate(&def, &empty)[0].field,
            "template.spec.containers"
        );
    }
}
