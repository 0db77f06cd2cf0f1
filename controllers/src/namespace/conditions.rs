//! The conditions a terminating namespace reports (upstream's deletion status conditions): all five are
//! always present, `True` with a failure reason while that step has trouble, `False` otherwise.

use k8s_openapi::api::core::v1::NamespaceCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Discovery of the namespaced types failed (for some groups).
pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
/// A discovered group version did not parse.
pub const GV_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
/// Deleting some content failed.
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
/// Some content is still there.
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
/// Some remaining content has finalizers.
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// (type, reason and message when fine, reason when not).
const TYPES: &[(&str, &str, &str, &str)] = &[
    (
        DISCOVERY_FAILURE,
        "ResourcesDiscovered",
        "All resources successfully discovered",
        "DiscoveryFailed",
    ),
    (
        GV_PARSING_FAILURE,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
        "GroupVersionParsingFailed",
    ),
    (
        CONTENT_FAILURE,
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
        "ContentDeletionFailed",
    ),
    (
        CONTENT_REMAINING,
        "ContentRemoved",
        "All content successfully removed",
        "SomeResourcesRemain",
    ),
    (
        FINALIZERS_REMAINING,
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
        "SomeFinalizersRemain",
    ),
];

/// The five conditions given the problems found (type, message); a condition whose status and reason
/// do not change keeps its old transition time.
pub fn conditions(
    problems: &[(&str, String)],
    old: &[NamespaceCondition],
) -> Vec<NamespaceCondition> {
    let now = Time(jiff::Timestamp::now());
    TYPES
        .iter()
        .map(|(ty, ok_reason, ok_message, bad_reason)| {
            let (status, reason, message) = match problems.iter().find(|(t, _)| t == ty) {
                Some((_, m)) => ("True", *bad_reason, m.clone()),
                None => ("False", *ok_reason, ok_message.to_string()),
            };
            let since = old
                .iter()
                .find(|c| {
                    c.type_ == *ty && c.status == status && c.reason.as_deref() == Some(reason)
                })
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            NamespaceCondition {
                type_: ty.to_string(),
                status: status.into(),
                reason: Some(reason.into()),
                message: Some(message),
                last_transition_time: Some(since),
            }
        })
        .collect()
}

/// Whether two condition lists say the same (transition times aside).
pub fn same(a: &[NamespaceCondition], b: &[NamespaceCondition]) -> bool {
    a.len() == b.len()
        && a.iter().all(|x| {
            b.iter().any(|y| {
                x.type_ == y.type_
                    && x.status == y.status
                    && x.reason == y.reason
                    && x.message == y.message
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_five_are_reported_and_problems_are_true() {
        let c = conditions(
            &[(CONTENT_REMAINING, "Some resources are remaining".into())],
            &[],
        );
        assert_eq!(c.len(), 5);
        let remaining = c
            .iter()
            .find(|c| c.type_ == CONTENT_REMAINING)
            .map(|c| c.status.as_str());
        assert_eq!(remaining, Some("True"));
        let discovery = c
            .iter()
            .find(|c| c.type_ == DISCOVERY_FAILURE)
            .map(|c| c.status.as_str());
        assert_eq!(discovery, Some("False"));
        assert!(same(
            &c,
            &conditions(
                &[(CONTENT_REMAINING, "Some resources are remaining".into())],
                &c
            )
        ));
    }
}
