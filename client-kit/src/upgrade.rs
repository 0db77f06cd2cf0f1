//! Relaying an HTTP connection upgrade (exec, attach, port-forward streams): the API server relays
//! kubectl's to the node agent, the agent relays it to the runtime's streaming server. The request goes
//! on without its body, the far end's answer comes back, and on `101 Switching Protocols` the two
//! upgraded connections are spliced until either side closes.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tracing::debug;

/// What the far end answered.
pub enum Answer {
    /// It switched protocols; the splice runs in its own task. Its response headers.
    Switched(HeaderMap),
    /// It refused the upgrade: its status, headers (less the dropped ones) and body.
    Refused {
        /// The far end's status.
        status: StatusCode,
        /// Its headers, less the dropped ones.
        headers: HeaderMap,
        /// Its body.
        body: Bytes,
    },
}

impl Answer {
    /// The answer for the client: `101` with the far end's headers, or its refusal as it came.
    pub fn into_response<B: From<Bytes>>(self) -> Result<http::Response<B>, http::Error> {
        let (status, headers, body) = match self {
            Answer::Switched(headers) => (StatusCode::SWITCHING_PROTOCOLS, headers, Bytes::new()),
            Answer::Refused {
                status,
                headers,
                body,
            } => (status, headers, body),
        };
        let mut r = http::Response::builder().status(status);
        for (k, v) in &headers {
            r = r.header(k, v);
        }
        r.body(B::from(body))
    }
}

/// Why the relay failed before an answer came back.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The request could not be built.
    #[error("cannot build the request: {0}")]
    Request(#[from] http::Error),
    /// The far end did not answer.
    #[error("{0}")]
    Send(#[from] hyper::Error),
}

/// Sends `req`'s method and headers (less `dropped`, lower-case names) to `path` with `Host: host`
/// over `sender`; `peer` names the far end in logs.
pub async fn relay<B: Send + 'static>(
    req: &mut Request<B>,
    sender: &mut SendRequest<Empty<Bytes>>,
    path: &str,
    host: &str,
    dropped: &[&str],
    peer: &'static str,
) -> Result<Answer, RelayError> {
    let mut out = Request::builder().method(req.method().clone()).uri(path);
    for (k, v) in req.headers() {
        if !dropped.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    let out = out.header(http::header::HOST, host).body(Empty::new())?;
    let mut resp = sender.send_request(out).await?;
    let status = resp.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let mut headers = resp.headers().clone();
        for name in dropped {
            headers.remove(*name);
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Ok(Answer::Refused {
            status,
            headers,
            body,
        });
    }
    let headers = resp.headers().clone();
    let upstream = hyper::upgrade::on(&mut resp);
    let client = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match (client.await, upstream.await) {
            (Ok(c), Ok(u)) => {
                let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                    debug!(error = %e, peer, "upgrade relay ended");
                }
            }
            (c, u) => debug!(
                client = c.is_ok(),
                far_end = u.is_ok(),
                peer,
                "upgrade relay: an upgrade failed"
            ),
        }
    });
    Ok(Answer::Switched(headers))
}
