//! Custom resources (upstream's `apiextensions-apiserver/pkg/registry/customresource`): defaults,
//! validation and pruning from the served version's structural schema; a create keeps the status the
//! client sent; without a status subresource every change but metadata counts for the generation; no
//! strategic merge patch (415); no creates while the CRD is terminating; `/scale` at the CRD's paths.

use serde_json::Value;

use super::{start_generation, ScalePaths, Strategy};
use crate::crd;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Cause};

/// Upstream's 415 message for a strategic merge patch of a custom object.
const CUSTOM_PATCH_TYPES: &str =
    "the body of the request was in an unknown format - accepted media types include: \
     application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

pub(super) struct CustomResource;

impl Strategy for CustomResource {
    fn prune_unknown(&self, def: &ResourceDef, obj: &mut Value) -> Vec<String> {
        match def.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            Some(schema) => crd::prune::object(schema, obj),
            None => Vec::new(),
        }
    }

    fn strategic_merge(
        &self,
        _def: &ResourceDef,
        _current: Value,
        _patch: &[u8],
    ) -> Result<Value, ApiError> {
        Err(ApiError::UnsupportedMediaType(CUSTOM_PATCH_TYPES.into()))
    }

    fn create_forbidden(&self, def: &ResourceDef) -> Option<&'static str> {
        def.custom
            .as_ref()
            .is_some_and(|c| c.terminating)
            .then_some("create not allowed while custom resource definition is terminating")
    }

    fn set_defaults(&self, def: &ResourceDef, obj: &mut Value) {
        if let Some(s) = def.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            crd::default::apply(s, obj);
        }
    }

    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
    }

    fn validate(&self, def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        match def.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            Some(s) => crd::validate::object(s, obj),
            None => Vec::new(),
        }
    }

    fn generation_changes(&self, def: &ResourceDef, old: &Value, new: &Value) -> bool {
        if def.status {
            return old.get("spec") != new.get("spec");
        }
        let body = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        };
        body(old) != body(new)
    }

    fn scale_paths(&self, def: &ResourceDef) -> ScalePaths {
        let dotted = |p: &str| p.trim_start_matches('.').to_string();
        match def.custom.as_ref().and_then(|c| c.scale.as_ref()) {
            Some(s) => ScalePaths {
                spec: dotted(&s.spec_replicas_path),
                status: dotted(&s.status_replicas_path),
                selector: s.label_selector_path.as_deref().map(dotted),
                selector_form: super::SelectorForm::Text,
            },
            None => super::Plain.scale_paths(def),
        }
    }
}
