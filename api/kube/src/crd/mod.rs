//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): the CRD objects themselves are a built-in
//! resource; this module turns them into served resources.
//!
//! - `registry`: the run-time table of served custom resources, fed by a watch on the CRD prefix, so every
//!   member serves a CRD created through any member.
//! - `definition`: defaulting and validation of CRD objects (names, versions, structural schema).
//! - `schema`, `validate`, `default`, `prune`: a custom resource's structural schema applied to its objects.
//! - `printer`: `additionalPrinterColumns`; `controller`: status conditions and deletion of a CRD's objects.

pub(crate) mod controller;
pub(crate) mod default;
pub(crate) mod definition;
pub(crate) mod printer;
pub(crate) mod props;
pub(crate) mod prune;
pub(crate) mod registry;
pub(crate) mod schema;
pub(crate) mod validate;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceSubresourceScale, JSONSchemaProps,
};

/// The group of CRD objects.
pub(crate) const GROUP: &str = "apiextensions.k8s.io";
/// The finalizer that holds a deleted CRD until its objects are gone (upstream's name).
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// Key prefix of CRD objects.
pub(crate) const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

/// What one served version of a custom resource adds to its [`super::resource::ResourceDef`].
#[derive(Debug, Clone)]
pub struct Custom {
    /// The CRD's name (`<plural>.<group>`).
    pub crd_name: String,
    /// The CRD's uid and generation: a change of either is a new definition (watches of it end).
    pub crd_uid: String,
    /// See `crd_uid`.
    pub crd_generation: i64,
    /// The version objects are stored in (`apiVersion` of stored objects).
    pub storage_version: String,
    /// `openAPIV3Schema` of this version, if any.
    pub schema: Option<JSONSchemaProps>,
    /// `additionalPrinterColumns` of this version.
    pub columns: Vec<CustomResourceColumnDefinition>,
    /// The scale subresource's paths, if served.
    pub scale: Option<CustomResourceSubresourceScale>,
    /// `listKind`.
    pub list_kind: String,
    /// The CRD is being deleted: no new objects.
    pub terminating: bool,
    /// `selectableFields` as field-selector names (`spec.color`).
    pub selectable: Vec<String>,
}

impl Custom {
    /// Whether `other` was built from the same CRD spec (status changes do not count).
    pub fn same_definition(&self, other: &Custom) -> bool {
        self.crd_uid == other.crd_uid && self.crd_generation == other.crd_generation
    }
}
