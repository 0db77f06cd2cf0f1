//! What the apps workloads (Deployment, ReplicaSet, StatefulSet, DaemonSet) validate alike: a
//! selector that matches the pod template (and, but for DaemonSets, valid replicas) on create, and a
//! selector that never changes on update.

use serde_json::Value;

use crate::status::Cause;
use crate::validation::validate::{check_replicas, check_selector_template, immutable};

/// Create-time checks; `replicas` when the kind has `spec.replicas`.
pub(super) fn validate(obj: &Value, replicas: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    if replicas {
        check_replicas(obj, &mut causes);
    }
    check_selector_template(obj, &mut causes, "spec.template", true);
    causes
}

/// Update-time checks: `spec.selector` is immutable.
pub(super) fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    immutable(old, new, "spec.selector", &mut causes);
    causes
}
