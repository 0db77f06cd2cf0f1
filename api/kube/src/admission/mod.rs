//! Admission of built-in kinds: defaulting, then validation (names, required fields, immutable fields).

pub mod defaults;
pub mod names;
pub mod node_restriction;
pub mod pod_security;
pub mod prune;
pub mod validate;
