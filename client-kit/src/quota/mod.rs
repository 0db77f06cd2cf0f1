//! Resource quota's shared rules: what objects consume ([`usage`]), which quotas count them ([`scope`]),
//! and the arithmetic of resource lists ([`list`]). The API server's ResourceQuota admission and the
//! resourcequota controller both use them, so a quota's `status.used` means the same to both.

pub mod list;
pub mod scope;
pub mod usage;

use serde_json::Value;

use list::{from_value, ResourceList};

/// A quota's `status.hard`: what it limits once the controller has seen it.
pub fn hard(quota: &Value) -> ResourceList {
    from_value(quota.pointer("/status/hard"))
}

/// A quota's `status.used`.
pub fn used(quota: &Value) -> ResourceList {
    from_value(quota.pointer("/status/used"))
}

/// The names among `names` that objects of `group`/`plural` consume.
pub fn matching_resources<'a>(
    group: &str,
    plural: &str,
    names: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| usage::tracks(group, plural, n))
        .cloned()
        .collect()
}

/// Whether `quota` (by its `status.hard` and scopes) counts `obj` of `group`/`plural`: it limits something
/// the object consumes, and the object falls under every scope (only pods fall under scopes).
pub fn matches(quota: &Value, group: &str, plural: &str, obj: &Value) -> bool {
    let hard = hard(quota);
    if matching_resources(group, plural, hard.keys()).is_empty() {
        return false;
    }
    let is_pod = group.is_empty() && plural == "pods";
    scope::of_quota(quota)
        .iter()
        .all(|s| is_pod && scope::pod_matches(s, obj))
}

/// Upstream's leftover rule: a quota on cpu or memory needs every container of a pod to state it.
/// The error text follows upstream (`must specify limits.cpu for: a,b; requests.memory for: a`).
pub fn constraints(
    group: &str,
    plural: &str,
    required: &[String],
    obj: &Value,
) -> Result<(), String> {
    if !(group.is_empty() && plural == "pods") {
        return Ok(());
    }
    let required: Vec<&String> = required
        .iter()
        .filter(|r| usage::MUST_SPECIFY.contains(&r.as_str()))
        .collect();
    if required.is_empty() {
        return Ok(());
    }
    let mut missing: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> =
        Default::default();
    let spec = obj.get("spec");
    for key in ["containers", "initContainers"] {
        let list = spec.and_then(|s| s.get(key)).and_then(Value::as_array);
        for c in list.into_iter().flatten() {
            let res = c.get("resources");
            let have = usage::compute_names(
                &from_value(res.and_then(|r| r.get("requests"))),
                &from_value(res.and_then(|r| r.get("limits"))),
            );
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            for r in &required {
                if !have.contains_key(*r) {
                    missing
                        .entry(r.as_str())
                        .or_default()
                        .insert(name.to_string());
                }
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quota_matches_by_hard_and_scope() {
        let q = json!({"status": {"hard": {"pods": "2"}}, "spec": {"scopes": ["BestEffort"]}});
        let pod = json!({"spec": {"containers": [{"name": "c"}]}});
        assert!(matches(&q, "", "pods", &pod));
        assert!(!matches(&q, "", "configmaps", &json!({})));
        let unscoped = json!({"status": {"hard": {"configmaps": "2"}}});
        assert!(matches(&unscoped, "", "configmaps", &json!({})));
        assert!(!matches(&unscoped, "", "pods", &pod));
        let fresh = json!({"spec": {"hard": {"pods": "2"}}});
        assert!(!matches(&fresh, "", "pods", &pod));
    }

    #[test]
    fn missing_limits_named_per_container() {
        let pod = json!({"spec": {"containers": [
            {"name": "b", "resources": {"requests": {"cpu": "1"}}},
            {"name": "a"}
        ]}});
        let req = vec![
            "limits.cpu".to_string(),
            "requests.cpu".to_string(),
            "pods".to_string(),
        ];
        assert_eq!(
            constraints("", "pods", &req, &pod),
            Err("must specify limits.cpu for: a,b; requests.cpu for: a".to_string())
        );
        assert_eq!(constraints("", "pods", &["pods".to_string()], &pod), Ok(()));
    }
}
