//! Admission of built-in kinds: defaulting, then the plugins of [`chain`] (mutating, then after validation
//! of names, required fields and immutable fields, validating, ResourceQuota last), in the order it lists.

pub mod bytes;
pub mod chain;
pub mod defaults;
pub mod limit_ranger;
pub mod names;
pub mod node_restriction;
pub mod node_taint;
pub mod pod_security;
pub mod prune;
pub mod resource_quota;
pub mod times;
pub mod validate;
