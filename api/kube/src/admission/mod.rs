//! Admission of built-in kinds: defaulting, mutating plugins (TaintNodesByCondition), then validation
//! (names, required fields, immutable fields).

pub mod defaults;
pub mod names;
pub mod node_restriction;
pub mod node_taint;
pub mod pod_security;
pub mod prune;
pub mod times;
pub mod validate;
