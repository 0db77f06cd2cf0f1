//! Admission of built-in kinds: defaulting, then the plugins of [`chain`] (mutating, then after validation
//! of names, required fields and immutable fields, validating, ResourceQuota last), in the order it lists.

pub mod cel_env;
pub mod chain;
pub mod default_ingress_class;
pub mod default_storage_class;
pub mod limit_ranger;
pub mod node_restriction;
pub mod node_taint;
pub mod pod_security;
pub mod policy;
pub mod request;
pub mod resource_quota;
pub mod runtime_class;
pub mod type_check;
pub mod webhook;
