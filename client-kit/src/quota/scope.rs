//! Quota scopes: `spec.scopes` and `spec.scopeSelector` pick which pods a quota counts.

use serde_json::Value;

use super::usage::best_effort;

/// The scopes upstream knows.
pub const SCOPES: [&str; 6] = [
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

/// One scope requirement: a scope name, an operator and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    /// The scope (`BestEffort`, `PriorityClass`, ...).
    pub scope: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values `In` and `NotIn` compare with.
    pub values: Vec<String>,
}

/// The requirements of a quota: each of `spec.scopes` as `Exists`, then `spec.scopeSelector`'s.
pub fn of_quota(quota: &Value) -> Vec<Selector> {
    let spec = quota.get("spec");
    let mut out: Vec<Selector> = spec
        .and_then(|s| s.get("scopes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| Selector {
            scope: s.to_string(),
            operator: "Exists".into(),
            values: Vec::new(),
        })
        .collect();
    let exprs = spec
        .and_then(|s| s.pointer("/scopeSelector/matchExpressions"))
        .and_then(Value::as_array);
    for e in exprs.into_iter().flatten() {
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        out.push(Selector {
            scope: text("scopeName"),
            operator: text("operator"),
            values: e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        });
    }
    out
}

/// Whether `pod` falls under `selector`.
pub fn pod_matches(selector: &Selector, pod: &Value) -> bool {
    let spec = pod.get("spec");
    match selector.scope.as_str() {
        "Terminating" => terminating(pod),
        "NotTerminating" => !terminating(pod),
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "PriorityClass" => {
            let class = spec
                .and_then(|s| s.get("priorityClassName"))
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty());
            match selector.operator.as_str() {
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                "In" => class.is_some_and(|c| selector.values.iter().any(|v| v == c)),
                "NotIn" => !class.is_some_and(|c| selector.values.iter().any(|v| v == c)),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        _ => false,
    }
}

/// Upstream's "terminating" pod: one with an `activeDeadlineSeconds`.
pub fn terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|d| d >= 0)
}

fn cross_namespace_affinity(pod: &Value) -> bool {
    let cross = |term: &Value| {
        term.get("namespaces")
            .and_then(Value::as_array)
            .is_some_and(|n| !n.is_empty())
            || term.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].into_iter().any(|kind| {
        let Some(a) = pod.pointer(&format!("/spec/affinity/{kind}")) else {
            return false;
        };
        let required = a
            .get("requiredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(cross);
        let preferred = a
            .get("preferredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w.get("podAffinityTerm"))
            .any(cross);
        required || preferred
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_and_selectors() {
        let q = json!({"spec": {"scopes": ["BestEffort"], "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}});
        let sel = of_quota(&q);
        assert_eq!(sel.len(), 2);
        let pod = json!({"spec": {"priorityClassName": "high", "containers": [{"name": "c"}]}});
        assert!(sel.iter().all(|s| pod_matches(s, &pod)));
        let low = json!({"spec": {"priorityClassName": "low", "containers": [{"name": "c"}]}});
        assert!(!pod_matches(&sel[1], &low));
        assert!(terminating(&json!({"spec": {"activeDeadlineSeconds": 5}})));
        let affinity = json!({"spec": {"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"namespaces": ["x"], "topologyKey": "k"}]}}}});
        assert!(cross_namespace_affinity(&affinity));
    }
}
