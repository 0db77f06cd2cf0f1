//! Serving the etcd services on a member's client URLs.

use std::net::SocketAddr;
use std::sync::Arc;

use keel_raft::node::Node;
use tokio::net::TcpListener;
use tracing::info;

use super::authority::AuthorityFix;
use super::coalesce::Coalesce;

use super::auth::AuthService;
use super::cluster::ClusterService;
use super::election::ElectionService;
use super::header::HeaderSource;
use super::kv::KvService;
use super::lease::LeaseService;
use super::lock::LockService;
use super::maintenance::MaintenanceService;
use super::pb::{
    auth_server::AuthServer, cluster_server::ClusterServer, kv_server::KvServer,
    lease_server::LeaseServer, maintenance_server::MaintenanceServer, watch_server::WatchServer,
};
use super::v3electionpb::election_server::ElectionServer;
use super::v3lockpb::lock_server::LockServer;
use super::watch::WatchService;

/// etcd's gRPC receive limit: `--max-request-bytes` plus 512 KiB of overhead.
pub const MAX_RECV_BYTES: usize = keel_store::MAX_REQUEST_BYTES + 512 * 1024;
/// What tonic itself accepts: twice etcd's limit, so that messages between the two get etcd's
/// exact ResourceExhausted answer from [`check_recv_size`] instead of tonic's generic one.
const DECODE_LIMIT: usize = 2 * MAX_RECV_BYTES;

/// Refuses a decoded request over etcd's receive limit with etcd's (gRPC-Go's) status.
pub fn check_recv_size(len: usize) -> Result<(), tonic::Status> {
    if len > MAX_RECV_BYTES {
        return Err(tonic::Status::resource_exhausted(format!(
            "grpc: received message larger than max ({len} vs. {MAX_RECV_BYTES})"
        )));
    }
    Ok(())
}
/// How long in-flight requests and open streams get to finish on shutdown.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// etcd's default send limit (unbounded in practice).
const MAX_SEND_BYTES: usize = i32::MAX as usize;

/// Why a client URL could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("client URL {0:?}: expected http://HOST:PORT or https://HOST:PORT")]
    BadUrl(String),
    #[error("client URL {0:?} is https but no --cert-file and --key-file were given")]
    NoTls(String),
    #[error("listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Parses `http://host:port` or `https://host:port` into a socket address and whether it is TLS.
pub fn parse_url(url: &str) -> Result<(SocketAddr, bool), ServeError> {
    let (plain, tls) = match url.strip_prefix("https://") {
        Some(rest) => (format!("http://{rest}"), true),
        None => (url.to_string(), false),
    };
    keel_raft::node::parse_http_addr(&plain)
        .map(|a| (a, tls))
        .ok_or_else(|| ServeError::BadUrl(url.into()))
}

/// Accepts TLS connections on `listener` with the member's shared acceptor (handshakes in their own
/// tasks, failures logged and dropped), each wrapped as the plaintext port wraps its connections.
fn tls_incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> impl tokio_stream::Stream<Item = std::io::Result<AuthorityFix<Coalesce<keel_raft::tls::TlsConn>>>>
{
    use tokio_stream::StreamExt;
    keel_raft::tls::tls_incoming(listener, config, "client")
        .map(|r| r.map(|c| AuthorityFix::new(Coalesce::new(c))))
}

/// Binds every URL, then serves until `shutdown` resolves; `https://` URLs are served with
/// `tls`; `extra` adds the embedding process' series to `/metrics`.
pub async fn serve(
    node: Arc<Node>,
    urls: Vec<String>,
    tls: Option<Arc<rustls::ServerConfig>>,
    extra: Option<super::metrics::Extra>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let mut listeners = Vec::new();
    for u in &urls {
        let (addr, is_tls) = parse_url(u)?;
        let config = match (is_tls, &tls) {
            (false, _) => None,
            (true, Some(c)) => Some(c.clone()),
            (true, None) => return Err(ServeError::NoTls(u.clone())),
        };
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        info!(url = %u, "serving etcd v3 API");
        listeners.push((l, config));
    }
    let (tx, _) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    // One set of gRPC series for every client URL, as etcd has one gRPC server.
    let grpc_metrics = super::grpc_metrics::GrpcMetrics::new();
    for (l, config) in listeners {
        let grpc = tonic::service::Routes::default()
            .add_service(
                KvServer::new(KvService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT)
                    .max_encoding_message_size(MAX_SEND_BYTES),
            )
            .add_service(
                WatchServer::new(WatchService::new(
                    node.store().hub().clone(),
                    HeaderSource::new(node.clone()),
                    super::auth::AuthGate::new(node.clone()),
                ))
                .max_decoding_message_size(DECODE_LIMIT)
                .max_encoding_message_size(MAX_SEND_BYTES),
            )
            .add_service(
                LeaseServer::new(LeaseService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT),
            )
            .add_service(
                ClusterServer::new(ClusterService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT),
            )
            .add_service(
                AuthServer::new(AuthService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT),
            )
            .add_service(
                MaintenanceServer::new(MaintenanceService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT)
                    .max_encoding_message_size(MAX_SEND_BYTES),
            )
            .add_service(
                LockServer::new(LockService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT),
            )
            .add_service(
                ElectionServer::new(ElectionService::new(node.clone()))
                    .max_decoding_message_size(DECODE_LIMIT),
            );
        // /metrics, /health, /version and the JSON gateway beside gRPC, as etcd serves them on
        // its client port: HTTP/1.1 requests go to these routes, HTTP/2 ones to gRPC.
        let grpc = grpc
            .into_axum_router()
            .layer(axum::middleware::from_fn_with_state(
                grpc_metrics.clone(),
                super::grpc_metrics::count,
            ));
        // The JSON gateway passes its calls to the same gRPC router, metrics included.
        let routes = grpc
            .clone()
            .merge(super::gateway::routes(grpc))
            .merge(super::metrics::routes(
                node.clone(),
                extra.clone(),
                grpc_metrics.clone(),
            ))
            .fallback(super::metrics::fallback);
        let router = tonic::transport::Server::builder()
            .accept_http1(true)
            .add_routes(routes.into());
        let mut rx = tx.subscribe();
        let stop = async move {
            let _ = rx.changed().await;
        };
        tasks.push(match config {
            Some(c) => tokio::spawn(router.serve_with_incoming_shutdown(tls_incoming(l, c), stop)),
            None => tokio::spawn(
                router.serve_with_incoming_shutdown(super::authority::wrap_incoming(l), stop),
            ),
        });
    }
    shutdown.await;
    let _ = tx.send(true);
    // Graceful shutdown waits for open streams (watches, keep-alives) to end; bound it.
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    for mut t in tasks {
        if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
            t.abort();
        }
    }
    Ok(())
}
