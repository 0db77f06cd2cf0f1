//! The review APIs: `authorization.k8s.io/v1` SubjectAccessReview, LocalSubjectAccessReview,
//! SelfSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i [--list]`), and
//! `authentication.k8s.io/v1` SelfSubjectReview (`kubectl auth whoami`). Nothing is stored: a POST is
//! answered with the object and its `status`.

use serde_json::{json, Map, Value};

use super::attributes::{Attributes, ResourceAttributes};
use super::rule::PolicyRule;
use super::{Authorizer, MASTERS};
use crate::authn::Identity;
use crate::status::{ApiError, Cause, Target};

/// The review group.
pub(crate) const AUTHORIZATION: &str = "authorization.k8s.io";
/// SelfSubjectReview's group.
pub(crate) const AUTHENTICATION: &str = "authentication.k8s.io";

/// Which review a path names: `(group, plural, namespace)` for a POST to one of them.
pub(crate) fn route(segs: &[&str]) -> Option<(&'static str, &'static str, Option<String>)> {
    let plural = |p: &str| -> Option<&'static str> {
        [
            "subjectaccessreviews",
            "selfsubjectaccessreviews",
            "selfsubjectrulesreviews",
            "localsubjectaccessreviews",
            "selfsubjectreviews",
        ]
        .into_iter()
        .find(|x| *x == p)
    };
    match segs {
        ["apis", AUTHORIZATION, "v1", p] => {
            let p = plural(p)?;
            (p != "localsubjectaccessreviews" && p != "selfsubjectreviews").then_some((
                AUTHORIZATION,
                p,
                None,
            ))
        }
        ["apis", AUTHORIZATION, "v1", "namespaces", ns, "localsubjectaccessreviews"] => Some((
            AUTHORIZATION,
            "localsubjectaccessreviews",
            Some((*ns).to_string()),
        )),
        ["apis", AUTHENTICATION, "v1", "selfsubjectreviews"] => {
            Some((AUTHENTICATION, "selfsubjectreviews", None))
        }
        _ => None,
    }
}

fn kind_of(plural: &str) -> &'static str {
    match plural {
        "subjectaccessreviews" => "SubjectAccessReview",
        "selfsubjectaccessreviews" => "SelfSubjectAccessReview",
        "localsubjectaccessreviews" => "LocalSubjectAccessReview",
        "selfsubjectrulesreviews" => "SelfSubjectRulesReview",
        _ => "SelfSubjectReview",
    }
}

/// Answers a review POSTed by `user` (already authorized to create it).
pub(crate) fn answer(
    authz: &Authorizer,
    user: &Identity,
    group: &str,
    plural: &str,
    namespace: Option<&str>,
    body: &Value,
) -> Result<Value, ApiError> {
    let kind = kind_of(plural);
    let api_version = format!("{group}/v1");
    if !body.is_object() {
        return Err(ApiError::BadRequest(format!(
            "the body of a {kind} must be an object"
        )));
    }
    crate::body::expect_kind(body, kind)?;
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match plural {
        "selfsubjectreviews" => json!({"userInfo": user_info(user)}),
        "selfsubjectrulesreviews" => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            rules_review(authz, user, ns)
        }
        _ => {
            let subject = match plural {
                "subjectaccessreviews" | "localsubjectaccessreviews" => subject_of(kind, &spec)?,
                _ => user.clone(),
            };
            let attrs = access_attributes(kind, &subject, &spec, namespace)?;
            let v = authz.authorize(&attrs);
            let mut s = Map::new();
            s.insert("allowed".into(), json!(v.allowed));
            if !v.reason.is_empty() {
                s.insert("reason".into(), json!(v.reason));
            }
            Value::Object(s)
        }
    };
    let mut meta = body.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!(kind));
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("metadata".into(), meta);
    if plural != "selfsubjectreviews" {
        out.insert("spec".into(), spec);
    }
    out.insert("status".into(), status);
    Ok(Value::Object(out))
}

fn invalid(kind: &str, field: &str, value: &Value, why: &str) -> ApiError {
    ApiError::Invalid {
        target: Target::new(AUTHORIZATION, kind, ""),
        causes: vec![Cause::invalid(field, value, why)],
    }
}

/// The user a SubjectAccessReview asks about (upstream refuses one that names neither user nor group).
fn subject_of(kind: &str, spec: &Value) -> Result<Identity, ApiError> {
    let user = spec
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return Err(invalid(
            kind,
            "spec.user",
            &json!(user),
            "at least one of user or group must be specified",
        ));
    }
    Ok(Identity { user, groups })
}

/// The attributes a review's spec describes.
fn access_attributes(
    kind: &str,
    user: &Identity,
    spec: &Value,
    path_ns: Option<&str>,
) -> Result<Attributes, ApiError> {
    let ra = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let nra = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    match (ra, nra) {
        (Some(_), Some(n)) => Err(invalid(
            kind,
            "spec.nonResourceAttributes",
            n,
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => Err(invalid(
            kind,
            "spec.resourceAttributes",
            &Value::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        (None, Some(n)) => Ok(Attributes {
            user: user.clone(),
            verb: s(n, "verb"),
            resource: None,
            path: s(n, "path"),
        }),
        (Some(r), None) => {
            let mut namespace = s(r, "namespace");
            if let Some(ns) = path_ns {
                if namespace.is_empty() {
                    namespace = ns.to_string();
                } else if namespace != ns {
                    return Err(invalid(
                        kind,
                        "spec.resourceAttributes.namespace",
                        &json!(namespace),
                        "must match metadata.namespace",
                    ));
                }
            }
            let name = s(r, "name");
            let sub = s(r, "subresource");
            Ok(Attributes::resource(
                user,
                &s(r, "verb"),
                ResourceAttributes {
                    group: s(r, "group"),
                    version: s(r, "version"),
                    resource: s(r, "resource"),
                    subresource: (!sub.is_empty()).then_some(sub),
                    namespace,
                    name: (!name.is_empty()).then_some(name),
                },
            ))
        }
    }
}

/// `status.userInfo` of a SelfSubjectReview.
fn user_info(user: &Identity) -> Value {
    json!({"username": user.user, "groups": user.groups})
}

/// `status` of a SelfSubjectRulesReview: the privileged group's rules, then RBAC's in the namespace.
fn rules_review(authz: &Authorizer, user: &Identity, namespace: &str) -> Value {
    let mut rules: Vec<PolicyRule> = Vec::new();
    if user.groups.iter().any(|g| g == MASTERS) {
        rules.push(PolicyRule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            ..Default::default()
        });
        rules.push(PolicyRule {
            verbs: vec!["*".into()],
            non_resource_urls: vec!["*".into()],
            ..Default::default()
        });
    }
    let (granted, errors) = authz.rbac.rules_for(user, namespace);
    rules.extend(granted);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if r.non_resource_urls.is_empty() {
            let mut m = Map::new();
            m.insert("verbs".into(), json!(r.verbs));
            if !r.api_groups.is_empty() {
                m.insert("apiGroups".into(), json!(r.api_groups));
            }
            if !r.resources.is_empty() {
                m.insert("resources".into(), json!(r.resources));
            }
            if !r.resource_names.is_empty() {
                m.insert("resourceNames".into(), json!(r.resource_names));
            }
            resource_rules.push(Value::Object(m));
        } else {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    let mut s = Map::new();
    s.insert("resourceRules".into(), json!(resource_rules));
    s.insert("nonResourceRules".into(), json!(non_resource_rules));
    s.insert("incomplete".into(), json!(!errors.is_empty()));
    if !errors.is_empty() {
        s.insert("evaluationError".into(), json!(errors.join(", ")));
    }
    Value::Object(s)
}

/// The create-only kinds of the two review groups, for discovery: `(group, plural, kind, namespaced)`.
const KINDS: [(&str, &str, &str, bool); 6] = [
    (
        AUTHENTICATION,
        "selfsubjectreviews",
        "SelfSubjectReview",
        false,
    ),
    (AUTHENTICATION, "tokenreviews", "TokenReview", false),
    (
        AUTHORIZATION,
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        true,
    ),
    (
        AUTHORIZATION,
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
    ),
    (
        AUTHORIZATION,
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        false,
    ),
    (
        AUTHORIZATION,
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
    ),
];

/// The review groups, in discovery's order.
pub(crate) const GROUPS: [&str; 2] = [AUTHENTICATION, AUTHORIZATION];

fn kinds_of(
    group: &str,
) -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str, bool)> + '_ {
    KINDS.iter().filter(move |k| k.0 == group)
}

/// `/apis` and `/apis/<group>` entry of a review group.
pub(crate) fn group_doc(group: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis/<group>/v1` of a review group; None for other group-versions.
pub(crate) fn resource_list(group: &str, version: &str) -> Option<Value> {
    if version != "v1" || !GROUPS.contains(&group) {
        return None;
    }
    let resources: Vec<Value> = kinds_of(group)
        .map(|(_, plural, kind, ns)| {
            json!({"name": plural, "singularName": kind.to_ascii_lowercase(), "namespaced": ns, "kind": kind, "verbs": ["create"]})
        })
        .collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/v1"), "resources": resources}),
    )
}

/// A review group in aggregated discovery.
pub(crate) fn aggregated_item(group: &str) -> Value {
    let resources: Vec<Value> = kinds_of(group)
        .map(|(_, plural, kind, ns)| {
            json!({
                "resource": plural,
                "singularResource": kind.to_ascii_lowercase(),
                "responseKind": {"group": group, "version": "v1", "kind": kind},
                "scope": if *ns { "Namespaced" } else { "Cluster" },
                "verbs": ["create"],
            })
        })
        .collect();
    json!({
        "metadata": {"name": group, "creationTimestamp": null},
        "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}],
    })
}
