//! The components that run on the leader: in `keel server` the controller manager and the scheduler
//! follow Raft leadership through the in-process client; `keel controllers` and `keel scheduler` run
//! them against any API server.

use keel_controllers::lease::Mode;
use keel_controllers::Selection;
use keel_kube_api::authn::Identity;
use keel_kube_api::{ApiServer, Storage};
use tokio::sync::watch;

use crate::cli::{ControllersArgs, NetworkControllerArgs, SchedulerArgs};
use crate::server::{init_logging, ServerError};

/// This member's Raft leadership as a flag.
fn leading(storage: &Storage) -> watch::Receiver<bool> {
    let mut leadership = storage.leadership();
    let (tx, rx) = watch::channel(leadership.borrow().is_leader());
    tokio::spawn(async move {
        while leadership.changed().await.is_ok() {
            let lead = leadership.borrow_and_update().is_leader();
            tx.send_if_modified(|v| std::mem::replace(v, lead) != lead);
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// The controller manager's options from its flags (the cluster CA is added where it is known).
pub(crate) fn controller_options(
    holder: String,
    controllers: &str,
    node_monitor_grace_period: std::time::Duration,
    network: &NetworkControllerArgs,
) -> Result<keel_controllers::Options, ServerError> {
    Ok(keel_controllers::Options {
        selection: Selection::parse(controllers).map_err(ServerError::Config)?,
        node_monitor_grace_period,
        node_cidrs: network.node_cidrs().map_err(ServerError::Config)?,
        servicelb: !network.disable_servicelb,
        ..keel_controllers::Options::new(holder)
    })
}

/// Starts the controller manager on `api` with `opts` (and the cluster CA): it runs while this member is
/// the Raft leader, until `stop`.
pub(crate) fn spawn_controllers(
    api: &ApiServer,
    storage: &Storage,
    mut opts: keel_controllers::Options,
    stop: watch::Receiver<bool>,
) {
    // One client serves every controller (kube-controller-manager without
    // --use-service-account-credentials), so it holds what all of them need: the privileged group.
    let identity = Identity {
        user: keel_controllers::USER.to_string(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    };
    let client = kube::Client::new(api.service(identity), "default");
    let leading = leading(storage);
    opts.root_ca = Some(api.ca_pem().to_string());
    // The controllers' workqueue series appear in this member's `/metrics` (idle on followers).
    api.metrics().register_more(|r| opts.metrics.register(r));
    tokio::spawn(keel_controllers::run_while_leading(
        client,
        opts,
        leading,
        stop,
        Mode::Follow,
    ));
}

/// Starts the scheduler on `api`: it runs while this member is the Raft leader, until `stop`.
pub(crate) fn spawn_scheduler(
    api: &ApiServer,
    storage: &Storage,
    holder: String,
    stop: watch::Receiver<bool>,
) {
    let identity = Identity {
        user: keel_scheduler::USER.to_string(),
        groups: vec!["system:authenticated".into()],
    };
    let client = kube::Client::new(api.service(identity), "default");
    let opts = keel_scheduler::Options::new(holder);
    // The scheduler's metrics appear in this member's `/metrics` (they stay at zero on followers).
    api.metrics().register_more(|r| opts.metrics.register(r));
    tokio::spawn(keel_scheduler::run_while_leading(
        client,
        opts,
        leading(storage),
        stop,
        keel_scheduler::lease::Mode::Follow,
    ));
}

/// Reads a kubeconfig file into a client configuration.
pub(crate) async fn load_kubeconfig(path: &std::path::Path) -> Result<kube::Config, ServerError> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| ServerError::Config(format!("--kubeconfig {}: {e}", path.display())))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| ServerError::Config(format!("--kubeconfig {}: {e}", path.display())))
}

/// A Lease holder identity: `--name`, or the host name with a random suffix (client-go's shape).
fn holder_identity(name: &str) -> String {
    if !name.is_empty() {
        return name.to_string();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "keel".into());
    format!("{host}_{}", uuid_suffix())
}

/// `keel scheduler --kubeconfig FILE`: elect through the Lease, then schedule while leading.
pub(crate) async fn run_scheduler(args: SchedulerArgs) -> Result<(), ServerError> {
    init_logging(&args.log_level)?;
    let config = load_kubeconfig(&args.kubeconfig).await?;
    let client = kube::Client::try_from(config)
        .map_err(|e| ServerError::Config(format!("cannot make a client: {e}")))?;
    let holder = holder_identity(&args.name);
    let leading = keel_scheduler::lease::elect(client.clone(), keel_scheduler::LEASE_NAME, &holder);
    let (stop_tx, stop) = watch::channel(false);
    let run = keel_scheduler::run_while_leading(
        client,
        keel_scheduler::Options::new(holder),
        leading,
        stop,
        keel_scheduler::lease::Mode::Elect,
    );
    tokio::select! {
        _ = run => {}
        r = crate::server::terminated() => {
            r.map_err(ServerError::Signal)?;
            let _ = stop_tx.send(true);
        }
    }
    Ok(())
}

/// `keel controllers --kubeconfig FILE`: elect through the Lease, then run the controllers while leading.
pub(crate) async fn run_controllers(args: ControllersArgs) -> Result<(), ServerError> {
    init_logging(&args.log_level)?;
    let mut opts = controller_options(
        String::new(),
        &args.controllers,
        args.node_monitor_grace_period,
        &args.network,
    )?;
    let config = load_kubeconfig(&args.kubeconfig).await?;
    let root_ca = config
        .root_cert
        .as_ref()
        .and_then(|certs| certs.first().map(|der| pem_encode("CERTIFICATE", der)));
    let client = kube::Client::try_from(config)
        .map_err(|e| ServerError::Config(format!("cannot make a client: {e}")))?;
    let holder = holder_identity(&args.name);
    let leading = keel_controllers::lease::elect(
        client.clone(),
        keel_controllers::manager::LEASE_NAME,
        &holder,
    );
    let (stop_tx, stop) = watch::channel(false);
    opts.holder = holder;
    opts.root_ca = root_ca;
    let run = keel_controllers::run_while_leading(client, opts, leading, stop, Mode::Elect);
    tokio::select! {
        _ = run => {}
        r = crate::server::terminated() => {
            r.map_err(ServerError::Signal)?;
            let _ = stop_tx.send(true);
        }
    }
    Ok(())
}

fn uuid_suffix() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:08x}{:04x}", nanos, std::process::id() & 0xffff)
}

/// PEM armour around one DER block.
fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}
