//! The Kubernetes API server (HTTPS, default port 6443), served by every member from the same store handle the
//! etcd front door uses. Objects, encodings and errors are `keel-kube-model`'s; storage, validation, the
//! per-kind strategies, CRDs, patch and apply are `keel-kube-registry`'s (re-exported here under their
//! names). This crate holds what runs around them, in layers (lowest first, checked by `scripts/test.sh`):
//!
//! - `dial`, `leader`, `metrics`, `pki`: dialing agents and aggregated servers, the while-leading loop,
//!   `GET /metrics`, the cluster CA.
//! - `authn`, `authz`, `serviceaccount`, `csr`, `audit`: who asks (certificates, tokens, service account
//!   tokens), whether they may (RBAC, Node), CertificateSigningRequests, the audit log.
//! - `admission`, `priority`, `lifecycle`: the ordered admission chain and the plugins it runs.
//! - `metrics_api`, `aggregator`, `discovery`: `metrics.k8s.io`, APIServices and the relay to aggregated
//!   servers, discovery documents.
//! - `handler`, `certs`: resource verbs (get, list, watch, create, update, patch, delete, scale, logs,
//!   exec) through a strategy and the admission chain; the member's certificate renewals.
//! - `compaction`, `kubernetes_service`, `crd_controller`, `join`: duties of the leader, and joins.
//! - `server`: TLS, the request layers (read once into `request_info`, audit, authenticate, authorize,
//!   measure), routing and the tasks of one API server.

pub mod admission;
pub use keel_kube_model::age;
mod aggregator;
use keel_kube_registry::alloc;
pub use keel_kube_registry::apply;
mod audit;
pub mod authn;
mod authz;
pub use keel_kube_registry::body;
pub mod certs;
pub mod compaction;
use keel_kube_registry::convert;
use keel_kube_registry::crd;
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
use keel_kube_registry::openapi;
pub mod pki;
mod priority;
pub use keel_kube_model::protobuf;
pub use keel_kube_model::request_info;
pub use keel_kube_model::resource;
pub use keel_kube_model::selector;
use keel_kube_registry::request;
pub mod server;
mod serviceaccount;
pub use keel_kube_model::status;
pub use keel_kube_model::types;
pub use keel_kube_model::version;
pub use keel_kube_registry::storage;
pub use keel_kube_registry::strategy;
use keel_kube_registry::table;
pub use keel_kube_registry::validation;

pub use server::{
    serve, ApiServer, InProcessService, KubeOptions, KubeServeError, DEFAULT_EVENT_TTL,
};
pub use storage::Storage;
