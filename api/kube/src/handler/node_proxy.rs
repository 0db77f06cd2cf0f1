//! GET `nodes/{name}/proxy/{path}`: a request relayed to the node's agent (its `/metrics`,
//! `/healthz`, `/stats/summary`), over the same mutual TLS as pod logs, as upstream relays to a
//! kubelet. Only GET is relayed; the agent's answer (status, content type, body) comes back as is.

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;

use super::Call;
use crate::dial::{agent_address, get_from_agent};
use crate::status::{ApiError, Target};

/// GET `nodes/{name}/proxy/...`.
pub async fn get(call: Call) -> Result<Response, ApiError> {
    let name = call.name().to_string();
    let node = call
        .state
        .storage
        .get(&format!("/registry/minions/{name}"), true)
        .await?
        .ok_or_else(|| ApiError::NotFound(Target::new("", "nodes", &name)))?
        .object;
    let (host, port) = agent_address(&node).ok_or_else(|| {
        ApiError::BadRequest(format!("node {name} has no address to reach its agent at"))
    })?;
    let tls = call.state.kubelet_tls().ok_or_else(|| {
        ApiError::Unavailable("this API server has no client certificate for node agents".into())
    })?;
    let path = call.route.proxy_path.clone().unwrap_or_else(|| "/".into());
    // Only a plain path goes through: no scheme, authority or dot segments.
    if path.contains("..") || path.contains("//") || !path.starts_with('/') {
        return Err(ApiError::BadRequest(format!("invalid proxy path {path:?}")));
    }
    let query = call.params.encoded();
    let target = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let upstream = get_from_agent(tls, &host, port, &target).await?;
    let status =
        StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = upstream
        .headers()
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(header::HeaderValue::from_static("text/plain"));
    let body = Body::new(upstream.into_body().map_err(axum::Error::new));
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .map_err(|e| ApiError::Internal(e.to_string()))
}
