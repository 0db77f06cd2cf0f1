//! Hollow nodes (`keel agent --hollow N`), as kubemark's hollow kubelet and KWOK make them: N Nodes
//! that look, from the API, like machines with a kubelet, and run nothing.
//!
//! - [`node`]: one node's name, labels, loopback InternalIP and status; registration and status writes;
//! - [`lease`]: Lease renewal as the kubelet's lease controller does it;
//! - [`ipam`]: pod IPs from each node's `spec.podCIDR`;
//! - [`pods`]: the status of a pod whose containers all started, and the final delete of a pod;
//! - this module: one task owning all state, fed by one Node watch, one Pod watch and the results of
//!   the API writes it starts, of which at most `concurrency` run at once.
//!
//! Model:
//! - Two watches serve all N nodes: Nodes labelled [`node::LABEL`]`=<prefix>`, and Pods with a
//!   `spec.nodeName` (each dropped at once unless its node is one of ours). No Node or Pod object is
//!   kept except a pod whose status write is pending; per node there is its uid, pod CIDR, used pod IPs,
//!   the Lease's resourceVersion and two deadlines.
//! - Each Lease is renewed every 10 s plus up to 4 % jitter (the kubelet's), the second renewal at a
//!   random point of the first period, so nodes registered together do not renew together. Node status
//!   is written at registration, then every 5 min (nodeStatusReportFrequency: nothing changes), and at
//!   once when someone else changed a condition the node owns.
//! - A pod whose status already says Running, with a pod IP and every container ready, needs nothing
//!   (so a restarted process adopts its pods and their IPs). Any other pod of a hollow node gets that
//!   status, with an IP of its node's range (the node's InternalIP for `hostNetwork` pods); a pod whose
//!   node has no range yet waits for one. A pod being deleted is deleted at once with grace period 0.
//! - Stopping drops everything in flight and leaves Nodes, Leases and pods as they are, as a stopped
//!   kubelet does: the node lifecycle controller then marks the nodes unreachable.

pub mod ipam;
pub mod lease;
pub mod node;
pub mod pods;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use rand::Rng;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{Error, Result};
use crate::node::lease::RENEW_INTERVAL;
use crate::node::machine::Machine;
use crate::node::status::REPORT_FREQUENCY;
use ipam::{Cidr, Pool};
use pods::Outcome;

/// How the hollow nodes are made.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many nodes.
    pub count: u32,
    /// Nodes are named `<prefix>-0` … `<prefix>-<count-1>`.
    pub prefix: String,
    /// Capacity and allocatable CPU (a quantity).
    pub cpu: String,
    /// Capacity and allocatable memory (a quantity).
    pub memory: String,
    /// Capacity and allocatable pods.
    pub pods: u32,
    /// Zones to spread the nodes over (node i in `zone-<i mod zones>`); 0: no zone labels.
    pub zones: u32,
    /// The kubelet port the nodes advertise (nothing listens on it).
    pub kubelet_port: i32,
    /// API writes in flight at most.
    pub concurrency: usize,
}

impl Options {
    /// `count` nodes with the defaults: `hollow-<i>`, 8 CPUs, 32 Gi, 110 pods, no zones.
    pub fn new(count: u32) -> Options {
        Options {
            count,
            prefix: "hollow".into(),
            cpu: "8".into(),
            memory: "32Gi".into(),
            pods: crate::node::status::MAX_PODS as u32,
            zones: 0,
            kubelet_port: 10250,
            concurrency: 32,
        }
    }

    /// Checks what the API would refuse for every node alike, before any is written.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.count == 0 || self.count > node::MAX_NODES {
            return bad(format!(
                "--hollow {}: between 1 and {}",
                self.count,
                node::MAX_NODES
            ));
        }
        let label_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 40
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
        };
        if !label_ok(&self.prefix) {
            return bad(format!(
                "--hollow-prefix {:?}: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 40",
                self.prefix
            ));
        }
        for (flag, q) in [
            ("--hollow-cpu", &self.cpu),
            ("--hollow-memory", &self.memory),
        ] {
            if !is_quantity(q) {
                return bad(format!(
                    "{flag} {q:?} is not a quantity (e.g. 8, 500m, 32Gi)"
                ));
            }
        }
        if self.concurrency == 0 {
            return bad("--hollow-concurrency must be at least 1".into());
        }
        Ok(())
    }
}

/// Whether `s` is a plain resource quantity: a decimal number and an optional suffix.
fn is_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 14] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P",
    ];
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let digits = num.bytes().filter(u8::is_ascii_digit).count();
    digits > 0
        && num.matches('.').count() <= 1
        && (suffix.is_empty() || suffix == "E" || SUFFIXES.contains(&suffix))
}

/// Longest wait between two tries of a failed write.
const MAX_BACKOFF: Duration = Duration::from_secs(7);
/// How often a summary of the work done is logged (at info).
const SUMMARY_EVERY: Duration = Duration::from_secs(60);
/// The kubelet's jitter on its periodic work (wait.JitterUntil factor).
const JITTER: f64 = 0.04;

fn backoff(failures: u32) -> Duration {
    let ms = 200u64.saturating_mul(1 << failures.min(6));
    Duration::from_millis(ms).min(MAX_BACKOFF)
}

/// A heartbeat kind that falls due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Beat {
    Lease,
    Status,
}

/// What the actor knows of one node.
#[derive(Debug, Default)]
struct Slot {
    uid: Option<String>,
    registered: bool,
    gone: bool,
    cidr: Option<Cidr>,
    ips: Pool,
    lease_rv: Option<String>,
    lease_due: Option<Instant>,
    lease_failures: u32,
    renewed: bool,
    status_due: Option<Instant>,
    status_failures: u32,
    /// lastTransitionTime of the node's conditions.
    since: Option<Timestamp>,
}

/// What the actor knows of one pod of a hollow node.
#[derive(Debug)]
struct PodRec {
    node: u32,
    ip: Option<u32>,
    /// The list generation that last showed it (a relist drops pods it did not show).
    seen: u64,
}

/// A status write to do.
#[derive(Debug)]
struct Pending {
    pod: Arc<Pod>,
    in_flight: bool,
    retry_at: bool,
    failures: u32,
}

/// A delete to do.
#[derive(Debug)]
struct Deleting {
    ns: String,
    name: String,
    in_flight: bool,
    failures: u32,
}

/// Results of the writes the actor started.
enum Msg {
    Registered(u32, Result<Node>),
    Lease(u32, Result<Option<String>>),
    Status(u32, Result<Node>),
    PodWritten(String, Outcome),
    PodDeleted(String, Outcome),
    Retry(String),
}

/// Work counted since the last summary.
#[derive(Debug, Default)]
struct Counts {
    leases: u64,
    lease_errors: u64,
    statuses: u64,
    pod_writes: u64,
    pod_deletes: u64,
    errors: u64,
}

struct Hollow {
    client: Client,
    opts: Arc<Options>,
    host: Arc<node::Host>,
    slots: Vec<Slot>,
    beats: BinaryHeap<Reverse<(Instant, u32, Beat)>>,
    pods: HashMap<String, PodRec>,
    pending: HashMap<String, Pending>,
    deleting: HashMap<String, Deleting>,
    /// Pods (by uid) waiting for their node's range, or for a free address in it.
    waiting: HashMap<u32, Vec<String>>,
    pod_generation: u64,
    registered: u32,
    started: std::time::Instant,
    counts: Counts,
    tasks: JoinSet<()>,
    tx: mpsc::UnboundedSender<Msg>,
    limit: Arc<Semaphore>,
}

/// Registers `opts.count` hollow nodes and keeps them and their pods until the future is dropped.
pub async fn run(client: Client, opts: Options) -> Result<()> {
    opts.validate()?;
    let opts = Arc::new(opts);
    let host = Arc::new(node::Host {
        machine: Machine::read(std::path::Path::new("/")),
        boot: format!("{:016x}", rand::thread_rng().gen::<u64>()),
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut h = Hollow {
        client: client.clone(),
        opts: opts.clone(),
        host,
        slots: (0..opts.count).map(|_| Slot::default()).collect(),
        beats: BinaryHeap::new(),
        pods: HashMap::new(),
        pending: HashMap::new(),
        deleting: HashMap::new(),
        waiting: HashMap::new(),
        pod_generation: 0,
        registered: 0,
        started: std::time::Instant::now(),
        counts: Counts::default(),
        tasks: JoinSet::new(),
        tx,
        limit: Arc::new(Semaphore::new(opts.concurrency)),
    };
    let node_cfg = watcher::Config::default().labels(&format!("{}={}", node::LABEL, opts.prefix));
    let mut nodes = watcher::watcher(Api::<Node>::all(client.clone()), node_cfg)
        .default_backoff()
        .boxed();
    let pod_cfg = watcher::Config::default().fields("spec.nodeName!=");
    let mut pods = watcher::watcher(Api::<Pod>::all(client.clone()), pod_cfg)
        .default_backoff()
        .boxed();
    h.start_registration();
    info!(
        nodes = opts.count,
        prefix = %opts.prefix,
        concurrency = opts.concurrency,
        "registering hollow nodes"
    );
    let mut summary = tokio::time::interval(SUMMARY_EVERY);
    summary.tick().await;
    loop {
        let next = h.beats.peek().map(|Reverse((t, _, _))| *t);
        tokio::select! {
            Some(m) = rx.recv() => h.on_msg(m)?,
            ev = nodes.next() => match ev {
                Some(Ok(ev)) => h.on_node_event(ev),
                Some(Err(e)) => warn!(error = %e, "node watch failed; retrying"),
                None => return Err(Error::WatchEnded("hollow nodes")),
            },
            ev = pods.next() => match ev {
                Some(Ok(ev)) => h.on_pod_event(ev),
                Some(Err(e)) => warn!(error = %e, "pod watch failed; retrying"),
                None => return Err(Error::WatchEnded("pods of hollow nodes")),
            },
            _ = sleep_until(next) => h.on_due(),
            Some(r) = h.tasks.join_next() => {
                if let Err(e) = r {
                    warn!(error = %e, "a hollow node write task failed");
                }
            }
            _ = summary.tick() => h.summary(),
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn parse_ip(s: Option<&str>) -> Option<u32> {
    s.and_then(|s| s.parse::<Ipv4Addr>().ok()).map(u32::from)
}

impl Hollow {
    fn name(&self, i: u32) -> String {
        node::name(&self.opts.prefix, i)
    }

    fn index(&self, name: &str) -> Option<u32> {
        node::index(&self.opts.prefix, self.opts.count, name)
    }

    fn slot(&mut self, i: u32) -> &mut Slot {
        &mut self.slots[i as usize]
    }

    /// Runs `work` once a write slot is free, and hands its result back to the actor.
    fn spawn<F>(&mut self, work: F)
    where
        F: Future<Output = Msg> + Send + 'static,
    {
        let (limit, tx) = (self.limit.clone(), self.tx.clone());
        self.tasks.spawn(async move {
            let Ok(_permit) = limit.acquire_owned().await else {
                return;
            };
            let _ = tx.send(work.await);
        });
    }

    /// Registers every node, `concurrency` at a time, from one task (not one task per node).
    fn start_registration(&mut self) {
        let (client, opts, host, tx) = (
            self.client.clone(),
            self.opts.clone(),
            self.host.clone(),
            self.tx.clone(),
        );
        let limit = self.limit.clone();
        self.tasks.spawn(async move {
            let register = |i: u32| {
                let (client, opts, host, limit) =
                    (client.clone(), opts.clone(), host.clone(), limit.clone());
                async move {
                    let mut failures = 0;
                    loop {
                        let r = {
                            let Ok(_permit) = limit.acquire().await else {
                                return (i, Err(Error::Config("stopping".into())));
                            };
                            node::register(&client, &opts, &host, i).await
                        };
                        match r {
                            Err(Error::Kube { what, source }) if node::retryable(&source) => {
                                if failures == 0 {
                                    warn!(node = i, error = %source, "{what}: retrying");
                                }
                                tokio::time::sleep(backoff(failures)).await;
                                failures += 1;
                            }
                            r => return (i, r),
                        }
                    }
                }
            };
            let mut results = futures::stream::iter(0..opts.count)
                .map(register)
                .buffer_unordered(opts.concurrency);
            while let Some((i, r)) = results.next().await {
                if tx.send(Msg::Registered(i, r)).is_err() {
                    return;
                }
            }
        });
    }

    fn schedule(&mut self, i: u32, beat: Beat, at: Instant) {
        let slot = self.slot(i);
        match beat {
            Beat::Lease => slot.lease_due = Some(at),
            Beat::Status => slot.status_due = Some(at),
        }
        self.beats.push(Reverse((at, i, beat)));
    }

    fn jittered(period: Duration) -> Duration {
        period.mul_f64(1.0 + rand::thread_rng().gen_range(0.0..JITTER))
    }

    fn on_msg(&mut self, m: Msg) -> Result<()> {
        match m {
            Msg::Registered(i, Ok(n)) => self.on_registered(i, n),
            Msg::Registered(i, Err(e)) => {
                // Refused (not unavailable): every node would be refused alike.
                return Err(Error::Config(format!(
                    "hollow node {} not registered: {e}",
                    self.name(i)
                )));
            }
            Msg::Lease(i, r) => self.on_lease(i, r),
            Msg::Status(i, r) => self.on_status(i, r),
            Msg::PodWritten(uid, o) => self.on_pod_written(uid, o),
            Msg::PodDeleted(uid, o) => self.on_pod_deleted(uid, o),
            Msg::Retry(uid) => {
                if let Some(p) = self.pending.get_mut(&uid) {
                    p.retry_at = false;
                    self.try_write(&uid);
                } else if self.deleting.contains_key(&uid) {
                    self.try_delete(&uid);
                }
            }
        }
        Ok(())
    }

    fn on_registered(&mut self, i: u32, n: Node) {
        let now = Instant::now();
        let kept_status = node::conditions_hold(&n);
        let since = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        let slot = self.slot(i);
        slot.registered = true;
        slot.gone = false;
        slot.uid = n.metadata.uid.clone();
        slot.since = since.or_else(|| Some(Timestamp::now()));
        let cidr = node::pod_cidr(&n).and_then(Cidr::parse);
        self.set_cidr(i, cidr);
        self.schedule(i, Beat::Lease, now);
        // An API server that dropped the status given at create gets it written at once.
        let status_at = if kept_status {
            now + Self::jittered(REPORT_FREQUENCY)
        } else {
            now
        };
        self.schedule(i, Beat::Status, status_at);
        self.registered += 1;
        debug!(node = %self.name(i), "hollow node registered");
        let (done, total) = (self.registered, self.opts.count);
        let step = (total / 10).max(1);
        if done == total {
            info!(
                nodes = total,
                seconds = format!("{:.1}", self.started.elapsed().as_secs_f64()),
                "all hollow nodes registered"
            );
        } else if done % step == 0 {
            info!(
                registered = done,
                of = total,
                seconds = format!("{:.1}", self.started.elapsed().as_secs_f64()),
                "registering hollow nodes"
            );
        }
    }

    fn set_cidr(&mut self, i: u32, cidr: Option<Cidr>) {
        let slot = self.slot(i);
        if slot.cidr.is_some() || cidr.is_none() {
            return;
        }
        slot.cidr = cidr;
        self.wake(i);
    }

    /// Tries again the pods of node `i` that waited for an address.
    fn wake(&mut self, i: u32) {
        for uid in self.waiting.remove(&i).unwrap_or_default() {
            self.try_write(&uid);
        }
    }

    fn on_due(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((t, i, beat))) = self.beats.peek().copied() {
            if t > now {
                break;
            }
            self.beats.pop();
            let slot = &self.slots[i as usize];
            let current = match beat {
                Beat::Lease => slot.lease_due == Some(t),
                Beat::Status => slot.status_due == Some(t),
            };
            if !current || slot.gone || !slot.registered {
                continue;
            }
            match beat {
                Beat::Lease => self.renew_lease(i),
                Beat::Status => self.write_node_status(i),
            }
        }
    }

    fn renew_lease(&mut self, i: u32) {
        let slot = self.slot(i);
        slot.lease_due = None;
        let (uid, rv) = (slot.uid.clone(), slot.lease_rv.clone());
        let (client, name) = (self.client.clone(), self.name(i));
        self.spawn(
            async move { Msg::Lease(i, lease::renew(&client, &name, uid.as_deref(), rv).await) },
        );
    }

    fn on_lease(&mut self, i: u32, r: Result<Option<String>>) {
        let now = Instant::now();
        let name = self.name(i);
        let slot = &mut self.slots[i as usize];
        let next = match r {
            Ok(rv) => {
                slot.lease_rv = rv;
                slot.lease_failures = 0;
                self.counts.leases += 1;
                if slot.renewed {
                    Self::jittered(RENEW_INTERVAL)
                } else {
                    // The second renewal at a random point of the period spreads nodes that came up together.
                    slot.renewed = true;
                    RENEW_INTERVAL.mul_f64(rand::thread_rng().gen_range(0.0..1.0))
                }
            }
            Err(e) => {
                if slot.lease_failures == 0 {
                    warn!(node = %name, error = %e, "node lease not renewed; retrying");
                } else {
                    debug!(node = %name, error = %e, "node lease not renewed; retrying");
                }
                slot.lease_rv = None;
                slot.lease_failures += 1;
                self.counts.lease_errors += 1;
                backoff(slot.lease_failures - 1)
            }
        };
        if !self.slot(i).gone {
            self.schedule(i, Beat::Lease, now + next);
        }
    }

    fn write_node_status(&mut self, i: u32) {
        let slot = self.slot(i);
        slot.status_due = None;
        let since = slot.since.unwrap_or_else(Timestamp::now);
        let status = node::status(&self.opts, &self.host, i, since);
        let (client, name) = (self.client.clone(), self.name(i));
        self.spawn(
            async move { Msg::Status(i, node::write_status(&client, &name, &status).await) },
        );
    }

    fn on_status(&mut self, i: u32, r: Result<Node>) {
        let now = Instant::now();
        let name = self.name(i);
        let slot = &mut self.slots[i as usize];
        let next = match r {
            Ok(_) => {
                slot.status_failures = 0;
                self.counts.statuses += 1;
                Self::jittered(REPORT_FREQUENCY)
            }
            Err(e) if e.is_not_found() => {
                warn!(node = %name, "hollow node deleted; no more heartbeats for it");
                slot.gone = true;
                return;
            }
            Err(e) => {
                if slot.status_failures == 0 {
                    warn!(node = %name, error = %e, "node status not written; retrying");
                }
                slot.status_failures += 1;
                self.counts.errors += 1;
                // The kubelet tries again at its next 10 s status sync.
                crate::node::status::UPDATE_FREQUENCY
            }
        };
        if !self.slot(i).gone && self.slot(i).status_due.is_none() {
            self.schedule(i, Beat::Status, now + next);
        }
    }

    fn on_node_event(&mut self, ev: Event<Node>) {
        match ev {
            Event::Apply(n) | Event::InitApply(n) => self.on_node(&n),
            Event::Delete(n) => {
                let Some(i) = n.metadata.name.as_deref().and_then(|n| self.index(n)) else {
                    return;
                };
                let name = self.name(i);
                let slot = self.slot(i);
                if slot.registered && !slot.gone {
                    warn!(node = %name, "hollow node deleted by someone; no more heartbeats for it");
                }
                slot.gone = true;
            }
            Event::Init | Event::InitDone => {}
        }
    }

    fn on_node(&mut self, n: &Node) {
        let Some(i) = n.metadata.name.as_deref().and_then(|n| self.index(n)) else {
            return;
        };
        let now = Instant::now();
        let cidr = node::pod_cidr(n).and_then(Cidr::parse);
        self.set_cidr(i, cidr);
        let holds = node::conditions_hold(n);
        let slot = self.slot(i);
        if slot.uid.is_some() && slot.uid != n.metadata.uid {
            // Made again by someone else: its Lease is another one too.
            slot.lease_rv = None;
        }
        slot.uid = n.metadata.uid.clone();
        if !slot.registered {
            return;
        }
        if slot.gone {
            slot.gone = false;
            slot.since = Some(Timestamp::now());
            self.schedule(i, Beat::Lease, now);
            self.schedule(i, Beat::Status, now);
            return;
        }
        // Someone changed a condition the node owns (the lifecycle controller after missed
        // heartbeats): the kubelet's next status sync puts it back.
        if !holds && slot.status_due.is_some_and(|t| t > now) {
            slot.since = Some(Timestamp::now());
            self.schedule(i, Beat::Status, now);
        }
    }

    fn on_pod_event(&mut self, ev: Event<Pod>) {
        match ev {
            Event::Init => self.pod_generation += 1,
            Event::InitApply(p) | Event::Apply(p) => self.on_pod(p),
            Event::Delete(p) => {
                if let Some(uid) = p.metadata.uid.as_deref() {
                    self.forget(uid);
                }
            }
            Event::InitDone => {
                let gen = self.pod_generation;
                let gone: Vec<String> = self
                    .pods
                    .iter()
                    .filter(|(_, r)| r.seen != gen)
                    .map(|(uid, _)| uid.clone())
                    .collect();
                for uid in gone {
                    self.forget(&uid);
                }
            }
        }
    }

    /// Drops a pod that is gone, freeing its address.
    fn forget(&mut self, uid: &str) {
        self.pending.remove(uid);
        self.deleting.remove(uid);
        if let Some(r) = self.pods.remove(uid) {
            if let Some(ip) = r.ip {
                self.slot(r.node).ips.release(ip);
                self.wake(r.node);
            }
        }
    }

    fn on_pod(&mut self, pod: Pod) {
        let Some(i) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| self.index(n))
        else {
            return;
        };
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let gen = self.pod_generation;
        let rec = self.pods.entry(uid.clone()).or_insert(PodRec {
            node: i,
            ip: None,
            seen: gen,
        });
        rec.seen = gen;
        if pod.metadata.deletion_timestamp.is_some() {
            self.pending.remove(&uid);
            if !self.deleting.contains_key(&uid) {
                self.deleting.insert(
                    uid.clone(),
                    Deleting {
                        ns: pod.metadata.namespace.clone().unwrap_or_default(),
                        name: pod.metadata.name.clone().unwrap_or_default(),
                        in_flight: false,
                        failures: 0,
                    },
                );
                self.try_delete(&uid);
            }
            return;
        }
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        if pods::is_terminal(&pod) {
            // Finished by someone else (an eviction): its sandbox would be gone, and its address free.
            self.pending.remove(&uid);
            if let Some(ip) = self.pods.get_mut(&uid).and_then(|r| r.ip.take()) {
                self.slot(i).ips.release(ip);
                self.wake(i);
            }
            return;
        }
        // An address the pod already has is kept (a restarted process adopts its pods).
        if !host_network {
            let has = self.pods.get(&uid).and_then(|r| r.ip);
            let shown = parse_ip(pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()));
            if let (None, Some(ip)) = (has, shown) {
                let slot = self.slot(i);
                let inside = slot.cidr.is_none_or(|c| c.contains(ip));
                if inside && slot.ips.reserve(ip) {
                    if let Some(r) = self.pods.get_mut(&uid) {
                        r.ip = Some(ip);
                    }
                }
            }
        }
        if pods::is_running(&pod) {
            if self.pending.get(&uid).is_some_and(|p| !p.in_flight) {
                self.pending.remove(&uid);
            }
            return;
        }
        let pod = Arc::new(pod);
        match self.pending.get_mut(&uid) {
            Some(p) => p.pod = pod,
            None => {
                self.pending.insert(
                    uid.clone(),
                    Pending {
                        pod,
                        in_flight: false,
                        retry_at: false,
                        failures: 0,
                    },
                );
            }
        }
        self.try_write(&uid);
    }

    /// Starts the status write of a pending pod, once it has an address.
    fn try_write(&mut self, uid: &str) {
        let Some(p) = self.pending.get(uid) else {
            return;
        };
        if p.in_flight || p.retry_at {
            return;
        }
        let Some(rec) = self.pods.get(uid) else {
            return;
        };
        let (i, pod) = (rec.node, p.pod.clone());
        let host_ip = node::internal_ip(i);
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let pod_ip = if host_network {
            host_ip
        } else {
            let ip = match rec.ip {
                Some(ip) => Some(ip),
                None => {
                    let slot = &mut self.slots[i as usize];
                    slot.cidr.and_then(|c| slot.ips.allocate(c))
                }
            };
            let Some(ip) = ip else {
                if self.slots[i as usize].cidr.is_some() {
                    debug!(pod = %uid, node = i, "no free pod address on the node; waiting");
                }
                let waiting = self.waiting.entry(i).or_default();
                if !waiting.iter().any(|w| w == uid) {
                    waiting.push(uid.to_string());
                }
                return;
            };
            if let Some(r) = self.pods.get_mut(uid) {
                r.ip = Some(ip);
            }
            Ipv4Addr::from(ip)
        };
        if let Some(p) = self.pending.get_mut(uid) {
            p.in_flight = true;
        }
        let (client, uid) = (self.client.clone(), uid.to_string());
        self.spawn(async move {
            let status = pods::status(&pod, &pod_ip.to_string(), &host_ip.to_string());
            Msg::PodWritten(uid, pods::write_status(&client, &pod, &status).await)
        });
    }

    fn retry_later(&mut self, uid: String, failures: u32) {
        let tx = self.tx.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(backoff(failures)).await;
            let _ = tx.send(Msg::Retry(uid));
        });
    }

    fn on_pod_written(&mut self, uid: String, o: Outcome) {
        if matches!(o, Outcome::Done) {
            self.counts.pod_writes += 1;
        }
        let Some(p) = self.pending.get_mut(&uid) else {
            return;
        };
        p.in_flight = false;
        match o {
            Outcome::Done | Outcome::Gone => {
                self.pending.remove(&uid);
            }
            Outcome::Failed(e) => {
                debug!(pod = %uid, error = %e, "pod status not written; retrying");
                self.counts.errors += 1;
                p.retry_at = true;
                p.failures += 1;
                let f = p.failures;
                self.retry_later(uid, f);
            }
        }
    }

    fn try_delete(&mut self, uid: &str) {
        let Some(d) = self.deleting.get_mut(uid) else {
            return;
        };
        if d.in_flight {
            return;
        }
        d.in_flight = true;
        let (ns, name) = (d.ns.clone(), d.name.clone());
        let (client, uid) = (self.client.clone(), uid.to_string());
        self.spawn(async move {
            let o = pods::delete(&client, &ns, &name, &uid).await;
            Msg::PodDeleted(uid, o)
        });
    }

    fn on_pod_deleted(&mut self, uid: String, o: Outcome) {
        if matches!(o, Outcome::Done | Outcome::Gone) {
            // Counted even when the watch's Delete (which frees the address) came first.
            self.counts.pod_deletes += 1;
        }
        let Some(d) = self.deleting.get_mut(&uid) else {
            return;
        };
        d.in_flight = false;
        match o {
            // The entry only stops a second delete until the watch's Delete.
            Outcome::Done | Outcome::Gone => {}
            Outcome::Failed(e) => {
                debug!(pod = %uid, error = %e, "pod not deleted; retrying");
                self.counts.errors += 1;
                d.failures += 1;
                let f = d.failures;
                self.retry_later(uid, f);
            }
        }
    }

    fn summary(&mut self) {
        let c = std::mem::take(&mut self.counts);
        let secs = SUMMARY_EVERY.as_secs_f64();
        let waiting: usize = self.waiting.values().map(Vec::len).sum();
        let running = self.pods.values().filter(|r| r.ip.is_some()).count();
        info!(
            registered = self.registered,
            leases_per_second = format!("{:.1}", c.leases as f64 / secs),
            lease_errors = c.lease_errors,
            node_status_writes = c.statuses,
            pod_status_writes = c.pod_writes,
            pod_deletes = c.pod_deletes,
            other_errors = c.errors,
            pods = self.pods.len(),
            pods_with_ip = running,
            pods_waiting_for_an_address = waiting,
            "hollow nodes"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for q in ["8", "500m", "32Gi", "1.5", "2E", "100k"] {
            assert!(is_quantity(q), "{q}");
        }
        for q in ["", "Gi", "8 Gi", "8GB", "1.2.3", "-1"] {
            assert!(!is_quantity(q), "{q}");
        }
    }

    #[test]
    fn options_are_checked() {
        assert!(Options::new(5000).validate().is_ok());
        assert!(Options::new(0).validate().is_err());
        let o = |f: fn(&mut Options)| {
            let mut o = Options::new(3);
            f(&mut o);
            o.validate()
        };
        assert!(o(|o| o.prefix = "Hollow".into()).is_err());
        assert!(o(|o| o.prefix = "-h".into()).is_err());
        assert!(o(|o| o.prefix = "kwok-node".into()).is_ok());
        assert!(o(|o| o.memory = "lots".into()).is_err());
        assert!(o(|o| o.concurrency = 0).is_err());
    }

    #[test]
    fn backoff_grows_to_its_cap() {
        assert_eq!(backoff(0), Duration::from_millis(200));
        assert_eq!(backoff(1), Duration::from_millis(400));
        assert_eq!(backoff(10), MAX_BACKOFF);
    }
}
