//! Upstream's bootstrap RBAC policy (Kubernetes 1.32, default feature gates): the ClusterRoles,
//! ClusterRoleBindings, Roles and RoleBindings kube-apiserver keeps in place, as full
//! `rbac.authorization.k8s.io/v1` objects.
//!
//! The facts live in `bootstrap_policy.json` in a compact form written by
//! `scripts/gen-rbac-bootstrap.py` (which names the upstream source); this module expands it.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{json, Map, Value};

const POLICY_JSON: &str = include_str!("bootstrap_policy.json");

/// The API version of every object here.
pub(crate) const API_VERSION: &str = "rbac.authorization.k8s.io/v1";
/// The label every bootstrap object carries, with [`BOOTSTRAPPING_VALUE`].
pub(crate) const BOOTSTRAPPING_LABEL: &str = "kubernetes.io/bootstrapping";
/// The value of [`BOOTSTRAPPING_LABEL`].
pub(crate) const BOOTSTRAPPING_VALUE: &str = "rbac-defaults";
/// The annotation telling the API server it may reconcile the object back to the defaults.
pub(crate) const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The name prefix of the controllers' own roles and bindings.
pub(crate) const CONTROLLER_PREFIX: &str = "system:controller:";
/// The namespace of the controllers' ServiceAccounts.
const CONTROLLER_NAMESPACE: &str = "kube-system";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Policy {
    cluster_roles: Vec<CompactRole>,
    controller_roles: Vec<CompactRole>,
    cluster_role_bindings: Vec<CompactBinding>,
    roles: Vec<CompactRole>,
    role_bindings: Vec<CompactBinding>,
}

#[derive(Debug, Deserialize)]
struct CompactRole {
    #[serde(default)]
    namespace: Option<String>,
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Label keys (each selected with value "true") of an aggregated ClusterRole.
    #[serde(default)]
    aggregate: Vec<String>,
    rules: Vec<CompactRule>,
}

#[derive(Debug, Deserialize)]
struct CompactRule {
    #[serde(default)]
    g: Vec<String>,
    #[serde(default)]
    r: Vec<String>,
    #[serde(default)]
    n: Vec<String>,
    #[serde(default)]
    u: Vec<String>,
    v: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct CompactBinding {
    #[serde(default)]
    namespace: Option<String>,
    name: String,
    role: String,
    subjects: Vec<String>,
}

static POLICY: LazyLock<Policy> = LazyLock::new(|| match serde_json::from_str(POLICY_JSON) {
    Ok(p) => p,
    Err(e) => {
        // Compiled-in data that does not parse is a build defect the unit tests catch.
        tracing::error!(error = %e, "bootstrap RBAC policy does not parse");
        Policy::default()
    }
});

/// Every ClusterRole of the bootstrap policy: the named ones (cluster-admin, admin, edit, view,
/// system:*) followed by the controllers' `system:controller:*` roles.
pub(crate) fn cluster_roles() -> Vec<Value> {
    let p = &*POLICY;
    let named = p
        .cluster_roles
        .iter()
        .map(|r| role("ClusterRole", r, &r.name));
    let controllers = p
        .controller_roles
        .iter()
        .map(|r| role("ClusterRole", r, &format!("{CONTROLLER_PREFIX}{}", r.name)));
    named.chain(controllers).collect()
}

/// Every ClusterRoleBinding: the named ones (the `system:node` one without subjects, as upstream)
/// followed by one per controller role binding it to the kube-system ServiceAccount of its name.
pub(crate) fn cluster_role_bindings() -> Vec<Value> {
    let p = &*POLICY;
    let named = p
        .cluster_role_bindings
        .iter()
        .map(|b| binding("ClusterRoleBinding", "ClusterRole", b));
    let controllers = p.controller_roles.iter().map(|r| {
        let b = CompactBinding {
            namespace: None,
            name: format!("{CONTROLLER_PREFIX}{}", r.name),
            role: format!("{CONTROLLER_PREFIX}{}", r.name),
            subjects: vec![format!("ServiceAccount:{CONTROLLER_NAMESPACE}/{}", r.name)],
        };
        binding("ClusterRoleBinding", "ClusterRole", &b)
    });
    named.chain(controllers).collect()
}

/// Every namespaced Role (in kube-system and kube-public).
pub(crate) fn roles() -> Vec<Value> {
    POLICY
        .roles
        .iter()
        .map(|r| role("Role", r, &r.name))
        .collect()
}

/// Every namespaced RoleBinding (in kube-system and kube-public).
pub(crate) fn role_bindings() -> Vec<Value> {
    POLICY
        .role_bindings
        .iter()
        .map(|b| binding("RoleBinding", "Role", b))
        .collect()
}

fn metadata(name: &str, namespace: Option<&str>, extra_labels: &BTreeMap<String, String>) -> Value {
    let mut labels = Map::new();
    labels.insert(BOOTSTRAPPING_LABEL.into(), BOOTSTRAPPING_VALUE.into());
    for (k, v) in extra_labels {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    let mut meta = Map::new();
    meta.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), ns.into());
    }
    meta.insert("labels".into(), Value::Object(labels));
    meta.insert(
        "annotations".into(),
        json!({ AUTOUPDATE_ANNOTATION: "true" }),
    );
    Value::Object(meta)
}

fn role(kind: &str, r: &CompactRole, name: &str) -> Value {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), API_VERSION.into());
    obj.insert("kind".into(), kind.into());
    obj.insert(
        "metadata".into(),
        metadata(name, r.namespace.as_deref(), &r.labels),
    );
    obj.insert(
        "rules".into(),
        Value::Array(r.rules.iter().map(rule).collect()),
    );
    if !r.aggregate.is_empty() {
        let selectors: Vec<Value> = r
            .aggregate
            .iter()
            .map(|key| json!({ "matchLabels": { key.as_str(): "true" } }))
            .collect();
        obj.insert(
            "aggregationRule".into(),
            json!({ "clusterRoleSelectors": selectors }),
        );
    }
    Value::Object(obj)
}

fn rule(r: &CompactRule) -> Value {
    let mut out = Map::new();
    for (field, values) in [
        ("apiGroups", &r.g),
        ("resources", &r.r),
        ("resourceNames", &r.n),
        ("nonResourceURLs", &r.u),
    ] {
        if !values.is_empty() {
            out.insert(field.into(), json!(values));
        }
    }
    out.insert("verbs".into(), json!(r.v));
    Value::Object(out)
}

fn binding(kind: &str, role_kind: &str, b: &CompactBinding) -> Value {
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), API_VERSION.into());
    obj.insert("kind".into(), kind.into());
    obj.insert(
        "metadata".into(),
        metadata(&b.name, b.namespace.as_deref(), &BTreeMap::new()),
    );
    obj.insert(
        "roleRef".into(),
        json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": b.role }),
    );
    let subjects: Vec<Value> = b.subjects.iter().filter_map(|s| subject(s)).collect();
    if !subjects.is_empty() {
        obj.insert("subjects".into(), Value::Array(subjects));
    }
    Value::Object(obj)
}

/// `User:NAME`, `Group:NAME` or `ServiceAccount:NAMESPACE/NAME` as an RBAC subject.
fn subject(s: &str) -> Option<Value> {
    let (kind, rest) = s.split_once(':')?;
    match kind {
        "User" | "Group" => Some(json!({
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": kind,
            "name": rest,
        })),
        "ServiceAccount" => {
            let (ns, name) = rest.split_once('/')?;
            Some(json!({ "kind": "ServiceAccount", "namespace": ns, "name": name }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named<'a>(objs: &'a [Value], name: &str) -> &'a Value {
        objs.iter()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    }

    #[test]
    fn the_compact_policy_parses_and_every_subject_expands() {
        let p: Policy = serde_json::from_str(POLICY_JSON).unwrap();
        for b in p.cluster_role_bindings.iter().chain(&p.role_bindings) {
            for s in &b.subjects {
                assert!(subject(s).is_some(), "{s}");
            }
        }
    }

    /// Upstream 1.32 with default gates: 31 named ClusterRoles and 33 controller roles, 12 named
    /// ClusterRoleBindings and 33 controller bindings, 7 Roles, 7 RoleBindings.
    #[test]
    fn counts_match_upstream() {
        let roles = cluster_roles();
        let controllers = roles
            .iter()
            .filter(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(CONTROLLER_PREFIX)
            })
            .count();
        assert_eq!((roles.len(), controllers), (64, 33));
        assert_eq!(cluster_role_bindings().len(), 45);
        assert_eq!(super::roles().len(), 7);
        assert_eq!(role_bindings().len(), 7);
    }

    #[test]
    fn names_are_unique_per_kind_and_namespace() {
        for objs in [
            cluster_roles(),
            cluster_role_bindings(),
            roles(),
            role_bindings(),
        ] {
            let mut keys: Vec<(String, String)> = objs
                .iter()
                .map(|o| {
                    (
                        o["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        o["metadata"]["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            let n = keys.len();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), n);
        }
    }

    #[test]
    fn objects_are_valid_rbac_v1_and_bindings_name_existing_roles() {
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
        let croles: Vec<ClusterRole> = cluster_roles()
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        let nroles: Vec<Role> = roles()
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        for v in cluster_role_bindings() {
            let b: ClusterRoleBinding = serde_json::from_value(v).unwrap();
            assert!(
                croles
                    .iter()
                    .any(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name)),
                "{}",
                b.role_ref.name
            );
        }
        for v in role_bindings() {
            let b: RoleBinding = serde_json::from_value(v).unwrap();
            assert!(nroles
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name)
                    && r.metadata.namespace == b.metadata.namespace));
        }
        // Every rule names verbs and either resources (with groups) or non-resource URLs.
        for r in croles.iter().flat_map(|r| r.rules.iter().flatten()) {
            assert!(!r.verbs.is_empty());
            assert_eq!(r.resources.is_some(), r.api_groups.is_some());
            assert_ne!(r.resources.is_some(), r.non_resource_urls.is_some());
        }
    }

    #[test]
    fn cluster_admin_may_do_everything() {
        let roles = cluster_roles();
        let admin = named(&roles, "cluster-admin");
        assert_eq!(
            admin["rules"],
            json!([
                { "apiGroups": ["*"], "resources": ["*"], "verbs": ["*"] },
                { "nonResourceURLs": ["*"], "verbs": ["*"] },
            ])
        );
        assert_eq!(admin["apiVersion"], API_VERSION);
        assert_eq!(admin["kind"], "ClusterRole");
        assert_eq!(
            admin["metadata"]["labels"],
            json!({ "kubernetes.io/bootstrapping": "rbac-defaults" })
        );
        assert_eq!(
            admin["metadata"]["annotations"],
            json!({ "rbac.authorization.kubernetes.io/autoupdate": "true" })
        );
        assert!(admin.get("aggregationRule").is_none());
        let bindings = cluster_role_bindings();
        let b = named(&bindings, "cluster-admin");
        assert_eq!(
            b["subjects"],
            json!([{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters" }])
        );
    }

    #[test]
    fn admin_edit_view_aggregate_and_feed_each_other() {
        let roles = cluster_roles();
        for (name, key, label) in [
            (
                "admin",
                "rbac.authorization.k8s.io/aggregate-to-admin",
                None,
            ),
            (
                "edit",
                "rbac.authorization.k8s.io/aggregate-to-edit",
                Some("rbac.authorization.k8s.io/aggregate-to-admin"),
            ),
            (
                "view",
                "rbac.authorization.k8s.io/aggregate-to-view",
                Some("rbac.authorization.k8s.io/aggregate-to-edit"),
            ),
        ] {
            let r = named(&roles, name);
            assert_eq!(
                r["aggregationRule"],
                json!({ "clusterRoleSelectors": [{ "matchLabels": { key: "true" } }] }),
                "{name}"
            );
            assert_eq!(r["rules"], json!([]), "{name}");
            if let Some(label) = label {
                assert_eq!(r["metadata"]["labels"][label], "true", "{name}");
            }
        }
        // Only these three aggregate in upstream's defaults.
        let aggregated: Vec<&str> = roles
            .iter()
            .filter(|r| r.get("aggregationRule").is_some())
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(aggregated, ["admin", "edit", "view"]);
        let to_view = named(&roles, "system:aggregate-to-view");
        assert_eq!(
            to_view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
            "true"
        );
    }

    #[test]
    fn scheduler_and_controller_manager_are_bound_to_their_users() {
        let bindings = cluster_role_bindings();
        for (binding, user) in [
            ("system:kube-scheduler", "system:kube-scheduler"),
            ("system:volume-scheduler", "system:kube-scheduler"),
            (
                "system:kube-controller-manager",
                "system:kube-controller-manager",
            ),
            ("system:node-proxier", "system:kube-proxy"),
        ] {
            let b = named(&bindings, binding);
            assert_eq!(
                b["subjects"],
                json!([{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }]),
                "{binding}"
            );
            assert_eq!(b["roleRef"]["kind"], "ClusterRole");
        }
        // Kept for compatibility with no subjects: the Node authorizer grants nodes their rights.
        let node = named(&bindings, "system:node");
        assert!(node.get("subjects").is_none());
        assert_eq!(node["roleRef"]["name"], "system:node");
        let public = named(&bindings, "system:public-info-viewer");
        assert_eq!(public["subjects"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn each_controller_role_is_bound_to_its_service_account() {
        let roles = cluster_roles();
        let bindings = cluster_role_bindings();
        let rs = named(&roles, "system:controller:replicaset-controller");
        assert!(rs["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["pods"]) && r["verbs"][0] == "create"));
        let b = named(
            &bindings,
            "system:controller:clusterrole-aggregation-controller",
        );
        assert_eq!(
            b["subjects"],
            json!([{ "kind": "ServiceAccount", "namespace": "kube-system", "name": "clusterrole-aggregation-controller" }])
        );
        assert_eq!(
            b["roleRef"],
            json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:controller:clusterrole-aggregation-controller" })
        );
        let agg = named(
            &roles,
            "system:controller:clusterrole-aggregation-controller",
        );
        assert_eq!(agg["rules"][0]["verbs"][0], "escalate");
    }

    #[test]
    fn namespaced_objects_carry_their_namespace() {
        let roles = roles();
        assert!(roles
            .iter()
            .all(|r| r["metadata"]["namespace"] == "kube-system"
                || r["metadata"]["namespace"] == "kube-public"));
        let signer = roles
            .iter()
            .find(|r| {
                r["metadata"]["namespace"] == "kube-public"
                    && r["metadata"]["name"] == "system:controller:bootstrap-signer"
            })
            .unwrap();
        assert_eq!(signer["rules"][1]["resourceNames"], json!(["cluster-info"]));
        let bindings = role_bindings();
        let reader = named(
            &bindings,
            "system::extension-apiserver-authentication-reader",
        );
        assert_eq!(reader["metadata"]["namespace"], "kube-system");
        assert_eq!(reader["roleRef"]["kind"], "Role");
        assert_eq!(
            reader["roleRef"]["name"],
            "extension-apiserver-authentication-reader"
        );
        assert_eq!(reader["subjects"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn discovery_is_non_resource_urls_only() {
        let roles = cluster_roles();
        let d = named(&roles, "system:discovery");
        assert_eq!(d["rules"].as_array().unwrap().len(), 1);
        assert!(d["rules"][0].get("apiGroups").is_none());
        assert!(d["rules"][0]["nonResourceURLs"]
            .as_array()
            .unwrap()
            .contains(&json!("/apis/*")));
        let bindings = cluster_role_bindings();
        assert_eq!(
            named(&bindings, "system:discovery")["subjects"][0]["name"],
            "system:authenticated"
        );
    }
}
