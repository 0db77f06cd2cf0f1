//! The HTTPS POST of one AdmissionReview: to a Service's ready endpoint (checked as
//! `<name>.<namespace>.svc`) or to a URL, verified with the webhook's caBundle, bounded by its timeout.
//! Errors read as upstream's client writes them (`Post "https://…?timeout=10s": …`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::storage::Storage;

/// The largest answer read from a webhook.
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// Where one webhook is reached.
struct Target {
    /// `host:port` dialled.
    authority: String,
    /// The name the certificate must carry.
    server_name: String,
    /// The URL as errors print it, with the timeout query.
    shown: String,
    /// Path and query sent.
    path_and_query: String,
}

/// Idle connections kept per webhook endpoint.
const IDLE_PER_ENDPOINT: usize = 16;

/// A connection's sending half.
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Where kept connections go: the address dialled, the certificate name checked, the CA trusted.
type EndpointKey = (String, String, Vec<u8>);

/// TLS client configurations by caBundle (built once each), and idle keep-alive connections by
/// endpoint, so a call does not pay a TCP and TLS handshake each time.
#[derive(Default)]
pub struct TlsCache {
    configs: Mutex<HashMap<Vec<u8>, Arc<rustls::ClientConfig>>>,
    idle: Mutex<HashMap<EndpointKey, Vec<Sender>>>,
}

impl TlsCache {
    /// An idle connection to the endpoint that is still open.
    fn take(&self, key: &EndpointKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(s) = list.pop() {
            if !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    /// Keeps a connection whose exchange finished, for the next call.
    fn put(&self, key: EndpointKey, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // Endpoints come and go with Services; a map that somehow grows large starts again.
        if idle.len() > 256 {
            idle.clear();
        }
        let list = idle.entry(key).or_default();
        if list.len() < IDLE_PER_ENDPOINT {
            list.push(sender);
        }
    }

    /// The configuration trusting `ca` (PEM), or the system's roots when `ca` is empty (as upstream).
    fn config(&self, ca: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut cache = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.get(ca) {
            return Ok(c.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        if ca.is_empty() {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        } else {
            for c in CertificateDer::pem_slice_iter(ca) {
                let c = c.map_err(|e| format!("caBundle: {e}"))?;
                roots.add(c).map_err(|e| format!("caBundle: {e}"))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        // Bundles change rarely; a cache that somehow grows large starts again.
        if cache.len() > 256 {
            cache.clear();
        }
        cache.insert(ca.to_vec(), cfg.clone());
        Ok(cfg)
    }
}

fn target(
    storage: &Storage,
    cc: &WebhookClientConfig,
    timeout: Duration,
) -> Result<Target, String> {
    let query = format!("timeout={}s", timeout.as_secs());
    if let Some(svc) = &cc.service {
        let port = i64::from(svc.port.unwrap_or(443));
        let ns = svc.namespace.as_str();
        let name = svc.name.as_str();
        let path = match svc.path.as_deref().unwrap_or("") {
            "" => "/".to_string(),
            p if p.len() > 1 => p.trim_end_matches('/').to_string(),
            p => p.to_string(),
        };
        let shown = format!("https://{name}.{ns}.svc:{port}{path}?{query}");
        let ep = crate::dial::resolve_service(storage, ns, name, port).map_err(|u| {
            format!(
                "Post \"{shown}\": {}",
                no_endpoint_text(u.reason, name, &u.message)
            )
        })?;
        return Ok(Target {
            authority: ep.authority(),
            server_name: ep.server_name,
            shown,
            path_and_query: format!("{path}?{query}"),
        });
    }
    let raw = cc
        .url
        .as_deref()
        .ok_or("webhook configuration must have either service or URL")?;
    let u = url::Url::parse(raw).map_err(|e| format!("Unparsable URL: {e}"))?;
    let host = u.host_str().ok_or("Unparsable URL: no host")?.to_string();
    let port = u.port().unwrap_or(443);
    let path = match u.path() {
        "" => "/",
        p => p,
    };
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok(Target {
        authority: crate::dial::join_host_port(&bare, port),
        server_name: bare,
        shown: format!("{}?{query}", raw.trim_end_matches('?')),
        path_and_query: format!("{path}?{query}"),
    })
}

/// What upstream's service resolver says when a Service has no endpoint to dial.
fn no_endpoint_text(reason: &str, name: &str, message: &str) -> String {
    match reason {
        "ServiceNotFound" => format!("service \"{name}\" not found"),
        "EndpointsNotFound" | "MissingEndpoints" => {
            format!("no endpoints available for service \"{name}\"")
        }
        _ => message.to_string(),
    }
}

/// Why a call failed: the text after `failed to call webhook: `, or an answer that was not 2xx.
#[derive(Debug)]
pub enum CallError {
    /// Transport: no endpoint, refused, TLS, timeout.
    Transport(String),
    /// The webhook answered with a non-2xx status.
    Status { code: u16, text: String },
}

/// POSTs `body` to the webhook and returns the answer's bytes.
pub async fn post(
    tls: &TlsCache,
    storage: &Storage,
    cc: &WebhookClientConfig,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<Vec<u8>, CallError> {
    let t = target(storage, cc, timeout).map_err(CallError::Transport)?;
    let shown = t.shown.clone();
    let fail =
        move |e: &dyn std::fmt::Display| CallError::Transport(format!("Post \"{shown}\": {e}"));
    let ca = match cc.ca_bundle.as_ref() {
        Some(b) if !b.0.is_empty() => decode_bundle(&b.0),
        _ => Vec::new(),
    };
    let cfg = tls.config(&ca).map_err(|e| fail(&e))?;
    let key = (t.authority.clone(), t.server_name.clone(), ca);
    let body = Bytes::from(body);
    let exchange = async {
        // A kept connection the webhook closed meanwhile fails before any answer; the request then
        // goes once more on a new connection.
        let mut pooled = tls.take(&key);
        loop {
            let reused = pooled.is_some();
            let mut sender = match pooled.take() {
                Some(s) => s,
                None => {
                    let stream =
                        crate::dial::dial_tls(cfg.clone(), &t.authority, &t.server_name, timeout)
                            .await
                            .map_err(|e| fail(&e))?;
                    let (sender, conn) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .map_err(|e| fail(&e))?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    sender
                }
            };
            let req = hyper::Request::post(t.path_and_query.as_str())
                .header(hyper::header::HOST, t.server_name.as_str())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::ACCEPT, "application/json, */*")
                .body(Full::new(body.clone()))
                .map_err(|e| fail(&e))?;
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(req).await,
                Err(e) => Err(e),
            };
            let resp = match sent {
                Ok(r) => r,
                Err(_) if reused => continue,
                Err(e) => return Err(fail(&e)),
            };
            let code = resp.status().as_u16();
            let limited = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE);
            let bytes = limited
                .collect()
                .await
                .map_err(|e| fail(&e))?
                .to_bytes()
                .to_vec();
            tls.put(key.clone(), sender);
            if !(200..300).contains(&code) {
                return Err(CallError::Status {
                    code,
                    text: status_text(code, &bytes),
                });
            }
            return Ok(bytes);
        }
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(CallError::Transport(format!(
            "Post \"{}\": context deadline exceeded",
            t.shown
        ))),
    }
}

/// A caBundle is PEM; the JSON carries it base64-encoded, which serde already undid. Some writers
/// base64 it twice; accept that too.
fn decode_bundle(raw: &[u8]) -> Vec<u8> {
    if raw.starts_with(b"-----") {
        return raw.to_vec();
    }
    base64::engine::general_purpose::STANDARD
        .decode(raw)
        .unwrap_or_else(|_| raw.to_vec())
}

/// client-go's text for a non-2xx answer: a Status body's message, else its generic sentences.
fn status_text(code: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if v.get("kind").and_then(|k| k.as_str()) == Some("Status") {
            if let Some(m) = v.get("message").and_then(|m| m.as_str()) {
                return m.to_string();
            }
        }
    }
    match code {
        404 => "the server could not find the requested resource".into(),
        500..=599 => format!(
            "an error on the server ({:?}) has prevented the request from succeeding",
            String::from_utf8_lossy(&body[..body.len().min(256)])
        ),
        _ => format!(
            "the server responded with the status code {code} but did not return more information"
        ),
    }
}
