//! Per-kind rules of writes, shaped like upstream's registry strategies (kube-apiserver's
//! `pkg/registry/<group>/<kind>/strategy.go`).
//!
//! Every rule that belongs to one kind sits in that kind's [`Strategy`], found from the resource table
//! with [`of`]: its defaults ([`Strategy::set_defaults`]), the rule its names follow
//! ([`Strategy::name_rule`]), its checks of a new object ([`Strategy::validate`], after the generic
//! metadata checks) and of an update ([`Strategy::validate_update`]: immutable fields).
//!
//! Every method has a default, the rule of a kind without rules of its own, so a module overrides only
//! what its kind changes. Shared building blocks (pod spec defaults and checks, selector/template checks,
//! name rules) stay in `admission`, which runs defaulting and validation through this table.

mod configmap;
mod crd;
mod cronjob;
mod custom;
mod daemonset;
mod deployment;
mod job;
mod namespace;
mod pod;
mod rbac;
mod replicaset;
mod secret;
mod service;
mod statefulset;

use serde_json::Value;

use crate::admission::names::NameRule;
use crate::resource::ResourceDef;
use crate::status::Cause;

/// The rules of one kind. Every method has the default of a kind without rules of its own.
pub trait Strategy: Sync {
    /// The rule `metadata.name` follows.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// Fills in upstream's defaults, on create and on updates of the object itself.
    fn set_defaults(&self, _def: &ResourceDef, _obj: &mut Value) {}

    /// The kind's checks of a new object (Validate); the caller checks metadata first.
    fn validate(&self, _def: &ResourceDef, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// The kind's checks of an update against the stored object (ValidateUpdate: immutable fields), on
    /// top of [`Strategy::validate`] of the new object.
    fn validate_update(&self, _def: &ResourceDef, _old: &Value, _new: &Value) -> Vec<Cause> {
        Vec::new()
    }
}

/// A kind without rules of its own.
pub struct Plain;

impl Strategy for Plain {}

/// Built-in kinds with rules, by (group, kind).
static BUILTIN: &[((&str, &str), &dyn Strategy)] = &[
    (("", "Pod"), &pod::Pod),
    (("", "Namespace"), &namespace::Namespace),
    (("", "Service"), &service::Service),
    (("", "ConfigMap"), &configmap::ConfigMap),
    (("", "Secret"), &secret::Secret),
    (("apps", "Deployment"), &deployment::Deployment),
    (("apps", "ReplicaSet"), &replicaset::ReplicaSet),
    (("apps", "StatefulSet"), &statefulset::StatefulSet),
    (("apps", "DaemonSet"), &daemonset::DaemonSet),
    (("batch", "Job"), &job::Job),
    (("batch", "CronJob"), &cronjob::CronJob),
    (("rbac.authorization.k8s.io", "Role"), &rbac::Role),
    (("rbac.authorization.k8s.io", "ClusterRole"), &rbac::Role),
    (
        ("rbac.authorization.k8s.io", "RoleBinding"),
        &rbac::RoleBinding,
    ),
    (
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        &rbac::ClusterRoleBinding,
    ),
    (
        (crate::crd::GROUP, "CustomResourceDefinition"),
        &crd::CustomResourceDefinition,
    ),
];

/// The strategy of a served resource: its kind's, the custom resources' one, or [`Plain`].
pub fn of(def: &ResourceDef) -> &'static dyn Strategy {
    if def.custom.is_some() {
        return &custom::CustomResource;
    }
    BUILTIN
        .iter()
        .find(|(gk, _)| *gk == def.gk())
        .map_or(&Plain as &dyn Strategy, |(_, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn every_builtin_kind_in_the_table_is_served() {
        for ((group, kind), _) in BUILTIN {
            assert!(
                resource::by_kind(group, kind).is_some(),
                "{group}/{kind} has a strategy but is not served"
            );
        }
    }

    #[test]
    fn kinds_without_rules_get_the_plain_strategy() {
        let cm = resource::find("", "v1", "endpoints").expect("endpoints");
        assert_eq!(of(&cm).name_rule(), NameRule::Subdomain);
        let ns = resource::find("", "v1", "namespaces").expect("namespaces");
        assert_eq!(of(&ns).name_rule(), NameRule::Label);
    }
}
