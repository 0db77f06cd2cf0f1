//! Secrets: type `Opaque` by default, `stringData` merged into `data` (write-only, as upstream's conversion
//! does), valid data keys; nothing changes once `immutable` is set.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::set_default;
use crate::validation::validate::{check_data_keys, immutable_data};

pub(super) struct Secret;

impl Strategy for Secret {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            set_default(m, "type", json!("Opaque"));
            // stringData entries win over data entries of the same key, and are never stored.
            if let Some(Value::Object(strings)) = m.remove("stringData") {
                let data = m.entry("data").or_insert_with(|| json!({}));
                if !data.is_object() {
                    *data = json!({});
                }
                if let Some(d) = data.as_object_mut() {
                    for (k, v) in strings {
                        let text = v.as_str().unwrap_or_default();
                        d.insert(k, json!(STANDARD.encode(text)));
                    }
                }
            }
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
