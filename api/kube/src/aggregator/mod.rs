//! The aggregation layer (kube-aggregator's part of kube-apiserver): APIServices
//! (`apiregistration.k8s.io/v1`) say which server answers each group-version.
//!
//! - `autoregister` (Raft leader): one Local APIService per group-version keel serves itself (built-ins,
//!   `metrics.k8s.io`, every served CRD version), kept in step as CRDs come and go.
//! - `available` (every member; the leader writes): checks each remote APIService's Service, endpoints and
//!   discovery document, keeps the discovery documents for this member's `/apis` answers, and (leader
//!   only) sets the `Available` condition with upstream's reasons.
//! - `proxy`: a request to `/apis/<group>/<version>/...` of a remote APIService is relayed over HTTPS to a
//!   ready endpoint of its Service, with the user in `X-Remote-User`/`X-Remote-Group` and this member's
//!   front-proxy client certificate as its own identity.

pub(crate) mod autoregister;
pub(crate) mod available;
pub(crate) mod proxy;

use std::sync::{Arc, RwLock};

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

use crate::object::path;

/// Where APIServices are stored (upstream's key layout).
pub(crate) const PREFIX: &str = "/registry/apiregistration.k8s.io/apiservices/";
/// The label autoregister puts on what it manages (upstream's key; `onstart` for built-ins, `true` for
/// CRD group-versions).
pub(crate) const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// What a member knows about one remote (non-Local) group-version for its discovery answers.
#[derive(Debug, Clone)]
pub struct Remote {
    pub group: String,
    pub version: String,
    pub group_priority: i64,
    pub version_priority: i64,
    /// The backend's APIResourceList, from the last successful discovery check.
    pub resources: Option<Value>,
}

/// The aggregation layer's state on one member.
pub struct Aggregator {
    /// The front-proxy client certificate and key (PEM) this member presents to aggregated servers
    /// (replaced when renewed).
    client: RwLock<Option<(String, String)>>,
    /// The cluster CA (PEM): the trust root when an APIService has no caBundle (keel has no system roots
    /// to fall back to, as upstream does).
    cluster_ca: String,
    remote: RwLock<Vec<Remote>>,
}

impl Aggregator {
    pub fn new(client: Option<(String, String)>, cluster_ca: String) -> Self {
        Aggregator {
            client: RwLock::new(client),
            cluster_ca,
            remote: RwLock::new(Vec::new()),
        }
    }

    /// The remote group-versions as last checked, ordered as upstream orders them for discovery:
    /// group priority (highest first), then group name; inside a group version priority, then version.
    pub fn remote(&self) -> Vec<Remote> {
        let mut out = self
            .remote
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        out.sort_by(|a, b| {
            b.group_priority
                .cmp(&a.group_priority)
                .then_with(|| a.group.cmp(&b.group))
                .then_with(|| b.version_priority.cmp(&a.version_priority))
                .then_with(|| crate::crd::registry::version_order(&a.version, &b.version))
        });
        out
    }

    /// Presents `cert` with `key` (PEM) to aggregated servers from the next connection on.
    pub fn set_client(&self, cert: String, key: String) {
        *self.client.write().unwrap_or_else(|e| e.into_inner()) = Some((cert, key));
    }

    fn set_remote(&self, list: Vec<Remote>) {
        *self.remote.write().unwrap_or_else(|e| e.into_inner()) = list;
    }

    /// The TLS client configuration for one APIService: its caBundle (or the cluster CA) as roots unless
    /// it skips verification, and the front-proxy client certificate.
    pub fn tls_for(&self, apiservice: &Value) -> Result<Arc<rustls::ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let insecure = path(apiservice, "spec.insecureSkipTLSVerify")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(keel_client_kit::tls::any_server_cert(provider))
        } else {
            let b64 = path(apiservice, "spec.caBundle")
                .and_then(Value::as_str)
                .unwrap_or("");
            let pem = if b64.is_empty() {
                self.cluster_ca.as_bytes().to_vec()
            } else {
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| format!("caBundle is not base64: {e}"))?
            };
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
                roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
            }
            if roots.is_empty() {
                return Err("caBundle holds no certificate".into());
            }
            builder.with_root_certificates(roots)
        };
        let client = self
            .client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let cfg = match &client {
            Some((cert, key)) => {
                let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                let key =
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| e.to_string())?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(cfg))
    }
}

/// `(group, version)` of an APIService object.
pub(crate) fn group_version(apiservice: &Value) -> (String, String) {
    let s = |p: &str| {
        path(apiservice, p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (s("spec.group"), s("spec.version"))
}

/// The APIService's `spec.service`, when it names one (a remote APIService).
pub(crate) fn service_of(apiservice: &Value) -> Option<&Value> {
    path(apiservice, "spec.service").filter(|s| s.is_object())
}

/// Whether the APIService's `Available` condition is `True`.
pub(crate) fn is_available(apiservice: &Value) -> bool {
    path(apiservice, "status.conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Available")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}
