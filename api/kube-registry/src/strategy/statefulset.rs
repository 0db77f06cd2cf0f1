//! StatefulSets (upstream's `pkg/registry/apps/statefulset`): replica, pod management, update strategy
//! and PVC retention defaults; a selector that matches the template and never changes.

use serde_json::{json, Value};

use super::{workload, Strategy};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{obj_mut, set_default, template};

pub(super) struct StatefulSet;

impl Strategy for StatefulSet {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
        }
        template(obj, &["spec", "template"], "Always");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        workload::validate(obj, true)
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        workload::validate_update(old, new)
    }
}
