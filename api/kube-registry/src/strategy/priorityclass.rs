//! PriorityClasses (`scheduling.k8s.io/v1`, upstream's `pkg/registry/scheduling/priorityclass` and
//! `pkg/apis/scheduling/validation`): DNS-subdomain names; `preemptionPolicy` defaults to
//! `PreemptLowerPriority` and is one of `PreemptLowerPriority`/`Never`; a name with the `system-` prefix
//! must be one of the built-in classes with its value and not the global default; any other class's value
//! is at most 1000000000; `value` and `preemptionPolicy` never change. As upstream's, an update is checked
//! for those two only (not against the create rules), and the built-in classes refuse a DELETE of one of
//! them. The one-global-default rule is the Priority admission plugin's (`crate::priority`).
//! Messages are upstream's, field by field.

use serde_json::{json, Value};

use super::Strategy;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::Cause;

/// The highest value a class not built in may have (upstream's HighestUserDefinablePriority).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
/// The value of `system-cluster-critical` (upstream's SystemCriticalPriority).
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
/// The name prefix reserved for the built-in classes.
pub const SYSTEM_PREFIX: &str = "system-";
/// The preemption policy of pods and classes that name none.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";
/// The preemption policies a class may have.
pub const PREEMPTION_POLICIES: &[&str] = &[PREEMPT_LOWER_PRIORITY, "Never"];

/// One built-in class.
#[derive(Debug, Clone, Copy)]
pub struct SystemClass {
    /// Its name.
    pub name: &'static str,
    /// Its value.
    pub value: i64,
    /// Its description, as upstream writes it.
    pub description: &'static str,
}

/// The built-in classes, in upstream's order (none is the global default).
pub const SYSTEM_CLASSES: &[SystemClass] = &[
    SystemClass {
        name: "system-node-critical",
        value: SYSTEM_CRITICAL_PRIORITY + 1000,
        description: "Used for system critical pods that must not be moved from their current node.",
    },
    SystemClass {
        name: "system-cluster-critical",
        value: SYSTEM_CRITICAL_PRIORITY,
        description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    },
];

/// Whether `name` is a built-in class.
pub fn is_system_class(name: &str) -> bool {
    SYSTEM_CLASSES.iter().any(|c| c.name == name)
}

/// Checks that a class named with the reserved prefix is a built-in one as built in (upstream's
/// IsKnownSystemPriorityClass); the error is upstream's text.
pub fn known_system_class(name: &str, value: i64, global_default: bool) -> Result<(), String> {
    let Some(c) = SYSTEM_CLASSES.iter().find(|c| c.name == name) else {
        return Err(format!("{name} is not a known system priority class"));
    };
    if c.value != value {
        return Err(format!(
            "value of {} PriorityClass must be {}",
            c.name, c.value
        ));
    }
    if global_default {
        return Err(format!(
            "globalDefault of {} PriorityClass must be false",
            c.name
        ));
    }
    Ok(())
}

pub(super) struct PriorityClass;

fn value(obj: &Value) -> i64 {
    obj.get("value").and_then(Value::as_i64).unwrap_or(0)
}

impl Strategy for PriorityClass {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        // Only a missing policy is defaulted: an empty one is the client's, and invalid.
        if let Some(m) = obj.as_object_mut() {
            if m.get("preemptionPolicy").is_none_or(Value::is_null) {
                m.insert("preemptionPolicy".into(), json!(PREEMPT_LOWER_PRIORITY));
            }
        }
    }

    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        // Upstream starts the generation at 1 and never bumps it (a class has no spec).
        object::meta_mut(obj).insert("generation".into(), json!(1));
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let name = object::name(obj);
        let global_default = obj.get("globalDefault").and_then(Value::as_bool) == Some(true);
        if name.starts_with(SYSTEM_PREFIX) {
            if let Err(e) = known_system_class(name, value(obj), global_default) {
                causes.push(Cause::forbidden(
                    "metadata.name",
                    &format!(
                        "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {e}"
                    ),
                ));
            }
        } else if value(obj) > HIGHEST_USER_DEFINABLE_PRIORITY {
            causes.push(Cause::forbidden(
                "value",
                &format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
                ),
            ));
        }
        match obj.get("preemptionPolicy") {
            None | Some(Value::Null) => {}
            Some(Value::String(p)) if p.is_empty() => {
                causes.push(Cause::required("preemptionPolicy"))
            }
            Some(p) if PREEMPTION_POLICIES.iter().any(|a| Some(*a) == p.as_str()) => {}
            Some(p) => causes.push(Cause::not_supported(
                "preemptionPolicy",
                p,
                PREEMPTION_POLICIES,
            )),
        }
        causes
    }

    fn revalidates_on_update(&self) -> bool {
        false
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if value(old) != value(new) {
            causes.push(Cause::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
        let policy = |o: &Value| o.get("preemptionPolicy").cloned().unwrap_or(Value::Null);
        if policy(old) != policy(new) {
            causes.push(Cause::invalid(
                "preemptionPolicy",
                &policy(new),
                "field is immutable",
            ));
        }
        causes
    }

    fn delete_forbidden(&self, name: &str) -> Option<&'static str> {
        is_system_class(name).then_some("this is a system priority class and cannot be deleted")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn system_classes_are_upstreams() {
        assert_eq!(SYSTEM_CLASSES[0].value, 2_000_001_000);
        assert_eq!(SYSTEM_CLASSES[1].value, 2_000_000_000);
        assert!(known_system_class("system-node-critical", 2_000_001_000, false).is_ok());
        assert_eq!(
            known_system_class("system-node-critical", 5, false),
            Err("value of system-node-critical PriorityClass must be 2000001000".into())
        );
        assert_eq!(
            known_system_class("system-cluster-critical", 2_000_000_000, true),
            Err("globalDefault of system-cluster-critical PriorityClass must be false".into())
        );
        assert_eq!(
            known_system_class("system-x", 1, false),
            Err("system-x is not a known system priority class".into())
        );
    }

    fn def() -> std::sync::Arc<ResourceDef> {
        resource::find("scheduling.k8s.io", "v1", "priorityclasses").expect("served")
    }

    fn check(obj: Value) -> Vec<String> {
        let def = def();
        let mut obj = obj;
        PriorityClass.set_defaults(&def, &mut obj);
        crate::strategy::validate_object(&def, &obj)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn check_update(old: Value, new: Value) -> Vec<String> {
        let def = def();
        let (mut old, mut new) = (old, new);
        PriorityClass.set_defaults(&def, &mut old);
        PriorityClass.set_defaults(&def, &mut new);
        crate::strategy::validate_update(&def, &old, &new)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn user_classes() {
        let mut ok =
            json!({"metadata": {"name": "high"}, "value": 1_000_000_000, "globalDefault": true});
        assert!(check(ok.clone()).is_empty());
        PriorityClass.set_defaults(&def(), &mut ok);
        assert_eq!(ok["preemptionPolicy"], "PreemptLowerPriority");
        // Upstream requires no value: a class without one has value 0.
        assert!(check(json!({"metadata": {"name": "zero"}})).is_empty());
        assert!(check(
            json!({"metadata": {"name": "low"}, "value": -5, "preemptionPolicy": "Never"})
        )
        .is_empty());
        assert_eq!(
            check(json!({"metadata": {"name": "too-high"}, "value": 1_000_000_001})),
            vec![
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
            ]
        );
        assert_eq!(
            check(json!({"metadata": {"name": "Bad_Name"}, "value": 1})),
            vec!["metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
        );
        assert_eq!(
            check(json!({"metadata": {"name": "p"}, "value": 1, "preemptionPolicy": "Sometimes"})),
            vec!["preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\""]
        );
        assert_eq!(
            check(json!({"metadata": {"name": "p"}, "value": 1, "preemptionPolicy": ""})),
            vec!["preemptionPolicy: Required value"]
        );
    }

    #[test]
    fn the_system_prefix_is_reserved() {
        assert!(check(
            json!({"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000})
        )
        .is_empty());
        assert_eq!(
            check(json!({"metadata": {"name": "system-mine"}, "value": 10})),
            vec!["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"]
        );
        assert_eq!(
            check(json!({"metadata": {"name": "system-cluster-critical"}, "value": 10})),
            vec!["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-cluster-critical PriorityClass must be 2000000000"]
        );
        assert_eq!(
            check(json!({"metadata": {"name": "system-cluster-critical"}, "value": 2_000_000_000, "globalDefault": true})),
            vec!["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: globalDefault of system-cluster-critical PriorityClass must be false"]
        );
        // The prefix takes precedence over the value limit, as upstream's checks are ordered.
        assert_eq!(
            check(json!({"metadata": {"name": "system-x"}, "value": 2_000_000_000})).len(),
            1
        );
    }

    #[test]
    fn value_and_policy_are_immutable() {
        let old = json!({"metadata": {"name": "p"}, "value": 10});
        assert!(check_update(old.clone(), json!({"metadata": {"name": "p"}, "value": 10, "description": "x", "globalDefault": true})).is_empty());
        assert_eq!(
            check_update(
                old.clone(),
                json!({"metadata": {"name": "p"}, "value": 11, "preemptionPolicy": "Never"})
            ),
            vec![
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable",
            ]
        );
        // An update is not checked against the create rules (upstream's ValidateUpdate does not call them).
        let big = json!({"metadata": {"name": "p"}, "value": 2_000_000_000});
        assert!(check_update(big.clone(), big).is_empty());
    }

    #[test]
    fn only_the_built_in_classes_refuse_a_delete() {
        assert_eq!(
            PriorityClass.delete_forbidden("system-node-critical"),
            Some("this is a system priority class and cannot be deleted")
        );
        assert!(PriorityClass.delete_forbidden("system-other").is_none());
        assert!(PriorityClass.delete_forbidden("high").is_none());
    }
}
