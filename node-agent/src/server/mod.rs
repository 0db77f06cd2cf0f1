//! The agent's own API (the kubelet's port, 10250): what the API server proxies `kubectl logs` to.
//!
//! HTTPS only, with a serving certificate the cluster CA signed through a kubelet-serving
//! CertificateSigningRequest ([`certs`]). Callers show a client certificate of the cluster CA or a bearer
//! token, and are authorized with a SubjectAccessReview of the Node's subresources ([`auth`]).
//!
//! - `GET /healthz`;
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `previous`, `timestamps`,
//!   `tailLines`, `sinceSeconds`, `sinceTime`, `limitBytes` ([`logs`]);
//! - `/exec/{namespace}/{pod}/{container}?command=…&input=&output=&error=&tty=`,
//!   `/attach/{namespace}/{pod}/{container}` and `/portForward/{namespace}/{pod}`: upgrade requests
//!   for the runtime's streaming server, SPDY relayed as it is, WebSocket translated to SPDY
//!   ([`stream`], [`ws`], [`spdy`]);
//! - `GET /metrics`: netprog's and the resolver's counters, Prometheus text ([`metrics`]);
//! - `GET /stats/summary`: CPU and memory of the node and its pods' containers ([`stats`]), which the
//!   API server's `metrics.k8s.io` serves to `kubectl top`.

pub mod auth;
pub mod certs;
pub mod logs;
pub mod metrics;
pub mod spdy;
pub mod stats;
pub mod stream;
pub mod ws;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_cri::v1::ContainerState;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::cri::{labels, Cri};
use crate::error::{Error, Result};

/// How the agent's API is served.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The cluster CA (PEM or DER certificates) that client certificates must chain to.
    pub client_ca: Vec<Vec<u8>>,
    /// Where the serving certificate is kept.
    pub pki_dir: PathBuf,
    /// Names and addresses the serving certificate covers.
    pub hosts: Vec<String>,
    /// The Node's name (in `/stats/summary`).
    pub node: String,
}

#[derive(Clone)]
struct App {
    cri: Cri,
    node: String,
    rates: Arc<std::sync::Mutex<stats::Rates>>,
}

/// The self-signed fallback serving certificate and key (PEM): read from `dir`, or made and written.
fn serving_cert(dir: &Path, hosts: &[String]) -> Result<(String, String)> {
    let (crt, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if let (Ok(c), Ok(k)) = (std::fs::read_to_string(&crt), std::fs::read_to_string(&key)) {
        // A key an earlier agent left readable to others is tightened, not trusted as it is.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(&key, e))?;
        return Ok((c, k));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let key_pair =
        rcgen::KeyPair::generate().map_err(|e| Error::Config(format!("serving key: {e}")))?;
    let mut params = rcgen::CertificateParams::new(hosts.to_vec())
        .map_err(|e| Error::Config(format!("serving certificate names: {e}")))?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        hosts.first().cloned().unwrap_or_default(),
    );
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    let now = jiff::Timestamp::now().as_second();
    let year = 1970 + (now / 31_556_952) as i32;
    params.not_after = rcgen::date_time_ymd(year + 1, 12, 31);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .self_signed(&key_pair)
        .map_err(|e| Error::Config(format!("serving certificate: {e}")))?;
    let (c, k) = (cert.pem(), key_pair.serialize_pem());
    std::fs::write(&crt, &c).map_err(|e| Error::io(&crt, e))?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key)
            .map_err(|e| Error::io(&key, e))?;
        f.write_all(k.as_bytes()).map_err(|e| Error::io(&key, e))?;
    }
    Ok((c, k))
}

fn tls_config(
    opts: &ServerOptions,
    certs: Arc<certs::ServingCerts>,
) -> Result<rustls::ServerConfig> {
    let tls = |e: &dyn std::fmt::Display| Error::Config(format!("agent TLS: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    for d in certs::roots(&opts.client_ca) {
        roots.add(d).map_err(|e| tls(&e))?;
    }
    if roots.is_empty() {
        return Err(Error::Config(
            "the kubeconfig names no certificate authority: the agent's API cannot check its clients".into(),
        ));
    }
    keel_client_kit::tls::server_config(roots, certs, &[b"http/1.1"]).map_err(|e| tls(&e))
}

fn text(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, msg.into()).into_response()
}

/// Serves the agent's API until the future is dropped; `client` (the agent's own credentials) requests
/// the serving certificate and checks callers.
pub async fn run(
    cri: Cri,
    client: kube::Client,
    opts: ServerOptions,
    sources: metrics::Sources,
) -> Result<()> {
    let cert_cfg = certs::CertConfig {
        dir: opts.pki_dir.clone(),
        node: opts.node.clone(),
        // `localhost` is for the self-signed fallback only: the cluster CA does not vouch for it.
        sans: opts
            .hosts
            .iter()
            .filter(|h| *h != "localhost")
            .cloned()
            .collect(),
        roots: certs::roots(&opts.client_ca),
    };
    let (serving, issued) = certs::initial(&cert_cfg, &opts.hosts)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_config(&opts, serving.clone())?));
    tokio::spawn(certs::manage(client.clone(), cert_cfg, serving, issued));
    let auth = Arc::new(auth::Auth::new(client, opts.node.clone()));
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|e| Error::io(format!("listen {}", opts.listen), e))?;
    info!(listen = %opts.listen, "agent API serving");
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/exec/{ns}/{pod}/{container}", get(exec).post(exec))
        .route("/attach/{ns}/{pod}/{container}", get(attach).post(attach))
        .route(
            "/portForward/{ns}/{pod}",
            get(port_forward).post(port_forward),
        )
        .route("/stats/summary", get(stats_summary))
        .route(
            "/metrics",
            get(move || {
                let sources = sources.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics::render(&sources),
                    )
                }
            }),
        )
        .with_state(App {
            cri,
            node: opts.node.clone(),
            rates: Arc::default(),
        })
        .layer(axum::middleware::from_fn_with_state(auth, auth::guard));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let svc = router.clone();
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        debug!(%peer, error = %e, "agent API: TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            let peer_cert = auth::PeerCert(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| auth::user_of_cert(c)),
            );
            let svc = tower::ServiceBuilder::new()
                .map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer_cert.clone());
                    req
                })
                .service(svc);
            let svc = hyper_util::service::TowerToHyperService::new(svc);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                .await
            {
                debug!(%peer, error = %e, "agent API: connection ended");
            }
        });
    }
}

async fn container_logs(
    State(app): State<App>,
    UrlPath((ns, pod, container)): UrlPath<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let now = jiff::Timestamp::now().as_nanosecond();
    let opts = match logs::LogOptions::parse(&query, now) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let previous = form_urlencoded::parse(query.as_bytes()).any(|(k, v)| {
        k == "previous" && matches!(v.as_ref(), "1" | "t" | "T" | "true" | "True" | "TRUE")
    });
    let all = match app.cri.list_containers().await {
        Ok(c) => c,
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let mut mine: Vec<_> = all
        .into_iter()
        .filter(|c| {
            c.labels.get(labels::POD_NAMESPACE) == Some(&ns)
                && c.labels.get(labels::POD_NAME) == Some(&pod)
                && c.labels.get(labels::CONTAINER_NAME) == Some(&container)
        })
        .collect();
    mine.sort_by_key(|c| {
        std::cmp::Reverse((c.metadata.as_ref().map_or(0, |m| m.attempt), c.created_at))
    });
    let chosen = if previous { mine.get(1) } else { mine.first() };
    let Some(c) = chosen else {
        let msg = if previous {
            format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
        } else {
            format!("container \"{container}\" in pod \"{pod}\" is not available")
        };
        return text(StatusCode::BAD_REQUEST, msg);
    };
    let status = match app.cri.container_status(&c.id).await {
        Ok(s) => s,
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    if status.log_path.is_empty() {
        return text(
            StatusCode::NOT_FOUND,
            format!("container \"{container}\" has no log file"),
        );
    }
    let path = PathBuf::from(&status.log_path);
    let (tx, rx) = mpsc::channel(64);
    let cri = app.cri.clone();
    let id = c.id.clone();
    let running: logs::StillRunning = Box::new(move || {
        let cri = cri.clone();
        let id = id.clone();
        Box::pin(async move {
            cri.container_status(&id)
                .await
                .is_ok_and(|s| s.state == ContainerState::ContainerRunning as i32)
        })
    });
    tokio::spawn(logs::stream(path, opts, running, tx));
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .body(body)
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response"))
}

/// The running container `container` of pod `ns/pod` (its newest instance).
async fn running_container(
    app: &App,
    ns: &str,
    pod: &str,
    container: &str,
) -> std::result::Result<String, Response> {
    let all = app
        .cri
        .list_containers()
        .await
        .map_err(|e| text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    all.into_iter()
        .filter(|c| {
            c.labels.get(labels::POD_NAMESPACE).map(String::as_str) == Some(ns)
                && c.labels.get(labels::POD_NAME).map(String::as_str) == Some(pod)
                && c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(container)
                && c.state == ContainerState::ContainerRunning as i32
        })
        .max_by_key(|c| c.created_at)
        .map(|c| c.id)
        .ok_or_else(|| {
            text(
                StatusCode::BAD_REQUEST,
                format!("container {container} is not running in pod {pod} (namespace {ns})"),
            )
        })
}

/// The streams an exec or attach asks for, from the kubelet's query names.
fn streams(query: &str) -> ws::Streams {
    let f = |k| stream::flag(query, k);
    ws::Streams {
        stdin: f("input"),
        stdout: f("output"),
        stderr: f("error"),
        tty: f("tty"),
    }
}

async fn exec(
    State(app): State<App>,
    UrlPath((ns, pod, container)): UrlPath<(String, String, String)>,
    req: Request,
) -> Response {
    let query = req.uri().query().unwrap_or_default().to_string();
    let cmd = stream::values(&query, "command");
    if cmd.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least one command for the container",
        );
    }
    let id = match running_container(&app, &ns, &pod, &container).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let f = |k| stream::flag(&query, k);
    match app
        .cri
        .exec(&id, cmd, f("tty"), f("input"), f("output"), f("error"))
        .await
    {
        Ok(url) => stream::serve(req, &url, stream::Kind::Exec, streams(&query)).await,
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn attach(
    State(app): State<App>,
    UrlPath((ns, pod, container)): UrlPath<(String, String, String)>,
    req: Request,
) -> Response {
    let query = req.uri().query().unwrap_or_default().to_string();
    let id = match running_container(&app, &ns, &pod, &container).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let f = |k| stream::flag(&query, k);
    match app
        .cri
        .attach(&id, f("tty"), f("input"), f("output"), f("error"))
        .await
    {
        Ok(url) => stream::serve(req, &url, stream::Kind::Attach, streams(&query)).await,
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn port_forward(
    State(app): State<App>,
    UrlPath((ns, pod)): UrlPath<(String, String)>,
    req: Request,
) -> Response {
    let sandboxes = match app.cri.list_sandboxes().await {
        Ok(s) => s,
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let ready = sandboxes
        .into_iter()
        .filter(|s| {
            s.labels.get(labels::POD_NAMESPACE) == Some(&ns)
                && s.labels.get(labels::POD_NAME) == Some(&pod)
                && s.state == k8s_cri::v1::PodSandboxState::SandboxReady as i32
        })
        .max_by_key(|s| s.created_at);
    let Some(sb) = ready else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("pod {pod} (namespace {ns}) has no running sandbox"),
        );
    };
    let query = req.uri().query().unwrap_or_default().to_string();
    let ports: Vec<i32> = stream::values(&query, "port")
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    match app.cri.port_forward(&sb.id, ports).await {
        Ok(url) => {
            stream::serve(req, &url, stream::Kind::PortForward, ws::Streams::default()).await
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn stats_summary(State(app): State<App>) -> Response {
    match stats::summary(&app.cri, &app.node, &app.rates).await {
        Ok(v) => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Body::from(v.to_string()))
            .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response")),
        Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}
