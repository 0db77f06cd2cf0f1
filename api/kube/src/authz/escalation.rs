//! Escalation prevention: writing a Role or ClusterRole needs every permission it grants (or `escalate`
//! on it), and writing a binding needs the permissions of the role it names (or `bind` on that role).
//! `system:masters` is exempt, as upstream's `EscalationAllowed`.

use serde_json::Value;

use super::attributes::{Attributes, ResourceAttributes};
use super::rule::{go_quoted_list, PolicyRule, ALL};
use super::{Authorizer, MASTERS};
use crate::authn::Identity;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Target};
use crate::storage::Storage;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Checks a create or update of an RBAC object by `user`; anything else passes.
pub(crate) async fn check_write(
    authz: &Authorizer,
    storage: &Storage,
    user: &Identity,
    def: &ResourceDef,
    obj: &Value,
) -> Result<(), ApiError> {
    if def.group != GROUP || user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    let name = object::name(obj);
    let ns = object::namespace(obj);
    let target = Target::new(GROUP, &def.plural, name);
    let refuse = |detail: String| ApiError::Forbidden {
        message: format!("{} {name:?} is forbidden: {detail}", target.qualified()),
        target: target.clone(),
    };
    let check = |verb: &str, resource: &str, name: &str| {
        authz
            .authorize(&Attributes::resource(
                user,
                verb,
                ResourceAttributes {
                    group: GROUP.into(),
                    version: "v1".into(),
                    resource: resource.into(),
                    subresource: None,
                    namespace: ns.to_string(),
                    name: Some(name.to_string()),
                },
            ))
            .allowed
    };
    match def.kind.as_ref() {
        "Role" | "ClusterRole" => {
            if check("escalate", &def.plural, name) {
                return Ok(());
            }
            if def.kind == "ClusterRole" && obj.get("aggregationRule").is_some_and(|a| !a.is_null())
            {
                let full = [
                    PolicyRule {
                        verbs: vec![ALL.into()],
                        api_groups: vec![ALL.into()],
                        resources: vec![ALL.into()],
                        ..Default::default()
                    },
                    PolicyRule {
                        verbs: vec![ALL.into()],
                        non_resource_urls: vec![ALL.into()],
                        ..Default::default()
                    },
                ];
                let (held, _) = authz.rbac.rules_for(user, ns);
                if !missing(&held, &full).is_empty() {
                    return Err(refuse(
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                }
                return Ok(());
            }
            confirm(authz, user, ns, &PolicyRule::all_of(obj)).map_err(refuse)
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let kind = object::path(obj, "roleRef.kind")
                .and_then(Value::as_str)
                .unwrap_or("");
            let role = object::path(obj, "roleRef.name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let plural = if kind == "ClusterRole" {
                "clusterroles"
            } else {
                "roles"
            };
            if check("bind", plural, role) {
                return Ok(());
            }
            let rules = role_rules(storage, kind, ns, role).await?;
            confirm(authz, user, ns, &rules).map_err(refuse)
        }
        _ => Ok(()),
    }
}

/// The rules of the role a binding names, read from the store with a consistent read (as upstream's
/// rule resolver reads its registry), so a role created just before its binding is always found; a
/// missing role is upstream's 404.
async fn role_rules(
    storage: &Storage,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<Vec<PolicyRule>, ApiError> {
    let (key, singular) = if kind == "ClusterRole" {
        (format!("/registry/clusterroles/{name}"), "clusterrole")
    } else {
        (format!("/registry/roles/{ns}/{name}"), "role")
    };
    match storage.get(&key, true).await? {
        Some(stored) => Ok(PolicyRule::all_of(&stored.object)),
        None => Err(ApiError::NotFound(Target::new(GROUP, singular, name))),
    }
}

/// Upstream's `ConfirmNoEscalation`: the text of the refusal when `user` lacks some of `rules`.
fn confirm(
    authz: &Authorizer,
    user: &Identity,
    ns: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (held, errors) = authz.rbac.rules_for(user, ns);
    let lacking = missing(&held, rules);
    if lacking.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = lacking.iter().map(PolicyRule::compact).collect();
    let mut msg = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.user,
        go_quoted_list(&user.groups),
        list.join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
    }
    Err(msg)
}

/// The parts of `wanted` no rule of `held` covers, with verbs of the same target merged and sorted as
/// upstream prints them.
pub(crate) fn missing(held: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for atom in wanted.iter().flat_map(breakdown) {
        if held.iter().any(|h| covers(h, &atom)) {
            continue;
        }
        match out.iter_mut().find(|r| {
            r.api_groups == atom.api_groups
                && r.resources == atom.resources
                && r.resource_names == atom.resource_names
                && r.non_resource_urls == atom.non_resource_urls
        }) {
            Some(r) if !r.verbs.contains(&atom.verbs[0]) => r.verbs.push(atom.verbs[0].clone()),
            Some(_) => {}
            None => out.push(atom),
        }
    }
    out.sort_by_key(PolicyRule::compact);
    out
}

/// One rule per group, resource, name and verb (or per URL and verb).
fn breakdown(r: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for verb in &r.verbs {
        for g in &r.api_groups {
            for res in &r.resources {
                if r.resource_names.is_empty() {
                    out.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: vec![g.clone()],
                        resources: vec![res.clone()],
                        ..Default::default()
                    });
                }
                for n in &r.resource_names {
                    out.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: vec![g.clone()],
                        resources: vec![res.clone()],
                        resource_names: vec![n.clone()],
                        ..Default::default()
                    });
                }
            }
        }
        for u in &r.non_resource_urls {
            out.push(PolicyRule {
                verbs: vec![verb.clone()],
                non_resource_urls: vec![u.clone()],
                ..Default::default()
            });
        }
    }
    out
}

/// Whether `owner` covers the single-target rule `atom` (upstream's `ruleCovers`).
fn covers(owner: &PolicyRule, atom: &PolicyRule) -> bool {
    let has = |list: &[String], v: &str| list.iter().any(|x| x == ALL || x == v);
    if !atom.verbs.iter().all(|v| has(&owner.verbs, v)) {
        return false;
    }
    if let Some(url) = atom.non_resource_urls.first() {
        return owner.non_resource_urls.iter().any(|o| {
            o == ALL || o == url || o.strip_suffix('*').is_some_and(|p| url.starts_with(p))
        });
    }
    let groups = atom.api_groups.iter().all(|g| has(&owner.api_groups, g));
    let resources = atom.resources.iter().all(|r| {
        owner.resources.iter().any(|o| {
            o == ALL
                || o == r
                || r.split_once('/')
                    .is_some_and(|(_, sub)| *o == format!("*/{sub}"))
        })
    });
    let names = owner.resource_names.is_empty()
        || (!atom.resource_names.is_empty()
            && atom
                .resource_names
                .iter()
                .all(|n| owner.resource_names.contains(n)));
    groups && resources && names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        PolicyRule::from_json(&v)
    }

    #[test]
    fn coverage_and_the_missing_list() {
        let held = [
            rule(
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/status"]}),
            ),
            rule(
                json!({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/logs/*"]})),
        ];
        let wanted = [
            rule(
                json!({"verbs": ["get", "delete", "watch"], "apiGroups": [""], "resources": ["pods", "services/status"]}),
            ),
            rule(
                json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web", "db"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/logs/a", "/metrics"]})),
        ];
        let lacking: Vec<String> = missing(&held, &wanted)
            .iter()
            .map(PolicyRule::compact)
            .collect();
        assert_eq!(
            lacking,
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "watch"]}"#,
                r#"{APIGroups:[""], Resources:["services/status"], Verbs:["delete" "watch"]}"#,
                r#"{APIGroups:["apps"], Resources:["deployments"], ResourceNames:["db"], Verbs:["update"]}"#,
                r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#,
            ]
        );
        let star = [rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        )];
        assert!(missing(&star, &wanted[..2]).is_empty());
        assert_eq!(missing(&star, &wanted[2..]).len(), 2);
    }
}
