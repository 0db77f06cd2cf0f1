//! etcd's gRPC server series (go-grpc-prometheus, which etcd registers on its gRPC server):
//! `grpc_server_started_total`, `grpc_server_handled_total`, `grpc_server_msg_received_total`
//! and `grpc_server_msg_sent_total`, labelled by `grpc_type`, `grpc_service`, `grpc_method` (and
//! `grpc_code` for handled calls).
//!
//! Counted by a middleware in front of the gRPC routes: a call starts when its request arrives,
//! messages are counted from the gRPC length-prefixed framing of the request and response
//! bodies, and the call is handled with the `grpc-status` of its trailers (or of a trailers-only
//! answer); a call whose answer is dropped before its trailers was cancelled.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Label values in Prometheus' sorted order (as etcd's exposition prints them).
type Labels = Vec<(&'static str, String)>;

/// How a method streams (go-grpc-prometheus' `grpc_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Unary,
    ServerStream,
    BidiStream,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Unary => "unary",
            Kind::ServerStream => "server_stream",
            Kind::BidiStream => "bidi_stream",
        }
    }
}

/// The etcd 3.4 methods etcd pre-registers (every series exists at 0 from the start).
const REGISTERED: &[(&str, &[(&str, Kind)])] = &[
    (
        "etcdserverpb.KV",
        &[
            ("Range", Kind::Unary),
            ("Put", Kind::Unary),
            ("DeleteRange", Kind::Unary),
            ("Txn", Kind::Unary),
            ("Compact", Kind::Unary),
        ],
    ),
    ("etcdserverpb.Watch", &[("Watch", Kind::BidiStream)]),
    (
        "etcdserverpb.Lease",
        &[
            ("LeaseGrant", Kind::Unary),
            ("LeaseRevoke", Kind::Unary),
            ("LeaseKeepAlive", Kind::BidiStream),
            ("LeaseTimeToLive", Kind::Unary),
            ("LeaseLeases", Kind::Unary),
        ],
    ),
    (
        "etcdserverpb.Cluster",
        &[
            ("MemberAdd", Kind::Unary),
            ("MemberRemove", Kind::Unary),
            ("MemberUpdate", Kind::Unary),
            ("MemberList", Kind::Unary),
            ("MemberPromote", Kind::Unary),
        ],
    ),
    (
        "etcdserverpb.Maintenance",
        &[
            ("Alarm", Kind::Unary),
            ("Status", Kind::Unary),
            ("Defragment", Kind::Unary),
            ("Hash", Kind::Unary),
            ("HashKV", Kind::Unary),
            ("Snapshot", Kind::ServerStream),
            ("MoveLeader", Kind::Unary),
        ],
    ),
    (
        "etcdserverpb.Auth",
        &[
            ("AuthEnable", Kind::Unary),
            ("AuthDisable", Kind::Unary),
            ("Authenticate", Kind::Unary),
            ("UserAdd", Kind::Unary),
            ("UserGet", Kind::Unary),
            ("UserList", Kind::Unary),
            ("UserDelete", Kind::Unary),
            ("UserChangePassword", Kind::Unary),
            ("UserGrantRole", Kind::Unary),
            ("UserRevokeRole", Kind::Unary),
            ("RoleAdd", Kind::Unary),
            ("RoleGet", Kind::Unary),
            ("RoleList", Kind::Unary),
            ("RoleDelete", Kind::Unary),
            ("RoleGrantPermission", Kind::Unary),
            ("RoleRevokePermission", Kind::Unary),
        ],
    ),
];

/// Served too, but registered after etcd's metrics were initialised: counted once called.
const LATE: &[(&str, &[(&str, Kind)])] = &[
    (
        "v3lockpb.Lock",
        &[("Lock", Kind::Unary), ("Unlock", Kind::Unary)],
    ),
    (
        "v3electionpb.Election",
        &[
            ("Campaign", Kind::Unary),
            ("Proclaim", Kind::Unary),
            ("Leader", Kind::Unary),
            ("Observe", Kind::ServerStream),
            ("Resign", Kind::Unary),
        ],
    ),
];

/// gRPC status codes by number, with gRPC-Go's names.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// The four series of one client listener set.
#[derive(Default)]
pub struct GrpcMetrics {
    started: Family<Labels, Counter>,
    handled: Family<Labels, Counter>,
    received: Family<Labels, Counter>,
    sent: Family<Labels, Counter>,
}

/// One known method.
#[derive(Clone, Copy)]
struct Method {
    service: &'static str,
    method: &'static str,
    kind: Kind,
}

impl Method {
    fn labels(&self) -> Labels {
        vec![
            ("grpc_method", self.method.to_string()),
            ("grpc_service", self.service.to_string()),
            ("grpc_type", self.kind.name().to_string()),
        ]
    }

    fn code_labels(&self, code: &str) -> Labels {
        vec![
            ("grpc_code", code.to_string()),
            ("grpc_method", self.method.to_string()),
            ("grpc_service", self.service.to_string()),
            ("grpc_type", self.kind.name().to_string()),
        ]
    }
}

impl GrpcMetrics {
    /// The series, with etcd's methods at 0 for every code, as etcd starts.
    pub fn new() -> Arc<Self> {
        let m = GrpcMetrics::default();
        for (service, methods) in REGISTERED {
            for &(method, kind) in *methods {
                let me = Method {
                    service,
                    method,
                    kind,
                };
                let _ = m.started.get_or_create(&me.labels());
                let _ = m.received.get_or_create(&me.labels());
                let _ = m.sent.get_or_create(&me.labels());
                for code in CODES {
                    let _ = m.handled.get_or_create(&me.code_labels(code));
                }
            }
        }
        Arc::new(m)
    }

    /// Adds the four series to a scrape.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "grpc_server_started",
            "Total number of RPCs started on the server",
            self.started.clone(),
        );
        r.register(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure",
            self.handled.clone(),
        );
        r.register(
            "grpc_server_msg_received",
            "Total number of RPC stream messages received on the server",
            self.received.clone(),
        );
        r.register(
            "grpc_server_msg_sent",
            "Total number of gRPC stream messages sent by the server",
            self.sent.clone(),
        );
    }

    fn method(path: &str) -> Option<Method> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        REGISTERED.iter().chain(LATE).find_map(|(s, methods)| {
            if *s != service {
                return None;
            }
            methods
                .iter()
                .find(|(m, _)| *m == method)
                .map(|&(m, kind)| Method {
                    service: s,
                    method: m,
                    kind,
                })
        })
    }
}

/// The middleware (`axum::middleware::from_fn_with_state`) that counts the gRPC calls it sees.
pub async fn count(State(m): State<Arc<GrpcMetrics>>, req: Request, next: Next) -> Response {
    let is_grpc = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    // Unknown services and methods are not counted (etcd answers them before its interceptors).
    let Some(method) = is_grpc
        .then(|| GrpcMetrics::method(req.uri().path()))
        .flatten()
    else {
        return next.run(req).await;
    };
    m.started.get_or_create(&method.labels()).inc();
    let (parts, body) = req.into_parts();
    let received = m.received.get_or_create(&method.labels()).clone();
    let req = Request::from_parts(
        parts,
        Body::new(Counted {
            inner: body,
            frames: Frames::default(),
            messages: received,
            done: None,
        }),
    );
    let resp = next.run(req).await;
    let (parts, body) = resp.into_parts();
    let sent = m.sent.get_or_create(&method.labels()).clone();
    // A trailers-only answer (an error before any message) carries its status in the headers.
    let done = match status_of(&parts.headers) {
        Some(code) => {
            m.handled.get_or_create(&method.code_labels(code)).inc();
            None
        }
        None => Some(Handled {
            metrics: m.clone(),
            method,
            recorded: false,
        }),
    };
    Response::from_parts(
        parts,
        Body::new(Counted {
            inner: body,
            frames: Frames::default(),
            messages: sent,
            done,
        }),
    )
}

/// The `grpc-status` of a header or trailer map, by name.
fn status_of(h: &HeaderMap) -> Option<&'static str> {
    let v = h.get("grpc-status")?.to_str().ok()?.parse::<usize>().ok()?;
    Some(CODES.get(v).copied().unwrap_or("Unknown"))
}

/// Records a call's completion once: at its trailers, or as cancelled if it is dropped first.
struct Handled {
    metrics: Arc<GrpcMetrics>,
    method: Method,
    recorded: bool,
}

impl Handled {
    fn record(&mut self, code: &str) {
        if !self.recorded {
            self.recorded = true;
            self.metrics
                .handled
                .get_or_create(&self.method.code_labels(code))
                .inc();
        }
    }
}

impl Drop for Handled {
    fn drop(&mut self) {
        self.record("Canceled");
    }
}

/// Counts complete messages in a gRPC body: each is a 1-byte flag, a 4-byte big-endian length
/// and that many bytes.
#[derive(Default)]
struct Frames {
    header: [u8; 5],
    have: usize,
    left: u64,
}

impl Frames {
    /// Feeds the next bytes of the body; returns how many messages they completed.
    fn feed(&mut self, mut b: &[u8]) -> u64 {
        let mut done = 0;
        while !b.is_empty() {
            if self.have < 5 {
                let n = (5 - self.have).min(b.len());
                self.header[self.have..self.have + n].copy_from_slice(&b[..n]);
                self.have += n;
                b = &b[n..];
                if self.have == 5 {
                    let len = u32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]);
                    self.left = u64::from(len);
                    if self.left == 0 {
                        done += 1;
                        self.have = 0;
                    }
                }
            } else {
                let n = usize::try_from(self.left)
                    .unwrap_or(usize::MAX)
                    .min(b.len());
                b = &b[n..];
                self.left -= n as u64;
                if self.left == 0 {
                    done += 1;
                    self.have = 0;
                }
            }
        }
        done
    }
}

/// A body whose messages are counted (and, for an answer, whose trailers complete the call).
struct Counted {
    inner: Body,
    frames: Frames,
    messages: Counter,
    done: Option<Handled>,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = this.frames.feed(data);
                    if n > 0 {
                        this.messages.inc_by(n);
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    if let Some(done) = this.done.as_mut() {
                        done.record(status_of(trailers).unwrap_or("Unknown"));
                    }
                }
            }
            Poll::Ready(None) => {
                if let Some(done) = this.done.as_mut() {
                    done.record("Unknown");
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_counted_across_chunk_boundaries() {
        let mut f = Frames::default();
        let mut body = vec![0, 0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0];
        body.extend([0, 0, 0, 0, 1, b'x']);
        let total: u64 = body.chunks(2).map(|c| f.feed(c)).sum();
        assert_eq!(total, 3);
        assert_eq!(Frames::default().feed(&body), 3);
        assert_eq!(Frames::default().feed(&body[..7]), 0);
    }

    #[test]
    fn methods_are_known_by_path() {
        let m = GrpcMetrics::method("/etcdserverpb.Watch/Watch").map(|m| m.kind);
        assert_eq!(m, Some(Kind::BidiStream));
        assert!(GrpcMetrics::method("/etcdserverpb.KV/Nope").is_none());
        assert!(GrpcMetrics::method("/metrics").is_none());
    }

    #[test]
    fn every_registered_method_starts_at_zero() {
        let m = GrpcMetrics::new();
        let mut r = Registry::default();
        m.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap_or_default();
        assert!(text.contains(
            r#"grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 0"#
        ), "{text}");
        assert!(text.contains(
            r#"grpc_server_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 0"#
        ));
    }
}
