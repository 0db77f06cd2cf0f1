//! Secrets: type `Opaque` by default, valid data keys; nothing changes once `immutable` is set.

use serde_json::{json, Value};

use super::Strategy;
use crate::admission::defaults::set_default;
use crate::admission::validate::{check_data_keys, immutable_data};
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct Secret;

impl Strategy for Secret {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            set_default(m, "type", json!("Opaque"));
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        check_data_keys(obj, "data", &mut causes);
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        immutable_data(old, new, &mut causes);
        causes
    }
}
