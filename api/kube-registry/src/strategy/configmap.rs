//! ConfigMaps: valid data keys; nothing changes once `immutable` is set.

use serde_json::Value;

use super::Strategy;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::validate::{check_data_keys, immutable_data};

pub(super) struct ConfigMap;

impl Strategy for ConfigMap {
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        check_data_keys(obj, "data", &mut causes);
        check_data_keys(obj, "binaryData", &mut causes);
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        immutable_data(old, new, &mut causes);
        causes
    }
}
