//! The controller manager under load: how fast the ReplicaSet controller turns one Deployment of N
//! replicas into N pods through the Kubernetes API of a keel cluster, what that costs the leader in CPU,
//! and the leader's memory once the cluster holds many pods. No etcd peer applies; the figures are set
//! beside upstream's published client limits (kube-controller-manager: 20 QPS, burst 30).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::error::{BenchError, Result};
use crate::target::{Api as Served, Binaries, Cluster, Kind};

/// kube-controller-manager's default client rate limit (`--kube-api-qps`), creates per second.
pub(crate) const UPSTREAM_QPS: f64 = 20.0;

/// How long the pod count may stand still before the step is declared stuck.
const STALL: Duration = Duration::from_secs(90);

/// What the step measured.
#[derive(Debug)]
pub(crate) struct Figures {
    /// Members of the cluster.
    pub members: usize,
    /// Replicas of the measured Deployment.
    pub replicas: usize,
    /// Seconds from the Deployment's create to its last pod.
    pub secs: f64,
    /// Leader CPU (user + system) over that time, per pod, in microseconds.
    pub leader_cpu_us_per_pod: f64,
    /// All members' CPU per pod, microseconds.
    pub cluster_cpu_us_per_pod: f64,
    /// Pods in the cluster when memory was read.
    pub pods_for_rss: usize,
    /// The leader's resident memory then, MiB.
    pub leader_rss_mib: f64,
    /// The leader's resident memory before any pod existed, MiB.
    pub leader_rss_empty_mib: f64,
    /// The churn that followed, when one was asked for.
    pub churn: Option<Churn>,
}

impl Figures {
    /// Pods created per second.
    pub(crate) fn pods_per_sec(&self) -> f64 {
        self.replicas as f64 / self.secs.max(1e-9)
    }
}

fn kube_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Kube(format!("{what}: {e}"))
}

pub(crate) async fn client(cluster: &Cluster, i: usize) -> Result<Client> {
    let path = cluster.kubeconfig(i);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(kc) = kube::config::Kubeconfig::read_from(&path) {
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| kube_error("kubeconfig", e))?;
            let c = Client::try_from(cfg).map_err(|e| kube_error("client", e))?;
            let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(c.clone(), "default");
            if sa.get("default").await.is_ok() {
                return Ok(c);
            }
        }
        if Instant::now() > deadline {
            return Err(kube_error(
                "Kubernetes API",
                format!("not ready after 60 s ({})", path.display()),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn deployment(name: &str, replicas: usize) -> Result<Deployment> {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
            }
        }
    }))
    .map_err(|e| kube_error("deployment manifest", e))
}

/// Pods in namespace `default`, counted without listing them all (a one-item page and its
/// remainingItemCount).
async fn pod_count(pods: &Api<Pod>) -> Result<usize> {
    let page = pods
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(|e| kube_error("count pods", e))?;
    let rest = page.metadata.remaining_item_count.unwrap_or(0).max(0);
    Ok(page.items.len() + usize::try_from(rest).unwrap_or(0))
}

/// Waits until `pods` holds `want` pods; fails if the count stands still for [`STALL`].
async fn wait_pods(pods: &Api<Pod>, want: usize, progress: &dyn Fn(usize)) -> Result<()> {
    let mut last = (0, Instant::now());
    loop {
        let n = pod_count(pods).await?;
        progress(n);
        if n >= want {
            return Ok(());
        }
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(BenchError::NoProgress {
                workload: format!("controllers: {want} pods"),
                kind: "keel",
                errors: 0,
                last: format!("{n} pods for {} s", STALL.as_secs()),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs the step on a fresh `members`-member keel: one Deployment of `replicas`, then more of the same
/// size until `rss_pods` pods exist.
pub(crate) async fn run(
    root: &std::path::Path,
    bins: &Binaries,
    members: usize,
    replicas: usize,
    rss_pods: usize,
    churn_deployments: usize,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    let cluster = Cluster::start_with(Kind::Keel, members, root, bins, Served::Kube).await?;
    let leader = cluster.leader().await?;
    let c = client(&cluster, leader).await?;
    let deploys: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    // Let the start-up work (namespaces, service accounts, leases) settle before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_empty = cluster.rss_of(leader);
    let cpu0 = cluster.cpu_us_of(leader);
    let all0 = cluster.cpu_us();
    let t0 = Instant::now();
    deploys
        .create(&PostParams::default(), &deployment("bench-0", replicas)?)
        .await
        .map_err(|e| kube_error("create deployment", e))?;
    wait_pods(&pods, replicas, &|n| {
        progress(format!("{n}/{replicas} pods"))
    })
    .await?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cluster.cpu_us_of(leader).saturating_sub(cpu0);
    let all = cluster.cpu_us().saturating_sub(all0);
    let mut made = replicas;
    let mut k = 1;
    while made < rss_pods {
        let n = replicas.min(rss_pods - made);
        deploys
            .create(
                &PostParams::default(),
                &deployment(&format!("bench-{k}"), n)?,
            )
            .await
            .map_err(|e| kube_error("create deployment", e))?;
        made += n;
        k += 1;
        wait_pods(&pods, made, &|n| progress(format!("{n}/{rss_pods} pods"))).await?;
    }
    // The leader's memory after the burst has been absorbed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let leader_rss = cluster.rss_of(leader);
    let churn = match churn_deployments {
        0 => None,
        n => Some(churn(&c, n, progress).await?),
    };
    Ok(Figures {
        members,
        replicas,
        secs,
        leader_cpu_us_per_pod: cpu as f64 / replicas as f64,
        cluster_cpu_us_per_pod: all as f64 / replicas as f64,
        pods_for_rss: made,
        leader_rss_mib: leader_rss as f64 / 1048576.0,
        leader_rss_empty_mib: rss_empty as f64 / 1048576.0,
        churn,
    })
}

/// The step's report, beside upstream's client limit.
pub(crate) fn text(f: &Figures) -> String {
    let upstream_secs = f.replicas as f64 / UPSTREAM_QPS;
    format!(
        "| members | replicas | pods/s | upstream at 20 QPS | ratio | leader CPU per pod | all members' CPU per pod | leader RSS, no pods | leader RSS, {} pods |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n\
         | {} | {} | {:.0} ({:.1} s) | {:.0} ({:.0} s) | {:.1} | {:.0} µs | {:.0} µs | {:.0} MiB | {:.0} MiB |",
        f.pods_for_rss,
        f.members,
        f.replicas,
        f.pods_per_sec(),
        f.secs,
        UPSTREAM_QPS,
        upstream_secs,
        f.pods_per_sec() / UPSTREAM_QPS,
        f.leader_cpu_us_per_pod,
        f.cluster_cpu_us_per_pod,
        f.leader_rss_empty_mib,
        f.leader_rss_mib,
    )
}

/// What the churn step saw.
#[derive(Debug)]
pub(crate) struct Churn {
    /// Deployments created and scaled.
    pub deployments: usize,
    /// Pods wanted after the last scale.
    pub pods_wanted: usize,
    /// Seconds from the first create to the moment every Deployment had exactly its pods.
    pub converge_secs: f64,
    /// Pods beyond what their Deployment asked for, counted after settling.
    pub extras: usize,
    /// Pods missing, counted after settling.
    pub gaps: usize,
    /// ReplicaSets in the namespace after settling (one per Deployment when nothing was duplicated).
    pub replica_sets: usize,
}

/// The namespace of the churn step.
const CHURN_NS: &str = "churn";

/// Replicas of churn deployment `i` after `round` (0: create, 1 and 2: scales).
fn churn_size(i: usize, round: usize) -> usize {
    match round {
        0 => (i * 7) % 4 + 1,
        1 => (i * 3 + 1) % 5,
        _ => (i * 5 + 2) % 4,
    }
}

/// Live pods per churn deployment index.
async fn churn_counts(pods: &Api<Pod>, n: usize) -> Result<Vec<usize>> {
    let mut have = vec![0usize; n];
    let mut lp = ListParams::default().limit(2000);
    loop {
        let page = pods
            .list_metadata(&lp)
            .await
            .map_err(|e| kube_error("list churn pods", e))?;
        for p in &page.items {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let idx = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .and_then(|a| a.strip_prefix("churn-"))
                .and_then(|i| i.parse::<usize>().ok());
            if let Some(slot) = idx.and_then(|i| have.get_mut(i)) {
                *slot += 1;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(have),
        }
    }
}

fn extras_and_gaps(have: &[usize], want: &[usize]) -> (usize, usize) {
    have.iter().zip(want).fold((0, 0), |(e, g), (h, w)| {
        (e + h.saturating_sub(*w), g + w.saturating_sub(*h))
    })
}

/// Creates `n` Deployments at once, scales every one twice without waiting, and counts how long
/// until each has exactly the pods it asked for, then extras and gaps after a settling pause.
pub(crate) async fn churn(c: &Client, n: usize, progress: &dyn Fn(String)) -> Result<Churn> {
    use futures::stream::{self, StreamExt, TryStreamExt};
    // Enough requests in flight to keep several members' API busy, not so many that the client
    // itself becomes the bottleneck.
    const IN_FLIGHT: usize = 64;
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": CHURN_NS}}))
            .map_err(|e| kube_error("namespace manifest", e))?;
    ns_api
        .create(&PostParams::default(), &ns)
        .await
        .map_err(|e| kube_error("create namespace", e))?;
    let deploys: Api<Deployment> = Api::namespaced(c.clone(), CHURN_NS);
    let pods: Api<Pod> = Api::namespaced(c.clone(), CHURN_NS);
    let t0 = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let deploys = deploys.clone();
            async move {
                let d = deployment(&format!("churn-{i}"), churn_size(i, 0))?;
                deploys
                    .create(&PostParams::default(), &d)
                    .await
                    .map_err(|e| kube_error("create churn deployment", e))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    progress(format!("churn: {n} deployments created"));
    for round in 1..=2 {
        stream::iter(0..n)
            .map(|i| {
                let deploys = deploys.clone();
                async move {
                    let patch = json!({"spec": {"replicas": churn_size(i, round)}});
                    deploys
                        .patch_scale(
                            &format!("churn-{i}"),
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(&patch),
                        )
                        .await
                        .map_err(|e| kube_error("scale churn deployment", e))
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<_>>()
            .await?;
        progress(format!("churn: round {round} of scales sent"));
    }
    let want: Vec<usize> = (0..n).map(|i| churn_size(i, 2)).collect();
    let mut last = (usize::MAX, Instant::now());
    let converge_secs = loop {
        let have = churn_counts(&pods, n).await?;
        let (extras, gaps) = extras_and_gaps(&have, &want);
        progress(format!("churn: {extras} extra and {gaps} missing pods"));
        if (extras, gaps) == (0, 0) {
            break t0.elapsed().as_secs_f64();
        }
        if extras + gaps != last.0 {
            last = (extras + gaps, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(BenchError::NoProgress {
                workload: format!("controllers: churn of {n} deployments"),
                kind: "keel",
                errors: 0,
                last: format!(
                    "{extras} extra and {gaps} missing pods for {} s",
                    STALL.as_secs()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Settled: a late duplicate create or a stale delete would show up here.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let have = churn_counts(&pods, n).await?;
    let (extras, gaps) = extras_and_gaps(&have, &want);
    let sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(c.clone(), CHURN_NS);
    let replica_sets = sets
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| kube_error("list churn replica sets", e))?
        .items
        .len();
    Ok(Churn {
        deployments: n,
        pods_wanted: want.iter().sum(),
        converge_secs,
        extras,
        gaps,
        replica_sets,
    })
}

/// The churn step's report.
pub(crate) fn churn_text(c: &Churn) -> String {
    format!(
        "| deployments | pods wanted at the end | converged after | extras | gaps | ReplicaSets |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: |\n\
         | {} | {} | {:.1} s | {} | {} | {} |",
        c.deployments, c.pods_wanted, c.converge_secs, c.extras, c.gaps, c.replica_sets
    )
}
