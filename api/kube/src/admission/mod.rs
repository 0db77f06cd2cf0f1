//! Admission of built-in kinds: defaulting, mutating plugins (TaintNodesByCondition, LimitRanger), then
//! validation (names, required fields, immutable fields) and the validating plugins, ResourceQuota last.

pub mod bytes;
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
