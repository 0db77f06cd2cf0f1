//! Label selectors as the API defines them: `matchLabels` and `matchExpressions` (In, NotIn, Exists,
//! DoesNotExist), all ANDed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object with `labels`. An empty selector selects everything (callers that
/// must not adopt everything check [`is_empty`] first).
pub use keel_client_kit::labels::matches;

/// Whether `sel` picks an object with `labels`; a missing selector picks nothing (as upstream's workloads
/// and policy/v1 budgets read it), an empty one everything.
pub fn selects(sel: Option<&LabelSelector>, labels: Option<&BTreeMap<String, String>>) -> bool {
    sel.is_some_and(|s| matches(s, labels))
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
