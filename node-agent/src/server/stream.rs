//! `kubectl exec`, `attach` and `port-forward` on the agent. The agent asks the runtime (CRI `Exec`,
//! `Attach`, `PortForward`) for a URL on its streaming server, then:
//!
//! - a **WebSocket** request (kubectl 1.31+'s first choice: `v5.channel.k8s.io` for exec and attach,
//!   `SPDY/3.1+portforward.k8s.io` for port-forward) is terminated here and spoken to the runtime as
//!   SPDY/3.1 ([`super::ws`]), since containerd 1.6 speaks no WebSocket protocol kubectl offers;
//! - a **SPDY/3.1** request (kubectl's fallback, `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`, older
//!   clients) is relayed to the runtime unchanged and, once the runtime answers `101 Switching
//!   Protocols`, bytes are copied both ways ([`relay`]). An answer other than 101 goes back to the
//!   client as it is.
//!
//! Every session that gets past its upgrade is counted by kind, transport and protocol
//! (`keel_agent_stream_sessions_total` in `/metrics`).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use keel_client_kit::upgrade;

/// Headers that describe the connection between two hops, not the request.
const HOP_BY_HOP: [&str; 5] = [
    "host",
    "authorization",
    "content-length",
    "transfer-encoding",
    "keep-alive",
];

/// A plain-text answer to the client.
pub(super) fn text(code: StatusCode, msg: String) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::from(msg))
        .unwrap_or_default()
}

/// The runtime's streaming server, connected over HTTP/1 with upgrades allowed.
pub(super) struct RuntimeHttp {
    /// `host:port`, for the Host header and error messages.
    pub addr: String,
    /// The path and query of the streaming URL.
    pub path: String,
    /// Sends the one upgrade request.
    pub sender: hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>,
}

/// Connects to the runtime's streaming `url` (plain HTTP on loopback, from CRI `Exec`, `Attach` or
/// `PortForward`); an unusable URL or an unreachable server is the answer to give the client.
pub(super) async fn connect_runtime(url: &str) -> Result<RuntimeHttp, Response> {
    let bad_url = || {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("runtime returned a bad streaming URL {url:?}"),
        )
    };
    let uri = url.parse::<hyper::Uri>().map_err(|_| bad_url())?;
    let host = uri.host().ok_or_else(bad_url)?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let gateway = |e: &dyn std::fmt::Display| {
        text(
            StatusCode::BAD_GATEWAY,
            format!("runtime streaming server {addr}: {e}"),
        )
    };
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| gateway(&e))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| gateway(&e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    Ok(RuntimeHttp { addr, path, sender })
}

/// What a streaming request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `kubectl exec`.
    Exec,
    /// `kubectl attach`.
    Attach,
    /// `kubectl port-forward`.
    PortForward,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Attach => "attach",
            Kind::PortForward => "portforward",
        }
    }
}

/// Serves one streaming request whose runtime URL is `url`: WebSocket requests are translated
/// ([`super::ws`]), SPDY ones relayed ([`relay`]).
pub async fn serve(req: Request, url: &str, kind: Kind, streams: super::ws::Streams) -> Response {
    if super::ws::is_websocket(req.headers()) {
        return match kind {
            Kind::PortForward => super::ws::port_forward(req, url).await,
            Kind::Exec | Kind::Attach => super::ws::exec(req, url, kind.name(), streams).await,
        };
    }
    let resp = relay(req, url).await;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let protocol = resp
            .headers()
            .get("X-Stream-Protocol-Version")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        super::ws::count(kind.name(), "spdy", &protocol);
    }
    resp
}

/// Relays the upgrade request `req` to `url` (the runtime's plain-HTTP streaming server on loopback) and
/// splices the two upgraded connections.
pub async fn relay(mut req: Request, url: &str) -> Response {
    let RuntimeHttp {
        addr,
        path,
        mut sender,
    } = match connect_runtime(url).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let answer =
        match upgrade::relay(&mut req, &mut sender, &path, &addr, &HOP_BY_HOP, "runtime").await {
            Ok(a) => a,
            Err(e) => {
                return text(
                    StatusCode::BAD_GATEWAY,
                    format!("runtime streaming server {addr}: {e}"),
                )
            }
        };
    answer.into_response::<Body>().unwrap_or_default()
}

/// The value of boolean query parameter `k` (`1`, `true`, … as Go reads them).
pub fn flag(query: &str, k: &str) -> bool {
    form_urlencoded::parse(query.as_bytes()).any(|(key, v)| {
        key == k && matches!(v.as_ref(), "1" | "t" | "T" | "true" | "True" | "TRUE")
    })
}

/// Every value of query parameter `k`, in order.
pub fn values(query: &str, k: &str) -> Vec<String> {
    form_urlencoded::parse(query.as_bytes())
        .filter(|(key, _)| key == k)
        .map(|(_, v)| v.into_owned())
        .collect()
}
