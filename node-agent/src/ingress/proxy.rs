//! The HTTP side of the built-in Ingress controller: each request is routed by the current
//! [`RouteTable`] and forwarded to one ready endpoint of its backend (round robin), its body streamed
//! both ways; WebSocket and other upgrades are spliced through. `X-Forwarded-For`, `-Proto`, `-Host`
//! and `-Port` tell the backend where the request came from. No route: 404; no ready endpoint: 503; an
//! endpoint that refuses the connection is skipped for the next one (a request without a body), so a
//! pod leaving between two table updates costs no request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, Scheme};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::watch;
use tracing::debug;

use super::routes::{Backend, RouteTable};
use super::stats::IngressStats;

/// A response body of any origin.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// Headers that describe one connection, not the request (RFC 9110 §7.6.1), never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
/// Upgrade relays drop only what names the client's own connection.
const UPGRADE_DROPPED: &[&str] = &["keep-alive", "proxy-connection", "te", "trailer"];
/// Endpoints tried for one request before it fails with 502.
const ATTEMPTS: usize = 3;

/// The proxy shared by every connection of one proxy thread.
pub struct Proxy {
    table: watch::Receiver<Arc<RouteTable>>,
    client: Client<HttpConnector, Body>,
    next: AtomicUsize,
    stats: Arc<IngressStats>,
    metrics: Mutex<MetricCache>,
    authorities: Mutex<HashMap<SocketAddr, Authority>>,
}

/// The metric handles of one table's routes, so a request allocates no label set: keyed by the
/// addresses of the route's Ingress name and backend in that table and the status code. The cache
/// holds the table, so those addresses stay its own until a request of a newer table empties it.
#[derive(Default)]
struct MetricCache {
    table: Option<Arc<RouteTable>>,
    handles: HashMap<(usize, usize, u16), (Counter, Histogram)>,
}

fn text(status: StatusCode, msg: &str) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(format!("{msg}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn is_upgrade(h: &HeaderMap) -> bool {
    h.get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
        && h.contains_key(header::UPGRADE)
}

/// Removes the hop-by-hop headers, and those the `Connection` header names.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in HOP_BY_HOP {
        h.remove(*n);
    }
}

/// What every request of one client connection shares: who sent it, over what, to which port, as
/// header values made once per connection.
#[derive(Debug, Clone)]
pub struct Connection {
    client: SocketAddr,
    client_ip: HeaderValue,
    proto: HeaderValue,
    port: HeaderValue,
}

impl Connection {
    /// A connection from `client` to `local` over `scheme` (`http` or `https`).
    pub fn new(client: SocketAddr, local: SocketAddr, scheme: &'static str) -> Connection {
        Connection {
            client,
            client_ip: HeaderValue::from_str(&client.ip().to_string())
                .unwrap_or_else(|_| HeaderValue::from_static("")),
            proto: HeaderValue::from_static(scheme),
            port: HeaderValue::from(local.port()),
        }
    }
}

/// Adds the `X-Forwarded-*` headers (appending the client to an existing `X-Forwarded-For`).
fn forwarded(h: &mut HeaderMap, conn: &Connection, host: &HeaderValue) {
    let xff = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.is_empty() => {
            HeaderValue::from_str(&format!("{prev}, {}", conn.client.ip())).ok()
        }
        _ => Some(conn.client_ip.clone()),
    };
    if let Some(v) = xff {
        h.insert(HeaderName::from_static("x-forwarded-for"), v);
    }
    h.insert(
        HeaderName::from_static("x-forwarded-proto"),
        conn.proto.clone(),
    );
    h.insert(HeaderName::from_static("x-forwarded-host"), host.clone());
    h.insert(
        HeaderName::from_static("x-forwarded-port"),
        conn.port.clone(),
    );
}

impl Proxy {
    /// A proxy routing by `table`.
    pub fn new(table: watch::Receiver<Arc<RouteTable>>, stats: Arc<IngressStats>) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(std::time::Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .build(connector);
        Proxy {
            table,
            client,
            next: AtomicUsize::new(0),
            stats,
            metrics: Mutex::default(),
            authorities: Mutex::default(),
        }
    }

    /// Counts one answered request of `table`'s route (None: no route).
    fn observe(
        &self,
        table: &Arc<RouteTable>,
        route: Option<(&str, &Backend)>,
        code: u16,
        start: Instant,
    ) {
        let Ok(mut cache) = self.metrics.lock() else {
            return;
        };
        if !cache.table.as_ref().is_some_and(|t| Arc::ptr_eq(t, table)) {
            cache.table = Some(table.clone());
            cache.handles.clear();
        }
        let key = route.map_or((0, 0, code), |(i, b)| {
            (i.as_ptr() as usize, b as *const Backend as usize, code)
        });
        let (requests, latency) = cache.handles.entry(key).or_insert_with(|| match route {
            Some((i, b)) => self.stats.handles(i, &b.to_string(), code),
            None => self.stats.handles("", "", code),
        });
        requests.inc();
        latency.observe(start.elapsed().as_secs_f64());
    }

    /// Answers one request of `conn`.
    pub async fn serve(&self, req: Request<Incoming>, conn: &Connection) -> Response<Body> {
        let start = Instant::now();
        let table = self.table.borrow().clone();
        // An HTTP/2 client names the host in `:authority`.
        let host = match req.headers().get(header::HOST) {
            Some(h) => h.clone(),
            None => req
                .uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
                .unwrap_or_else(|| HeaderValue::from_static("")),
        };
        let Some(route) = table.route(host.to_str().unwrap_or(""), req.uri().path()) else {
            self.observe(&table, None, 404, start);
            return text(StatusCode::NOT_FOUND, "404 page not found");
        };
        let labels = Some((route.ingress, route.backend));
        let endpoints = table.endpoints(route.backend);
        if endpoints.is_empty() {
            self.observe(&table, labels, 503, start);
            return text(StatusCode::SERVICE_UNAVAILABLE, "503 no ready endpoint");
        }
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let resp = if is_upgrade(req.headers()) {
            let target = endpoints[first % endpoints.len()];
            self.upgrade(req, target, conn, &host).await
        } else {
            self.forward(req, endpoints, first, conn, host).await
        };
        self.observe(&table, labels, resp.status().as_u16(), start);
        resp
    }

    /// `http://<target>` as a URI authority, made once per endpoint.
    fn authority(&self, target: SocketAddr) -> Option<Authority> {
        let mut cache = self.authorities.lock().ok()?;
        if let Some(a) = cache.get(&target) {
            return Some(a.clone());
        }
        // Endpoints come and go; a bounded cache is enough.
        if cache.len() > 4096 {
            cache.clear();
        }
        let a = Authority::try_from(target.to_string()).ok()?;
        cache.insert(target, a.clone());
        Some(a)
    }

    async fn forward(
        &self,
        req: Request<Incoming>,
        endpoints: &[SocketAddr],
        first: usize,
        conn: &Connection,
        host: HeaderValue,
    ) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        // The backend hears HTTP/1.1 whatever the client spoke; `Host` stays the client's.
        strip_hop_by_hop(&mut parts.headers);
        forwarded(&mut parts.headers, conn, &host);
        // An HTTP/2 client's `:authority` reaches the backend as `Host` (else the client library
        // would put the endpoint's address there).
        if !parts.headers.contains_key(header::HOST) {
            parts.headers.insert(header::HOST, host);
        }
        // Only a request without a body can go to another endpoint after a refused connection.
        let bodyless = hyper::body::Body::is_end_stream(&body);
        let mut body = Some(body.boxed());
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| hyper::http::uri::PathAndQuery::from_static("/"));
        let tries = if bodyless {
            ATTEMPTS.min(endpoints.len())
        } else {
            1
        };
        let mut last_err = String::new();
        for k in 0..tries {
            let target = endpoints[(first + k) % endpoints.len()];
            let mut up = hyper::http::uri::Parts::default();
            up.scheme = Some(Scheme::HTTP);
            up.authority = self.authority(target);
            up.path_and_query = Some(path.clone());
            let Ok(uri) = Uri::from_parts(up) else {
                return text(StatusCode::BAD_REQUEST, "400 bad request path");
            };
            let mut out = Request::new(body.take().unwrap_or_else(empty));
            *out.method_mut() = parts.method.clone();
            // Copied only while another endpoint may still be tried.
            *out.headers_mut() = if k + 1 < tries {
                parts.headers.clone()
            } else {
                std::mem::take(&mut parts.headers)
            };
            *out.uri_mut() = uri;
            match self.client.request(out).await {
                Ok(resp) => {
                    let (mut rp, rb) = resp.into_parts();
                    strip_hop_by_hop(&mut rp.headers);
                    return Response::from_parts(rp, rb.boxed());
                }
                Err(e) if e.is_connect() => {
                    debug!(%target, error = %e, "ingress: endpoint refused; trying the next");
                    last_err = e.to_string();
                }
                Err(e) => {
                    debug!(%target, error = %e, "ingress: backend failed");
                    return text(StatusCode::BAD_GATEWAY, "502 bad gateway");
                }
            }
        }
        debug!(error = %last_err, "ingress: no endpoint accepted the connection");
        text(StatusCode::BAD_GATEWAY, "502 bad gateway")
    }

    async fn upgrade(
        &self,
        mut req: Request<Incoming>,
        target: SocketAddr,
        conn: &Connection,
        host: &HeaderValue,
    ) -> Response<Body> {
        let Ok(tcp) = tokio::net::TcpStream::connect(target).await else {
            return text(StatusCode::BAD_GATEWAY, "502 bad gateway");
        };
        let Ok((mut sender, backend)) =
            hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await
        else {
            return text(StatusCode::BAD_GATEWAY, "502 bad gateway");
        };
        tokio::spawn(async move {
            if let Err(e) = backend.with_upgrades().await {
                debug!(error = %e, "ingress: upgraded backend connection ended");
            }
        });
        forwarded(req.headers_mut(), conn, host);
        let host = host.to_str().unwrap_or("");
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let answer = keel_client_kit::upgrade::relay(
            &mut req,
            &mut sender,
            &path,
            host,
            UPGRADE_DROPPED,
            "ingress backend",
        )
        .await;
        match answer.map(|a| a.into_response::<Full<Bytes>>()) {
            Ok(Ok(r)) => r.map(|b| b.map_err(|never| match never {}).boxed()),
            _ => text(StatusCode::BAD_GATEWAY, "502 bad gateway"),
        }
    }
}

fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}
