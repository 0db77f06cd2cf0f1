//! The Kubernetes API listener: the server's tasks wired up here ([`ApiServer::start`]), the serving TLS and
//! cluster PKI bootstrap (`tls`), every request's way in (`router`: authentication, authorization, routing),
//! health checks (`health`), and the discovery and OpenAPI answers with their negotiation (`documents`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::authn::{self, Identity, Tokens};
use super::crd::registry::Registry;
use super::handler::KubeState;
use super::metrics::Metrics;
use super::pki::{ClusterPki, PkiError, ADMIN_GROUP, ADMIN_USER};
use super::storage::Storage;
use super::{compaction, crd, crd_controller, kubernetes_service, lifecycle};

mod documents;
mod health;
mod router;
mod tls;

use tls::{bootstrap_pki, serving_hosts, tls_config};

/// How a member serves the Kubernetes API.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// URL clients use for this member (`https://host:port`), written into `admin.kubeconfig`.
    pub advertise_url: String,
    /// Data directory (gets `pki/` and `admin.kubeconfig`).
    pub data_dir: PathBuf,
    /// Extra names and addresses for the serving certificate.
    pub extra_sans: Vec<String>,
    /// kube-apiserver's `--token-auth-file`.
    pub token_file: Option<PathBuf>,
    /// kube-apiserver's `--encryption-provider-config`.
    pub encryption_config: Option<PathBuf>,
    /// kube-apiserver's `--audit-log-path` (None: no audit log).
    pub audit_log: Option<PathBuf>,
    /// kube-apiserver's `--audit-policy-file` (None: keel's default policy).
    pub audit_policy: Option<PathBuf>,
    /// kube-apiserver's `--etcd-compaction-interval` (zero: no compaction by the API server).
    pub compaction_interval: Duration,
    /// kube-apiserver's `--event-ttl`: how long an Event lives after its last write.
    pub event_ttl: Duration,
    /// Days the member's serving certificate lives ([`crate::pki::LEAF_DAYS`] unless a test says less).
    pub leaf_cert_days: u32,
    /// The PKI to store if the cluster has none yet (made by `keel server --init` before the member
    /// started); `None` makes a fresh one.
    pub initial_pki: Option<ClusterPki>,
    /// The hosts of the member's peer and client URLs when it keeps peer and etcd certificates in
    /// `<data-dir>/tls/`: they are renewed online with the serving certificate.
    pub member_tls_hosts: Option<(Vec<String>, Vec<String>)>,
}

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);

/// Why the API could not be served.
#[derive(Debug, thiserror::Error)]
pub enum KubeServeError {
    #[error("cluster PKI: {0}")]
    Pki(#[from] PkiError),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("token file: {0}")]
    Tokens(#[from] authn::TokenFileError),
    #[error("encryption configuration: {0}")]
    Encryption(#[from] crate::encryption::ConfigError),
    #[error("audit: {0}")]
    Audit(#[from] crate::audit::AuditError),
}

/// The authenticated identity of a TLS connection's client certificate, if any.
#[derive(Debug, Clone)]
struct PeerIdentity(Option<Identity>, Option<std::net::SocketAddr>);

struct App {
    state: Arc<KubeState>,
    tokens: Tokens,
    audit: Option<crate::audit::AuditLog>,
}

/// A running Kubernetes API server on one member: the cluster PKI is loaded, the leader's duties run, and
/// requests can be served over HTTPS ([`ApiServer::serve_https`]) and in process ([`ApiServer::service`]).
pub struct ApiServer {
    router: Router,
    metrics: Arc<Metrics>,
    opts: KubeOptions,
    acceptor: tokio_rustls::TlsAcceptor,
    kubeconfig: PathBuf,
    ca_pem: String,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The Kubernetes API as an in-process tower `Service` with a fixed identity (see [`ApiServer::service`]).
pub type InProcessService = axum::routing::Router;

impl ApiServer {
    /// Loads (or, on the first member to get here, creates) the cluster PKI, writes the serving certificate
    /// and `admin.kubeconfig`, and starts the leader's duties. Waits as long as the PKI cannot be read or
    /// written (no quorum yet): drop the future to give up.
    pub async fn start(storage: Storage, opts: KubeOptions) -> Result<ApiServer, KubeServeError> {
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        if let Some(path) = &opts.encryption_config {
            storage.install_encryption(crate::encryption::Encryption::load(path)?);
            info!(config = %path.display(), "encrypting resources at rest");
        }
        let pki = bootstrap_pki(&storage, opts.initial_pki.as_ref()).await?;
        let sa_key = Arc::new(
            crate::serviceaccount::key::bootstrap(&storage)
                .await
                .map_err(|e| KubeServeError::Tls(e.to_string()))?,
        );
        let hosts = serving_hosts(&storage, &opts);
        let serving = pki.serving_cert_for(&hosts, opts.leaf_cert_days)?;
        let kubeconfig = pki.write_files(&opts.data_dir, &serving, &opts.advertise_url)?;
        let resolver = Arc::new(
            crate::certs::ServingResolver::new(&serving.cert, &serving.key)
                .map_err(KubeServeError::Tls)?,
        );
        let tls = Arc::new(tls_config(&pki, resolver.clone())?);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);

        let mut tokens = Tokens::default();
        tokens.insert(
            &pki.admin_token,
            Identity {
                user: ADMIN_USER.into(),
                groups: vec![ADMIN_GROUP.into(), "system:authenticated".into()],
            },
        );
        if let Some(f) = &opts.token_file {
            tokens.load_file(f)?;
        }
        let kubelet_client = match pki.kubelet_client_cert(opts.leaf_cert_days) {
            Ok(c) => Some(c),
            Err(e) => {
                warn!(error = %e, "no kubelet client certificate: kubectl logs will not work");
                None
            }
        };
        let front_proxy = match pki.front_proxy_client_cert(opts.leaf_cert_days) {
            Ok(c) => Some((c.cert, c.key)),
            Err(e) => {
                warn!(error = %e, "no front-proxy client certificate: aggregated APIs get no client identity");
                None
            }
        };
        let aggregator = Arc::new(crate::aggregator::Aggregator::new(
            front_proxy,
            pki.ca_cert.clone(),
        ));
        let registry = Arc::new(Registry::default());
        let metrics = Arc::new(Metrics::new(&storage, registry.clone()));
        let webhooks = Arc::new(crate::admission::webhook::Webhooks::default());
        metrics.register_more(|r| webhooks.metrics.register(r));
        let authz = Arc::new(crate::authz::Authorizer::new(storage.clone()));
        let state = Arc::new(KubeState {
            storage: storage.clone(),
            registry: registry.clone(),
            server_address: opts.advertise_url.clone(),
            shutdown: stop_rx.clone(),
            event_ttl: opts.event_ttl,
            kubelet_tls_config: std::sync::RwLock::new(
                match kubelet_client
                    .as_ref()
                    .map(|c| crate::dial::agent_tls(&c.cert, &c.key, &pki.ca_cert))
                {
                    Some(Ok(t)) => Some(t),
                    Some(Err(e)) => {
                        warn!(error = %e, "no TLS to node agents: kubectl logs will not work");
                        None
                    }
                    None => None,
                },
            ),
            aggregator,
            priority_classes_ready: Arc::default(),
            metrics: metrics.clone(),
            authz: authz.clone(),
            sa_key,
            ca_pem: pki.ca_cert.clone(),
            ca_key_pem: pki.ca_key.clone(),
            rbac_ready: Arc::default(),
            joining: tokio::sync::Mutex::new(()),
            webhooks: webhooks.clone(),
        });
        let audit = match &opts.audit_log {
            Some(path) => {
                let policy = match &opts.audit_policy {
                    Some(p) => crate::audit::Policy::load(p)?,
                    None => crate::audit::Policy::default_policy(),
                };
                info!(log = %path.display(), "audit log on");
                Some(crate::audit::AuditLog::open(path.clone(), policy)?)
            }
            None => None,
        };
        let app = Arc::new(App {
            state: state.clone(),
            tokens,
            audit,
        });
        let router = router::router(app);
        let mut tasks = vec![
            tokio::spawn(lifecycle::run(storage.clone(), stop_rx.clone())),
            tokio::spawn(crd::registry::run(
                registry.clone(),
                storage.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crd_controller::run(
                storage.clone(),
                registry.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::admission::type_check::run(
                storage.clone(),
                registry.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(kubernetes_service::run(storage.clone(), stop_rx.clone())),
            tokio::spawn(crate::aggregator::available::run(
                storage.clone(),
                state.aggregator.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::aggregator::autoregister::run(
                storage.clone(),
                registry.clone(),
                pki.ca_cert.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::priority::bootstrap(
                storage.clone(),
                state.priority_classes_ready.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::certs::run(crate::certs::Renewal {
                state: state.clone(),
                pki: pki.clone(),
                hosts,
                data_dir: opts.data_dir.clone(),
                advertise_url: opts.advertise_url.clone(),
                resolver,
                days: opts.leaf_cert_days,
                serving: serving.cert.clone(),
                member: storage.node().config().name.clone(),
                member_tls_hosts: opts.member_tls_hosts.clone(),
                client_cert: kubelet_client.map(|c| c.cert).unwrap_or_default(),
            })),
            tokio::spawn(crate::authz::rbac::run(
                authz.rbac.clone(),
                storage.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::authz::ensure::run(
                storage.clone(),
                authz.clone(),
                state.rbac_ready.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(compaction::run(
                storage.clone(),
                opts.compaction_interval,
                stop_rx.clone(),
            )),
            tokio::spawn(metrics.clone().run(stop_rx.clone())),
        ];
        let publish_url = opts.advertise_url.clone();
        tasks.push(tokio::spawn(async move {
            // Retried until it lands: the `kubernetes` Endpoints list members that published their address.
            let mut delay = Duration::from_millis(200);
            while let Err(e) = kubernetes_service::publish(&storage, &publish_url).await {
                debug!(error = %e, "publishing this member's API address failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            // The leader need not wait for its next periodic pass to list the address it just published.
            if storage.is_leader() {
                if let Err(e) = kubernetes_service::reconcile(&storage).await {
                    debug!(error = %e, "kubernetes service pass failed; the periodic pass retries");
                }
            }
        }));
        Ok(ApiServer {
            router,
            metrics,
            opts,
            acceptor,
            kubeconfig,
            ca_pem: pki.ca_cert.clone(),
            stop,
            tasks,
        })
    }

    /// The API as a tower `Service` for in-process clients (controllers, the scheduler): every request
    /// goes through authentication (as `identity`), admission, managedFields and watch exactly as an HTTPS
    /// request does, without TLS or a socket. `kube::Client::new(api.service(id), "default")` makes a
    /// client of it. Requests without a `User-Agent` are attributed (as field manager) to the last
    /// `:`-separated part of the user name, as upstream's components name themselves.
    pub fn service(&self, identity: Identity) -> InProcessService {
        let agent = identity
            .user
            .rsplit(':')
            .next()
            .filter(|a| !a.is_empty())
            .and_then(|a| header::HeaderValue::from_str(a).ok());
        self.router
            .clone()
            .layer(axum::middleware::map_request(move |mut req: Request| {
                let agent = agent.clone();
                async move {
                    if let Some(a) = agent {
                        req.headers_mut().entry(header::USER_AGENT).or_insert(a);
                    }
                    req
                }
            }))
            .layer(Extension(PeerIdentity(Some(identity), None)))
    }

    /// What `/metrics` serves (other components of the member may add to it).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The cluster CA certificate (PEM), as published in every namespace's `kube-root-ca.crt`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Where `admin.kubeconfig` was written.
    pub fn kubeconfig(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// Serves HTTPS on the options' listen address until `shutdown` resolves, then stops the leader's
    /// duties and every open request.
    pub async fn serve_https(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), KubeServeError> {
        let listener = TcpListener::bind(self.opts.listen)
            .await
            .map_err(|e| KubeServeError::Bind(self.opts.listen, e))?;
        info!(listen = %self.opts.listen, kubeconfig = %self.kubeconfig.display(), "Kubernetes API serving");
        tokio::pin!(shutdown);
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let acceptor = self.acceptor.clone();
                    let router = self.router.clone();
                    conns.spawn(async move {
                        let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        };
                        let identity = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(|c| authn::from_certificate(c));
                        let svc = router.layer(Extension(PeerIdentity(identity, Some(peer))));
                        let svc = hyper_util::service::TowerToHyperService::new(svc);
                        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc).await {
                            debug!(%peer, error = %e, "connection ended");
                        }
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        self.stop();
        // Give streaming answers a moment to see the stop, then cut what is left.
        tokio::time::sleep(Duration::from_millis(100)).await;
        conns.abort_all();
        Ok(())
    }

    /// Stops the leader's duties and ends open watches (in-process ones too).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves the Kubernetes API of the member behind `storage` over HTTPS until `shutdown` resolves.
pub async fn serve(
    storage: Storage,
    opts: KubeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), KubeServeError> {
    tokio::pin!(shutdown);
    let api = tokio::select! {
        api = ApiServer::start(storage, opts) => api?,
        _ = &mut shutdown => return Ok(()),
    };
    api.serve_https(shutdown).await
}

/// Where a member writes its admin kubeconfig.
pub fn kubeconfig_path(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("admin.kubeconfig")
}
