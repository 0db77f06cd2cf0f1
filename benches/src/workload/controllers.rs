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

async fn client(cluster: &Cluster, i: usize) -> Result<Client> {
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
    Ok(Figures {
        members,
        replicas,
        secs,
        leader_cpu_us_per_pod: cpu as f64 / replicas as f64,
        cluster_cpu_us_per_pod: all as f64 / replicas as f64,
        pods_for_rss: made,
        leader_rss_mib: cluster.rss_of(leader) as f64 / 1048576.0,
        leader_rss_empty_mib: rss_empty as f64 / 1048576.0,
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
