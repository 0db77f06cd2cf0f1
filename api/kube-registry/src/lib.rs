//! The registry layer of the Kubernetes API: what a request does to stored objects once it has been
//! authenticated, authorized and admitted. It sits on `keel-kube-model` and below `keel-kube-api` (admission,
//! authentication, authorization, the HTTP server), so nothing here can reach up into a request's handling.
//!
//! - `storage`: the seam to the Raft-replicated store: objects as JSON or protobuf under `/registry/...`,
//!   resourceVersion = mod revision, encryption at rest, watches, store-call timings.
//! - `validation`: the checks strategies are built from (names, metadata, byte fields, defaults, pruning,
//!   times, each kind's generated rules).
//! - `strategy`: the rules of each kind (defaults, validation, what create and update may change,
//!   subresources, delete), looked up from the resource table; `alloc`: Service IPs and node ports claimed
//!   in the write that stores the Service.
//! - `generic`: the generic store: a create or update of any kind through its strategy and the admission the
//!   layer above passes in, written with a compare on the key's mod revision.
//! - `crd`: CustomResourceDefinitions and the run-time registry of served resources (built-ins plus custom
//!   resources); `convert`: between served versions and the stored form.
//! - `apply`: server-side apply and managedFields; `patch` (private): strategic merge patches, which the
//!   strategies apply.
//! - `request`: the route and query of a resource request; `table`: `kubectl get` columns; `openapi`: the
//!   OpenAPI documents of what is served; `body`: request and response media types.

pub mod alloc;
pub mod apply;
pub mod body;
pub mod cel;
pub mod convert;
pub mod crd;
pub mod generic;
pub mod openapi;
mod patch;
pub mod request;
pub mod storage;
pub mod strategy;
pub mod table;
pub mod validation;

use keel_kube_model::{
    age, encode, encryption, exposition, object, protobuf, resource, selector, status, types,
    version,
};
