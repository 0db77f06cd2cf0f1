//! Server-side apply and `metadata.managedFields`.
//!
//! - `fieldset`: sets of field paths and their `fieldsV1` JSON form.
//! - `shape`: how each part of an object merges (structs, maps, list maps, sets, atomic values).
//! - `diff`: the fields a configuration owns; what changed between two versions of an object.
//! - `merge`: an applied configuration merged into a live object; removal of dropped fields.
//! - `managed`: the entries themselves, updated on every write, and the apply operation with its conflicts.

pub mod diff;
pub mod fieldset;
pub mod managed;
pub mod merge;
pub mod shape;
