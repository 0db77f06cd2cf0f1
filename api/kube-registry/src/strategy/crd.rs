//! CustomResourceDefinitions (upstream's `apiextensions-apiserver/pkg/registry/customresourcedefinition`):
//! defaults and validation of `crd::definition`, an immutable group and scope (objects are stored per
//! scope), fields known from the typed CRD, strategic merge patches merged as JSON merge patches (no Go
//! struct tags to give merge keys), and a delete held by the cleanup finalizer until the CRD's objects are
//! gone (the CRD controller on the leader).

use serde_json::{json, Value};

use super::{set_status, start_generation, Strategy};
use crate::body;
use crate::crd::{self, definition};
use crate::resource::ResourceDef;
use crate::status::{ApiError, Cause};
use crate::validation::validate::immutable;

pub(super) struct CustomResourceDefinition;

impl Strategy for CustomResourceDefinition {
    fn prune_unknown(&self, _def: &ResourceDef, obj: &mut Value) -> Vec<String> {
        definition::prune_unknown(obj)
    }

    fn strategic_merge(
        &self,
        _def: &ResourceDef,
        mut current: Value,
        patch: &[u8],
    ) -> Result<Value, ApiError> {
        let p = body::json(patch)?;
        json_patch::merge(&mut current, &p);
        Ok(current)
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        definition::apply_defaults(obj);
    }

    /// Upstream's PrepareForCreate: a fresh status that already lists the storage version, with no
    /// conditions (`null`) until the CRD controller, woken by the create, sets them.
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        let stored: Vec<Value> = obj
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| v.get("storage") == Some(&json!(true)))
            .filter_map(|v| v.get("name").cloned())
            .collect();
        set_status(
            obj,
            json!({"conditions": null, "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": stored}),
        );
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        definition::validate(obj)
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        immutable(old, new, "spec.group", &mut causes);
        immutable(old, new, "spec.scope", &mut causes);
        causes
    }

    fn deletion_held(&self, _obj: &Value) -> bool {
        true
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        crd::add_cleanup_finalizer(obj);
    }
}
