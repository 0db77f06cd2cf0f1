//! Network programming latency (upstream's SLI for kube-proxy): from a change of a Service's ready pods
//! to the node's rules being in effect, measured with packets.
//!
//! In a network namespace of its own (see [`super::netns`]) the child starts one keel member, a Node
//! kept Ready by a heartbeat, `background` selector-less Services with hand-made EndpointSlices of 10
//! endpoints each (the table netprog rewrites on every change), and a few probe Services of one pod
//! each, whose status the benchmark writes as a kubelet would. netprog (`keel_netprog::sync::run`, as
//! the node agent runs it) programs the namespace. Each change flips one probe pod's `Ready`
//! condition through `pods/status`; the clock starts just before that write. The EndpointSlice
//! controller follows, netprog rewrites the table, and a TCP probe that connects to the Service's
//! ClusterIP every millisecond sees the result: accepted once the pod is an endpoint, refused (the
//! table's reject for Services without endpoints) once it is not. The latency is the start of the
//! first probe that sees the new state.
//!
//! netprog's own histogram (`keel_agent_proxy_network_programming_duration_seconds`, from the
//! slice's `endpoints.kubernetes.io/last-change-trigger-time`) is read at the end and reported beside
//! it: it counts from the pod condition's `lastTransitionTime` (upstream keeps that to the second and so
//! reads up to a second high; keel keeps the fraction the writer sent), and its quantiles are
//! interpolated inside coarse buckets.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;

use super::netns;
use crate::error::{BenchError, Result};
use crate::target::{Api as ServeApi, Binaries, Cluster, Kind};

/// Background Services of a full run.
pub(crate) const BACKGROUND: usize = 1000;
/// Background Services of `--quick`.
pub(crate) const QUICK_BACKGROUND: usize = 100;
/// Changes measured in a full run.
pub(crate) const CHANGES: usize = 100;
/// Changes measured with `--quick`.
pub(crate) const QUICK_CHANGES: usize = 10;
/// Endpoints per background Service.
const ENDPOINTS: usize = 10;
/// Probe Services, changed in turn.
const PROBES: usize = 5;
/// The node netprog programs.
const NODE: &str = "bench-node";
/// Where everything lives.
const NS: &str = "bench-programming";
/// The probe pods' port (a listener of this process answers on every pod address).
const TARGET_PORT: u16 = 8080;
/// The Services' port.
const SERVICE_PORT: u16 = 80;
/// The node's address, on the namespace's portless bridge.
const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 42, 0, 1);
/// How long the child may take in all.
const DEADLINE: Duration = Duration::from_secs(1800);
/// How long one change may take to show before the run fails.
const CHANGE_LIMIT: Duration = Duration::from_secs(60);
const RESULT: &str = "programming-result";
const PROGRESS: &str = "programming-progress";

/// What the step measured.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Figures {
    /// Background Services (10 endpoints each) in the table besides the probes.
    pub background: usize,
    /// From netprog's start to the background Services being in force (list, render, first apply).
    pub first_sync: Duration,
    /// Size of the table's script when the changes were made, bytes.
    pub script_bytes: u64,
    /// Latency of changes that made a pod ready (its endpoint added).
    pub added: Vec<Duration>,
    /// Latency of changes that made a pod not ready (its endpoint removed).
    pub removed: Vec<Duration>,
    /// The `pods/status` writes themselves (Raft commit included).
    pub writes: Vec<Duration>,
    /// netprog's histogram: observations, p50 and p99 (seconds), from the trigger times.
    pub histogram: (u64, Option<f64>, Option<f64>),
}

impl Figures {
    /// Every change's latency, sorted.
    pub(crate) fn all(&self) -> Vec<Duration> {
        let mut all: Vec<Duration> = self.added.iter().chain(&self.removed).copied().collect();
        all.sort();
        all
    }
}

fn error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Netprog(format!("programming latency: {what}: {e}"))
}

fn micros(d: &[Duration]) -> Value {
    Value::from(d.iter().map(|x| x.as_micros() as u64).collect::<Vec<_>>())
}

fn encode(f: &Figures) -> String {
    let v = json!({
        "background": f.background,
        "first_sync": f.first_sync.as_micros() as u64,
        "script_bytes": f.script_bytes,
        "added": micros(&f.added),
        "removed": micros(&f.removed),
        "writes": micros(&f.writes),
        "hist_count": f.histogram.0,
        "hist_p50": f.histogram.1,
        "hist_p99": f.histogram.2,
    });
    format!("{RESULT} {v}")
}

fn decode(line: &str) -> Result<Figures> {
    let bad = |what: &str| error("child result", format!("{what} in {line:?}"));
    let v: Value = line
        .strip_prefix(RESULT)
        .and_then(|j| serde_json::from_str(j.trim()).ok())
        .ok_or_else(|| bad("no JSON"))?;
    let durations = |k: &str| -> Result<Vec<Duration>> {
        v[k].as_array()
            .ok_or_else(|| bad(k))?
            .iter()
            .map(|x| x.as_u64().map(Duration::from_micros).ok_or_else(|| bad(k)))
            .collect()
    };
    Ok(Figures {
        background: v["background"].as_u64().ok_or_else(|| bad("background"))? as usize,
        first_sync: Duration::from_micros(
            v["first_sync"].as_u64().ok_or_else(|| bad("first_sync"))?,
        ),
        script_bytes: v["script_bytes"].as_u64().unwrap_or(0),
        added: durations("added")?,
        removed: durations("removed")?,
        writes: durations("writes")?,
        histogram: (
            v["hist_count"].as_u64().unwrap_or(0),
            v["hist_p50"].as_f64(),
            v["hist_p99"].as_f64(),
        ),
    })
}

/// The parent's side: runs the step in `unshare -n <self> --programming-child …`.
pub(crate) async fn run(
    keel: &Path,
    background: usize,
    changes: usize,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    let args = [
        "--keel".to_string(),
        keel.display().to_string(),
        "--programming-background".to_string(),
        background.to_string(),
        "--programming-changes".to_string(),
        changes.to_string(),
    ];
    let prefixes = netns::Prefixes {
        progress: PROGRESS,
        result: RESULT,
    };
    let lines =
        netns::run_child("--programming-child", &args, &prefixes, DEADLINE, progress).await?;
    match lines.as_slice() {
        [one] => decode(one),
        _ => Err(error(
            "child",
            format!("{} result lines, want 1", lines.len()),
        )),
    }
}

async fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|e| error("ip", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(error(
            &format!("ip {}", args.join(" ")),
            String::from_utf8_lossy(&out.stderr).trim(),
        ))
    }
}

fn pod_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 42, 0, 10 + i as u8)
}

/// The namespace's network: loopback up, the node's and the probe pods' addresses on a bridge without ports
/// interface, and the service range routed to the loopback so the nat-output hook sees connections
/// to ClusterIPs (as the agent's local service route does).
async fn network() -> Result<()> {
    ip(&["link", "set", "lo", "up"]).await?;
    ip(&["link", "add", "bench0", "type", "bridge"]).await?;
    ip(&["link", "set", "bench0", "up"]).await?;
    ip(&["addr", "add", &format!("{NODE_IP}/32"), "dev", "bench0"]).await?;
    for i in 0..PROBES {
        ip(&["addr", "add", &format!("{}/32", pod_ip(i)), "dev", "bench0"]).await?;
    }
    ip(&["route", "add", "10.96.0.0/12", "dev", "lo"]).await
}

/// Now as a MicroTime (exactly six fraction digits, as the API server requires).
fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The Node, Ready, with this namespace's address; its Lease renewed until the step ends.
async fn node(client: &Client) -> Result<tokio::task::JoinHandle<()>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        "spec": {"podCIDR": "10.42.0.0/24", "podCIDRs": ["10.42.0.0/24"]},
    }))
    .map_err(|e| error("node", e))?;
    nodes
        .create(&PostParams::default(), &node)
        .await
        .map_err(|e| error("create node", e))?;
    let status = |t: &str| {
        json!({"status": {
            "addresses": [{"type": "InternalIP", "address": NODE_IP.to_string()},
                          {"type": "Hostname", "address": NODE}],
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "the benchmark stands in for the kubelet",
                            "lastHeartbeatTime": t, "lastTransitionTime": t}],
        }})
    };
    nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(status(&now())))
        .await
        .map_err(|e| error("node status", e))?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": NODE},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": now()},
    }))
    .map_err(|e| error("lease", e))?;
    leases
        .create(&PostParams::default(), &lease)
        .await
        .map_err(|e| error("create lease", e))?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let renew = json!({"spec": {"renewTime": now()}});
            // A missed renewal is retried in 5 s; 40 s of grace leave room for several.
            let _ = leases
                .patch(NODE, &PatchParams::default(), &Patch::Merge(renew))
                .await;
        }
    }))
}

/// `n` selector-less Services with a hand-made slice of 10 ready endpoints each.
async fn background(client: &Client, n: usize, progress: &dyn Fn(String)) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let done = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(0..n)
        .map(|i| {
            let (services, slices, done) = (&services, &slices, &done);
            async move {
                let name = format!("bg-{i:05}");
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"ports": [{"port": SERVICE_PORT, "targetPort": TARGET_PORT}]},
                }))
                .map_err(|e| error("service", e))?;
                services
                    .create(&PostParams::default(), &svc)
                    .await
                    .map_err(|e| error("create service", e))?;
                let endpoints: Vec<Value> = (0..ENDPOINTS)
                    .map(|e| {
                        let ip = Ipv4Addr::from(
                            u32::from(Ipv4Addr::new(10, 44, 0, 0)) + (i * ENDPOINTS + e) as u32,
                        );
                        json!({"addresses": [ip.to_string()], "conditions": {"ready": true},
                               "nodeName": NODE})
                    })
                    .collect();
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-x"),
                                 "labels": {"kubernetes.io/service-name": name}},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": [{"name": "", "port": TARGET_PORT, "protocol": "TCP"}],
                }))
                .map_err(|e| error("slice", e))?;
                slices
                    .create(&PostParams::default(), &slice)
                    .await
                    .map_err(|e| error("create slice", e))?;
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if d % 200 == 0 {
                    progress(format!("{d}/{n} background Services"));
                }
                Ok::<(), BenchError>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The probe Services and their pods (not ready yet); returns each Service's ClusterIP address.
async fn probes(client: &Client) -> Result<Vec<SocketAddr>> {
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut addrs = Vec::new();
    for i in 0..PROBES {
        let name = format!("probe-{i}");
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"selector": {"probe": name},
                     "ports": [{"port": SERVICE_PORT, "targetPort": TARGET_PORT}]},
        }))
        .map_err(|e| error("service", e))?;
        let svc = services
            .create(&PostParams::default(), &svc)
            .await
            .map_err(|e| error("create probe service", e))?;
        let ip: Ipv4Addr = svc
            .spec
            .and_then(|s| s.cluster_ip)
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| error("probe service", "no ClusterIP"))?;
        addrs.push(SocketAddr::from((ip, SERVICE_PORT)));
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"probe": name}},
            "spec": {"nodeName": NODE,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                     "ports": [{"containerPort": TARGET_PORT}]}]},
        }))
        .map_err(|e| error("pod", e))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| error("create probe pod", e))?;
        set_ready(&pods, i, false).await?;
    }
    Ok(addrs)
}

/// Writes probe pod `i`'s status as its kubelet would, Ready or not.
async fn set_ready(pods: &Api<Pod>, i: usize, ready: bool) -> Result<()> {
    let t = now();
    let s = if ready { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": NODE_IP.to_string(),
        "podIP": pod_ip(i).to_string(),
        "podIPs": [{"ip": pod_ip(i).to_string()}],
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": s, "lastTransitionTime": t},
            {"type": "Ready", "status": s, "lastTransitionTime": t},
        ],
    }});
    pods.patch_status(
        &format!("probe-{i}"),
        &PatchParams::default(),
        &Patch::Merge(status),
    )
    .await
    .map_err(|e| error("pod status", e))?;
    Ok(())
}

/// Whether a connection to `addr` is accepted now (refused, or no answer in 100 ms, is `false`).
async fn accepts(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_millis(100), TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// Probes `addr` every millisecond until it answers as `want`; returns when the first probe that
/// did so started.
async fn until(addr: SocketAddr, want: bool) -> Result<Instant> {
    let limit = Instant::now() + CHANGE_LIMIT;
    loop {
        let at = Instant::now();
        if accepts(addr).await == want {
            return Ok(at);
        }
        if at > limit {
            return Err(error(
                "change",
                format!(
                    "{addr} still {} after {} s",
                    if want { "refused" } else { "accepted" },
                    CHANGE_LIMIT.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The child's side (`--programming-child <parent's netns>`).
pub(crate) async fn child(
    parent_netns: &str,
    keel: &Path,
    background_n: usize,
    changes: usize,
) -> Result<()> {
    netns::enter(parent_netns).await?;
    let progress = |m: String| println!("{PROGRESS} {m}");
    network().await?;
    let root = tempfile::tempdir().map_err(|e| error("temp dir", e))?;
    let bins = Binaries {
        keel: keel.to_path_buf(),
        etcd: std::path::PathBuf::from("/usr/bin/etcd"),
    };
    let cluster = Cluster::start_with(Kind::Keel, 1, root.path(), &bins, ServeApi::Kube).await?;
    let client = super::controllers::client(&cluster, 0).await?;
    let heartbeat = node(&client).await?;
    let result = measure(&client, root.path(), background_n, changes, &progress).await;
    heartbeat.abort();
    // The namespace goes when this process exits; the table is removed first all the same.
    let _ = keel_netprog::nft::remove().await;
    drop(cluster);
    println!("{}", encode(&result?));
    Ok(())
}

async fn measure(
    client: &Client,
    root: &Path,
    background_n: usize,
    changes: usize,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))
        .map_err(|e| error("namespace", e))?;
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .map_err(|e| error("create namespace", e))?;
    background(client, background_n, progress).await?;
    let addrs = probes(client).await?;
    // Every probe pod's address answers on the target port.
    let listener = TcpListener::bind(("0.0.0.0", TARGET_PORT))
        .await
        .map_err(|e| error("listen", e))?;
    let accept = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });

    progress(format!(
        "netprog programs {background_n} Services of {ENDPOINTS} endpoints and {PROBES} probes"
    ));
    let stats = Arc::new(keel_netprog::Stats::default());
    let cidr = "10.42.0.0/16"
        .parse()
        .map_err(|e| error("cluster CIDR", e))?;
    let state = root.join("netprog");
    std::fs::create_dir_all(&state).map_err(|e| error("state dir", e))?;
    let opts = keel_netprog::sync::Options::new(NODE, cidr, state);
    let started = Instant::now();
    let netprog = tokio::spawn(keel_netprog::sync::run(client.clone(), opts, stats.clone()));
    let result = async {
        // In force once the background Services are in the table (probes have no endpoints yet).
        while stats.services.load(Ordering::Relaxed) < background_n as u64 {
            if netprog.is_finished() || started.elapsed() > Duration::from_secs(600) {
                return Err(error(
                    "first sync",
                    "netprog stopped or did not program the Services in 600 s",
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let first_sync = started.elapsed();
        for &a in &addrs {
            until(a, false).await?;
        }
        progress(format!(
            "first sync {:.2} s; {changes} changes",
            first_sync.as_secs_f64()
        ));
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let mut ready = [false; PROBES];
        let (mut added, mut removed, mut writes) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..changes {
            let i = k % PROBES;
            ready[i] = !ready[i];
            let t0 = Instant::now();
            set_ready(&pods, i, ready[i]).await?;
            writes.push(t0.elapsed());
            let seen = until(addrs[i], ready[i]).await?;
            let latency = seen.saturating_duration_since(t0);
            if ready[i] {
                added.push(latency);
            } else {
                removed.push(latency);
            }
            if (k + 1) % 10 == 0 {
                progress(format!("{}/{changes} changes", k + 1));
            }
            // Changes do not line up with netprog's batching: a pause of 200-500 ms between them.
            tokio::time::sleep(Duration::from_millis(200 + (k as u64 * 37) % 300)).await;
        }
        let snapshot = stats.programming.snapshot();
        Ok(Figures {
            background: background_n,
            first_sync,
            script_bytes: stats.script_bytes.load(Ordering::Relaxed),
            added,
            removed,
            writes,
            histogram: (
                snapshot.count,
                snapshot.quantile(0.5),
                snapshot.quantile(0.99),
            ),
        })
    }
    .await;
    netprog.abort();
    accept.abort();
    result
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// The step's table, beside upstream's published figures.
pub(crate) fn text(f: &Figures) -> String {
    let all = f.all();
    let mut added = f.added.clone();
    added.sort();
    let mut removed = f.removed.clone();
    removed.sort();
    let mut writes = f.writes.clone();
    writes.sort();
    let row = |what: &str, d: &[Duration]| {
        format!(
            "| {what} | {} | {} | {} | {} | {} |\n",
            d.len(),
            ms(super::nearest_rank(d, 0.5)),
            ms(super::nearest_rank(d, 0.9)),
            ms(super::nearest_rank(d, 0.99)),
            ms(d.last().copied().unwrap_or_default()),
        )
    };
    let hist = |q: Option<f64>| q.map_or("-".to_string(), |s| format!("{:.2} s", s));
    let mut out = String::new();
    out.push_str(&format!(
        "network programming latency: {} background Services of {ENDPOINTS} endpoints ({} KiB of rules, first sync {:.2} s), {PROBES} probe Services changed in turn\n\n",
        f.background,
        f.script_bytes / 1024,
        f.first_sync.as_secs_f64()
    ));
    out.push_str("| change | n | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n");
    out.push_str(&row("pod Ready -> endpoint added", &added));
    out.push_str(&row("pod not Ready -> endpoint removed", &removed));
    out.push_str(&row("all changes", &all));
    out.push_str(&row("(the pods/status write alone)", &writes));
    out.push_str(&format!(
        "\nnetprog's histogram (from last-change-trigger-time; quantiles interpolated inside its 0.25 s, 0.5 s, 1 s… buckets): {} observations, p50 {}, p99 {}\n",
        f.histogram.0,
        hist(f.histogram.1),
        hist(f.histogram.2)
    ));
    out.push_str(&format!("upstream: {UPSTREAM}\n"));
    out
}

/// What upstream publishes for the same SLI (measured elsewhere, on other hardware and scale).
pub(crate) const UPSTREAM: &str = "kubernetes PR #124272 (nftables proxy, 2024-04-11, job \
pull-kubernetes-e2e-gce-100-performance: 100 nodes, the load test's Services and pods): NetworkProgrammingLatency \
p50 1 520 ms, p90 2 282 ms, p99 6 815 ms (from the pod change, truncated to the second, to every node's kube-proxy \
having programmed it). SLO (sig-scalability): p99 <= 30 s over 5 min.";
