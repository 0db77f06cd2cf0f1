//! RBAC (upstream's `pkg/registry/rbac/*`): names are path segments (`system:admin`); a binding names the
//! role it grants (a RoleBinding a Role or ClusterRole, a ClusterRoleBinding a ClusterRole). rbac/v1's
//! defaults: a binding's `roleRef.apiGroup`, and a User's or Group's `apiGroup`, are
//! `rbac.authorization.k8s.io`.

use serde_json::{json, Value};

use super::Strategy;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::set_default;
use crate::validation::names::NameRule;

/// Roles and ClusterRoles.
pub(super) struct Role;

impl Strategy for Role {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }
}

pub(super) struct RoleBinding;

impl Strategy for RoleBinding {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        binding_defaults(obj);
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        role_ref(obj, &["Role", "ClusterRole"])
    }
}

pub(super) struct ClusterRoleBinding;

impl Strategy for ClusterRoleBinding {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        binding_defaults(obj);
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        role_ref(obj, &["ClusterRole"])
    }
}

const GROUP: &str = "rbac.authorization.k8s.io";

fn binding_defaults(obj: &mut Value) {
    if let Some(r) = obj.get_mut("roleRef").and_then(Value::as_object_mut) {
        set_default(r, "apiGroup", json!(GROUP));
    }
    let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) else {
        return;
    };
    for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind == "User" || kind == "Group" {
            set_default(s, "apiGroup", json!(GROUP));
        }
    }
}

/// `roleRef.name` is required and `roleRef.kind` one of `allowed`.
fn role_ref(obj: &Value, allowed: &[&str]) -> Vec<Cause> {
    let mut causes = Vec::new();
    if path(obj, "roleRef.name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        causes.push(Cause::required("roleRef.name"));
    }
    let kind = path(obj, "roleRef.kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !allowed.contains(&kind) {
        causes.push(Cause::not_supported("roleRef.kind", &json!(kind), allowed));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_default_their_api_groups() {
        let mut b = json!({"roleRef": {"kind": "Role", "name": "r"},
                           "subjects": [{"kind": "User", "name": "a"},
                                        {"kind": "ServiceAccount", "name": "s", "namespace": "n"},
                                        {"kind": "Group", "name": "g", "apiGroup": "x"}]});
        binding_defaults(&mut b);
        assert_eq!(
            b,
            json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
                   "subjects": [{"kind": "User", "name": "a", "apiGroup": GROUP},
                                {"kind": "ServiceAccount", "name": "s", "namespace": "n"},
                                {"kind": "Group", "name": "g", "apiGroup": "x"}]})
        );
    }
}
