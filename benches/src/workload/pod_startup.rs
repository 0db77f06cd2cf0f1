//! Pod startup on a real node: a keel cluster, one `keel agent` on a private containerd (root needed), and
//! N pods of the built-in busybox image (already on the node, so no image pull is timed, as upstream's SLO
//! excludes it) created through the API as fast as one client goes. Each pod's latency runs from the
//! moment its create was sent to the moment a watch sees it Running with every container started.
//! Reported beside upstream's SLO (pod startup p99 ≤ 5 s, image pull excluded), with the agent's CPU
//! over the burst, its CPU per second while the pods just run, and its memory with them running.
//!
//! Then, on the same cluster and node, the same number of pods that each mount a generic ephemeral volume
//! of the default StorageClass `local-path` (`WaitForFirstConsumer`): each pod waits for the scheduler to
//! pick the node, the agent's provisioner to make the directory and volume, and the PersistentVolume
//! controller to bind the claim. Their startup is reported beside the plain pods' (the ratio is the cost
//! of a claim), with each claim's time from its creation (seen by a watch) to Bound.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::error::{BenchError, Result};
use crate::target::{cpu_us_of, rss_of, Api as Served, Binaries, Cluster, Kind};

/// Upstream's pod startup SLO (p99, image pull excluded), seconds.
pub(crate) const UPSTREAM_P99_SECS: f64 = 5.0;
/// How long all pods may take before the step is declared stuck.
const DEADLINE: Duration = Duration::from_secs(600);
/// How long the steady-state CPU of the agent is read with every pod running.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// The pods with a claim each, and their claims.
#[derive(Debug)]
pub(crate) struct ClaimFigures {
    /// Pod startup percentiles, seconds: p50, p99.
    pub p50: f64,
    pub p99: f64,
    /// Claim created → Bound, seconds: p50, p99, max.
    pub bound_p50: f64,
    pub bound_p99: f64,
    pub bound_max: f64,
    /// Seconds from the first create to the last pod Running.
    pub total_secs: f64,
}

/// What the step measured.
#[derive(Debug)]
pub(crate) struct Figures {
    /// Members of the cluster.
    pub members: usize,
    /// Pods started.
    pub pods: usize,
    /// Creates per second (None: as fast as one client goes).
    pub rate: Option<f64>,
    /// Latency percentiles, seconds: p50, p90, p99, max.
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    /// Seconds from the first create to the last pod Running.
    pub total_secs: f64,
    /// Agent CPU (user + system) over the burst, ms.
    pub agent_cpu_ms: f64,
    /// Agent CPU while the pods run and nothing changes, % of one core.
    pub agent_idle_cpu_pct: f64,
    /// Agent resident memory with the pods running, MiB.
    pub agent_rss_mib: f64,
    /// containerd's resident memory then, MiB.
    pub containerd_rss_mib: f64,
    /// The same burst with a local-path claim per pod (None: not run).
    pub claimed: Option<ClaimFigures>,
}

fn kube_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Kube(format!("{what}: {e}"))
}

fn started(p: &Pod) -> bool {
    let Some(st) = p.status.as_ref() else {
        return false;
    };
    st.phase.as_deref() == Some("Running")
        && st.container_statuses.as_ref().is_some_and(|cs| {
            !cs.is_empty()
                && cs
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// Runs the step: `members` keel members, one agent, `pods` pods, then as many with a claim each when
/// `claims`.
pub(crate) async fn run(
    root: &Path,
    bins: &Binaries,
    members: usize,
    pods: usize,
    rate: Option<f64>,
    claims: bool,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    keel_testkit::containerd::require();
    let cluster = Cluster::start_with(Kind::Keel, members, root, bins, Served::Kube).await?;
    let leader = cluster.leader().await?;
    let client = super::controllers::client(&cluster, leader).await?;
    progress("starting containerd and keel agent".into());
    let node_name = "bench-node";
    let kubeconfig = cluster.kubeconfig(leader);
    let agent_port = keel_testkit::free_port().to_string();
    let node_dir = root.join("node");
    let keel = bins.keel.clone();
    let mut node = tokio::task::spawn_blocking(move || {
        keel_testkit::agent::AgentNode::start(
            &keel,
            &node_dir,
            node_name,
            &kubeconfig,
            "10.42.200.0/24",
            &[
                "--address",
                "127.0.0.1",
                "--port",
                &agent_port,
                "--node-ip",
                "127.0.0.1",
                // Pod startup only: the host's nftables and sysctls stay untouched.
                "--disable-kube-proxy",
                "--disable-dns",
                "--disable-ingress",
            ],
        )
    })
    .await
    .map_err(|e| kube_error("agent", e))?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let ready_by = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = nodes
            .get_opt(node_name)
            .await
            .ok()
            .flatten()
            .is_some_and(|n| {
                n.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        if ready {
            break;
        }
        if Instant::now() > ready_by {
            return Err(kube_error(
                "node",
                format!("not Ready after 120 s:\n{}", node.log_tails(40)),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let agent_pid = node.agent_pid().unwrap_or(0);
    let containerd_pid = node.containerd().pid();
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let plain = burst(&client, pods, rate, false, agent_pid, progress).await;
    let plain = match plain {
        Ok(b) => b,
        Err(e) => return Err(kube_error("pods", format!("{e}\n{}", node.log_tails(40)))),
    };
    let total_secs = plain.total_secs;
    let agent_cpu_ms = plain.agent_cpu_ms;
    let idle0 = cpu_us_of(agent_pid);
    let w0 = Instant::now();
    tokio::time::sleep(IDLE_WINDOW).await;
    let agent_idle_cpu_pct = cpu_us_of(agent_pid).saturating_sub(idle0) as f64
        / w0.elapsed().as_micros().max(1) as f64
        * 100.0;
    let agent_rss_mib = rss_of(agent_pid) as f64 / (1024.0 * 1024.0);
    let containerd_rss_mib = containerd_pid.map_or(0.0, |p| rss_of(p) as f64 / (1024.0 * 1024.0));
    let lat = plain.latencies;
    progress("deleting the pods".into());
    delete_all(&api).await;
    let claimed = if claims {
        let b = match burst(&client, pods, rate, true, agent_pid, progress).await {
            Ok(b) => b,
            Err(e) => {
                return Err(kube_error(
                    "pods with claims",
                    format!("{e}\n{}", node.log_tails(40)),
                ))
            }
        };
        progress("deleting the pods with claims".into());
        delete_all(&api).await;
        Some(ClaimFigures {
            p50: super::nearest_rank(&b.latencies, 0.50),
            p99: super::nearest_rank(&b.latencies, 0.99),
            bound_p50: super::nearest_rank(&b.bound, 0.50),
            bound_p99: super::nearest_rank(&b.bound, 0.99),
            bound_max: b.bound.last().copied().unwrap_or(0.0),
            total_secs: b.total_secs,
        })
    } else {
        None
    };
    tokio::task::spawn_blocking(move || {
        node.kill9_agent();
        drop(node);
    })
    .await
    .map_err(|e| kube_error("agent teardown", e))?;
    drop(cluster);
    Ok(Figures {
        members,
        pods,
        rate,
        p50: super::nearest_rank(&lat, 0.50),
        p90: super::nearest_rank(&lat, 0.90),
        p99: super::nearest_rank(&lat, 0.99),
        max: lat.last().copied().unwrap_or(0.0),
        total_secs,
        agent_cpu_ms,
        agent_idle_cpu_pct,
        agent_rss_mib,
        containerd_rss_mib,
        claimed,
    })
}

/// Deletes every pod of `default` and waits (up to 3 minutes) for them to go.
async fn delete_all(api: &Api<Pod>) {
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let gone_by = Instant::now() + Duration::from_secs(180);
    while Instant::now() < gone_by {
        if api
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One burst's latencies: each pod's from its create to Running (sorted), and, with claims, each
/// claim's from its creation to Bound (sorted).
struct Burst {
    latencies: Vec<f64>,
    bound: Vec<f64>,
    total_secs: f64,
    /// The agent's CPU (user + system) from the first create to the last pod Running, ms.
    agent_cpu_ms: f64,
}

/// Creates `pods` pods (paced at `rate`, else as fast as one client goes), each with a local-path
/// ephemeral volume when `claims`, and waits for every one to run.
async fn burst(
    client: &kube::Client,
    pods: usize,
    rate: Option<f64>,
    claims: bool,
    agent_pid: u32,
    progress: &dyn Fn(String),
) -> Result<Burst> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let prefix = if claims { "claimed" } else { "startup" };
    // The watches start before the first create, so no transition is missed.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watch_api = api.clone();
    let watch = tokio::spawn(async move {
        let mut s = watcher::watcher(watch_api, watcher::Config::default()).boxed();
        while let Some(ev) = s.next().await {
            if let Ok(Event::Apply(p) | Event::InitApply(p)) = ev {
                if started(&p) {
                    let _ = tx.send((p.metadata.name.clone().unwrap_or_default(), Instant::now()));
                }
            }
        }
    });
    let claims_seen = std::sync::Arc::new(std::sync::Mutex::new((
        HashMap::<String, Instant>::new(),
        HashMap::<String, Instant>::new(),
    )));
    let claim_watch = {
        let seen = claims_seen.clone();
        let capi: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
        tokio::spawn(async move {
            let mut s = watcher::watcher(capi, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                if let Ok(Event::Apply(c) | Event::InitApply(c)) = ev {
                    let name = c.metadata.name.clone().unwrap_or_default();
                    let now = Instant::now();
                    let bound = c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                    if let Ok(mut m) = seen.lock() {
                        m.0.entry(name.clone()).or_insert(now);
                        if bound {
                            m.1.entry(name).or_insert(now);
                        }
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu0 = cpu_us_of(agent_pid);
    let t0 = Instant::now();
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let mut running: HashMap<String, Instant> = HashMap::new();
    for i in 0..pods {
        if let Some(r) = rate.filter(|r| *r > 0.0) {
            // Paced: pod i is created at i/r seconds, as ClusterLoader2 paces its latency pods.
            let at = t0 + Duration::from_secs_f64(i as f64 / r);
            tokio::time::sleep_until(at.into()).await;
        }
        let name = format!("{prefix}-{i}");
        let mut spec = json!({
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": keel_testkit::agent::BUSYBOX,
                "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]
        });
        if claims {
            spec["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
            spec["volumes"] = json!([{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Mi"}}}}}}]);
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec
        }))
        .map_err(|e| kube_error("pod", e))?;
        sent.insert(name.clone(), Instant::now());
        api.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| kube_error("create pod", e))?;
        while let Ok((n, t)) = rx.try_recv() {
            running.entry(n).or_insert(t);
        }
    }
    while running.len() < pods {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some((n, t))) => {
                running.entry(n).or_insert(t);
                progress(format!("{}/{pods} {prefix} pods Running", running.len()));
            }
            Ok(None) => return Err(kube_error("watch", "ended")),
            Err(_) => {}
        }
        if t0.elapsed() > DEADLINE {
            return Err(kube_error(
                "pods",
                format!("only {}/{pods} Running after {DEADLINE:?}", running.len()),
            ));
        }
    }
    let total_secs = t0.elapsed().as_secs_f64();
    let agent_cpu_ms = cpu_us_of(agent_pid).saturating_sub(cpu0) as f64 / 1000.0;
    watch.abort();
    claim_watch.abort();
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(n, s)| {
            running
                .get(n)
                .map(|r| r.saturating_duration_since(*s).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let mut bound: Vec<f64> = match claims_seen.lock() {
        Ok(m) => {
            m.1.iter()
                .filter_map(|(n, b)| {
                    m.0.get(n)
                        .map(|c| b.saturating_duration_since(*c).as_secs_f64())
                })
                .collect()
        }
        Err(_) => Vec::new(),
    };
    bound.sort_by(f64::total_cmp);
    if claims && bound.len() < pods {
        return Err(kube_error(
            "claims",
            format!("only {}/{pods} seen Bound", bound.len()),
        ));
    }
    Ok(Burst {
        latencies,
        bound,
        total_secs,
        agent_cpu_ms,
    })
}

/// The figures as the report prints them.
pub(crate) fn text(f: &Figures) -> String {
    format!(
        "pod startup ({} members, 1 agent, {} pods {}, image present): p50 {:.2} s, p90 {:.2} s, p99 {:.2} s, max {:.2} s \
         (upstream SLO: p99 <= {UPSTREAM_P99_SECS} s); all Running {:.1} s after the first create ({:.1} pods/s)\n\
         agent: {:.0} ms CPU for the burst ({:.1} ms per pod), {:.1} % of a core with the pods running, {:.0} MiB RSS; containerd {:.0} MiB RSS",
        f.members,
        f.pods,
        f.rate.map_or("in one burst".to_string(), |r| format!("at {r} pods/s")),
        f.p50,
        f.p90,
        f.p99,
        f.max,
        f.total_secs,
        f.pods as f64 / f.total_secs.max(1e-9),
        f.agent_cpu_ms,
        f.agent_cpu_ms / f.pods.max(1) as f64,
        f.agent_idle_cpu_pct,
        f.agent_rss_mib,
        f.containerd_rss_mib,
    ) + &f.claimed.as_ref().map_or(String::new(), |c| {
        format!(
            "\npods with a local-path claim each ({} pods, WaitForFirstConsumer): p50 {:.2} s, p99 {:.2} s \
             ({:.2}x / {:.2}x the plain pods'); all Running {:.1} s after the first create; \
             claim created -> Bound: p50 {:.2} s, p99 {:.2} s, max {:.2} s",
            f.pods,
            c.p50,
            c.p99,
            c.p50 / f.p50.max(1e-9),
            c.p99 / f.p99.max(1e-9),
            c.total_secs,
            c.bound_p50,
            c.bound_p99,
            c.bound_max,
        )
    })
}
