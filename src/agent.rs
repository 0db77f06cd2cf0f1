//! `keel agent`: a node agent against any keel (or Kubernetes) API server, and `keel images`, which
//! writes the image archives it imports when no registry is reachable.

use std::collections::BTreeMap;

use keel_node_agent::agent::{self, Options};
use keel_node_agent::node::register::NodeConfig;
use keel_node_agent::pod::spec::DnsSettings;

use crate::cli::{AgentArgs, ImagesArgs};
use crate::server::{init_logging, ServerError};

/// The kube-dns Service's IP when --cluster-dns is not given.
const DEFAULT_CLUSTER_DNS: &str = "10.96.0.10";

/// The cluster DNS IPs pods get: --cluster-dns, else the default when this agent runs a resolver.
fn cluster_dns(args: &AgentArgs) -> Vec<String> {
    let given: Vec<String> = args
        .cluster_dns
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
    if given.is_empty() && !args.disable_dns {
        vec![DEFAULT_CLUSTER_DNS.to_string()]
    } else {
        given
    }
}

/// The resolver's upstreams: --dns-upstream (port 53 unless given), else /etc/resolv.conf's.
fn dns_upstreams(args: &AgentArgs) -> Result<Vec<std::net::SocketAddr>, ServerError> {
    if args.dns_upstream.is_empty() {
        let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        return Ok(keel_node_agent::dns::parse_resolv_conf(&text));
    }
    args.dns_upstream
        .iter()
        .map(|u| {
            u.parse::<std::net::SocketAddr>()
                .or_else(|_| u.parse::<std::net::IpAddr>().map(|ip| (ip, 53).into()))
                .map_err(|_| {
                    ServerError::Config(format!("--dns-upstream {u:?} is not ip or ip:port"))
                })
        })
        .collect()
}

/// The resolver's options: it listens on the node's IP and fronts the first cluster DNS IP.
fn resolver_options(
    args: &AgentArgs,
    node: &str,
    node_ip: &str,
) -> Result<Option<keel_node_agent::dns::DnsOptions>, ServerError> {
    if args.disable_dns {
        return Ok(None);
    }
    let ip: std::net::IpAddr = node_ip
        .parse()
        .map_err(|_| ServerError::Config(format!("node IP {node_ip:?} is not an address")))?;
    let dns = cluster_dns(args);
    let service_ip = dns
        .first()
        .map(|s| s.parse::<std::net::Ipv4Addr>())
        .transpose()
        .map_err(|_| {
            ServerError::Config(format!(
                "--cluster-dns {dns:?}: the first must be an IPv4 address"
            ))
        })?
        .unwrap_or(std::net::Ipv4Addr::new(10, 96, 0, 10));
    let mut o = keel_node_agent::dns::DnsOptions::new(node, ip, dns_upstreams(args)?);
    o.domain = args.cluster_domain.clone();
    o.service_ip = service_ip;
    Ok(Some(o))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_else(|_| "keel-node".into())
}

/// The local address this machine reaches `url`'s host from (a UDP connect sends nothing).
fn local_ip_towards(url: &str) -> Option<String> {
    let rest = url.split("://").nth(1)?;
    let hostport = rest.split('/').next()?;
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:443")
    };
    let target = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .ok()?
        .next()?;
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect(target).ok()?;
    Some(s.local_addr().ok()?.ip().to_string())
}

/// `keel agent`.
pub(crate) async fn run(args: AgentArgs) -> Result<(), ServerError> {
    init_logging(&args.log_level)?;
    let name = if args.node_name.is_empty() {
        host_name()
    } else {
        args.node_name.clone()
    };
    if args.remove_all_pods || args.cleanup {
        let n = agent::remove_all_pods(&args.cri)
            .await
            .map_err(|e| ServerError::Config(e.to_string()))?;
        keel_node_agent::node::routes::remove(&[
            args.cluster_cidr.clone(),
            args.service_cidr.clone(),
        ]);
        keel_node_agent::node::routes::remove_local_services();
        println!("removed {n} pod sandboxes from {}", args.cri);
        let mounts = keel_node_agent::pod::volumes::unmount_pods(&args.root_dir);
        if mounts > 0 {
            println!("unmounted {mounts} memory-backed volumes");
        }
        if args.cleanup {
            keel_netprog::sync::cleanup(&args.root_dir.join("netprog"))
                .await
                .map_err(|e| ServerError::Config(e.to_string()))?;
            agent::remove_network(&name, &args.root_dir, &args.cni_conf_dir)
                .map_err(|e| ServerError::Config(e.to_string()))?;
            println!(
                "removed the nftables table ip keel, the pod routes, the bridge and CNI state"
            );
            // The node's kube-dns EndpointSlice lives in the API: removed when we can reach it.
            if let Some(kubeconfig) = &args.kubeconfig {
                let config = crate::control::load_kubeconfig(kubeconfig).await?;
                let client = kube::Client::try_from(config)
                    .map_err(|e| ServerError::Config(format!("cannot make a client: {e}")))?;
                keel_node_agent::dns::publish::delete_slice(&client, &name)
                    .await
                    .map_err(|e| ServerError::Config(e.to_string()))?;
                println!(
                    "removed the EndpointSlice kube-system/{}",
                    keel_node_agent::dns::publish::slice_name(&name)
                );
            }
        }
        return Ok(());
    }
    // With --join, the node's own kubeconfig comes from the cluster the first time and is kept, and the
    // API is reached through a local balancer over every member.
    let mut balanced: Option<std::sync::Arc<crate::api_balancer::Servers>> = None;
    let kubeconfig = match (&args.join, &args.token) {
        (Some(url), Some(token)) => {
            let path = args
                .kubeconfig
                .clone()
                .unwrap_or_else(|| args.root_dir.join("kubeconfig"));
            let mut urls = vec![url.clone()];
            if !path.exists() {
                let joined = crate::join::join_agent(url, token, &name, &path)
                    .await
                    .map_err(|e| ServerError::Config(e.to_string()))?;
                tracing::info!(node = %name, servers = ?joined.servers, kubeconfig = %path.display(), "joined the cluster");
                urls.extend(joined.servers);
            }
            balanced = Some(crate::api_balancer::Servers::new(
                &urls,
                args.root_dir.join("apiservers.json"),
            ));
            path
        }
        _ => match &args.kubeconfig {
            Some(k) => k.clone(),
            None => {
                return Err(ServerError::Config(
                    "--kubeconfig (or --join with --token) is required".into(),
                ))
            }
        },
    };
    let mut config = crate::control::load_kubeconfig(&kubeconfig).await?;
    if let Some(s) = &args.server {
        config.cluster_url = s
            .parse()
            .map_err(|e| ServerError::Config(format!("--server {s}: {e}")))?;
    }
    let mut server = config.cluster_url.to_string();
    if let Some(servers) = &balanced {
        let local = crate::api_balancer::start(servers.clone())
            .await
            .map_err(|e| ServerError::Config(format!("API load balancer: {e}")))?;
        if let Some(first) = servers.first() {
            // The node's address is the one it reaches a member from, not the loopback balancer's.
            server = format!("https://{first}");
        }
        config.cluster_url = format!("https://{local}")
            .parse()
            .map_err(|e| ServerError::Config(format!("API load balancer address: {e}")))?;
        tracing::info!(%local, "reaching the API through the local load balancer");
    }
    let client_ca = config.root_cert.clone().unwrap_or_default();
    let client = kube::Client::try_from(config)
        .map_err(|e| ServerError::Config(format!("cannot make a client: {e}")))?;
    if let Some(servers) = &balanced {
        crate::api_balancer::refresh(client.clone(), servers.clone());
    }
    if args.hollow > 0 {
        return hollow(client, &args).await;
    }
    let mut labels = BTreeMap::new();
    for l in &args.node_labels {
        let (k, v) = l
            .split_once('=')
            .ok_or_else(|| ServerError::Config(format!("--node-labels: {l:?} is not key=value")))?;
        labels.insert(k.to_string(), v.to_string());
    }
    let internal_ip = match &args.node_ip {
        Some(ip) => ip.clone(),
        None => local_ip_towards(&server).unwrap_or_else(|| "127.0.0.1".into()),
    };
    if args.image_gc_low_threshold > args.image_gc_high_threshold {
        return Err(ServerError::Config(format!(
            "--image-gc-low-threshold {} is above --image-gc-high-threshold {}",
            args.image_gc_low_threshold, args.image_gc_high_threshold
        )));
    }
    let opts = Options {
        node: NodeConfig {
            name,
            internal_ip,
            pod_cidr: args.pod_cidr.clone(),
            labels,
            taints: vec![],
            port: args.port,
        },
        cri: args.cri.clone(),
        root: args.root_dir.clone(),
        log_root: args.pod_log_dir.clone(),
        seccomp: keel_node_agent::pod::security::SeccompSettings {
            profile_root: args.root_dir.join("seccomp"),
            runtime_default: args.seccomp_default,
        },
        log_rotation: keel_node_agent::log_rotation::RotationPolicy {
            max_size: args.container_log_max_size,
            max_files: args.container_log_max_files as usize,
            interval: args.container_log_monitor_interval,
        },
        image_gc: keel_node_agent::image::gc::GcPolicy {
            high_percent: args.image_gc_high_threshold,
            low_percent: args.image_gc_low_threshold,
            min_age: args.minimum_image_ttl_duration,
            interval: args.image_gc_period,
        },
        cni_conf_dir: args.cni_conf_dir.clone(),
        image_dir: args.image_dir.clone(),
        registries: args.registries.clone(),
        dns: DnsSettings {
            cluster_dns: cluster_dns(&args),
            domain: args.cluster_domain.clone(),
        },
        blackholes: vec![args.cluster_cidr.clone(), args.service_cidr.clone()],
        node_ip_on_bridge: args.node_ip_on_bridge,
        local_services: (!args.disable_kube_proxy).then(|| args.service_cidr.clone()),
        server: None,
        netprog: None,
        resolver: None,
        ingress: None,
        storage_dir: (!args.disable_local_storage).then(|| {
            args.storage_dir
                .clone()
                .unwrap_or_else(|| args.root_dir.join("storage"))
        }),
    };
    let port = u16::try_from(args.port)
        .map_err(|_| ServerError::Config(format!("--port {} is not a port", args.port)))?;
    let mut opts = opts;
    opts.resolver = resolver_options(&args, &opts.node.name, &opts.node.internal_ip)?;
    if !args.disable_ingress {
        let ip: std::net::IpAddr = opts.node.internal_ip.parse().map_err(|_| {
            ServerError::Config(format!(
                "node IP {:?} is not an address",
                opts.node.internal_ip
            ))
        })?;
        opts.ingress = Some(keel_node_agent::ingress::IngressOptions {
            http: std::net::SocketAddr::new(ip, args.ingress_http_port),
            https: (args.ingress_https_port != 0)
                .then(|| std::net::SocketAddr::new(ip, args.ingress_https_port)),
            workers: keel_node_agent::ingress::default_workers(),
        });
    }
    opts.server = Some(keel_node_agent::server::ServerOptions {
        listen: std::net::SocketAddr::new(args.address, port),
        client_ca,
        pki_dir: args.root_dir.join("pki"),
        hosts: vec![
            opts.node.name.clone(),
            opts.node.internal_ip.clone(),
            "localhost".into(),
        ],
        node: opts.node.name.clone(),
    });
    if !args.disable_kube_proxy {
        let cidr = args.cluster_cidr.parse::<ipnet::Ipv4Net>().map_err(|e| {
            ServerError::Config(format!("--cluster-cidr {}: {e}", args.cluster_cidr))
        })?;
        opts.netprog = Some(keel_netprog::Options::new(
            &opts.node.name,
            cidr,
            args.root_dir.join("netprog"),
        ));
    }
    tokio::select! {
        r = agent::run(client, opts) => r.map_err(|e| ServerError::Config(e.to_string())),
        r = crate::server::terminated() => r.map_err(ServerError::Signal),
    }
}

/// `keel agent --hollow N`: until SIGINT or SIGTERM, after which the Nodes stay as a stopped
/// kubelet's do.
async fn hollow(client: kube::Client, args: &AgentArgs) -> Result<(), ServerError> {
    let opts = keel_node_agent::hollow::Options {
        count: args.hollow,
        prefix: args.hollow_prefix.clone(),
        cpu: args.hollow_cpu.clone(),
        memory: args.hollow_memory.clone(),
        pods: args.hollow_pods,
        zones: args.hollow_zones,
        kubelet_port: args.port,
        concurrency: args.hollow_concurrency,
    };
    tokio::select! {
        r = keel_node_agent::hollow::run(client, opts) => r.map_err(|e| ServerError::Config(e.to_string())),
        r = crate::server::terminated() => {
            tracing::info!("stopping; the hollow Nodes stay registered and go NotReady when their Leases expire");
            r.map_err(ServerError::Signal)
        }
    }
}

/// `keel images --out DIR` or `keel images --push REGISTRY`.
pub(crate) async fn images(args: ImagesArgs) -> Result<(), ServerError> {
    let cfg = |e: &dyn std::fmt::Display| ServerError::Config(e.to_string());
    if let Some(out) = &args.out {
        let paths =
            keel_node_agent::image::oci::write_builtin(out, &args.busybox).map_err(|e| cfg(&e))?;
        for p in paths {
            println!("{}", p.display());
        }
    }
    let Some(push) = &args.push else {
        return Ok(());
    };
    use keel_node_agent::image::push::{Destination, Pusher};
    let dest = Destination::parse(push, args.plain_http).map_err(|e| cfg(&e))?;
    let credentials = match &args.username {
        Some(user) => {
            let password = if args.password_stdin {
                let mut p = String::new();
                std::io::stdin()
                    .read_line(&mut p)
                    .map_err(|e| cfg(&format!("reading the password: {e}")))?;
                p.trim_end_matches(['\r', '\n']).to_string()
            } else {
                std::env::var("KEEL_REGISTRY_PASSWORD").map_err(|_| {
                    cfg(&"--username needs --password-stdin or KEEL_REGISTRY_PASSWORD")
                })?
            };
            Some((user.clone(), password))
        }
        None => None,
    };
    let mut pusher =
        Pusher::new(dest.clone(), credentials, args.ca_file.as_deref()).map_err(|e| cfg(&e))?;
    for (_, def) in keel_node_agent::image::oci::builtin(&args.busybox).map_err(|e| cfg(&e))? {
        let built = keel_node_agent::image::oci::build(&def).map_err(|e| cfg(&e))?;
        let (repo, tag) = dest.repository_of(&def.name);
        let digest = pusher
            .push(&repo, &tag, &built)
            .await
            .map_err(|e| cfg(&e))?;
        println!("{}/{repo}:{tag}@{digest}", dest.host);
    }
    Ok(())
}
