//! Kubernetes writes through the API, with the etcd put beneath them as the floor: ConfigMap creates (200
//! bytes of data), guarded Node status PATCHes (a kubelet's heartbeat: a strategic merge patch of the Ready
//! condition, read-modify-write with a compare on the resourceVersion inside the server) and deletes, at
//! several client counts, each a fixed number of operations. For each: operations per second, latency p50/p99
//! and server CPU per operation summed over the members and on the Raft leader alone (from /proc, so the
//! load generator is not counted). First, on the fresh members, the leader's memory per stored ConfigMap.
//!
//! With a baseline binary (`--baseline-keel`), a second cluster of it runs beside the first and every phase
//! runs on both back to back, taking turns at going first, so "before" and "after" see the same machine in
//! the same run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::future::join_all;
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::error::{BenchError, Result};
use crate::load::histogram;
use crate::target::{Api as Served, Binaries, Cluster, Kind};
use crate::workload::controllers::client;

/// Bytes of data in each ConfigMap (the size the cost issue measured with).
const DATA_LEN: usize = 200;
/// Bytes of each etcd put of the floor (the etcd benchmark's value size).
const PUT_LEN: usize = 256;
/// Namespace of the ConfigMaps.
const NAMESPACE: &str = "default";

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    /// Members of each cluster.
    pub members: usize,
    /// Client counts, each measured in turn.
    pub clients: Vec<usize>,
    /// Operations per phase and client count.
    pub ops: usize,
    /// ConfigMaps stored when the leader's memory is read.
    pub objects: usize,
    /// Whether the baseline goes first where the measured binary would (the other half of a pair of runs).
    pub baseline_first: bool,
}

/// One phase's figures on one cluster.
#[derive(Clone, Debug)]
pub(crate) struct Phase {
    /// Operations per second (operations over the phase's wall time).
    pub rate: f64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// CPU of all members per operation, µs.
    pub cpu_all_us: f64,
    /// CPU of the leader per operation, µs.
    pub cpu_leader_us: f64,
    /// Failed operations.
    pub errors: u64,
    /// What the last failure said.
    pub last_error: Option<String>,
}

/// One row: a phase at a client count, on the measured binary and (when given) the baseline.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Concurrent clients.
    pub clients: usize,
    /// What was done.
    pub op: &'static str,
    /// The measured binary.
    pub keel: Phase,
    /// The baseline binary.
    pub baseline: Option<Phase>,
}

/// The leader's memory with the ConfigMaps stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Memory {
    /// ConfigMaps stored.
    pub objects: usize,
    /// Leader RSS before they were created, MiB.
    pub before_mib: f64,
    /// Leader RSS with them, MiB.
    pub after_mib: f64,
}

impl Memory {
    /// Growth per stored object, KiB.
    pub(crate) fn kib_per_object(&self) -> f64 {
        (self.after_mib - self.before_mib) * 1024.0 / self.objects.max(1) as f64
    }
}

/// Everything the step measured.
#[derive(Debug)]
pub(crate) struct Figures {
    /// The measured binary.
    pub keel: PathBuf,
    /// The baseline binary.
    pub baseline: Option<PathBuf>,
    /// The shape run.
    pub shape: Shape,
    /// Per client count and phase.
    pub rows: Vec<Row>,
    /// Leader memory of the measured binary, then of the baseline.
    pub memory: (Memory, Option<Memory>),
}

/// A cluster under test with its clients.
struct Target {
    cluster: Cluster,
    leader: usize,
    /// Client `w` talks to member `(leader + w) % members`: a single client talks to the leader.
    kube: Vec<Client>,
    etcd: Vec<etcd_client::Client>,
}

impl Target {
    async fn start(root: &Path, bins: &Binaries, members: usize) -> Result<Self> {
        let cluster = Cluster::start_with(Kind::Keel, members, root, bins, Served::Kube).await?;
        let leader = cluster.leader().await?;
        let mut kube = Vec::with_capacity(members);
        let mut etcd = Vec::with_capacity(members);
        for k in 0..members {
            let i = (leader + k) % members;
            kube.push(client(&cluster, i).await?);
            etcd.push(etcd_client::Client::connect([&cluster.urls[i]], None).await?);
        }
        Ok(Target {
            cluster,
            leader,
            kube,
            etcd,
        })
    }

    fn kube(&self, worker: usize) -> Client {
        self.kube[worker % self.kube.len()].clone()
    }

    fn etcd(&self, worker: usize) -> etcd_client::Client {
        self.etcd[worker % self.etcd.len()].clone()
    }

    /// The Nodes the status phase patches, one per client, created once.
    async fn nodes(&self, n: usize) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.kube(0));
        for w in 0..n {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node_name(w), "labels": {"bench": "kube-writes"}},
            }))
            .map_err(|e| kube_error("node manifest", e))?;
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(kube_error("create node", e)),
            }
        }
        Ok(())
    }
}

fn kube_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Kube(format!("{what}: {e}"))
}

fn node_name(worker: usize) -> String {
    format!("bench-node-{worker}")
}

fn configmap_name(run: usize, worker: usize, n: usize) -> String {
    format!("cm-{run}-{worker}-{n}")
}

fn configmap(name: &str) -> Result<ConfigMap> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"bench": "kube-writes"}},
        "data": {"payload": "x".repeat(DATA_LEN)},
    }))
    .map_err(|e| kube_error("configmap manifest", e))
}

/// A kubelet's status heartbeat for its Node. Times have second granularity, so the message carries the
/// heartbeat's number: every patch changes the object and is a real write (an unchanged one is not stored).
fn heartbeat(run: usize, n: usize) -> serde_json::Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": format!("kubelet is posting ready status (heartbeat {run}.{n})"),
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}})
}

/// The kinds of operation, in the order each client count runs them.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// etcd put through the same members (the floor).
    EtcdPut,
    /// ConfigMap create.
    Create,
    /// Node status PATCH.
    StatusPatch,
    /// ConfigMap delete (of the ones just created).
    Delete,
}

impl Op {
    const ALL: [Op; 4] = [Op::EtcdPut, Op::Create, Op::StatusPatch, Op::Delete];

    fn label(self) -> &'static str {
        match self {
            Op::EtcdPut => "etcd put 256 B (floor)",
            Op::Create => "create ConfigMap",
            Op::StatusPatch => "PATCH Node status",
            Op::Delete => "delete ConfigMap",
        }
    }
}

/// One operation of worker `w`, its `n`th; `run` tells apart the client counts' objects (and heartbeats).
async fn one(
    t: &Target,
    op: Op,
    run: usize,
    w: usize,
    n: usize,
) -> std::result::Result<(), String> {
    match op {
        Op::EtcdPut => {
            let key = format!("bench/kube-writes/{run}/{w}/{n}");
            t.etcd(w)
                .put(key, vec![b'v'; PUT_LEN], None)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Op::Create => {
            let api: Api<ConfigMap> = Api::namespaced(t.kube(w), NAMESPACE);
            let cm = configmap(&configmap_name(run, w, n)).map_err(|e| e.to_string())?;
            api.create(&PostParams::default(), &cm)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Op::StatusPatch => {
            let api: Api<Node> = Api::all(t.kube(w));
            api.patch_status(
                &node_name(w),
                &PatchParams::default(),
                &Patch::Strategic(heartbeat(run, n)),
            )
            .await
            .map(drop)
            .map_err(|e| e.to_string())
        }
        Op::Delete => {
            let api: Api<ConfigMap> = Api::namespaced(t.kube(w), NAMESPACE);
            api.delete(&configmap_name(run, w, n), &DeleteParams::default())
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    }
}

/// Runs `ops` operations of `op` from `clients` concurrent clients (split evenly) and measures them.
async fn phase(t: &Target, op: Op, run: usize, clients: usize, ops: usize) -> Result<Phase> {
    let per = ops.div_ceil(clients).max(1);
    let cpu_all = t.cluster.cpu_us();
    let cpu_leader = t.cluster.cpu_us_of(t.leader);
    let started = Instant::now();
    let outcomes = join_all((0..clients).map(|w| async move {
        let mut hist = histogram();
        let mut errors = 0u64;
        let mut last = None;
        for n in 0..per {
            let t0 = Instant::now();
            match one(t, op, run, w, n).await {
                Ok(()) => {
                    let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
                }
                Err(e) => {
                    errors += 1;
                    last = Some(e);
                }
            }
        }
        (hist, errors, last)
    }))
    .await;
    let secs = started.elapsed().as_secs_f64();
    let cpu_all = t.cluster.cpu_us().saturating_sub(cpu_all) as f64;
    let cpu_leader = t.cluster.cpu_us_of(t.leader).saturating_sub(cpu_leader) as f64;
    let mut hist: Histogram<u64> = histogram();
    let (mut errors, mut last_error) = (0, None);
    for (h, e, l) in outcomes {
        let _ = hist.add(&h);
        errors += e;
        if l.is_some() {
            last_error = l;
        }
    }
    let done = (per * clients) as f64;
    if hist.is_empty() {
        return Err(BenchError::NoProgress {
            workload: format!("{} at {clients} clients", op.label()),
            kind: "keel",
            errors,
            last: last_error.unwrap_or_default(),
        });
    }
    Ok(Phase {
        rate: hist.len() as f64 / secs.max(1e-9),
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        cpu_all_us: cpu_all / done,
        cpu_leader_us: cpu_leader / done,
        errors,
        last_error,
    })
}

/// Fills the cluster with `objects` ConfigMaps from 16 clients and reads the leader's memory before and
/// after (each after a pause, so neither is a reading of start-up work or of a burst in flight).
async fn memory(t: &Target, run: usize, objects: usize) -> Result<Memory> {
    const SETTLE: Duration = Duration::from_secs(3);
    tokio::time::sleep(SETTLE).await;
    let before = t.cluster.rss_of(t.leader);
    let filled = phase(t, Op::Create, run, 16, objects).await?;
    if filled.errors > 0 {
        return Err(kube_error(
            "fill for the memory reading",
            filled.last_error.unwrap_or_default(),
        ));
    }
    tokio::time::sleep(SETTLE).await;
    let after = t.cluster.rss_of(t.leader);
    Ok(Memory {
        objects: objects.div_ceil(16) * 16,
        before_mib: before as f64 / 1048576.0,
        after_mib: after as f64 / 1048576.0,
    })
}

/// Runs the step: a cluster of `bins.keel` (and one of `baseline` beside it), every phase at every client
/// count, then the memory reading.
pub(crate) async fn run(
    root: &Path,
    bins: &Binaries,
    baseline: Option<&Path>,
    shape: Shape,
    progress: &dyn Fn(String),
) -> Result<Figures> {
    progress(format!(
        "starting {} members of {}",
        shape.members,
        bins.keel.display()
    ));
    let keel = Target::start(&root.join("measured"), bins, shape.members).await?;
    let base = match baseline {
        Some(b) => {
            progress(format!(
                "starting {} members of {}",
                shape.members,
                b.display()
            ));
            let bins = Binaries {
                keel: b.to_path_buf(),
                etcd: bins.etcd.clone(),
            };
            bins.check()?;
            Some(Target::start(&root.join("baseline"), &bins, shape.members).await?)
        }
        None => None,
    };
    let most = shape.clients.iter().copied().max().unwrap_or(1);
    for t in std::iter::once(&keel).chain(base.as_ref()) {
        t.nodes(most).await?;
    }
    // Memory first, on fresh members (later, the allocator holds what the phases' objects left behind);
    // the ConfigMaps stay, so the phases run on a store that holds some.
    progress(format!("leader memory with {} ConfigMaps", shape.objects));
    let fill = shape.clients.len();
    let mem = memory(&keel, fill, shape.objects).await?;
    let base_mem = match &base {
        Some(b) => Some(memory(b, fill, shape.objects).await?),
        None => None,
    };
    let mut rows = Vec::new();
    for (run, &clients) in shape.clients.iter().enumerate() {
        for (i, op) in Op::ALL.into_iter().enumerate() {
            progress(format!("{} at {clients} clients", op.label()));
            // With a baseline, the two take turns going first from one client count to the next, so
            // neither always runs on a machine the other just warmed (or left compacting); a second run
            // with `baseline_first` flips every turn.
            let turn = run + i + usize::from(shape.baseline_first);
            let (measured, before) = match &base {
                Some(b) if !turn.is_multiple_of(2) => {
                    let before = phase(b, op, run, clients, shape.ops).await?;
                    (
                        phase(&keel, op, run, clients, shape.ops).await?,
                        Some(before),
                    )
                }
                Some(b) => {
                    let measured = phase(&keel, op, run, clients, shape.ops).await?;
                    (measured, Some(phase(b, op, run, clients, shape.ops).await?))
                }
                None => (phase(&keel, op, run, clients, shape.ops).await?, None),
            };
            rows.push(Row {
                clients,
                op: op.label(),
                keel: measured,
                baseline: before,
            });
        }
    }
    Ok(Figures {
        keel: bins.keel.clone(),
        baseline: baseline.map(Path::to_path_buf),
        shape,
        rows,
        memory: (mem, base_mem),
    })
}

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

/// The step's report as a Markdown table (pasted into `docs/benchmarks.md`).
pub(crate) fn text(f: &Figures) -> String {
    let mut out = format!(
        "Kubernetes writes: {} members, {} operations per row; clients spread over the members from the leader; \
         CPU = user + system of the members per operation, µs\n\nmeasured: {}\n",
        f.shape.members,
        f.shape.ops,
        f.keel.display()
    );
    if let Some(b) = &f.baseline {
        out.push_str(&format!("baseline: {}\n", b.display()));
    }
    out.push('\n');
    let with_base = f.baseline.is_some();
    if with_base {
        out.push_str("| clients | operation | ops/s | p50 ms | p99 ms | CPU all | CPU leader | baseline ops/s | baseline CPU all | baseline CPU leader | CPU all, measured / baseline |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    } else {
        out.push_str("| clients | operation | ops/s | p50 ms | p99 ms | CPU all | CPU leader |\n|---|---|---|---|---|---|---|\n");
    }
    let mut failures = Vec::new();
    for r in &f.rows {
        let k = &r.keel;
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {:.0} | {:.0} |",
            r.clients,
            r.op,
            k.rate,
            ms(k.p50_us),
            ms(k.p99_us),
            k.cpu_all_us,
            k.cpu_leader_us
        ));
        if let Some(b) = &r.baseline {
            out.push_str(&format!(
                " {:.0} | {:.0} | {:.0} | {:.2} |",
                b.rate,
                b.cpu_all_us,
                b.cpu_leader_us,
                k.cpu_all_us / b.cpu_all_us.max(1e-9)
            ));
        }
        out.push('\n');
        for (who, p) in
            std::iter::once(("measured", k)).chain(r.baseline.iter().map(|b| ("baseline", b)))
        {
            if p.errors > 0 {
                failures.push(format!(
                    "{who}, {} at {} clients: {} failed, last: {}",
                    r.op,
                    r.clients,
                    p.errors,
                    p.last_error.as_deref().unwrap_or("")
                ));
            }
        }
    }
    let (m, b) = f.memory;
    out.push_str(&format!(
        "\nleader RSS with {} ConfigMaps: {:.0} MiB (from {:.0} MiB, {:.1} KiB per object)",
        m.objects,
        m.after_mib,
        m.before_mib,
        m.kib_per_object()
    ));
    if let Some(b) = b {
        out.push_str(&format!(
            "; baseline {:.0} MiB (from {:.0} MiB, {:.1} KiB per object)",
            b.after_mib,
            b.before_mib,
            b.kib_per_object()
        ));
    }
    out.push('\n');
    if !failures.is_empty() {
        out.push_str(&format!("\nfailed operations:\n{}\n", failures.join("\n")));
    }
    out
}

/// Whether any operation failed (the step then fails, after printing).
pub(crate) fn failed(f: &Figures) -> bool {
    f.rows
        .iter()
        .any(|r| r.keel.errors > 0 || r.baseline.as_ref().is_some_and(|b| b.errors > 0))
}
