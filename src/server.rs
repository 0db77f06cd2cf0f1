//! `keel server`: one member, until SIGTERM or Ctrl-C.

use std::time::Duration;

use keel_etcd_api::server::serve;
use keel_raft::membership::{check_self, parse_initial_cluster, ClusterState};
use keel_raft::node::{Node, NodeConfig};
use keel_store::StoreOptions;
use tracing::info;

use crate::cli::ServerArgs;

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerError {
    #[error("bad --log-level: {0}")]
    LogLevel(String),
    #[error("cannot start member: {0}")]
    Start(#[from] keel_raft::error::StartError),
    #[error("{0}")]
    Serve(#[from] keel_etcd_api::server::ServeError),
    #[error("signal handler: {0}")]
    Signal(std::io::Error),
    #[error("{0}")]
    Config(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] keel_kube_api::KubeServeError),
}

/// The rustls server configuration of `https://` client URLs, from etcd's client TLS flags.
fn client_tls(a: &ServerArgs) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, ServerError> {
    let files = keel_raft::tls::TlsFiles {
        cert: a.cert_file.clone(),
        key: a.key_file.clone(),
        trusted_ca: a.trusted_ca_file.clone(),
        client_cert_auth: a.client_cert_auth,
    };
    if files.cert.is_some() != files.key.is_some() {
        return Err(ServerError::Config(
            "--cert-file and --key-file go together".into(),
        ));
    }
    let pem = files
        .load()
        .map_err(|e| ServerError::Config(format!("client TLS: {e}")))?;
    if pem.is_none() {
        if let Some(u) = a
            .listen_client_urls
            .iter()
            .find(|u| u.starts_with("https://"))
        {
            return Err(ServerError::Config(format!(
                "--listen-client-urls {u}: https needs --cert-file and --key-file"
            )));
        }
    }
    pem.map(|p| p.server_config())
        .transpose()
        .map_err(|e| ServerError::Config(format!("client TLS: {e}")))
}

/// Peer TLS from etcd's peer TLS flags (`None` when no certificate is given).
fn peer_tls(a: &ServerArgs) -> Result<Option<keel_raft::tls::TlsPem>, ServerError> {
    let files = keel_raft::tls::TlsFiles {
        cert: a.peer_cert_file.clone(),
        key: a.peer_key_file.clone(),
        trusted_ca: a.peer_trusted_ca_file.clone(),
        client_cert_auth: a.peer_client_cert_auth,
    };
    if files.cert.is_some() != files.key.is_some() {
        return Err(ServerError::Config(
            "--peer-cert-file and --peer-key-file go together".into(),
        ));
    }
    if files.cert.is_none() && (files.trusted_ca.is_some() || files.client_cert_auth) {
        return Err(ServerError::Config(
            "--peer-trusted-ca-file and --peer-client-cert-auth need --peer-cert-file and --peer-key-file".into(),
        ));
    }
    let pem = files
        .load()
        .map_err(|e| ServerError::Config(format!("peer TLS: {e}")))?;
    if pem.is_none() {
        if let Some(u) = a
            .listen_peer_urls
            .iter()
            .chain(&a.initial_advertise_peer_urls)
            .find(|u| u.starts_with("https://"))
        {
            return Err(ServerError::Config(format!(
                "peer URL {u}: https needs --peer-cert-file and --peer-key-file"
            )));
        }
    }
    if let Some(p) = &pem {
        // Fail at start, with the flag names, rather than at the first peer connection.
        p.server_config()
            .map_err(|e| ServerError::Config(format!("peer TLS: {e}")))?;
        if p.trusted_ca.is_some() {
            p.client_config()
                .map_err(|e| ServerError::Config(format!("peer TLS: {e}")))?;
        }
    }
    Ok(pem)
}

/// The port the Kubernetes API listens on unless `--kube-listen` says otherwise.
pub(crate) const DEFAULT_KUBE_PORT: u16 = 6443;

/// `--kube-listen` as given, or its default: `https://<host of the first client URL>:6443`.
fn kube_listen_url(a: &ServerArgs) -> Result<String, ServerError> {
    if let Some(url) = &a.kube_listen {
        return Ok(url.clone());
    }
    let first = a
        .listen_client_urls
        .first()
        .map(String::as_str)
        .unwrap_or("");
    let plain = match first.strip_prefix("https://") {
        Some(rest) => format!("http://{rest}"),
        None => first.to_string(),
    };
    let addr = keel_raft::node::parse_http_addr(&plain).ok_or_else(|| {
        ServerError::Config(format!(
            "--listen-client-urls {first:?}: cannot derive the Kubernetes API address from it; pass --kube-listen"
        ))
    })?;
    let addr = std::net::SocketAddr::new(addr.ip(), DEFAULT_KUBE_PORT);
    Ok(format!("https://{addr}"))
}

/// The Kubernetes API options from flags, if it is to be served.
pub(crate) fn kube_options(
    a: &ServerArgs,
) -> Result<Option<keel_kube_api::KubeOptions>, ServerError> {
    let url = kube_listen_url(a)?;
    if url.is_empty() {
        return Ok(None);
    }
    let listen = url.strip_prefix("https://").ok_or_else(|| {
        ServerError::Config(format!("--kube-listen {url}: must be an https:// URL"))
    })?;
    let listen: std::net::SocketAddr = listen
        .trim_end_matches('/')
        .parse()
        .map_err(|e| ServerError::Config(format!("--kube-listen {url}: {e}")))?;
    let advertise_url = if a.kube_advertise_url.is_empty() {
        url.trim_end_matches('/').to_string()
    } else {
        a.kube_advertise_url.clone()
    };
    Ok(Some(keel_kube_api::KubeOptions {
        listen,
        advertise_url,
        data_dir: a.data_dir.clone(),
        extra_sans: a.kube_extra_sans.clone(),
        token_file: a.token_auth_file.clone(),
        encryption_config: a.encryption_provider_config.clone(),
        audit_log: a.audit_log_path.clone(),
        audit_policy: a.audit_policy_file.clone(),
        compaction_interval: a.kube_compaction_interval,
        event_ttl: a.event_ttl,
        leaf_cert_days: a.leaf_cert_days,
        initial_pki: None,
        member_tls_hosts: None,
    }))
}

/// The filter directive that silences rustls' per-handshake SNI warnings (unless `--log-level`
/// names rustls itself).
const QUIET_RUSTLS: &str = "rustls::msgs::handshake=error";

/// Installs the tracing subscriber (quiet by default).
pub(crate) fn init_logging(level: &str) -> Result<(), ServerError> {
    // rustls warns on every handshake whose SNI is an IP address (clients that dial
    // https://127.0.0.1:2379 with some TLS stacks send one); etcd logs nothing for it.
    let level = if level.contains("rustls") {
        level.to_string()
    } else {
        format!("{level},{QUIET_RUSTLS}")
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .map_err(|e| ServerError::LogLevel(e.to_string()))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal, so log files stay readable.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    Ok(())
}

/// Builds the member configuration from flags.
pub(crate) fn node_config(a: &ServerArgs) -> Result<NodeConfig, ServerError> {
    let mut cfg = NodeConfig::new(a.name.clone(), a.data_dir.clone());
    cfg.client_urls = a.advertise_client_urls.clone();
    cfg.peer_urls = if a.initial_advertise_peer_urls.is_empty() {
        a.listen_peer_urls.clone()
    } else {
        a.initial_advertise_peer_urls.clone()
    };
    cfg.heartbeat = Duration::from_millis(a.heartbeat_interval);
    cfg.election_timeout = Duration::from_millis(a.election_timeout);
    cfg.snapshot_count = a.snapshot_count;
    cfg.unsafe_local_linearizable_reads = a.unsafe_serve_linearizable_reads_locally;
    cfg.unsafe_early_forwarded_answer = a.unsafe_answer_forwarded_writes_early;
    if a.quota_backend_bytes > keel_store::store::MAX_QUOTA_BYTES {
        tracing::warn!(
            quota = a.quota_backend_bytes,
            max = keel_store::store::MAX_QUOTA_BYTES,
            "--quota-backend-bytes exceeds the suggested maximum"
        );
    }
    cfg.store = StoreOptions {
        progress_interval: a.progress_notify_interval,
        quota_backend_bytes: a.quota_backend_bytes,
        auth_token_ttl: Duration::from_secs(a.auth_token_ttl),
        ..StoreOptions::default()
    };
    cfg.listen_peer_urls = a.listen_peer_urls.clone();
    cfg.peer_tls = peer_tls(a)?;
    cfg.cluster_token = a.initial_cluster_token.clone();
    cfg.cluster_state = if a.initial_cluster_state == "existing" {
        ClusterState::Existing
    } else {
        ClusterState::New
    };
    if !a.initial_cluster.is_empty() {
        let members = parse_initial_cluster(&a.initial_cluster)
            .map_err(|e| ServerError::Config(e.to_string()))?;
        check_self(&members, &a.name, &cfg.peer_urls)
            .map_err(|e| ServerError::Config(e.to_string()))?;
        cfg.initial_cluster = members;
    }
    Ok(cfg)
}

/// Waits for SIGTERM or SIGINT.
pub(crate) async fn terminated() -> Result<(), std::io::Error> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// The scheduled-snapshot settings from flags (None with `--disable-snapshots`).
fn snapshot_schedule(
    a: &ServerArgs,
) -> Result<Option<crate::snapshot::schedule::Schedule>, ServerError> {
    if a.disable_snapshots {
        return Ok(None);
    }
    let cron =
        crate::snapshot::schedule::parse(&a.snapshot_schedule).map_err(ServerError::Config)?;
    Ok(Some(crate::snapshot::schedule::Schedule {
        cron,
        dir: a
            .snapshot_dir
            .clone()
            .unwrap_or_else(|| a.data_dir.join("snapshots")),
        retention: usize::try_from(a.snapshot_retention).unwrap_or(usize::MAX),
    }))
}

/// Aborts a background task when dropped.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.abort();
        }
    }
}

/// The file of a joined member's data directory that keeps the cluster token it was given.
const CLUSTER_TOKEN_FILE: &str = "cluster-token";

/// `--join`: before the member starts, asks the cluster to add it and takes the cluster token and
/// membership from the answer. A member that has joined before (its data directory exists) just takes
/// the cluster token it kept. Returns whether this call created the data directory.
async fn prepare_join(args: &mut ServerArgs) -> Result<bool, ServerError> {
    let kept = args.data_dir.join(CLUSTER_TOKEN_FILE);
    if let Ok(t) = std::fs::read_to_string(&kept) {
        args.initial_cluster_token = t.trim().to_string();
    }
    let (Some(url), Some(token)) = (args.join.clone(), args.token.clone()) else {
        return Ok(false);
    };
    if args.data_dir.join("member").exists() {
        return Ok(false);
    }
    let peer_urls = if args.initial_advertise_peer_urls.is_empty() {
        args.listen_peer_urls.clone()
    } else {
        args.initial_advertise_peer_urls.clone()
    };
    let (answer, _) = crate::join::join_server(
        &url,
        &token,
        &args.name,
        &peer_urls,
        &args.advertise_client_urls,
    )
    .await
    .map_err(|e| ServerError::Config(e.to_string()))?;
    info!(member = %answer.member_id, initial_cluster = %answer.initial_cluster, "joined the cluster; starting as an existing member");
    args.initial_cluster = answer.initial_cluster;
    args.initial_cluster_state = "existing".into();
    args.initial_cluster_token = answer.cluster_token.clone();
    let created = !args.data_dir.exists();
    crate::join::write_private(&kept, answer.cluster_token.as_bytes())
        .map_err(|e| ServerError::Config(e.to_string()))?;
    if let Some(tls) = &answer.tls {
        // Signed by the cluster for this member: its peer TLS works before it has read anything.
        let dir = args.data_dir.join(keel_kube_api::pki::MEMBER_TLS_DIR);
        if let Err(e) = tls.write(&dir) {
            if created {
                let _ = std::fs::remove_dir_all(&args.data_dir);
            }
            return Err(ServerError::Config(format!(
                "writing the join's certificates: {e}"
            )));
        }
    }
    // Kept (as `--init` keeps its own) so that a member a quorum-loss recovery leaves out can join the
    // recovered cluster again by itself.
    if let Err(e) = crate::join::write_private(
        &args.data_dir.join(SERVER_TOKEN_FILE),
        format!("{token}\n").as_bytes(),
    ) {
        tracing::warn!(%e, "cannot keep the join token in the data directory");
    }
    Ok(created)
}

/// The file of a server's data directory that keeps a server join token.
const SERVER_TOKEN_FILE: &str = "server-token";

/// A member a quorum-loss recovery left out joins the recovered cluster again, as a new member: its
/// data directory is kept aside and the process starts over (same PID, for its supervisor) as
/// `keel server --join <url> --token <its kept server token>` with its other flags. Returns only when
/// that cannot be done (it is only called when the token file exists).
fn rejoin_after_recovery(args: &ServerArgs, url: &str) -> Result<(), ServerError> {
    use std::os::unix::process::CommandExt;
    let token = std::fs::read_to_string(args.data_dir.join(SERVER_TOKEN_FILE))
        .map(|t| t.trim().to_string())
        .ok()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ServerError::Config(format!(
                "a quorum-loss recovery left this member out, and {} holds no {SERVER_TOKEN_FILE} to join \
                 again with: move the data directory aside and start with --join {url} --token <server token>",
                args.data_dir.display()
            ))
        })?;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let mut aside = args.data_dir.as_os_str().to_owned();
    aside.push(format!(".left-out-{stamp}"));
    let aside = std::path::PathBuf::from(aside);
    std::fs::rename(&args.data_dir, &aside).map_err(|e| {
        ServerError::Config(format!(
            "moving {} aside to join again: {e}",
            args.data_dir.display()
        ))
    })?;
    let argv = rejoin_args(std::env::args().skip(1), url, &token);
    tracing::warn!(join = %url, kept = %aside.display(), "a quorum-loss recovery left this member out: joining the recovered cluster again as a new member");
    let exe = std::env::current_exe().map_err(|e| ServerError::Config(e.to_string()))?;
    let e = std::process::Command::new(exe).args(argv).exec();
    Err(ServerError::Config(format!(
        "cannot start again to join: {e}"
    )))
}

/// `args` without the flags that made or joined the old cluster, plus `--join url --token token`.
fn rejoin_args(args: impl Iterator<Item = String>, url: &str, token: &str) -> Vec<String> {
    const WITH_VALUE: [&str; 4] = [
        "--join",
        "--token",
        "--initial-cluster",
        "--initial-cluster-state",
    ];
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        if a == "--init" {
            continue;
        }
        if WITH_VALUE.contains(&a.as_str()) {
            skip_next = true;
            continue;
        }
        if WITH_VALUE
            .iter()
            .any(|f| a.strip_prefix(f).is_some_and(|rest| rest.starts_with('=')))
        {
            continue;
        }
        out.push(a);
    }
    out.extend([
        "--join".into(),
        url.to_string(),
        "--token".into(),
        token.to_string(),
    ]);
    out
}

/// `--init`: makes sure the cluster has a server and an agent join token and writes them to
/// `<data-dir>/server-token` and `<data-dir>/agent-token` (kept across restarts).
async fn write_init_tokens(
    storage: keel_kube_api::storage::Storage,
    ca_pem: String,
    data_dir: std::path::PathBuf,
    join_url: String,
) {
    use keel_kube_api::join::{
        ensure_token, full_token, new_token_parts, AGENT_USAGE, SERVER_USAGE,
    };
    for (file, usage, what) in [
        (
            "server-token",
            SERVER_USAGE,
            "servers joined with keel server --join",
        ),
        (
            "agent-token",
            AGENT_USAGE,
            "agents joined with keel agent --join",
        ),
    ] {
        let path = data_dir.join(file);
        // A restart keeps the token it wrote; a fresh one is made only the first time.
        let (id, secret) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| {
                let cred = t.trim().rsplit("::").next()?.to_string();
                let (i, s) = cred.split_once('.')?;
                Some((i.to_string(), s.to_string()))
            })
            .unwrap_or_else(new_token_parts);
        let mut delay = Duration::from_millis(200);
        loop {
            match ensure_token(&storage, &id, &secret, usage, what).await {
                Ok(()) => break,
                Err(e) => tracing::debug!(%e, "storing the {file} join token; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        if let Err(e) = crate::join::write_private(
            &path,
            format!("{}\n", full_token(&ca_pem, &id, &secret)).as_bytes(),
        ) {
            tracing::warn!(%e, "cannot write the {file} file");
        }
    }
    info!(
        server_token = %data_dir.join("server-token").display(),
        agent_token = %data_dir.join("agent-token").display(),
        "join tokens ready: keel server --join {join_url} --token $(cat server-token); keel agent --join {join_url} --token $(cat agent-token)"
    );
}

/// Leaves this member's client URLs in its data dir for `keel status --data-dir` (a hint, so
/// failing to write it only warns).
fn write_client_urls(dir: &std::path::Path, urls: &[String]) {
    let path = dir.join(crate::status::CLIENT_URLS_FILE);
    let tmp = dir.join(format!("{}.tmp", crate::status::CLIENT_URLS_FILE));
    let text: String = urls.iter().map(|u| format!("{u}\n")).collect();
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
        tracing::warn!(path = %path.display(), %e, "cannot record the client URLs");
    }
}

/// A member made with `--init` or `--join` (or one that kept their TLS files): TLS by default.
fn tls_by_default(a: &ServerArgs) -> bool {
    a.init || a.join.is_some() || member_tls_file(a, "peer.crt").exists()
}

fn member_tls_file(a: &ServerArgs, name: &str) -> std::path::PathBuf {
    a.data_dir
        .join(keel_kube_api::pki::MEMBER_TLS_DIR)
        .join(name)
}

/// The URLs a member gets when its flags name none: etcd's, with `https://` for a member made with
/// `--init` or `--join` (an explicit `http://` URL stays plaintext, as in etcd).
fn default_urls(a: &mut ServerArgs) {
    let scheme = if tls_by_default(a) { "https" } else { "http" };
    if a.listen_client_urls.is_empty() {
        a.listen_client_urls = vec![format!("{scheme}://127.0.0.1:2379")];
    }
    if a.advertise_client_urls.is_empty() {
        a.advertise_client_urls = vec![format!("{scheme}://127.0.0.1:2379")];
    }
    if a.listen_peer_urls.is_empty() {
        a.listen_peer_urls = vec![format!("{scheme}://127.0.0.1:2380")];
    }
}

/// Days before their end that a member's peer and etcd certificates are renewed at its start.
const MEMBER_TLS_RENEW_DAYS: i64 = 90;

/// The file `--init` keeps the cluster PKI in from before the member starts until the store holds it.
const INIT_PKI_FILE: &str = "init-pki.json";

/// For a member made with `--init` or `--join`: makes sure `<data-dir>/tls/` holds its peer and etcd
/// certificates (the first `--init` makes the cluster CA for them; later starts renew them from
/// `pki/ca.key` when they near their end), and makes them the default of the TLS flags the user did not
/// give. Returns the PKI `--init` made, for the Kubernetes API to store.
fn prepare_member_tls(
    a: &mut ServerArgs,
) -> Result<Option<keel_kube_api::pki::ClusterPki>, ServerError> {
    use keel_kube_api::pki::ClusterPki;
    if !tls_by_default(a) {
        return Ok(None);
    }
    let cfg = |e: &dyn std::fmt::Display| ServerError::Config(format!("member TLS: {e}"));
    let dir = a.data_dir.join(keel_kube_api::pki::MEMBER_TLS_DIR);
    let mut initial = None;
    if a.init {
        let path = dir.join(INIT_PKI_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => initial = Some(serde_json::from_slice(&bytes).map_err(|e| cfg(&e))?),
            Err(_)
                if !a.data_dir.join("member").exists()
                    && !a.data_dir.join("pki/ca.key").exists() =>
            {
                // A new cluster: its CA is made now, since the peer certificates come from it.
                let pki = ClusterPki::generate().map_err(|e| cfg(&e))?;
                let json = serde_json::to_vec(&pki).map_err(|e| cfg(&e))?;
                crate::join::write_private(&path, &json).map_err(|e| cfg(&e))?;
                initial = Some(pki);
            }
            Err(_) => {}
        }
    }
    let peer_crt = member_tls_file(a, "peer.crt");
    let ends_soon = match std::fs::read_to_string(&peer_crt) {
        Ok(pem) => keel_kube_api::certs::not_after(&pem).is_none_or(|t| {
            t - jiff::Timestamp::now().as_second() < MEMBER_TLS_RENEW_DAYS * 86_400
        }),
        Err(_) => true,
    };
    if ends_soon {
        let ca = match &initial {
            Some(p) => Some(p.clone()),
            None => {
                let read = |f: &str| std::fs::read_to_string(a.data_dir.join("pki").join(f)).ok();
                match (read("ca.crt"), read("ca.key")) {
                    (Some(ca_cert), Some(ca_key)) => Some(ClusterPki {
                        ca_cert,
                        ca_key,
                        admin_cert: String::new(),
                        admin_key: String::new(),
                        admin_token: String::new(),
                    }),
                    _ => None,
                }
            }
        };
        if let Some(ca) = ca {
            let (peer_hosts, client_hosts) = member_tls_hosts(a);
            let tls = ca
                .member_tls(&peer_hosts, &client_hosts, a.leaf_cert_days)
                .map_err(|e| cfg(&e))?;
            tls.write(&dir).map_err(|e| cfg(&e))?;
            info!(dir = %dir.display(), "peer and etcd certificates written");
        }
    }
    if peer_crt.exists() {
        let dir = dir.clone();
        let f = |n: &str| Some(dir.join(n));
        if a.peer_cert_file.is_none()
            && a.peer_key_file.is_none()
            && a.peer_trusted_ca_file.is_none()
        {
            a.peer_cert_file = f("peer.crt");
            a.peer_key_file = f("peer.key");
            a.peer_trusted_ca_file = f("ca.crt");
            a.peer_client_cert_auth = true;
        }
        if a.cert_file.is_none() && a.key_file.is_none() && a.trusted_ca_file.is_none() {
            a.cert_file = f("etcd-server.crt");
            a.key_file = f("etcd-server.key");
            a.trusted_ca_file = f("ca.crt");
            a.client_cert_auth = true;
        }
    }
    Ok(initial)
}

/// How the version-skew check reaches other members' `https://` client ports: the client CA, and the
/// data dir's etcd client certificate when there is one. `None` when there is no CA to verify them.
fn skew_check_tls(a: &ServerArgs) -> Option<std::sync::Arc<rustls::ClientConfig>> {
    let ca = std::fs::read(a.trusted_ca_file.as_ref()?).ok()?;
    let identity = match (
        std::fs::read(member_tls_file(a, "etcd-client.crt")),
        std::fs::read(member_tls_file(a, "etcd-client.key")),
    ) {
        (Ok(c), Ok(k)) => Some((c, k)),
        _ => None,
    };
    keel_raft::tls::tool_client_config(
        &ca,
        identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
    )
    .inspect_err(|e| tracing::warn!(%e, "the version-skew check cannot use TLS"))
    .ok()
}

/// The hosts a member's peer certificate and etcd serving certificate name: those of its peer URLs and
/// of its client URLs.
fn member_tls_hosts(a: &ServerArgs) -> (Vec<String>, Vec<String>) {
    let hosts = |urls: &[&Vec<String>]| -> Vec<String> {
        urls.iter()
            .flat_map(|u| u.iter())
            .filter_map(|u| keel_kube_api::pki::url_host(u))
            .collect()
    };
    (
        hosts(&[&a.listen_peer_urls, &a.initial_advertise_peer_urls]),
        hosts(&[&a.listen_client_urls, &a.advertise_client_urls]),
    )
}

/// `keel etcdctl-env`: the environment etcdctl needs for a member's etcd client port.
pub(crate) fn etcdctl_env(a: crate::cli::EtcdctlEnvArgs) -> Result<(), ServerError> {
    let dir = std::fs::canonicalize(&a.data_dir)
        .map_err(|e| ServerError::Config(format!("{}: {e}", a.data_dir.display())))?;
    let urls_file = dir.join(crate::status::CLIENT_URLS_FILE);
    let urls: Vec<String> = std::fs::read_to_string(&urls_file)
        .map_err(|e| {
            ServerError::Config(format!(
                "{}: {e} (it is written when the member starts)",
                urls_file.display()
            ))
        })?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    println!("export ETCDCTL_API=3");
    println!("export ETCDCTL_ENDPOINTS={}", quote(&urls.join(",")));
    let tls = dir.join(keel_kube_api::pki::MEMBER_TLS_DIR);
    for (var, file) in [
        ("ETCDCTL_CACERT", "ca.crt"),
        ("ETCDCTL_CERT", "etcd-client.crt"),
        ("ETCDCTL_KEY", "etcd-client.key"),
    ] {
        let p = tls.join(file);
        if p.exists() {
            println!("export {var}={}", quote(&p.to_string_lossy()));
        }
    }
    Ok(())
}

/// Runs one member until it is told to stop.
pub(crate) async fn run(mut args: ServerArgs) -> Result<(), ServerError> {
    init_logging(&args.log_level)?;
    default_urls(&mut args);
    let created_by_join = prepare_join(&mut args).await?;
    let initial_pki = prepare_member_tls(&mut args)?;
    let client_tls = client_tls(&args)?;
    crate::upgrade::check_data_format(&args.data_dir).map_err(ServerError::Config)?;
    let mut kube = kube_options(&args)?;
    if let Some(k) = &mut kube {
        k.initial_pki = initial_pki;
        if member_tls_file(&args, "peer.crt").exists() {
            k.member_tls_hosts = Some(member_tls_hosts(&args));
        }
    }
    let auto_compaction = keel_etcd_api::auto_compaction::parse(
        &args.auto_compaction_mode,
        &args.auto_compaction_retention,
    )
    .map_err(ServerError::Config)?;
    let node = match Node::start(node_config(&args)?).await {
        Ok(n) => n,
        Err(e) => {
            // A join that cannot start leaves nothing behind here; the cluster removes the half-joined
            // member at the next join.
            if created_by_join {
                let _ = std::fs::remove_dir_all(&args.data_dir);
            }
            return Err(e.into());
        }
    };
    info!(name = %args.name, member = %format!("{:x}", node.member_id()), "member started");
    if args.unsafe_serve_linearizable_reads_locally {
        tracing::warn!("UNSAFE: linearizable reads are served from local state (--unsafe-serve-linearizable-reads-locally)");
    }
    if args.unsafe_answer_forwarded_writes_early {
        tracing::warn!("UNSAFE: forwarded writes are answered before this member applied them (--unsafe-answer-forwarded-writes-early)");
    }
    // Like etcd, serve clients once this member's attributes are published (bounded, so a
    // member that cannot reach a quorum still answers serializable reads and status).
    if !node.wait_published(node.config().request_timeout).await {
        tracing::warn!("member attributes not published yet; serving clients anyway");
    }
    let others: Vec<(String, Vec<String>)> = node
        .members()
        .into_iter()
        .filter(|m| m.id != node.member_id())
        .map(|m| (m.node.name, m.node.client_urls))
        .collect();
    if let Err(e) = crate::upgrade::check_skew(others, skew_check_tls(&args)).await {
        node.shutdown().await;
        return Err(ServerError::Config(e));
    }
    if let Some(ac) = auto_compaction {
        info!(?ac, "auto-compaction on");
        keel_etcd_api::auto_compaction::spawn(
            node.clone(),
            ac,
            args.auto_compaction_revision_check_interval,
        );
    }
    let mut extra_metrics = None;
    let snapshots = match snapshot_schedule(&args)? {
        Some(schedule) => {
            info!(dir = %schedule.dir.display(), cron = %args.snapshot_schedule, retention = schedule.retention, "scheduled snapshots on");
            let stats = std::sync::Arc::new(crate::snapshot::schedule::Stats::default());
            extra_metrics = Some(crate::snapshot::schedule::metrics(
                schedule.dir.clone(),
                stats.clone(),
            ));
            Some(crate::snapshot::schedule::spawn(
                node.clone(),
                schedule,
                stats,
            ))
        }
        None => None,
    };
    // The schedule stops with the member however `run` returns.
    let _snapshots = AbortOnDrop(snapshots);
    write_client_urls(&args.data_dir, &args.advertise_client_urls);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (kube_tx, kube_rx) = tokio::sync::oneshot::channel::<()>();
    let kube_node = node.clone();
    let controllers = (!args.disable_controller_manager).then(|| {
        crate::control::controller_options(
            args.name.clone(),
            &args.controllers,
            args.node_monitor_grace_period,
            &args.network,
        )
    });
    let controllers = controllers.transpose()?;
    let holder = args.name.clone();
    let init = args.init.then(|| {
        (
            args.data_dir.clone(),
            kube.as_ref()
                .map(|k| k.advertise_url.clone())
                .unwrap_or_default(),
        )
    });
    let scheduler = !args.disable_scheduler;
    let mut kube_serving = tokio::spawn(async move {
        match kube {
            Some(opts) => {
                let storage = keel_kube_api::Storage::new(kube_node);
                let mut kube_rx = kube_rx;
                let api = tokio::select! {
                    api = keel_kube_api::ApiServer::start(storage.clone(), opts) => api?,
                    _ = &mut kube_rx => return Ok(()),
                };
                let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
                if let Some((data_dir, _)) = &init {
                    // The store holds the cluster PKI now (pki/ keeps the CA for renewals).
                    let made = data_dir
                        .join(keel_kube_api::pki::MEMBER_TLS_DIR)
                        .join(INIT_PKI_FILE);
                    if made.exists() {
                        if let Err(e) = std::fs::remove_file(&made) {
                            tracing::warn!(path = %made.display(), %e, "cannot remove the initial PKI file");
                        }
                    }
                }
                if let Some((data_dir, url)) = init {
                    tokio::spawn(write_init_tokens(
                        storage.clone(),
                        api.ca_pem().to_string(),
                        data_dir,
                        url,
                    ));
                }
                if scheduler {
                    crate::control::spawn_scheduler(&api, &storage, holder, stop_rx.clone());
                }
                if let Some(opts) = controllers {
                    crate::control::spawn_controllers(&api, &storage, opts, stop_rx);
                }
                let served = api
                    .serve_https(async move {
                        let _ = kube_rx.await;
                    })
                    .await;
                let _ = stop_tx.send(true);
                served
            }
            None => {
                let _ = kube_rx.await;
                Ok(())
            }
        }
    });
    let mut serving = tokio::spawn(serve(
        node.clone(),
        args.listen_client_urls.clone(),
        client_tls,
        extra_metrics,
        async move {
            let _ = rx.await;
        },
    ));
    let signal = terminated();
    let mut fatal = node.fatal_error();
    let mut removed = node.removed();
    tokio::select! {
        r = &mut kube_serving => {
            let _ = tx.send(());
            let _ = serving.await;
            node.shutdown().await;
            return match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.into()),
                Err(e) => Err(ServerError::Signal(std::io::Error::other(e))),
            };
        }
        r = fatal.wait_for(|f| f.is_some()) => {
            let msg = r.ok().and_then(|v| v.clone()).unwrap_or_default();
            let _ = kube_tx.send(());
            let _ = tx.send(());
            let _ = serving.await;
            node.shutdown().await;
            return Err(ServerError::Config(msg));
        }
        Ok(_) = removed.wait_for(|r| *r) => {
            // Left out by a recovery of a cluster made with join tokens: join it again (where, read
            // before stopping). Otherwise, as etcd: a removed member stops with status 0 (a supervisor
            // must not bring it back).
            let left_out = node.left_out_by();
            let rejoin = left_out
                .filter(|_| args.data_dir.join(SERVER_TOKEN_FILE).exists())
                .and_then(|by| {
                    keel_kube_api::kubernetes_service::published(
                        &keel_kube_api::Storage::new(node.clone()),
                        by,
                    )
                });
            match (rejoin.is_some(), left_out.is_some()) {
                (true, _) => {}
                (false, true) => tracing::error!("a quorum-loss recovery left this member out; with no join token kept, it must be wiped and added again"),
                (false, false) => tracing::error!("the member has been permanently removed from the cluster; its data directory must not be reused"),
            }
            let _ = kube_tx.send(());
            let _ = tx.send(());
            let _ = serving.await;
            if let Some(url) = rejoin {
                node.shutdown().await;
                return rejoin_after_recovery(&args, &url);
            }
        }
        r = signal => {
            r.map_err(ServerError::Signal)?;
            info!("stopping");
            let _ = kube_tx.send(());
            let _ = tx.send(());
            let _ = serving.await;
        }
        r = &mut serving => {
            node.shutdown().await;
            return match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.into()),
                Err(e) => Err(ServerError::Signal(std::io::Error::other(e))),
            };
        }
    }
    node.shutdown().await;
    Ok(())
}

/// A kubeconfig for `user` in `groups`, signed by the CA of the member data dir `data_dir` (its server
/// unless `server` is given).
pub(crate) fn mint_kubeconfig(
    data_dir: &std::path::Path,
    user: &str,
    groups: &[String],
    server: Option<&str>,
) -> Result<String, ServerError> {
    let read = |name: &str| {
        let p = data_dir.join(name);
        std::fs::read_to_string(&p)
            .map_err(|e| ServerError::Config(format!("{}: {e}", p.display())))
    };
    let (ca_cert, ca_key) = (read("pki/ca.crt")?, read("pki/ca.key")?);
    let server = match server {
        Some(s) => s.to_string(),
        None => read("admin.kubeconfig")?
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
            .ok_or_else(|| {
                ServerError::Config("admin.kubeconfig names no server; pass --server".into())
            })?,
    };
    keel_kube_api::pki::user_kubeconfig(&ca_cert, &ca_key, &server, user, groups)
        .map_err(|e| ServerError::Config(e.to_string()))
}

/// `keel kubeconfig`: a kubeconfig for a user with a certificate from the member's CA.
pub(crate) fn kubeconfig(a: crate::cli::KubeconfigArgs) -> Result<(), ServerError> {
    let text = mint_kubeconfig(&a.data_dir, &a.user, &a.group, a.server.as_deref())?;
    match &a.out {
        Some(path) => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?;
            f.write_all(text.as_bytes())
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))
        }
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod rejoin_tests {
    use super::rejoin_args;

    #[test]
    fn rejoin_drops_the_old_cluster_flags_and_joins() {
        let args = [
            "server",
            "--name",
            "m2",
            "--join",
            "https://a:6443",
            "--token=K10old::x.y",
            "--init",
            "--initial-cluster-state",
            "existing",
            "--initial-cluster=m1=https://a:2380",
            "--data-dir",
            "/var/lib/keel",
        ]
        .map(String::from);
        assert_eq!(
            rejoin_args(args.into_iter(), "https://b:6443", "K10new::p.q"),
            [
                "server",
                "--name",
                "m2",
                "--data-dir",
                "/var/lib/keel",
                "--join",
                "https://b:6443",
                "--token",
                "K10new::p.q"
            ]
        );
    }
}
