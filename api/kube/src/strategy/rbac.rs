//! RBAC (upstream's `pkg/registry/rbac/*`): names are path segments (`system:admin`); a binding names the
//! role it grants (a RoleBinding a Role or ClusterRole, a ClusterRoleBinding a ClusterRole).

use serde_json::{json, Value};

use super::Strategy;
use crate::admission::names::NameRule;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;

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

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        role_ref(obj, &["Role", "ClusterRole"])
    }
}

pub(super) struct ClusterRoleBinding;

impl Strategy for ClusterRoleBinding {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        role_ref(obj, &["ClusterRole"])
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
