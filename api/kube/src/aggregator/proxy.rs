//! Relaying requests of a remote APIService's group-version to its Service (upstream's proxy handler).
//!
//! The request goes, method, path, query and body as they are, to one ready endpoint over HTTPS (HTTP/1.1),
//! verified with the APIService's caBundle unless `insecureSkipTLSVerify`. The client's credentials
//! (`Authorization`) and any `X-Remote-*` or `Impersonate-*` headers it sent are dropped; the user and
//! groups this server authenticated go in `X-Remote-User` and `X-Remote-Group`, and this member
//! authenticates itself with its front-proxy client certificate. The answer streams back as it comes, so a
//! watch works. Connection upgrades (exec-style streams) are not relayed.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::Value;
use tracing::debug;

use super::available::{connect, resolve};
use super::Aggregator;
use super::{is_available, service_of, PREFIX};
use crate::authn::Identity;
use crate::crd::registry::Registry;
use crate::status::ApiError;
use crate::storage::Storage;

/// Headers that describe one hop and never pass through a proxy.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The remote APIService answering `path`, if its group-version is not one this server serves itself.
pub(crate) fn target(registry: &Registry, storage: &Storage, segments: &[String]) -> Option<Value> {
    let (group, version) = match segments {
        [apis, group, version, ..] if apis == "apis" => (group, version),
        _ => return None,
    };
    // keel's own group-versions always answer here: built-ins and CRDs. `metrics.k8s.io` is keel's own
    // unless an APIService points it at a real metrics server.
    if !registry.of_group_version(group, version).is_empty() {
        return None;
    }
    let key = format!("{PREFIX}{version}.{group}");
    let page = storage
        .range(
            key.as_bytes(),
            &crate::storage::prefix_end(key.as_bytes()),
            0,
            1,
        )
        .ok()?;
    let (k, st) = page.items.into_iter().next()?;
    if k != key.as_bytes() {
        return None;
    }
    service_of(&st.object)?;
    Some(st.object)
}

/// Relays `req` to the APIService's backend.
pub(crate) async fn serve(
    storage: &Storage,
    aggregator: &Aggregator,
    apiservice: Value,
    identity: Option<Identity>,
    req: Request,
) -> Result<Response, ApiError> {
    // As upstream: an APIService whose checks fail is not proxied to.
    if !is_available(&apiservice) {
        return Err(ApiError::Unavailable("service unavailable".into()));
    }
    let ep = resolve(storage, &apiservice).map_err(|u| {
        debug!(reason = u.reason, message = %u.message, "no endpoint for an aggregated API");
        ApiError::Unavailable("service unavailable".into())
    })?;
    let tls = aggregator
        .tls_for(&apiservice)
        .map_err(|e| ApiError::Unavailable(format!("service unavailable: {e}")))?;
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut out = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(path_and_query);
    let headers = match out.headers_mut() {
        Some(h) => h,
        None => return Err(ApiError::Internal("building the proxied request".into())),
    };
    for (name, value) in parts.headers.iter() {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n)
            || n == "authorization"
            || n == "host"
            || n.starts_with("x-remote-")
            || n.starts_with("impersonate-")
        {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let Ok(h) = HeaderValue::from_str(&ep.server_name) {
        headers.insert(header::HOST, h);
    }
    if let Some(id) = &identity {
        if let Ok(u) = HeaderValue::from_str(&id.user) {
            headers.insert(HeaderName::from_static("x-remote-user"), u);
        }
        for g in &id.groups {
            if let Ok(v) = HeaderValue::from_str(g) {
                headers.append(HeaderName::from_static("x-remote-group"), v);
            }
        }
    }
    let out = out
        .body(body)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut sender = connect(tls, &ep).await.map_err(|e| {
        debug!(error = %e, "aggregated API unreachable");
        ApiError::Unavailable(format!("service unavailable: {e}"))
    })?;
    let resp = sender
        .send_request(out)
        .await
        .map_err(|e| ApiError::Unavailable(format!("service unavailable: {e}")))?;
    let (rparts, rbody) = resp.into_parts();
    let mut answer = Response::builder().status(rparts.status.as_u16());
    if let Some(h) = answer.headers_mut() {
        for (name, value) in rparts.headers.iter() {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                h.append(name.clone(), value.clone());
            }
        }
    }
    answer
        .body(Body::new(rbody.map_err(axum::Error::new)))
        .map_err(|e| ApiError::Internal(e.to_string()))
}
