//! Resource requests: routing by verb to reads (`read`), writes (`write`, server-side apply in `apply`),
//! deletes (`delete`), watches (`watch`), the scale subresource (`scale`), pod evictions (`eviction`) and
//! pod bindings (`binding`).

pub mod apply;
pub mod binding;
pub mod delete;
pub mod eviction;
pub mod node_proxy;
pub mod pod_log;
pub mod pod_stream;
pub mod read;
pub mod scale;
pub mod versions;
pub mod watch;
pub mod write;

use std::sync::Arc;

use axum::http::{HeaderMap, Method};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::crd::registry::Registry;
use super::object;
use super::request::{parse_route, Params, Route};
use super::status::{ApiError, Target};
use super::storage::Storage;

/// Everything a request handler needs.
pub struct KubeState {
    /// Objects in the store.
    pub storage: Storage,
    /// Served resources: built-ins and the custom resources of stored CRDs.
    pub registry: Arc<Registry>,
    /// `https://host:port` of this member's API (for `/api`'s serverAddressByClientCIDRs).
    pub server_address: String,
    /// Ends long-running requests (watches) when the server stops.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// How long Events live after their last write (their keys are attached to a lease).
    pub event_ttl: std::time::Duration,
    /// TLS to node agents (the kubelet-client certificate), for `pods/log`.
    /// Swapped when the certificate is renewed; read it with [`KubeState::kubelet_tls`].
    pub kubelet_tls_config: std::sync::RwLock<Option<Arc<rustls::ClientConfig>>>,
    /// The aggregation layer: remote APIServices' TLS and this member's view of their discovery.
    pub aggregator: Arc<crate::aggregator::Aggregator>,
    /// Whether this member has made sure the built-in PriorityClasses exist (a `/readyz` check).
    pub priority_classes_ready: Arc<std::sync::atomic::AtomicBool>,
    /// What `/metrics` shows; every request is recorded in it.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Who may do what (RBAC, the Node authorizer).
    pub authz: Arc<crate::authz::Authorizer>,
    /// The cluster's service-account token signing key.
    pub sa_key: Arc<crate::serviceaccount::key::SigningKey>,
    /// The cluster CA (PEM), for token Secrets.
    pub ca_pem: String,
    /// The cluster CA's key (PEM), for signing kubelet serving certificates (`crate::csr`).
    pub ca_key_pem: String,
    /// Whether this member has made sure the default RBAC roles exist (a `/readyz` check).
    pub rbac_ready: Arc<std::sync::atomic::AtomicBool>,
    /// Held while this member adds a server: two joins at once would each see the other half-joined.
    pub joining: tokio::sync::Mutex<()>,
    /// The admission webhook dispatcher.
    pub webhooks: Arc<crate::admission::webhook::Webhooks>,
}

impl KubeState {
    /// The TLS client configuration for node agents (the kubelet-client certificate), if any.
    pub fn kubelet_tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.kubelet_tls_config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The lease a write of an object of storage `storage` attaches its key to (0: none; only Events
    /// have a time to live, through both `v1` and `events.k8s.io`).
    pub async fn ttl_lease(&self, storage: &str) -> Result<i64, ApiError> {
        keel_kube_registry::generic::ttl_lease(&self.storage, self.event_ttl, storage).await
    }
}

/// One resource request, parsed.
pub struct Call {
    pub state: Arc<KubeState>,
    pub route: Route,
    pub params: Params,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Who asks (for field managers and events).
    pub user: String,
    /// Who asks, with groups (for escalation checks and node restrictions).
    pub identity: crate::authn::Identity,
    /// Warnings admission raised during an update, sent with the answer.
    pub warnings: std::sync::Mutex<Vec<String>>,
}

impl Call {
    /// Whether the body is a server-side apply configuration (`application/apply-patch+yaml`).
    pub fn is_apply(&self) -> bool {
        crate::body::media_type(self.headers.get(axum::http::header::CONTENT_TYPE))
            == apply::CONTENT_TYPE
    }

    /// The namespace of the request (from the path).
    pub fn ns(&self) -> Option<&str> {
        self.route.namespace.as_deref()
    }

    /// The object name (the router guarantees it where a handler needs it).
    pub fn name(&self) -> &str {
        self.route.name.as_deref().unwrap_or("")
    }

    /// The key of the named object.
    pub fn key(&self) -> String {
        self.route.def.key(self.ns(), self.name())
    }

    /// Error target naming this request's object.
    pub fn target(&self) -> Target {
        Target::new(&self.route.def.group, &self.route.def.plural, self.name())
    }
}

/// Serves `/api/v1/...` (`group` = "") and `/apis/<group>/<version>/...`.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    state: Arc<KubeState>,
    method: Method,
    group: &str,
    version: &str,
    segments: &[&str],
    query: Option<&str>,
    headers: HeaderMap,
    body: Bytes,
    identity: crate::authn::Identity,
) -> Result<Response, ApiError> {
    let route = parse_route(&state.registry, group, version, segments)?;
    let params = Params::parse(query);
    let call = Call {
        state,
        route,
        params,
        headers,
        body,
        user: identity.user.clone(),
        identity,
        warnings: Default::default(),
    };
    let sub = call.route.subresource.clone();
    let named = call.route.name.is_some();
    let watching = call.route.legacy_watch || call.params.flag("watch");
    // A write of what the RBAC authorizer caches answers once the authorizer sees it (and anything
    // older), so a client's next request is judged by what it was told is stored.
    let rbac_write = call.route.def.group == crate::authz::rbac::GROUP && method != Method::GET;
    let state = call.state.clone();
    let answer = dispatch(call, &method, named, sub.as_deref(), watching).await;
    if rbac_write && answer.is_ok() {
        if let Err(e) = state.authz.rbac.caught_up(&state.storage) {
            tracing::warn!(error = %e, "RBAC view not refreshed after a write; the watch will");
        }
    }
    answer
}

async fn dispatch(
    call: Call,
    method: &Method,
    named: bool,
    sub: Option<&str>,
    watching: bool,
) -> Result<Response, ApiError> {
    match (method, named, sub) {
        (&Method::GET, false, None) if watching => watch::watch(call).await,
        (&Method::GET, false, None) => read::list(call).await,
        (&Method::GET, true, None) if watching => watch::watch(call).await,
        (&Method::GET, true, Some("scale")) => scale::get(call).await,
        (&Method::GET, true, Some("log")) => pod_log::log(call).await,
        (&Method::GET, true, Some("proxy")) => node_proxy::get(call).await,
        (&Method::GET, true, None | Some("status")) => read::get(call).await,
        (&Method::POST, false, None) => write::create(call).await,
        (&Method::POST, true, Some("eviction")) => eviction::evict(call).await,
        (&Method::POST, true, Some("binding")) => binding::bind(call).await,
        (&Method::PUT, true, Some("scale")) => scale::update(call).await,
        (&Method::PUT, true, None | Some("status") | Some("finalize") | Some("approval")) => {
            write::update(call).await
        }
        (&Method::PATCH, true, Some("scale")) => scale::patch(call).await,
        (&Method::PATCH, true, None | Some("status")) if call.is_apply() => {
            apply::apply(call).await
        }
        (&Method::PATCH, true, None | Some("status")) => write::patch(call).await,
        (&Method::DELETE, true, None) => delete::delete(call).await,
        (&Method::DELETE, false, None)
            if crate::discovery::verbs(&call.route.def).contains(&"deletecollection") =>
        {
            delete::delete_collection(call).await
        }
        _ => Err(ApiError::MethodNotAllowed(call.target())),
    }
}

/// Strips what list items omit (built-in list items carry no kind/apiVersion).
pub fn list_item(mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    obj
}

/// The name and namespace of a stored object, for messages.
pub fn describe(obj: &Value) -> String {
    let ns = object::namespace(obj);
    if ns.is_empty() {
        object::name(obj).to_string()
    } else {
        format!("{ns}/{}", object::name(obj))
    }
}
