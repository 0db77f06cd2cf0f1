//! The scheduler at scale, on hollow nodes: a keel cluster, one `keel agent --hollow N` process
//! carrying N nodes (Leases renewed, pods reported Running, no containers), and two shapes:
//!
//! - **SchedulingBasic** (scheduler_perf's): pods created through the API as fast as the client can,
//!   timed from the first create to the last binding seen on a watch;
//! - **load** (ClusterLoader2's in spirit): Deployments whose pods must all be Running, timed from the
//!   first Deployment create; the API server's own request histograms give p50/p99 per (resource,
//!   verb), the store's revision gives the write rate, and the leader's CPU and memory are read.
//!
//! No upstream binary runs here, so the figures stand beside upstream's published ones (the
//! scheduler_perf CI floor, ClusterLoader2's threshold, the API call latency SLO).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use serde_json::json;

use crate::error::{BenchError, Result};
use crate::target::{Api as Served, Binaries, Cluster, Kind};

/// scheduler_perf's CI floor for SchedulingBasic at 5 000 nodes, pods/s.
pub(crate) const UPSTREAM_BASIC_FLOOR: f64 = 270.0;
/// ClusterLoader2's scheduling throughput threshold, pods/s.
pub(crate) const UPSTREAM_CL2_THROUGHPUT: f64 = 100.0;
/// The API call latency SLO for mutating calls, p99 seconds.
pub(crate) const UPSTREAM_MUTATING_P99: f64 = 1.0;

/// Creates in flight at once while making pods and Deployments.
const CREATORS: usize = 64;
/// How long a count may stand still before the step is declared stuck.
const STALL: Duration = Duration::from_secs(180);

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// keel members.
    pub members: usize,
    /// Hollow nodes.
    pub nodes: usize,
    /// Pods scheduled before SchedulingBasic measures (scheduler_perf's initPods).
    pub init_pods: usize,
    /// Pods SchedulingBasic measures.
    pub pods: usize,
    /// Deployments of the load shape (0 skips it).
    pub deployments: usize,
    /// Replicas of each.
    pub replicas: usize,
}

/// One (resource, verb) of the API during the load shape.
#[derive(Debug, Clone)]
pub(crate) struct CallLatency {
    /// The resource (with `/subresource`).
    pub resource: String,
    /// The verb as the API server counts it.
    pub verb: String,
    /// Requests.
    pub count: u64,
    /// Median, seconds (interpolated within the histogram's bucket).
    pub p50: f64,
    /// 99th percentile, seconds.
    pub p99: f64,
}

/// What the load shape measured.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    /// Pods that had to run.
    pub pods: usize,
    /// Seconds from the first Deployment create to the last pod Running.
    pub secs: f64,
    /// The leader's CPU over that time, percent of one core.
    pub leader_cpu_pct: f64,
    /// The leader's resident memory at the end, MiB.
    pub leader_rss_mib: f64,
    /// The hollow agent's resident memory at the end, MiB.
    pub hollow_rss_mib: f64,
    /// Store revisions per second over that time (each is one write).
    pub writes_per_sec: f64,
    /// Lease updates per second (node heartbeats) over that time.
    pub lease_writes_per_sec: f64,
    /// The busiest (resource, verb) pairs, by count.
    pub calls: Vec<CallLatency>,
}

/// Everything the step measured.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    /// The run's sizes.
    pub shape: Shape,
    /// Seconds until every hollow node was Ready.
    pub register_secs: f64,
    /// SchedulingBasic: seconds from the first create to the last binding.
    pub basic_secs: f64,
    /// SchedulingBasic: seconds the creates alone took.
    pub basic_create_secs: f64,
    /// The load shape, when run.
    pub load: Option<Load>,
}

impl Figures {
    /// SchedulingBasic's throughput, pods bound per second.
    pub(crate) fn basic_pods_per_sec(&self) -> f64 {
        self.shape.pods as f64 / self.basic_secs.max(1e-9)
    }
}

fn kube_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Kube(format!("{what}: {e}"))
}

/// The hollow agent: a child process, killed when dropped.
struct Hollow(Child);

impl Hollow {
    fn start(keel: &Path, kubeconfig: &Path, nodes: usize, log: &Path) -> Result<Hollow> {
        let out = std::fs::File::create(log).map_err(|source| BenchError::Io {
            what: format!("create {}", log.display()),
            source,
        })?;
        let err = out.try_clone().map_err(|source| BenchError::Io {
            what: format!("open {}", log.display()),
            source,
        })?;
        Command::new(keel)
            .arg("agent")
            .arg("--hollow")
            .arg(nodes.to_string())
            .arg("--hollow-zones")
            .arg("3")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map(Hollow)
            .map_err(|source| BenchError::Spawn {
                what: "keel agent --hollow".into(),
                source,
            })
    }

    fn rss(&self) -> u64 {
        crate::target::rss_of(self.0.id())
    }
}

impl Drop for Hollow {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pod as scheduler_perf's default template makes it: one pause container requesting 100m and
/// 500Mi.
fn pod(name: &str) -> Pod {
    let v = json!({
        "metadata": {"name": name, "labels": {"bench": "scheduling"}},
        "spec": {"containers": [{
            "name": "pause", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"},
                          "limits": {"cpu": "100m", "memory": "500Mi"}},
        }]},
    });
    serde_json::from_value(v).unwrap_or_default()
}

fn deployment(name: &str, replicas: usize) -> Deployment {
    let v = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "pause", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}},
                }]},
            },
        },
    });
    serde_json::from_value(v).unwrap_or_default()
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
        .map_err(|e| kube_error("namespace", e))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(kube_error("create namespace", e)),
    }
}

/// Waits until `want` nodes are Ready, reporting progress.
async fn wait_nodes(client: &Client, want: usize, progress: &dyn Fn(String)) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let (mut last, mut since) = (usize::MAX, Instant::now());
    loop {
        let nodes = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| kube_error("list nodes", e))?;
        let n = nodes.items.len();
        progress(format!("{n}/{want} hollow nodes registered"));
        if n >= want {
            break;
        }
        if n != last {
            (last, since) = (n, Instant::now());
        } else if since.elapsed() > STALL {
            return Err(kube_error("hollow nodes", format!("stuck at {n}/{want}")));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Registered is not Ready: wait for the conditions too (one list at the end).
    loop {
        let ready = api
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_error("list nodes", e))?
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        progress(format!("{ready}/{want} hollow nodes Ready"));
        if ready >= want {
            return Ok(());
        }
        if since.elapsed() > STALL {
            return Err(kube_error("hollow nodes", format!("{ready}/{want} Ready")));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Creates `count` pods named `{prefix}-{i}` in `ns` with [`CREATORS`] creates in flight.
async fn create_pods(client: &Client, ns: &str, prefix: &str, count: usize) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            let p = pod(&format!("{prefix}-{i}"));
            async move { api.create(&PostParams::default(), &p).await.map(drop) }
        })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
        .map_err(|e| kube_error("create pod", e))
}

/// Counts pods of `ns` as the watch shows them bound until `want` are; returns when the last was
/// seen. Progress is reported every second.
async fn wait_bound(
    client: &Client,
    ns: &str,
    want: usize,
    progress: &dyn Fn(String),
) -> Result<Instant> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let stream = watcher::watcher(api, watcher::Config::default());
    futures::pin_mut!(stream);
    let mut bound: HashSet<String> = HashSet::new();
    let (mut last_change, mut last_report) = (Instant::now(), Instant::now());
    loop {
        let next = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
        let mut seen = |p: Pod| {
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                && bound.insert(p.metadata.name.unwrap_or_default())
            {
                last_change = Instant::now();
            }
        };
        match next {
            Ok(Some(Ok(Event::Apply(p) | Event::InitApply(p)))) => seen(p),
            Ok(Some(Ok(_))) | Err(_) => {}
            Ok(Some(Err(e))) => eprintln!("scheduling: pod watch: {e}; retrying"),
            Ok(None) => return Err(kube_error("pod watch", "ended")),
        }
        if bound.len() >= want {
            return Ok(last_change);
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            progress(format!("{}/{want} pods bound", bound.len()));
        }
        if last_change.elapsed() > STALL {
            return Err(kube_error(
                "scheduling",
                format!("stuck at {}/{want} pods bound", bound.len()),
            ));
        }
    }
}

/// The API server's metrics as text.
async fn scrape(client: &Client) -> Result<String> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| kube_error("metrics request", e))?;
    client
        .request_text(req)
        .await
        .map_err(|e| kube_error("GET /metrics", e))
}

/// Request counts and duration buckets by (resource, verb), and Lease updates.
#[derive(Debug, Default, Clone)]
struct Scrape {
    /// (resource, verb) → cumulative bucket counts by upper bound.
    buckets: HashMap<(String, String), BTreeMap<u64, f64>>,
    /// (resource, verb) → count.
    counts: HashMap<(String, String), f64>,
}

/// `le` as a sortable key (microseconds; +Inf as u64::MAX).
fn le_key(le: f64) -> u64 {
    if le.is_infinite() {
        u64::MAX
    } else {
        (le * 1e6).round() as u64
    }
}

fn parse_scrape(text: &str) -> Result<Scrape> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).map_err(|e| kube_error("metrics", e))?;
    let mut out = Scrape::default();
    for s in parsed.samples {
        if s.metric != "apiserver_request_duration_seconds" {
            continue;
        }
        // Non-resource paths (`/api`, `/healthz`) come with the path as subresource.
        let resource = match (
            s.labels.get("resource").unwrap_or(""),
            s.labels.get("subresource").unwrap_or(""),
        ) {
            ("", path) => path.to_string(),
            (r, "") => r.to_string(),
            (r, sub) => format!("{r}/{sub}"),
        };
        let key = (resource, s.labels.get("verb").unwrap_or("").to_string());
        if let prometheus_parse::Value::Histogram(hist) = s.value {
            let b = out.buckets.entry(key.clone()).or_default();
            for h in hist {
                *b.entry(le_key(h.less_than)).or_insert(0.0) += h.count;
            }
            let total = b.get(&u64::MAX).copied().unwrap_or(0.0);
            out.counts.insert(key, total);
        }
    }
    Ok(out)
}

/// The `q` quantile of the requests between two scrapes, interpolated linearly within its bucket
/// (as Prometheus' histogram_quantile does).
fn quantile(before: Option<&BTreeMap<u64, f64>>, after: &BTreeMap<u64, f64>, q: f64) -> f64 {
    let delta: Vec<(u64, f64)> = after
        .iter()
        .map(|(le, c)| {
            (
                *le,
                c - before.and_then(|b| b.get(le)).copied().unwrap_or(0.0),
            )
        })
        .collect();
    let total = delta.last().map_or(0.0, |(_, c)| *c);
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let (mut lower_le, mut lower_count) = (0u64, 0.0);
    for (le, count) in delta {
        if count >= rank {
            if le == u64::MAX {
                return lower_le as f64 / 1e6;
            }
            let width = (le - lower_le) as f64 / 1e6;
            let inside = (count - lower_count).max(1e-9);
            return lower_le as f64 / 1e6 + width * (rank - lower_count) / inside;
        }
        (lower_le, lower_count) = (le, count);
    }
    lower_le as f64 / 1e6
}

fn latencies(before: &Scrape, after: &Scrape, secs: f64) -> (Vec<CallLatency>, f64) {
    let mut calls: Vec<CallLatency> = after
        .buckets
        .iter()
        .filter_map(|(key, b)| {
            let count = after.counts.get(key).copied().unwrap_or(0.0)
                - before.counts.get(key).copied().unwrap_or(0.0);
            (count >= 1.0).then(|| CallLatency {
                resource: key.0.clone(),
                verb: key.1.clone(),
                count: count as u64,
                p50: quantile(before.buckets.get(key), b, 0.5),
                p99: quantile(before.buckets.get(key), b, 0.99),
            })
        })
        .filter(|c| c.verb != "WATCH")
        .collect();
    calls.sort_by_key(|c| std::cmp::Reverse(c.count));
    let lease_puts = calls
        .iter()
        .filter(|c| c.resource == "leases" && (c.verb == "PUT" || c.verb == "PATCH"))
        .map(|c| c.count)
        .sum::<u64>();
    (calls, lease_puts as f64 / secs.max(1e-9))
}

/// The store's current revision, through member `i`'s etcd API.
async fn revision(cluster: &Cluster, i: usize) -> Result<i64> {
    let mut c = etcd_client::Client::connect([&cluster.urls[i]], None)
        .await
        .map_err(|e| kube_error("etcd connect", e))?;
    let s = c.status().await.map_err(|e| kube_error("etcd status", e))?;
    Ok(s.header().map_or(0, |h| h.revision()))
}

/// Sum of the Deployments' available replicas across `namespaces`.
async fn available(client: &Client, namespaces: &[String]) -> Result<usize> {
    let mut total = 0;
    for ns in namespaces {
        let list = Api::<Deployment>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_error("list deployments", e))?;
        total += list
            .items
            .iter()
            .filter_map(|d| d.status.as_ref().and_then(|s| s.available_replicas))
            .map(|n| n.max(0) as usize)
            .sum::<usize>();
    }
    Ok(total)
}

async fn load_shape(
    cluster: &Cluster,
    client: &Client,
    leader: usize,
    hollow: &Hollow,
    shape: Shape,
    progress: &dyn Fn(String),
) -> Result<Load> {
    // ClusterLoader2 spreads its Deployments over namespaces; 30 per namespace here.
    let per_ns = 30;
    let namespaces: Vec<String> = (0..shape.deployments.div_ceil(per_ns))
        .map(|i| format!("load-{i}"))
        .collect();
    for ns in &namespaces {
        create_namespace(client, ns).await?;
    }
    let want = shape.deployments * shape.replicas;
    let before = parse_scrape(&scrape(client).await?)?;
    let rev0 = revision(cluster, leader).await?;
    let cpu0 = cluster.cpu_us_of(leader);
    let started = Instant::now();
    futures::stream::iter(0..shape.deployments)
        .map(|i| {
            let api: Api<Deployment> = Api::namespaced(client.clone(), &namespaces[i / per_ns]);
            let d = deployment(&format!("load-{i}"), shape.replicas);
            async move { api.create(&PostParams::default(), &d).await.map(drop) }
        })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<()>>()
        .await
        .map_err(|e| kube_error("create deployment", e))?;
    let (mut last, mut since) = (0, Instant::now());
    loop {
        let n = available(client, &namespaces).await?;
        progress(format!("load: {n}/{want} pods available"));
        if n >= want {
            break;
        }
        if n != last {
            (last, since) = (n, Instant::now());
        } else if since.elapsed() > STALL {
            return Err(kube_error("load", format!("stuck at {n}/{want} available")));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = cluster.cpu_us_of(leader).saturating_sub(cpu0) as f64;
    let rev1 = revision(cluster, leader).await?;
    let after = parse_scrape(&scrape(client).await?)?;
    let (calls, lease_writes_per_sec) = latencies(&before, &after, secs);
    Ok(Load {
        pods: want,
        secs,
        leader_cpu_pct: cpu / 1e6 / secs.max(1e-9) * 100.0,
        leader_rss_mib: cluster.rss_of(leader) as f64 / 1048576.0,
        hollow_rss_mib: hollow.rss() as f64 / 1048576.0,
        writes_per_sec: (rev1 - rev0) as f64 / secs.max(1e-9),
        lease_writes_per_sec,
        calls,
    })
}

/// Runs the step: cluster, hollow nodes, SchedulingBasic, then the load shape.
pub(crate) async fn run(
    root: &Path,
    bins: &Binaries,
    shape: Shape,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    // The default cluster CIDR (a /16 cut into /24s) has room for 256 nodes; 5 000 need a /10.
    let cluster = Cluster::start_with_args(
        Kind::Keel,
        shape.members,
        root,
        bins,
        Served::Kube,
        &["--cluster-cidr", "10.0.0.0/10"],
    )
    .await?;
    let leader = cluster.leader().await?;
    let client = super::controllers::client(&cluster, leader).await?;
    let started = Instant::now();
    let hollow = Hollow::start(
        &bins.keel,
        &cluster.kubeconfig(leader),
        shape.nodes,
        &root.join("hollow.log"),
    )?;
    wait_nodes(&client, shape.nodes, progress).await?;
    let register_secs = started.elapsed().as_secs_f64();

    create_namespace(&client, "sched-init").await?;
    create_namespace(&client, "sched-basic").await?;
    if shape.init_pods > 0 {
        progress(format!("{} initial pods", shape.init_pods));
        create_pods(&client, "sched-init", "init", shape.init_pods).await?;
        wait_bound(&client, "sched-init", shape.init_pods, progress).await?;
    }
    let watcher_client = client.clone();
    let want = shape.pods;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let basic_started = Instant::now();
    let watch = async move {
        // The creates report progress; the watch stays quiet meanwhile.
        let r = wait_bound(&watcher_client, "sched-basic", want, &|_| {}).await;
        let _ = tx.send(());
        r
    };
    let create = async {
        create_pods(&client, "sched-basic", "p", shape.pods).await?;
        let create_secs = basic_started.elapsed().as_secs_f64();
        progress(format!(
            "{} pods created in {create_secs:.1} s; waiting for bindings",
            shape.pods
        ));
        Ok::<f64, BenchError>(create_secs)
    };
    let (bound_at, basic_create_secs) = tokio::try_join!(watch, create)?;
    let _ = rx.await;
    let basic_secs = bound_at.duration_since(basic_started).as_secs_f64();

    let load = if shape.deployments > 0 {
        Some(load_shape(&cluster, &client, leader, &hollow, shape, progress).await?)
    } else {
        None
    };
    drop(hollow);
    Ok(Figures {
        shape,
        register_secs,
        basic_secs,
        basic_create_secs,
        load,
    })
}

/// The step's result as text for the terminal and docs/benchmarks.md.
pub(crate) fn text(f: &Figures) -> String {
    let s = f.shape;
    let mut out = format!(
        "scheduling: {} members, {} hollow nodes (registered and Ready in {:.1} s)\n\
         SchedulingBasic: {} pods ({} placed before): {:.1} s from the first create to the last binding, \
         {:.0} pods/s (creates alone: {:.1} s); scheduler_perf's CI floor: {UPSTREAM_BASIC_FLOOR:.0} pods/s\n",
        s.members,
        s.nodes,
        f.register_secs,
        s.pods,
        s.init_pods,
        f.basic_secs,
        f.basic_pods_per_sec(),
        f.basic_create_secs,
    );
    if let Some(l) = &f.load {
        out.push_str(&format!(
            "load: {} Deployments x {} replicas = {} pods available in {:.1} s ({:.0} pods/s; ClusterLoader2 threshold {UPSTREAM_CL2_THROUGHPUT:.0} pods/s)\n\
             leader CPU {:.0} % of a core, leader RSS {:.0} MiB, hollow agent RSS {:.0} MiB, \
             {:.0} store writes/s, {:.0} Lease writes/s\n",
            s.deployments,
            s.replicas,
            l.pods,
            l.secs,
            l.pods as f64 / l.secs.max(1e-9),
            l.leader_cpu_pct,
            l.leader_rss_mib,
            l.hollow_rss_mib,
            l.writes_per_sec,
            l.lease_writes_per_sec,
        ));
        out.push_str(&format!(
            "API calls during the load (server-side, p99 SLO for mutating calls: {UPSTREAM_MUTATING_P99:.0} s):\n\
             | resource | verb | calls | p50 ms | p99 ms |\n|---|---|---:|---:|---:|\n"
        ));
        for c in l.calls.iter().take(15) {
            out.push_str(&format!(
                "| {} | {} | {} | {:.1} | {:.1} |\n",
                c.resource,
                c.verb,
                c.count,
                c.p50 * 1e3,
                c.p99 * 1e3
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let before = BTreeMap::from([(100_000, 0.0), (200_000, 0.0), (u64::MAX, 0.0)]);
        let after = BTreeMap::from([(100_000, 50.0), (200_000, 100.0), (u64::MAX, 100.0)]);
        assert!((quantile(Some(&before), &after, 0.5) - 0.1).abs() < 1e-9);
        assert!((quantile(Some(&before), &after, 0.75) - 0.15).abs() < 1e-9);
        let text = "# TYPE apiserver_request_duration_seconds histogram\n\
            apiserver_request_duration_seconds_bucket{verb=\"PUT\",resource=\"leases\",subresource=\"\",le=\"0.1\"} 3\n\
            apiserver_request_duration_seconds_bucket{verb=\"PUT\",resource=\"leases\",subresource=\"\",le=\"+Inf\"} 4\n\
            apiserver_request_duration_seconds_sum{verb=\"PUT\",resource=\"leases\",subresource=\"\"} 0.2\n\
            apiserver_request_duration_seconds_count{verb=\"PUT\",resource=\"leases\",subresource=\"\"} 4\n";
        let s = parse_scrape(text).unwrap();
        let (calls, leases) = latencies(&Scrape::default(), &s, 2.0);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].count, 4);
        assert!((leases - 2.0).abs() < 1e-9);
    }
}
