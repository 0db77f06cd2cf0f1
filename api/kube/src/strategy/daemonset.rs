//! DaemonSets (upstream's `pkg/registry/apps/daemonset`): history and update strategy defaults; a selector
//! that matches the template and never changes.

use serde_json::{json, Value};

use super::{workload, Strategy};
use crate::admission::defaults::{obj_mut, set_default, template};
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct DaemonSet;

impl Strategy for DaemonSet {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            );
        }
        template(obj, &["spec", "template"], "Always");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        workload::validate(obj, false)
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        workload::validate_update(old, new)
    }
}
