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
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tracing::debug;

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
    let mut out = hyper::Request::builder()
        .method(req.method().clone())
        .uri(path);
    for (k, v) in req.headers() {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    out = out.header(header::HOST, addr.as_str());
    let Ok(out) = out.body(http_body_util::Empty::<bytes::Bytes>::new()) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot build the runtime request".into(),
        );
    };
    let mut resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("runtime streaming server {addr}: {e}"),
            )
        }
    };
    let status = resp.status();
    let headers: HeaderMap = resp.headers().clone();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut r = Response::builder().status(status);
        for (k, v) in &headers {
            if !HOP_BY_HOP.contains(&k.as_str()) {
                r = r.header(k, v);
            }
        }
        return r.body(Body::from(body)).unwrap_or_default();
    }
    let upstream = hyper::upgrade::on(&mut resp);
    let client = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match (client.await, upstream.await) {
            (Ok(c), Ok(u)) => {
                let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                    debug!(error = %e, "stream relay ended");
                }
            }
            (c, u) => debug!(
                client = c.is_ok(),
                runtime = u.is_ok(),
                "stream relay: an upgrade failed"
            ),
        }
    });
    let mut r = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in &headers {
        r = r.header(k, v);
    }
    r.body(Body::empty()).unwrap_or_default()
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
