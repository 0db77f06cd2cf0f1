//! Label selectors as the API defines them: `matchLabels` and `matchExpressions` (In, NotIn, Exists,
//! DoesNotExist), all ANDed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object with `labels`. An empty selector selects everything (callers that
/// must not adopt everything check [`is_empty`] first).
pub fn matches(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let have = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}

/// Whether `sel` picks an object with `labels`; a missing selector picks nothing (as upstream's workloads
/// and policy/v1 budgets read it), an empty one everything.
pub fn selects(sel: Option<&LabelSelector>, labels: Option<&BTreeMap<String, String>>) -> bool {
    sel.is_some_and(|s| matches(s, labels))
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    crate::pod_state::is_ready(pod)
}

/// Whether `selector` has no requirement at all.
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|m| m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn labels_and_expressions_are_anded() {
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(matches(&sel, Some(&l(&[("app", "web")]))));
        assert!(!matches(&sel, Some(&l(&[("app", "web"), ("tier", "db")]))));
        assert!(!matches(&sel, Some(&l(&[("app", "api")]))));
        assert!(!matches(&sel, None));
        assert!(matches(&LabelSelector::default(), None));
    }
}
