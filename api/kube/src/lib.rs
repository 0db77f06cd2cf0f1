//! The Kubernetes API (HTTPS, default port 6443), served by every member from the same store handle the
//! etcd front door uses.
//!
//! - `server`: PKI bootstrap, TLS, authentication, routing of non-resource paths; `request_info`: what a request
//!   asks, read once when it arrives (verb, resource attributes, decoded path segments).
//! - `handler`: resource verbs (get, list, watch, create, update, patch, delete, scale).
//! - `resource`: the table of built-in resources; `crd`: CustomResourceDefinitions and the run-time registry
//!   of served resources (built-ins plus custom resources); `discovery`: documents built from it.
//! - `storage`: objects as JSON under `/registry/...`, resourceVersion = mod revision; `compaction`: the
//!   API server's periodic compaction of history.
//! - `strategy`: the rules of each kind (create, update, subresources, delete), looked up from the resource
//!   table; `admission`: defaulting and validation through them; `alloc`: Service IPs and node ports;
//!   `lifecycle`: namespaces; `priority`: PriorityClasses (the built-in ones) and the Priority admission
//!   plugin.
//! - `apply`: server-side apply and managedFields.
//! - `handler::pod_log`, `handler::pod_stream`, `metrics_api`: what goes through to the node agents (logs,
//!   exec/attach/port-forward, `metrics.k8s.io` for `kubectl top`).
//! - `aggregator`: APIServices (Local ones for what keel serves, availability) and the relay of remote
//!   group-versions to their Services.
//! - `table`: `kubectl get` columns; `selector`: label and field selectors; `status`: every error answer.
//! - `metrics`: `GET /metrics` (requests, in-flight and long-running requests, store calls, object counts,
//!   process figures) in the Prometheus text format.

pub mod admission;
pub use keel_kube_model::age;
mod aggregator;
mod alloc;
pub mod apply;
mod audit;
pub mod authn;
mod authz;
pub mod body;
pub mod certs;
pub mod compaction;
mod convert;
mod crd;
mod crd_controller;
mod csr;
mod dial;
mod discovery;
pub use keel_kube_model::encode;
pub use keel_kube_model::encryption;
pub use keel_kube_model::exposition;
pub mod handler;
pub mod join;
pub mod kubernetes_service;
mod leader;
mod lifecycle;
mod metrics;
mod metrics_api;
pub use keel_kube_model::object;
mod openapi;
mod patch;
pub mod pki;
mod priority;
pub use keel_kube_model::protobuf;
mod request;
pub use keel_kube_model::request_info;
pub use keel_kube_model::resource;
pub use keel_kube_model::selector;
pub mod server;
mod serviceaccount;
pub use keel_kube_model::status;
pub mod storage;
pub mod strategy;
mod table;
pub use keel_kube_model::types;
pub mod validation;
pub use keel_kube_model::version;

pub use server::{
    serve, ApiServer, InProcessService, KubeOptions, KubeServeError, DEFAULT_EVENT_TTL,
};
pub use storage::Storage;
