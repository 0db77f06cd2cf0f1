//! The Kubernetes API listener: cluster PKI bootstrap, HTTPS (rustls; HTTP/2 and HTTP/1.1), authentication,
//! and routing of non-resource paths (version, health, discovery) and resource paths (see `handler`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::authn::{self, Identity, Tokens};
use super::body::{respond, MAX_BODY};
use super::crd::registry::Registry;
use super::discovery;
use super::handler::{self, KubeState};
use super::metrics::{Metrics, RequestInfo};
use super::pki::{ClusterPki, PkiError, ADMIN_GROUP, ADMIN_USER, PKI_KEY};
use super::status::ApiError;
use super::storage::Storage;
use super::{alloc, compaction, crd, kubernetes_service, lifecycle, openapi};

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

fn host_of(url: &str) -> Option<String> {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let hostport = rest.split('/').next()?;
    let host = if let Some(h) = hostport.strip_prefix('[') {
        h.split(']').next()?.to_string()
    } else {
        hostport
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(hostport)
            .to_string()
    };
    (!host.is_empty()).then_some(host)
}

/// Reads the cluster PKI from the store, creating it first if this is the first member to get here.
/// `initial` is the PKI to store when none is (`keel server --init` makes it before the member starts,
/// since its peer certificates come from the same CA); without it a fresh one is made.
async fn bootstrap_pki(
    storage: &Storage,
    initial: Option<&ClusterPki>,
) -> Result<ClusterPki, KubeServeError> {
    let mut delay = Duration::from_millis(200);
    loop {
        let attempt = async {
            if let Some(raw) = storage.get_raw(PKI_KEY).await? {
                return Ok::<_, ApiError>(Some(raw));
            }
            let fresh = match initial {
                Some(p) => p.clone(),
                None => ClusterPki::generate().map_err(|e| ApiError::Internal(e.to_string()))?,
            };
            let bytes =
                serde_json::to_vec(&fresh).map_err(|e| ApiError::Internal(e.to_string()))?;
            storage.create_raw(PKI_KEY, bytes).await?;
            storage.get_raw(PKI_KEY).await
        };
        match attempt.await {
            Ok(Some(raw)) => return Ok(serde_json::from_slice(&raw).map_err(PkiError::Decode)?),
            Ok(None) => {}
            Err(e) => debug!(error = %e, "cluster PKI not readable yet"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

fn tls_config(
    pki: &ClusterPki,
    resolver: Arc<crate::certs::ServingResolver>,
) -> Result<rustls::ServerConfig, KubeServeError> {
    let tls = |e: &dyn std::fmt::Display| KubeServeError::Tls(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pki.ca_cert.as_bytes()) {
        roots.add(c.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    keel_client_kit::tls::server_config(roots, resolver, &[b"h2", b"http/1.1"]).map_err(|e| tls(&e))
}

/// Every name this member's serving certificate covers.
fn serving_hosts(storage: &Storage, opts: &KubeOptions) -> Vec<String> {
    let mut hosts: Vec<String> = vec![
        "localhost".into(),
        "127.0.0.1".into(),
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        "kubernetes.default.svc.cluster.local".into(),
        alloc::KUBERNETES_SERVICE_IP.to_string(),
        opts.listen.ip().to_string(),
    ];
    hosts.extend(host_of(&opts.advertise_url));
    for u in storage.member_urls() {
        hosts.extend(host_of(&u));
    }
    if let Ok(h) = std::fs::read_to_string("/etc/hostname") {
        let h = h.trim();
        if !h.is_empty() {
            hosts.push(h.to_string());
        }
    }
    hosts.extend(opts.extra_sans.iter().cloned());
    hosts.retain(|h| h != "0.0.0.0" && h != "::");
    hosts.dedup();
    hosts
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
            crate::encryption::install(crate::encryption::Encryption::load(path)?);
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
            priority_classes_ready: std::sync::atomic::AtomicBool::new(false),
            metrics: metrics.clone(),
            authz: authz.clone(),
            sa_key,
            ca_pem: pki.ca_cert.clone(),
            ca_key_pem: pki.ca_key.clone(),
            rbac_ready: std::sync::atomic::AtomicBool::new(false),
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
        let router = Router::new().fallback(route).with_state(app);
        let mut tasks = vec![
            tokio::spawn(lifecycle::run(storage.clone(), stop_rx.clone())),
            tokio::spawn(crd::registry::run(
                registry.clone(),
                storage.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crd::controller::run(
                storage.clone(),
                registry.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(kubernetes_service::run(storage.clone(), stop_rx.clone())),
            tokio::spawn(crate::aggregator::available::run(
                state.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::aggregator::autoregister::run(
                storage.clone(),
                registry.clone(),
                pki.ca_cert.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::priority::bootstrap(state.clone())),
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
            tokio::spawn(crate::authz::ensure::run(state.clone())),
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

fn plain(code: StatusCode, text: &str) -> Response {
    let mut r = (code, text.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn health(app: &App, path: &str, query: Option<&str>) -> Response {
    let readyz = path.starts_with("/readyz");
    let ready = app.state.storage.has_leader() && lifecycle::bootstrapped(&app.state.storage).await;
    // As upstream's, readiness waits for the post-start hook that creates the built-in PriorityClasses.
    let hooks = [
        (
            crate::authz::ensure::HOOK,
            app.state
                .rbac_ready
                .load(std::sync::atomic::Ordering::Acquire),
        ),
        (
            crate::priority::HOOK,
            app.state
                .priority_classes_ready
                .load(std::sync::atomic::Ordering::Acquire),
        ),
    ];
    let hook = hooks.iter().all(|(_, done)| *done);
    let check = !readyz || (ready && hook);
    let verbose = query.is_some_and(|q| q.contains("verbose"));
    let hook_line: String = if !readyz {
        String::new()
    } else {
        hooks
            .iter()
            .map(|(name, done)| {
                if *done {
                    format!("[+]{name} ok\n")
                } else {
                    format!("[-]{name} failed: reason withheld\n")
                }
            })
            .collect()
    };
    match (check, verbose) {
        (true, false) => plain(StatusCode::OK, "ok"),
        (true, true) => plain(
            StatusCode::OK,
            &format!(
                "[+]ping ok\n[+]etcd ok\n{hook_line}{} check passed\n",
                &path[1..]
            ),
        ),
        (false, _) => {
            let bootstrap = if ready {
                "[+]etcd ok\n"
            } else {
                "[-]bootstrap failed: no Raft leader yet, or the default namespaces are not created yet\n"
            };
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "[+]ping ok\n{bootstrap}{hook_line}{} check failed\n",
                    &path[1..]
                ),
            )
        }
    }
}

/// Authenticates, then serves and records the request (as upstream, requests refused by
/// authentication are not in the request metrics).
async fn route(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<PeerIdentity>,
    req: Request,
) -> Response {
    let Some(log) = app.audit.as_ref() else {
        return route_request(app.clone(), peer, req, &mut None).await;
    };
    let received = jiff::Timestamp::now();
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let source = peer.1;
    let mut who = Some((None, None));
    let resp = route_request(app.clone(), peer, req, &mut who).await;
    let (authenticated, acting): (Option<Identity>, Option<Identity>) = who.unwrap_or((None, None));
    let subject = acting
        .clone()
        .or_else(|| authenticated.clone())
        .unwrap_or(Identity {
            user: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        });
    let mut attrs =
        crate::authz::attributes::Attributes::of_request(subject, &method, uri.path(), uri.query());
    if let (Some(r), Some(created)) = (
        attrs.resource.as_mut(),
        resp.extensions().get::<crate::audit::CreatedName>(),
    ) {
        if r.name.is_none() {
            r.name = Some(created.0.clone());
        }
    }
    let impersonated = match (&authenticated, &acting) {
        (Some(a), Some(b)) if a != b => Some(b),
        _ => None,
    };
    log.record(&crate::audit::Entry {
        user: authenticated.as_ref(),
        impersonated,
        attrs: &attrs,
        uri: uri.path_and_query().map_or(uri.path(), |p| p.as_str()),
        user_agent: &agent,
        source,
        code: resp.status().as_u16(),
        received,
    });
    resp
}

/// Who a request came from and who it acted as (filled for the audit log).
type Who = Option<(Option<Identity>, Option<Identity>)>;

async fn route_request(app: Arc<App>, peer: PeerIdentity, req: Request, who: &mut Who) -> Response {
    let start = std::time::Instant::now();
    let mut identity = peer
        .0
        .clone()
        .or_else(|| app.tokens.from_headers(req.headers()));
    if identity.is_none() {
        if let Some(token) =
            authn::bearer(req.headers()).filter(|t| crate::serviceaccount::token::looks_like_jwt(t))
        {
            identity = match crate::serviceaccount::token::authenticate(
                &app.state.sa_key,
                &app.state.storage,
                token,
            )
            .await
            {
                Some(id) => Some(id),
                None => {
                    crate::serviceaccount::legacy::authenticate(
                        &app.state.sa_key,
                        &app.state.storage,
                        token,
                    )
                    .await
                }
            };
        }
    }
    if identity.is_none() && !authn::is_public(req.uri().path()) {
        return ApiError::Unauthorized.into_response();
    }
    // Every authenticated user is in `system:authenticated`; impersonation then authorization decide the
    // rest (anonymous requests reach only the public paths above).
    let identity = match identity {
        Some(mut id) => {
            if !id.groups.iter().any(|g| g == crate::authz::AUTHENTICATED) {
                id.groups.push(crate::authz::AUTHENTICATED.into());
            }
            if let Some(w) = who.as_mut() {
                w.0 = Some(id.clone());
            }
            let authz = &app.state.authz;
            // Right after start the member's RBAC view may not hold the default roles yet: wait for them
            // (briefly) rather than refuse what the bindings allow.
            let mut waited = 0;
            while !(authz.rbac.loaded()
                && app
                    .state
                    .rbac_ready
                    .load(std::sync::atomic::Ordering::Acquire))
                && waited < 250
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
                waited += 1;
            }
            let acting =
                crate::authz::impersonate::acting_as(authz, id, req.headers()).and_then(|id| {
                    let attrs = crate::authz::attributes::Attributes::of_request(
                        id.clone(),
                        req.method(),
                        req.uri().path(),
                        req.uri().query(),
                    );
                    authz.check(&attrs).map(|()| id)
                });
            match acting {
                Ok(id) => {
                    if let Some(w) = who.as_mut() {
                        w.1 = Some(id.clone());
                    }
                    Some(id)
                }
                Err(e) => return e.into_response(),
            }
        }
        None => None,
    };
    let metrics = app.state.metrics.clone();
    let info = RequestInfo::of(&app.state.registry, req.method(), req.uri(), req.headers());
    let long_running = info.as_ref().is_some_and(RequestInfo::long_running);
    let read_only = matches!(*req.method(), Method::GET | Method::HEAD);
    let in_flight = (!long_running).then(|| metrics.in_flight(read_only));
    let resp = match dispatch(app, identity, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    drop(in_flight);
    match info {
        Some(info) => metrics.finish(info, resp, start),
        None => resp,
    }
}

async fn dispatch(
    app: Arc<App>,
    identity: Option<Identity>,
    req: Request,
) -> Result<Response, ApiError> {
    // A remote APIService's group-version goes to its backend with the request whole (body streamed).
    if let Some(apiservice) = crate::aggregator::proxy::target(&app.state, req.uri().path()) {
        return crate::aggregator::proxy::serve(
            app.state.clone(),
            apiservice,
            identity.clone(),
            req,
        )
        .await;
    }
    // exec, attach and portforward keep the request whole: its connection is upgraded and relayed.
    if let Some((ns, name, sub)) = pod_stream_target(req.uri().path()) {
        return handler::pod_stream::serve(app.state.clone(), &ns, &name, &sub, req).await;
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::TooLarge(format!("limit is {MAX_BODY}")))?;
    let method = parts.method.clone();
    let headers = parts.headers;
    let segments = path_segments(&path);
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let read_only = method == Method::GET || method == Method::HEAD;
    let reg = &app.state.registry;
    match segs.as_slice() {
        ["version"] if read_only => Ok(respond(StatusCode::OK, &discovery::version())),
        ["cacerts"] if read_only => {
            let mut r = (StatusCode::OK, app.state.ca_pem.clone()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain"),
            );
            Ok(r)
        }
        ["v1-keel", "apiservers"] if read_only => Ok(respond(
            StatusCode::OK,
            &serde_json::json!({"servers": crate::join::api_urls(&app.state).await}),
        )),
        ["v1-keel", "join"] if method == Method::POST => {
            let answer = crate::join::serve(app.state.clone(), &body).await?;
            Ok(respond(StatusCode::OK, &answer))
        }
        ["metrics"] if read_only => {
            let mut r = (StatusCode::OK, app.state.metrics.render()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            Ok(r)
        }
        [p] | [p, _] if matches!(*p, "healthz" | "livez" | "readyz") && read_only => {
            Ok(health(&app, &path, query.as_deref()).await)
        }
        ["api"] if read_only => Ok(discovery_answer(
            reg,
            &app.state.aggregator.remote(),
            &headers,
            &accept,
            true,
            || discovery::api_versions(&app.state.server_address),
        )),
        ["apis"] if read_only => Ok(discovery_answer(
            reg,
            &app.state.aggregator.remote(),
            &headers,
            &accept,
            false,
            || discovery::api_group_list(reg, &app.state.aggregator.remote()),
        )),
        ["api", "v1"] if read_only => discovery::api_resource_list(reg, "", "v1")
            .map(|v| respond(StatusCode::OK, &v))
            .ok_or(ApiError::NoRoute),
        ["apis", group] if read_only => {
            discovery::api_group(reg, &app.state.aggregator.remote(), group)
                .map(|v| respond(StatusCode::OK, &v))
                .ok_or(ApiError::NoRoute)
        }
        ["apis", "metrics.k8s.io", "v1beta1", rest @ ..] if read_only => {
            crate::metrics_api::serve(app.state.clone(), rest).await
        }
        ["apis", group, version] if read_only => discovery::api_resource_list(reg, group, version)
            .map(|v| respond(StatusCode::OK, &v))
            .ok_or(ApiError::NoRoute),
        ["openapi", "v3"] if read_only => Ok(respond(StatusCode::OK, &openapi::v3_index(reg))),
        ["openapi", "v3", rest @ ..] if read_only => {
            openapi_v3(reg, &rest.join("/"), query.as_deref(), &accept)
        }
        ["openapi", "v2"] if read_only => openapi_v2(reg, &headers, &accept),
        [".well-known", "openid-configuration"] if read_only => Ok(respond(
            StatusCode::OK,
            &crate::serviceaccount::openid_configuration(&app.state.server_address),
        )),
        ["openid", "v1", "jwks"] if read_only => {
            let mut r = respond(StatusCode::OK, &app.state.sa_key.jwks());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/jwk-set+json"),
            );
            Ok(r)
        }
        ["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"] => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed(crate::status::Target::new(
                    "",
                    "serviceaccounts",
                    name,
                )));
            }
            let obj = crate::body::decode(&headers, &body)?;
            let out = crate::serviceaccount::request::answer(
                &app.state.storage,
                &app.state.sa_key,
                ns,
                name,
                &obj,
            )
            .await?;
            Ok(respond(StatusCode::CREATED, &out))
        }
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed(crate::status::Target::new(
                    "authentication.k8s.io",
                    "tokenreviews",
                    "",
                )));
            }
            let obj = crate::body::decode(&headers, &body)?;
            let out = crate::serviceaccount::review::answer(
                &app.tokens,
                &app.state.sa_key,
                &app.state.storage,
                &obj,
            )
            .await?;
            Ok(respond(StatusCode::CREATED, &out))
        }
        review @ ["apis", _, "v1", ..] if crate::authz::review::route(review).is_some() => {
            let Some((group, plural, ns)) = crate::authz::review::route(review) else {
                return Err(ApiError::NoRoute);
            };
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed(crate::status::Target::new(
                    group, plural, "",
                )));
            }
            let obj = crate::body::decode(&headers, &body)?;
            let user = identity.unwrap_or_else(|| Identity {
                user: String::new(),
                groups: Vec::new(),
            });
            let out = crate::authz::review::answer(
                &app.state.authz,
                &user,
                group,
                plural,
                ns.as_deref(),
                &obj,
            )?;
            Ok(respond(StatusCode::CREATED, &out))
        }
        ["api", "v1", rest @ ..] | ["apis", _, _, rest @ ..] => {
            let (group, version) = match segs.as_slice() {
                ["apis", g, v, ..] => (*g, *v),
                _ => ("", "v1"),
            };
            let user = identity.unwrap_or_else(|| Identity {
                user: String::new(),
                groups: Vec::new(),
            });
            handler::serve(
                app.state.clone(),
                method,
                group,
                version,
                rest,
                query.as_deref(),
                headers,
                body,
                user,
            )
            .await
        }
        _ => Err(ApiError::NoRoute),
    }
}

/// The path's non-empty segments, percent-decoded.
fn path_segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}

/// `(namespace, pod, subresource)` of an exec, attach or portforward path.
fn pod_stream_target(path: &str) -> Option<(String, String, String)> {
    let segs = path_segments(path);
    match segs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", "v1", "namespaces", ns, "pods", name, sub @ ("exec" | "attach" | "portforward")] => {
            Some((ns.to_string(), name.to_string(), sub.to_string()))
        }
        _ => None,
    }
}

/// The protobuf media type of `/openapi/v2` (gnostic's `openapi.v2.Document`), the one upstream answers with.
const OPENAPI_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether an Accept header gets `/openapi/v2` as protobuf (`Some(true)`), JSON (`Some(false)`) or neither.
/// As upstream: clauses by decreasing quality, then concrete before wildcard; the first that matches JSON,
/// the older protobuf name (`...spec.v2@v1.0+protobuf`, which client-go still sends) or the current one wins.
fn openapi_v2_protobuf(accept: &str) -> Option<bool> {
    let accept = if accept.trim().is_empty() {
        "*/*"
    } else {
        accept
    };
    let mut clauses: Vec<(f32, &str, &str)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let (ty, sub) = parts.next()?.trim().split_once('/')?;
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            Some((q, ty.trim(), sub.trim()))
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then((a.1 == "*").cmp(&(b.1 == "*")))
            .then((a.2 == "*").cmp(&(b.2 == "*")))
    });
    const SERVED: [(&str, bool); 3] = [
        ("json", false),
        ("com.github.proto-openapi.spec.v2@v1.0+protobuf", true),
        ("com.github.proto-openapi.spec.v2.v1.0+protobuf", true),
    ];
    clauses.iter().find_map(|(_, ty, sub)| {
        if *ty != "application" && *ty != "*" {
            return None;
        }
        SERVED
            .iter()
            .find(|(s, _)| sub == s || *sub == "*")
            .map(|(_, protobuf)| *protobuf)
    })
}

/// Whether `If-None-Match` names `etag` (weakly compared, as Go's file server does).
fn etag_matches(headers: &header::HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
            })
        })
}

/// `/openapi/v2` in JSON or protobuf, with the JSON's SHA-512 as ETag for both (a 304 when it matches).
fn openapi_v2(
    reg: &Registry,
    headers: &header::HeaderMap,
    accept: &str,
) -> Result<Response, ApiError> {
    let protobuf = openapi_v2_protobuf(accept).ok_or_else(|| {
        ApiError::NotAcceptable(format!(
            "/openapi/v2 is served as application/json or {OPENAPI_V2_PROTOBUF}"
        ))
    })?;
    let doc = openapi::v2(reg);
    let etag = format!("\"{}\"", doc.hash);
    let not_modified = etag_matches(headers, &etag);
    let mut r = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else if protobuf {
        (StatusCode::OK, doc.protobuf).into_response()
    } else {
        (StatusCode::OK, doc.json).into_response()
    };
    let h = r.headers_mut();
    if !not_modified {
        let ct = if protobuf {
            OPENAPI_V2_PROTOBUF
        } else {
            "application/json"
        };
        h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ct));
    }
    if let Ok(v) = header::HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
    Ok(r)
}

/// 406 unless `accept` allows JSON (OpenAPI v3 is served as JSON only).
fn json_only(accept: &str, what: &str) -> Result<(), ApiError> {
    if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
        return Err(ApiError::NotAcceptable(format!(
            "only application/json is served for {what}"
        )));
    }
    Ok(())
}

fn openapi_v3(
    reg: &Registry,
    gv: &str,
    query: Option<&str>,
    accept: &str,
) -> Result<Response, ApiError> {
    let doc = openapi::v3_document(reg, gv).ok_or(ApiError::NoRoute)?;
    json_only(accept, "/openapi/v3")?;
    let asked = query
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "hash"))
        .map(|(_, v)| v.into_owned());
    let mut r = match &asked {
        Some(h) if *h != doc.hash => {
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(loc) =
                header::HeaderValue::from_str(&format!("/openapi/v3/{gv}?hash={}", doc.hash))
            {
                r.headers_mut().insert(header::LOCATION, loc);
            }
            return Ok(r);
        }
        _ => (StatusCode::OK, doc.body.clone()).into_response(),
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if let Ok(etag) = header::HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        h.insert(header::ETAG, etag);
    }
    if asked.is_some() {
        h.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("public, immutable"),
        );
    } else {
        h.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache, private"),
        );
    }
    h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
    Ok(r)
}

/// Legacy or aggregated discovery. Aggregated answers carry an ETag (the document's SHA-512, as upstream)
/// and answer 304 to a matching `If-None-Match`, so a client's HTTP cache revalidates cheaply and sees a
/// CRD's resources appear and disappear.
fn discovery_answer(
    reg: &Registry,
    remote: &[crate::aggregator::Remote],
    headers: &header::HeaderMap,
    accept: &str,
    core: bool,
    legacy: impl FnOnce() -> serde_json::Value,
) -> Response {
    match discovery::wants_aggregated(accept) {
        Some(ct) => {
            let doc = discovery::aggregated(reg, remote, core, ct);
            let body = serde_json::to_vec(&doc).unwrap_or_default();
            let digest = ring::digest::digest(&ring::digest::SHA512, &body);
            let hex: String = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
            let etag = format!("\"{hex}\"");
            let matches = etag_matches(headers, &etag);
            let mut r = if matches {
                StatusCode::NOT_MODIFIED.into_response()
            } else {
                (StatusCode::OK, body).into_response()
            };
            let h = r.headers_mut();
            if let (false, Ok(v)) = (matches, header::HeaderValue::from_str(ct)) {
                h.insert(header::CONTENT_TYPE, v);
            }
            if let Ok(v) = header::HeaderValue::from_str(&etag) {
                h.insert(header::ETAG, v);
            }
            h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
            r
        }
        None => respond(StatusCode::OK, &legacy()),
    }
}

/// Where a member writes its admin kubeconfig.
pub fn kubeconfig_path(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("admin.kubeconfig")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_discovery_revalidates_by_etag() {
        let reg = Registry::default();
        let mut h = header::HeaderMap::new();
        let first = discovery_answer(&reg, &[], &h, discovery::AGGREGATED_V2, false, || {
            serde_json::json!({})
        });
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers().get(header::ETAG).cloned().expect("etag");
        h.insert(header::IF_NONE_MATCH, etag.clone());
        let again = discovery_answer(&reg, &[], &h, discovery::AGGREGATED_V2, false, || {
            serde_json::json!({})
        });
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        // A new CRD changes the document, so the old ETag no longer matches.
        reg.load(
            &[serde_json::json!({"metadata": {"name": "ws.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                         "names": {"plural": "ws", "kind": "W"},
                         "versions": [{"name": "v1", "served": true, "storage": true}]}})],
            2,
        );
        let changed = discovery_answer(&reg, &[], &h, discovery::AGGREGATED_V2, false, || {
            serde_json::json!({})
        });
        assert_eq!(changed.status(), StatusCode::OK);
        assert_ne!(changed.headers().get(header::ETAG), Some(&etag));
    }

    #[test]
    fn openapi_v2_negotiates_protobuf_and_revalidates() {
        let pb = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        assert_eq!(openapi_v2_protobuf(pb), Some(true));
        assert_eq!(openapi_v2_protobuf(OPENAPI_V2_PROTOBUF), Some(true));
        assert_eq!(openapi_v2_protobuf(""), Some(false));
        assert_eq!(openapi_v2_protobuf("application/json, */*"), Some(false));
        assert_eq!(
            openapi_v2_protobuf(&format!("application/json;q=0.5, {pb}")),
            Some(true)
        );
        assert_eq!(openapi_v2_protobuf(&format!("*/*, {pb}")), Some(true));
        assert_eq!(openapi_v2_protobuf("text/html"), None);
        assert_eq!(openapi_v2_protobuf("application/json;q=0"), None);

        let reg = Registry::default();
        let mut h = header::HeaderMap::new();
        let first = openapi_v2(&reg, &h, pb).expect("protobuf answer");
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(
            first
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(OPENAPI_V2_PROTOBUF.as_bytes())
        );
        let etag = first.headers().get(header::ETAG).cloned().expect("etag");
        let json = openapi_v2(&reg, &h, "application/json").expect("json answer");
        assert_eq!(json.headers().get(header::ETAG), Some(&etag));
        h.insert(header::IF_NONE_MATCH, etag);
        let again = openapi_v2(&reg, &h, pb).expect("revalidation");
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(matches!(
            openapi_v2(&reg, &h, "text/html"),
            Err(ApiError::NotAcceptable(_))
        ));
    }

    #[test]
    fn hosts_from_urls() {
        assert_eq!(
            host_of("https://127.0.0.11:6443").as_deref(),
            Some("127.0.0.11")
        );
        assert_eq!(host_of("http://[::1]:2380").as_deref(), Some("::1"));
        assert_eq!(host_of("http://node-a:2380/x").as_deref(), Some("node-a"));
    }
}
