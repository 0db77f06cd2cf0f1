//! The Kubernetes API (HTTPS, default port 6443), served by every member from the same store handle the
//! etcd front door uses.
//!
//! - `server`: PKI bootstrap, TLS, authentication, routing of non-resource paths.
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
pub mod aggregator;
pub mod alloc;
pub mod apply;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod body;
pub mod certs;
pub mod compaction;
pub mod convert;
pub mod crd;
pub mod csr;
pub mod dial;
pub mod discovery;
pub mod encode;
pub mod encryption;
pub mod exposition;
pub mod handler;
pub mod join;
pub mod kubernetes_service;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod metrics_api;
pub mod object;
pub mod openapi;
pub mod patch;
pub mod pki;
pub mod priority;
pub mod protobuf;
pub mod request;
pub mod resource;
pub mod selector;
pub mod server;
pub mod serviceaccount;
pub mod status;
pub mod storage;
pub mod strategy;
pub mod table;
pub mod types;
pub mod version;

pub use server::{
    serve, ApiServer, InProcessService, KubeOptions, KubeServeError, DEFAULT_EVENT_TTL,
};
pub use storage::Storage;
