//! Which webhooks a request reaches: namespaceSelector, objectSelector, then the rules (the requested
//! resource, else with matchPolicy `Equivalent` the resource's stored version), in upstream's order.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use super::hook::Hook;
use crate::admission::request::Request;
use crate::resource::ResourceDef;

/// The kinds no webhook ever sees, so a broken webhook cannot lock its own configuration.
const EXEMPT_KINDS: &[&str] = &[
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
];

/// Whether requests for objects of `def` skip webhooks altogether.
pub fn exempt(def: &ResourceDef) -> bool {
    def.group == "admissionregistration.k8s.io" && EXEMPT_KINDS.contains(&&*def.kind)
}

fn one_of(list: &Option<Vec<String>>, want: &str) -> bool {
    list.iter().flatten().any(|v| v == "*" || v == want)
}

/// Whether a `resources` entry covers `resource` with `sub` (`*`, `*/*`, `pods`, `pods/*`, `*/status`).
fn covers(entry: &str, resource: &str, sub: Option<&str>) -> bool {
    if entry == "*/*" {
        return true;
    }
    let (r, s) = match entry.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (entry, None),
    };
    let resource_ok = r == "*" || r == resource;
    match (s, sub) {
        (None, None) => resource_ok,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(s), Some(sub)) => resource_ok && (s == "*" || s == sub),
    }
}

/// Upstream's scope rule: a Namespace itself counts as cluster-scoped.
fn scope_ok(scope: Option<&str>, req: &Request<'_>) -> bool {
    let is_namespace = req.stored.group.is_empty() && req.stored.plural == "namespaces";
    match scope {
        Some("Namespaced") => req.namespace.is_some() && !is_namespace,
        Some("Cluster") => req.namespace.is_none() || is_namespace,
        _ => true,
    }
}

/// Whether one rule covers the request in `def`'s group, version and resource.
pub fn rule_matches(rule: &RuleWithOperations, req: &Request<'_>, def: &ResourceDef) -> bool {
    one_of(&rule.operations, req.operation.as_str())
        && one_of(&rule.api_groups, &def.group)
        && one_of(&rule.api_versions, &def.version)
        && rule
            .resources
            .iter()
            .flatten()
            .any(|e| covers(e, &def.plural, req.subresource))
        && scope_ok(rule.scope.as_deref(), req)
}

/// The resource version the hook's rules match the request in: the requested one, or (Equivalent)
/// the stored one; None when the hook does not apply.
pub fn matched_def<'a>(hook: &Hook, req: &Request<'a>) -> Option<&'a ResourceDef> {
    let rules = hook.spec.rules.as_deref().unwrap_or(&[]);
    matched_by(req, hook.spec.match_policy.as_deref(), |r, def| {
        rules.iter().any(|rule| rule_matches(rule, r, def))
    })
}

/// The version `covers` accepts the request in: the requested one, or (unless `match_policy` is
/// `Exact`) the stored one.
pub fn matched_by<'a>(
    req: &Request<'a>,
    match_policy: Option<&str>,
    covers: impl Fn(&Request<'a>, &ResourceDef) -> bool,
) -> Option<&'a ResourceDef> {
    if covers(req, req.requested) {
        return Some(req.requested);
    }
    let equivalent = match_policy != Some("Exact");
    let stored = req.stored;
    let differs = stored.group != req.requested.group || stored.version != req.requested.version;
    (equivalent && differs && covers(req, stored)).then_some(stored)
}

pub(crate) fn labels_of(obj: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let m = obj?.pointer("/metadata/labels")?.as_object()?;
    Some(
        m.iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect(),
    )
}

pub(crate) fn is_empty(sel: &Option<LabelSelector>) -> bool {
    sel.as_ref().is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    })
}

/// objectSelector: the new object's labels or the old one's.
pub fn object_selected(hook: &Hook, obj: Option<&Value>, old: Option<&Value>) -> bool {
    object_selector_matches(&hook.spec.object_selector, obj, old)
}

/// Whether `sel` selects the new object or the old one (an empty selector selects everything).
pub fn object_selector_matches(
    sel: &Option<LabelSelector>,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> bool {
    if is_empty(sel) {
        return true;
    }
    let Some(sel) = sel.as_ref() else {
        return true;
    };
    // An object without metadata (a connection's options) matches no selector but the empty one.
    [obj, old]
        .into_iter()
        .flatten()
        .filter(|o| o.get("metadata").is_some_and(Value::is_object))
        .any(|o| keel_client_kit::labels::matches(sel, labels_of(Some(o)).as_ref()))
}

/// namespaceSelector, given the labels of the request's namespace (None: a cluster-scoped object that
/// is not a Namespace, which every selector matches).
pub fn namespace_selected(hook: &Hook, ns_labels: Option<&BTreeMap<String, String>>) -> bool {
    namespace_selector_matches(&hook.spec.namespace_selector, ns_labels)
}

/// Whether `sel` selects a namespace with `ns_labels` (None: a cluster-scoped object, always selected).
pub fn namespace_selector_matches(
    sel: &Option<LabelSelector>,
    ns_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    match (sel.as_ref(), ns_labels) {
        _ if is_empty(sel) => true,
        (Some(sel), Some(labels)) => keel_client_kit::labels::matches(sel, Some(labels)),
        _ => true,
    }
}

/// Whether any hook has a non-empty namespaceSelector (only then is the namespace read).
pub fn needs_namespace(hooks: &[Hook]) -> bool {
    hooks.iter().any(|h| !is_empty(&h.spec.namespace_selector))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_entries_cover_as_upstream() {
        assert!(covers("*", "pods", None));
        assert!(!covers("*", "pods", Some("status")));
        assert!(covers("*/*", "pods", Some("status")));
        assert!(covers("*/*", "pods", None));
        assert!(covers("pods/*", "pods", Some("exec")));
        assert!(!covers("pods/*", "pods", None));
        assert!(covers("*/status", "deployments", Some("status")));
        assert!(!covers("*/status", "deployments", Some("scale")));
        assert!(covers("pods", "pods", None));
        assert!(!covers("pods", "services", None));
    }
}
