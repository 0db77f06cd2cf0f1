//! The built-in Ingress controller every agent runs (class `keel`, controller `keel.io/ingress`), as
//! k3s ships Traefik but in the agent itself: an HTTP reverse proxy on the node's port 80 that routes the
//! Ingresses of its classes to the ready endpoints of their Services.
//!
//! - [`routes`]: the routing table (hosts, paths, precedence, endpoints);
//! - [`proxy`]: forwarding, upgrades, the `X-Forwarded-*` headers;
//! - [`stats`]: requests and latency per Ingress and backend;
//! - [`tls`]: HTTPS on port 443 with the Ingresses' certificates, chosen by SNI.
//!
//! Which Ingresses are its own: those whose `ingressClassName` (or legacy `kubernetes.io/ingress.class`
//! annotation) names an IngressClass whose `controller` is [`CONTROLLER`]; any other Ingress is left
//! alone. The table is rebuilt after each burst of changes to Ingresses, IngressClasses, Services and
//! EndpointSlices and swapped in whole: requests in flight finish on the table they started with, and
//! no connection is dropped by a change. Each Ingress's `status.loadBalancer.ingress` lists the
//! InternalIPs of the nodes (every agent writes the same list, so they agree).

pub mod proxy;
pub mod routes;
pub mod stats;
pub mod tls;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

pub use proxy::Proxy;
pub use routes::RouteTable;
pub use stats::IngressStats;

use crate::error::{Error, Result};
use keel_client_kit::reflect::reflect_all;

/// The `spec.controller` of the IngressClasses this controller serves.
pub const CONTROLLER: &str = "keel.io/ingress";
/// The legacy annotation naming an Ingress's class.
const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";
/// How long a change waits for the rest of its burst before the table is rebuilt.
const BATCH: Duration = Duration::from_millis(20);

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct IngressOptions {
    /// Where plain HTTP is served (the node's port 80 by default).
    pub http: SocketAddr,
    /// Where HTTPS is served (the node's port 443 by default; None: not at all).
    pub https: Option<SocketAddr>,
    /// Proxy threads, each with its own listening sockets (`SO_REUSEPORT`), connections and backend
    /// pool, so a request never changes thread (as nginx's workers).
    pub workers: usize,
}

/// The default number of proxy threads: one per CPU.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A socket bound to `addr` with `SO_REUSEPORT`, so each proxy thread listens on its own.
fn reuse_bind(addr: SocketAddr) -> Result<tokio::net::TcpSocket> {
    let fail = |e: std::io::Error| Error::Config(format!("ingress: cannot listen on {addr}: {e}"));
    let s = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(fail)?;
    s.set_reuseaddr(true).map_err(fail)?;
    s.set_reuseport(true).map_err(fail)?;
    s.bind(addr).map_err(fail)?;
    Ok(s)
}

/// Runs one proxy thread on a runtime of its own until `stop`'s sender is dropped.
fn start_worker(
    i: usize,
    http: tokio::net::TcpSocket,
    https: Option<(tokio::net::TcpSocket, tokio_rustls::TlsAcceptor)>,
    proxy: Arc<Proxy>,
    mut stop: watch::Receiver<()>,
) -> Result<()> {
    std::thread::Builder::new()
        .name(format!("ingress-{i}"))
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    warn!(error = %e, "ingress: no runtime for a proxy thread");
                    return;
                }
            };
            rt.block_on(async move {
                let listen = |s: tokio::net::TcpSocket| match s.listen(4096) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        warn!(error = %e, "ingress: listen failed");
                        None
                    }
                };
                let Some(http) = listen(http) else { return };
                let secure = async {
                    match https.and_then(|(s, acceptor)| Some((listen(s)?, acceptor))) {
                        Some((l, acceptor)) => serve(l, proxy.clone(), Some(acceptor)).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = serve(http, proxy.clone(), None) => {}
                    () = secure => {}
                    _ = stop.changed() => {}
                }
            });
        })
        .map(|_| ())
        .map_err(|e| Error::Config(format!("ingress: cannot start a proxy thread: {e}")))
}

/// The Ingresses `classes` make this controller's.
fn ours<'a>(ingresses: &'a [Arc<Ingress>], classes: &[Arc<IngressClass>]) -> Vec<&'a Ingress> {
    let mine: BTreeSet<&str> = classes
        .iter()
        .filter(|c| c.spec.as_ref().and_then(|s| s.controller.as_deref()) == Some(CONTROLLER))
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    ingresses
        .iter()
        .filter(|i| {
            let class = i
                .spec
                .as_ref()
                .and_then(|s| s.ingress_class_name.as_deref())
                .or_else(|| {
                    i.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(LEGACY_CLASS))
                        .map(String::as_str)
                });
            class.is_some_and(|c| mine.contains(c))
        })
        .map(|i| i.as_ref())
        .collect()
}

/// The caches the table is built from.
struct Caches {
    ingresses: Store<Ingress>,
    classes: Store<IngressClass>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    nodes: Store<Node>,
}

impl Caches {
    async fn ready(&self) -> Result<()> {
        let ended = |what| move |_| Error::WatchEnded(what);
        self.ingresses
            .wait_until_ready()
            .await
            .map_err(ended("ingresses"))?;
        self.classes
            .wait_until_ready()
            .await
            .map_err(ended("ingressclasses"))?;
        self.services
            .wait_until_ready()
            .await
            .map_err(ended("services"))?;
        self.slices
            .wait_until_ready()
            .await
            .map_err(ended("endpointslices"))?;
        self.nodes
            .wait_until_ready()
            .await
            .map_err(ended("nodes"))?;
        Ok(())
    }
}

/// The nodes' InternalIPs, sorted: what every Ingress of the class reports as its address.
fn node_addresses(nodes: &[Arc<Node>]) -> Vec<String> {
    let mut ips: Vec<String> = nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// Writes `status.loadBalancer.ingress` of `ing` when it differs from `ips`.
async fn report(client: &Client, ing: &Ingress, ips: &[String]) {
    let have: Vec<String> = ing
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone())
        .collect();
    if have == ips {
        return;
    }
    let (Some(ns), Some(name)) = (
        ing.metadata.namespace.as_deref(),
        ing.metadata.name.as_deref(),
    ) else {
        return;
    };
    let api: Api<Ingress> = Api::namespaced(client.clone(), ns);
    let list: Vec<serde_json::Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let patch = json!({"status": {"loadBalancer": {"ingress": list}}});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        debug!(ingress = %format!("{ns}/{name}"), error = %e, "ingress status not written; next rebuild retries");
    }
}

/// Rebuilds the table after every burst of changes, once the caches have synced.
async fn keep_table(
    client: Client,
    caches: Caches,
    wake: Arc<Notify>,
    table: watch::Sender<Arc<RouteTable>>,
    certs: Arc<tls::SniCerts>,
) -> Result<()> {
    caches.ready().await?;
    let mut secrets = tls::SecretCache::default();
    let mut first = true;
    loop {
        let ingresses = caches.ingresses.state();
        let classes = caches.classes.state();
        let services = caches.services.state();
        let slices = caches.slices.state();
        let mine = ours(&ingresses, &classes);
        let built = RouteTable::build(
            mine.iter().copied(),
            services.iter().map(|s| s.as_ref()),
            slices.iter().map(|s| s.as_ref()),
        );
        let (hosts, backends) = built.size();
        if first {
            info!(
                ingresses = mine.len(),
                hosts, backends, "ingress routes synced"
            );
            first = false;
        } else {
            debug!(
                ingresses = mine.len(),
                hosts, backends, "ingress routes rebuilt"
            );
        }
        table.send_replace(Arc::new(built));
        secrets.refresh(&client, &mine, &certs).await;
        let ips = node_addresses(&caches.nodes.state());
        for ing in &mine {
            report(&client, ing, &ips).await;
        }
        wake.notified().await;
        tokio::time::sleep(BATCH).await;
    }
}

/// Serves `listener` through `proxy` until dropped, over TLS when `tls` is given.
async fn serve(
    listener: tokio::net::TcpListener,
    proxy: Arc<Proxy>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "ingress: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let proxy = proxy.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let conn = Arc::new(proxy::Connection::new(peer, local, scheme));
            let svc = service_fn(move |req| {
                let proxy = proxy.clone();
                let conn = conn.clone();
                async move { Ok::<_, std::convert::Infallible>(proxy.serve(req, &conn).await) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let served = match tls {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp));
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                                .await
                        }
                        Ok(Err(e)) => {
                            debug!(%peer, error = %e, "ingress TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    }
                }
                None => {
                    builder
                        .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
                        .await
                }
            };
            if let Err(e) = served {
                debug!(%peer, error = %e, "ingress connection ended");
            }
        });
    }
}

/// Runs the controller until dropped: binds `opts.http`, keeps the routing table and the Ingresses'
/// status current, and proxies. Fails when the port cannot be bound or a watch ends.
pub async fn run(client: Client, opts: IngressOptions, stats: Arc<IngressStats>) -> Result<()> {
    let workers = opts.workers.max(1);
    let http: Vec<_> = (0..workers)
        .map(|_| reuse_bind(opts.http))
        .collect::<Result<_>>()?;
    let certs = Arc::new(tls::SniCerts::new()?);
    let mut https = Vec::new();
    if let Some(addr) = opts.https {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("ingress TLS: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        for _ in 0..workers {
            https.push((reuse_bind(addr)?, acceptor.clone()));
        }
    }
    let (table_tx, table_rx) = watch::channel(Arc::new(RouteTable::default()));
    // Dropped with this future: every proxy thread then ends, closing its connections.
    let (_stop, stopped) = watch::channel(());
    let mut https = https.into_iter();
    for (i, socket) in http.into_iter().enumerate() {
        let proxy = Arc::new(Proxy::new(table_rx.clone(), stats.clone()));
        start_worker(i, socket, https.next(), proxy, stopped.clone())?;
    }
    info!(http = %opts.http, https = ?opts.https, workers, "ingress controller listening");
    let wake = Arc::new(Notify::new());
    // Renewed certificates are picked up on the next Secret read.
    let ticker = {
        let wake = wake.clone();
        async move {
            loop {
                tokio::time::sleep(tls::REFRESH).await;
                wake.notify_one();
            }
        }
    };
    let (ingresses, i_driver) = reflect_all::<Ingress>(&client, &wake);
    let (classes, c_driver) = reflect_all::<IngressClass>(&client, &wake);
    let (services, s_driver) = reflect_all::<Service>(&client, &wake);
    let (slices, e_driver) = reflect_all::<EndpointSlice>(&client, &wake);
    let (nodes, n_driver) = reflect_all::<Node>(&client, &wake);
    let caches = Caches {
        ingresses,
        classes,
        services,
        slices,
        nodes,
    };
    tokio::select! {
        () = ticker => Ok(()),
        r = keep_table(client, caches, wake, table_tx, certs) => r,
        () = i_driver => Err(Error::WatchEnded("ingresses")),
        () = c_driver => Err(Error::WatchEnded("ingressclasses")),
        () = s_driver => Err(Error::WatchEnded("services")),
        () = e_driver => Err(Error::WatchEnded("endpointslices")),
        () = n_driver => Err(Error::WatchEnded("nodes")),
    }
}
