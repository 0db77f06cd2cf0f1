//! Custom resources (upstream's `apiextensions-apiserver/pkg/registry/customresource`): defaults and
//! validation from the served version's structural schema.

use serde_json::Value;

use super::Strategy;
use crate::crd;
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct CustomResource;

impl Strategy for CustomResource {
    fn set_defaults(&self, def: &ResourceDef, obj: &mut Value) {
        if let Some(s) = def.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            crd::default::apply(s, obj);
        }
    }

    fn validate(&self, def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        match def.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            Some(s) => crd::validate::object(s, obj),
            None => Vec::new(),
        }
    }
}
