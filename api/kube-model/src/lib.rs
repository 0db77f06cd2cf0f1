//! The model layer of keel's Kubernetes API: what every layer above reads and none of it imports
//! back (the compiler keeps the direction: this crate depends on no other keel crate).
//!
//! - `object`: JSON object accessors; `types`: the wire type names; `version`: the Kubernetes version
//!   keel reports.
//! - `resource`: the table of built-in resources (and the served part of a custom one).
//! - `selector`: label and field selectors; `encode`: objects in upstream's canonical field order.
//! - `request_info`: what a request asks, read once from its method and URL; `age`: kubectl's ages.
//! - `status`: every error answer (upstream's `Status` objects); `protobuf`: upstream's protobuf wire form;
//!   `encryption`: encryption at rest of stored values; `exposition`: Prometheus label helpers.

pub mod age;
pub mod encode;
pub mod encryption;
pub mod exposition;
pub mod object;
pub mod protobuf;
pub mod request_info;
pub mod resource;
pub mod selector;
pub mod status;
pub mod types;
pub mod version;
