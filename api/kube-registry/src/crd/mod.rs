//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): the CRD objects themselves are a built-in
//! resource; this module turns them into served resources.
//!
//! - `registry`: the run-time table of served custom resources, fed by a watch on the CRD prefix, so every
//!   member serves a CRD created through any member.
//! - `definition`: defaulting and validation of CRD objects (names, versions, structural schema).
//! - `schema`, `validate`, `default`, `prune`: a custom resource's structural schema applied to its objects.
//! - `printer`: `additionalPrinterColumns`. Status conditions and the deletion of a CRD's objects are the
//!   API server's CRD controller's, run on the leader.

pub mod default;
pub mod definition;
pub mod printer;
pub mod props;
pub mod prune;
pub mod registry;
pub mod schema;
pub mod validate;

/// The group of CRD objects.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The finalizer that holds a deleted CRD until its objects are gone (upstream's name).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// Key prefix of CRD objects.
pub const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

use serde_json::{json, Value};

use crate::object;
pub use crate::resource::Custom;

/// Adds the cleanup finalizer (a deleted CRD waits for its objects to go first).
pub fn add_cleanup_finalizer(obj: &mut Value) {
    let meta = object::meta_mut(obj);
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(a) = list.as_array_mut() {
        if !a.iter().any(|f| f == CLEANUP_FINALIZER) {
            a.push(json!(CLEANUP_FINALIZER));
        }
    }
}
