//! Label selectors as the workload controllers read them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

/// Whether `sel` picks an object with `labels`; a missing or malformed selector picks nothing (as
/// upstream's workloads and policy/v1 budgets read it), an empty one everything.
pub fn selects(sel: Option<&LabelSelector>, labels: Option<&BTreeMap<String, String>>) -> bool {
    let Some(sel) = sel else { return false };
    let Ok(s) = Selector::try_from(sel.clone()) else {
        return false;
    };
    let empty = BTreeMap::new();
    s.matches(labels.unwrap_or(&empty))
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_selects_all_and_none_selects_nothing() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(selects(Some(&LabelSelector::default()), Some(&labels)));
        assert!(!selects(None, Some(&labels)));
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_string(), "db".to_string())])),
            ..Default::default()
        };
        assert!(!selects(Some(&sel), Some(&labels)));
    }
}
