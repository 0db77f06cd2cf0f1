//! `labelSelector` and `fieldSelector` query parameters: parsing and matching.

pub mod field;
pub mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;
