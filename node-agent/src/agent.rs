//! The agent put together: connect to the runtime, import the image archives, register the Node,
//! write the CNI config from its pod CIDR, then renew the Lease, keep the Node status and run the pods
//! until stopped. Stopping the agent leaves its pods running (a restarted agent adopts them);
//! [`remove_all_pods`] is the explicit teardown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use tracing::{info, warn};

use crate::cri::Cri;
use crate::error::{Error, Result};
use crate::node::machine::Machine;
use crate::node::register::{self, NodeConfig};
use crate::pod::spec::DnsSettings;
use crate::pod::worker::Shared;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The node.
    pub node: NodeConfig,
    /// The CRI endpoint (`unix:///…`).
    pub cri: String,
    /// The agent's directory (pod volumes, CNI state).
    pub root: PathBuf,
    /// Where container logs go.
    pub log_root: PathBuf,
    /// How seccomp profiles are chosen.
    pub seccomp: crate::pod::security::SeccompSettings,
    /// When container logs are rotated.
    pub log_rotation: crate::log_rotation::RotationPolicy,
    /// When unused images are removed.
    pub image_gc: crate::image::gc::GcPolicy,
    /// Where the CNI conflist is written (containerd's `conf_dir`).
    pub cni_conf_dir: PathBuf,
    /// Image archives to import at start.
    pub image_dir: Option<PathBuf>,
    /// A registries file (k3s's `registries.yaml`): mirrors and their credentials and TLS.
    pub registries: Option<PathBuf>,
    /// Cluster DNS.
    pub dns: DnsSettings,
    /// Ranges given `unreachable` routes (the service and cluster CIDRs).
    pub blackholes: Vec<String>,
    /// Put the node IP on the pod bridge as its gateway ([`crate::cni::own_gateway`]).
    pub node_ip_on_bridge: bool,
    /// The service CIDR the node's own processes reach through netprog's rules (None: only the
    /// blackhole, as when another proxy programs Services).
    pub local_services: Option<String>,
    /// The agent's API (None: not served).
    pub server: Option<crate::server::ServerOptions>,
    /// Services on this node (None: `--disable-kube-proxy`, someone else programs them).
    pub netprog: Option<keel_netprog::Options>,
    /// The node's built-in Ingress controller (None: `--disable-ingress`).
    pub ingress: Option<crate::ingress::IngressOptions>,
    /// The node's cluster DNS resolver (None: `--disable-dns`).
    pub resolver: Option<crate::dns::DnsOptions>,
    /// Where the local-path provisioner keeps volume directories (None: `--disable-local-storage`).
    pub storage_dir: Option<PathBuf>,
}

fn socket_path(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint))
}

/// Connects to the runtime, waiting up to a minute for it to come up.
pub async fn connect(endpoint: &str) -> Result<Cri> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Cri::connect(endpoint).await {
            Ok(c) => match c.version().await {
                Ok(_) => return Ok(c),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => {}
            },
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Renders the registries file into the `hosts.toml` directory containerd reads.
async fn write_mirrors(
    cri: &Cri,
    path: &std::path::Path,
    registries: &crate::image::mirrors::Registries,
) -> Result<()> {
    use crate::image::mirrors::{hosts_dir, MirrorError};
    let config_path = cri.registry_config_path().await?;
    let Some(dir) = hosts_dir(&config_path) else {
        if registries.is_empty() {
            return Ok(());
        }
        return Err(Error::Config(
            MirrorError::NoConfigPath {
                path: path.display().to_string(),
            }
            .to_string(),
        ));
    };
    let written = registries
        .write(&dir)
        .map_err(|e| Error::Config(e.to_string()))?;
    info!(dir = %dir.display(), registries = ?written, "registry mirrors written for containerd");
    Ok(())
}

/// Runs the agent until the returned future is dropped.
pub async fn run(client: Client, opts: Options) -> Result<()> {
    let registries = match &opts.registries {
        Some(p) => {
            crate::image::mirrors::Registries::load(p).map_err(|e| Error::Config(e.to_string()))?
        }
        None => Default::default(),
    };
    let cri = connect(&opts.cri).await?;
    if let Some(path) = &opts.registries {
        write_mirrors(&cri, path, &registries).await?;
    }
    // The sandbox image and the local images can be brought back by no registry: never collected.
    let mut protected: std::collections::HashSet<String> =
        [crate::image::oci::PAUSE_IMAGE.to_string()].into();
    if let Some(dir) = &opts.image_dir {
        let n = crate::image::import::import_dir(&socket_path(&opts.cri), dir).await?;
        info!(archives = n, dir = %dir.display(), "image archives imported");
        for a in crate::image::import::archives(dir)? {
            protected.extend(crate::image::import::archive_names(&a)?);
        }
    }
    std::fs::create_dir_all(&opts.root).map_err(|e| Error::io(&opts.root, e))?;
    std::fs::create_dir_all(&opts.log_root).map_err(|e| Error::io(&opts.log_root, e))?;
    crate::node::routes::install(&opts.blackholes)?;
    if let Some(cidr) = &opts.local_services {
        crate::node::routes::install_local_services(cidr)?;
    }
    let machine = Machine::read(&opts.root);
    let node = register::register(&client, &opts.node).await?;
    // Without --pod-cidr the node IPAM controller assigns one moments after the Node exists.
    let cidr = match register::pod_cidr(&node, &opts.node) {
        Some(c) => Some(c),
        None => {
            register::wait_for_pod_cidr(&client, &opts.node.name, Duration::from_secs(60)).await
        }
    };
    match &cidr {
        Some(c) => {
            let bridge = crate::cni::bridge_name(&opts.node.name);
            let path = crate::cni::write(&opts.cni_conf_dir, &bridge, c, &opts.root.join("cni"))?;
            if opts.node_ip_on_bridge {
                crate::cni::own_gateway(&bridge, c, &opts.node.internal_ip)?;
                info!(bridge = %bridge, ip = %opts.node.internal_ip, "node address on the pod bridge");
            }
            info!(cidr = %c, bridge = %bridge, conf = %path.display(), "pod network configured");
        }
        None => warn!("no pod CIDR (neither spec.podCIDR nor --pod-cidr): the node stays NotReady until one is set"),
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "kubelet".into(),
            instance: Some(opts.node.name.clone()),
        },
    );
    let shared = Arc::new(Shared {
        client: client.clone(),
        cri: cri.clone(),
        node: opts.node.name.clone(),
        host_ip: opts.node.internal_ip.clone(),
        root: opts.root.clone(),
        log_root: opts.log_root.clone(),
        seccomp: opts.seccomp.clone(),
        dns: opts.dns.clone(),
        cpus: machine.cpus,
        memory: machine.memory_bytes,
        events: crate::pod::events::EventSink::start(recorder),
        tokens: Default::default(),
        registries: Arc::new(registries),
    });
    let lease = crate::node::lease::run(client.clone(), node.clone(), opts.node.name.clone());
    let status = crate::node::status::run(
        client.clone(),
        cri.clone(),
        machine,
        opts.node.clone(),
        node.status.clone(),
    );
    let pods = crate::pod::run(shared);
    let rotation = crate::log_rotation::run(cri.clone(), opts.log_rotation);
    let image_gc = crate::image::gc::Collector::new(cri.clone(), opts.image_gc, protected).run();
    let sources = crate::server::metrics::Sources {
        netprog: opts.netprog.as_ref().map(|_| Arc::default()),
        dns: opts.resolver.as_ref().map(|_| Arc::default()),
        ingress: opts.ingress.as_ref().map(|_| Arc::default()),
    };
    let netprog = async {
        match (opts.netprog.clone(), sources.netprog.clone()) {
            (Some(n), Some(stats)) => keel_netprog::sync::run(client.clone(), n, stats)
                .await
                .map_err(|e| Error::Config(format!("netprog: {e}"))),
            _ => std::future::pending().await,
        }
    };
    info!(node = %opts.node.name, "agent running");
    let api = async {
        match opts.server.clone() {
            Some(s) => crate::server::run(cri.clone(), client.clone(), s, sources.clone()).await,
            None => std::future::pending().await,
        }
    };
    let resolver = async {
        match (opts.resolver.clone(), sources.dns.clone()) {
            (Some(d), Some(stats)) => crate::dns::run(client.clone(), d, stats).await,
            _ => std::future::pending().await,
        }
    };
    let ingress = async {
        match (opts.ingress.clone(), sources.ingress.clone()) {
            (Some(i), Some(stats)) => match crate::ingress::run(client.clone(), i, stats).await {
                // A port someone else holds costs the node its Ingress controller, not its pods.
                Err(Error::Config(e)) => {
                    warn!(error = %e, "ingress controller not running");
                    std::future::pending().await
                }
                r => r,
            },
            _ => std::future::pending().await,
        }
    };
    let provisioner = async {
        match opts.storage_dir.clone() {
            Some(dir) => {
                let o = crate::storage::provisioner::ProvisionerOptions {
                    node: opts.node.name.clone(),
                    dir,
                };
                crate::storage::provisioner::run(client.clone(), o).await
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = async { tokio::join!(lease, status, pods, rotation, image_gc, provisioner) } => Ok(()),
        r = api => r,
        r = netprog => r,
        r = resolver => r,
        r = ingress => r,
    }
}

/// Stops and removes every sandbox and container keel's agents made on this runtime (CNI teardown
/// included); returns how many sandboxes went.
pub async fn remove_all_pods(endpoint: &str) -> Result<usize> {
    let cri = Cri::connect(endpoint).await?;
    let containers = cri.list_containers().await?;
    for c in &containers {
        let _ = cri.stop_container(&c.id, 0).await;
        let _ = cri.remove_container(&c.id).await;
    }
    let sandboxes = cri.list_sandboxes().await?;
    for s in &sandboxes {
        cri.stop_sandbox(&s.id).await?;
        cri.remove_sandbox(&s.id).await?;
        if let Some(uid) = s.labels.get(crate::cri::labels::POD_UID) {
            crate::pod::resources::remove_pod_cgroups(uid);
        }
    }
    Ok(sandboxes.len())
}

/// Removes the node's pod network: its bridge, the CNI conflist, and host-local's leases (run after
/// [`remove_all_pods`], when no pod uses them).
pub fn remove_network(
    node: &str,
    root: &std::path::Path,
    cni_conf_dir: &std::path::Path,
) -> Result<()> {
    let bridge = crate::cni::bridge_name(node);
    let out = std::process::Command::new("ip")
        .args(["link", "del", &bridge])
        .output()
        .map_err(|e| Error::Command {
            command: format!("ip link del {bridge}"),
            message: e.to_string(),
        })?;
    if out.status.success() {
        info!(bridge = %bridge, "bridge removed");
    }
    let conf = cni_conf_dir.join(crate::cni::CONFLIST);
    if conf.exists() {
        std::fs::remove_file(&conf).map_err(|e| Error::io(&conf, e))?;
    }
    let state = root.join("cni");
    if state.exists() {
        std::fs::remove_dir_all(&state).map_err(|e| Error::io(&state, e))?;
    }
    Ok(())
}
