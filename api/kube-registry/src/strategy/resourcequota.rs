//! ResourceQuotas (upstream's `ValidateResourceQuota`): every limited resource is one quota knows, each
//! amount a non-negative quantity (a whole number for counted objects), and scopes that exist, do not
//! contradict each other and fit what the quota limits.

use keel_client_kit::quantity::Quantity;
use keel_client_kit::quota::scope::SCOPES;
use keel_client_kit::quota::usage::POD_RESOURCES;
use serde_json::{json, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct ResourceQuota;

/// Resource names a quota may limit without a `/` (upstream's standard quota resources).
const STANDARD: [&str; 19] = [
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
];

/// Names counted in whole objects.
const INTEGER: [&str; 9] = [
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

impl Strategy for ResourceQuota {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        amounts(obj.pointer("/spec/hard"), "spec.hard", &mut causes);
        amounts(obj.pointer("/status/hard"), "status.hard", &mut causes);
        amounts(obj.pointer("/status/used"), "status.used", &mut causes);
        scopes(obj, &mut causes);
        causes
    }
}

/// Checks one resource list of a quota.
fn amounts(list: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    let Some(map) = list.and_then(Value::as_object) else {
        return;
    };
    for (name, v) in map {
        let at = format!("{field}[{name}]");
        if !name.contains('/') && !STANDARD.contains(&name.as_str()) && !hugepages(name) {
            causes.push(Cause::invalid(
                &at,
                &json!(name),
                "must be a standard resource for quota",
            ));
            continue;
        }
        let Some(q) = v.as_str().and_then(Quantity::parse) else {
            causes.push(Cause::invalid(&at, v, "must be a quantity"));
            continue;
        };
        if q.is_negative() {
            causes.push(Cause::invalid(
                &at,
                &json!(q.to_string()),
                "must be greater than or equal to 0",
            ));
        } else if integer(name) && !q.is_whole() {
            causes.push(Cause::invalid(
                &at,
                &json!(q.to_string()),
                "must be an integer",
            ));
        }
    }
}

fn hugepages(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("requests.hugepages-")
}

fn integer(name: &str) -> bool {
    INTEGER.contains(&name) || name.starts_with("count/")
}

/// The scopes and scope selector of a quota.
fn scopes(obj: &Value, causes: &mut Vec<Cause>) {
    let selector = keel_client_kit::quota::scope::of_quota(obj);
    let listed: Vec<String> = obj
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let printed = format!(
        "[]core.ResourceQuotaScope{{{}}}",
        listed
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if listed.iter().any(|s| !SCOPES.contains(&s.as_str())) {
        causes.push(Cause::invalid_printed(
            "spec.scopes",
            &printed,
            "unsupported scope",
        ));
    }
    let has = |s: &str| selector.iter().any(|x| x.scope == s);
    if (has("BestEffort") && has("NotBestEffort")) || (has("Terminating") && has("NotTerminating"))
    {
        causes.push(Cause::invalid_printed(
            "spec.scopes",
            &printed,
            "conflicting scopes",
        ));
    }
    let hard: Vec<&String> = obj
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.keys())
        .collect();
    for scope in &selector {
        let fits = |r: &str| match scope.scope.as_str() {
            "BestEffort" => r == "pods" || r == "count/pods",
            _ => POD_RESOURCES.contains(&r) || hugepages(r),
        };
        if hard.iter().any(|r| !fits(r)) {
            causes.push(Cause::invalid_printed(
                "spec.scopes",
                &printed,
                "unsupported scope applied to resource",
            ));
            break;
        }
    }
    let exprs = obj
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array);
    for (i, e) in exprs.into_iter().flatten().enumerate() {
        let at = format!("spec.scopeSelector.matchExpressions[{i}]");
        let name = e.get("scopeName").and_then(Value::as_str).unwrap_or("");
        if !SCOPES.contains(&name) {
            causes.push(Cause::invalid(
                &format!("{at}.scopeName"),
                &json!(name),
                "unsupported scope",
            ));
        }
        let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match op {
            "In" | "NotIn" if values == 0 => causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector".into(),
                field: format!("{at}.values"),
            }),
            "Exists" | "DoesNotExist" if values > 0 => causes.push(Cause::invalid(
                &format!("{at}.values"),
                e.get("values").unwrap_or(&Value::Null),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(Cause::invalid(
                &format!("{at}.operator"),
                &json!(other),
                "not a valid selector operator",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn check(v: Value) -> Vec<String> {
        let def = resource::find("", "v1", "resourcequotas").expect("def");
        ResourceQuota
            .validate(&def, &v)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn names_amounts_and_scopes_as_upstream() {
        assert!(check(json!({"spec": {"hard": {"pods": "2", "requests.cpu": "1", "count/deployments.apps": "3"}}})).is_empty());
        assert_eq!(
            check(json!({"spec": {"hard": {"foo": "1", "pods": "1.5", "cpu": "-1"}}})),
            vec![
                "spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.hard[foo]: Invalid value: \"foo\": must be a standard resource for quota",
                "spec.hard[pods]: Invalid value: \"1500m\": must be an integer",
            ]
        );
        assert_eq!(
            check(json!({"spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort", "NotBestEffort"]}})),
            vec!["spec.scopes: Invalid value: []core.ResourceQuotaScope{\"BestEffort\", \"NotBestEffort\"}: conflicting scopes"]
        );
        assert_eq!(
            check(json!({"spec": {"hard": {"configmaps": "1"}, "scopes": ["Terminating"]}})),
            vec!["spec.scopes: Invalid value: []core.ResourceQuotaScope{\"Terminating\"}: unsupported scope applied to resource"]
        );
    }
}
