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

/// The group of CRD objects.
pub(crate) const GROUP: &str = "apiextensions.k8s.io";
/// The finalizer that holds a deleted CRD until its objects are gone (upstream's name).
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// Key prefix of CRD objects.
pub(crate) const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

pub(crate) use crate::resource::Custom;
