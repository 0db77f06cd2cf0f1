//! Admission of built-in kinds: defaulting, then validation (names, required fields, immutable fields).

pub mod defaults;
pub mod names;
pub mod node_restriction;
pub mod prune;
pub mod validate;
