//! The scheduler's loop. One task owns the cache and the queue: it applies watch changes, takes the
//! next pod, runs one scheduling cycle on the snapshot, assumes the pod on the chosen node and hands the
//! binding to a task of its own (the binding cycle), whose result comes back on the same channel. A pod
//! that fits nowhere gets its condition and a FailedScheduling Event (written by a task, so the loop
//! never waits on the API) and goes back to the queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::Client;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::binder;
use crate::cache::objects::ClusterKind;
use crate::cache::{Cache, ClusterObjects, Snapshot};
use crate::framework::fit_error::NO_NODES_AVAILABLE;
use crate::framework::schedule::{nominated_node_name, Algorithm, Failure};
use crate::framework::{CycleState, Framework};
use crate::informer::{self, Change};
use crate::plugins::{default_framework, volume_binding};
use crate::pod_info::{is_ours, is_terminal, key_of, PodInfo};
use crate::preemption::{self, Outcome};
use crate::queue::SchedulingQueue;
use crate::report::{self, Kind, Note};
use crate::Options;

/// How often back-off and the unschedulable leftovers are flushed.
const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// A change of one of the [`ClusterObjects`] kinds, ready to apply.
pub struct ClusterChange {
    kind: &'static str,
    listed: bool,
    apply: Box<dyn FnOnce(&mut ClusterObjects) + Send>,
}

impl std::fmt::Debug for ClusterChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterChange")
            .field("kind", &self.kind)
            .field("listed", &self.listed)
            .finish()
    }
}

fn cluster_input<K: ClusterKind + Send + 'static>(change: Change<K>) -> Input {
    Input::Cluster(ClusterChange {
        kind: std::any::type_name::<K>(),
        listed: matches!(change, Change::Listed(_)),
        apply: Box::new(move |o: &mut ClusterObjects| o.apply(change)),
    })
}

/// How many kinds the scheduler watches besides Pods and Nodes.
const CLUSTER_KINDS: usize = 9;

/// What reaches the loop.
#[derive(Debug)]
pub enum Input {
    /// A namespace, Service, workload or PodDisruptionBudget changed.
    Cluster(ClusterChange),
    /// A pod changed.
    Pod(Box<Change<Pod>>),
    /// A node changed.
    Node(Box<Change<Node>>),
    /// A binding finished.
    Bound {
        /// The pod's key.
        key: String,
        /// The node it was bound to.
        node: String,
        /// What the binding cycle ended with.
        result: Result<(), binder::BindError>,
        /// Seconds from the start of the scheduling attempt to the answer.
        secs: f64,
    },
}

/// The loop's state.
pub struct Scheduler {
    client: Client,
    opts: Options,
    fw: Framework,
    alg: Algorithm,
    cache: Cache,
    queue: SchedulingQueue,
    snapshot: Snapshot,
    pods_synced: bool,
    nodes_synced: bool,
    kinds_synced: std::collections::HashSet<&'static str>,
    tx: UnboundedSender<Input>,
    tasks: JoinSet<()>,
    last_flush: Instant,
}

/// Runs the scheduler until the returned future is dropped (which aborts the watches and every binding
/// in flight; a binding is a compare-and-set, so an aborted one either happened or did not).
pub async fn run(client: Client, opts: Options) {
    let (tx, rx) = mpsc::unbounded_channel();
    let pods = informer::watch(Api::<Pod>::all(client.clone()), tx.clone(), |c| {
        Input::Pod(Box::new(c))
    });
    let nodes = informer::watch(Api::<Node>::all(client.clone()), tx.clone(), |c| {
        Input::Node(Box::new(c))
    });
    let mut handles = vec![pods, nodes];
    handles.push(informer::watch(
        Api::<Namespace>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<Service>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<ReplicaSet>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<StatefulSet>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<ReplicationController>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<PodDisruptionBudget>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<PersistentVolume>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    handles.push(informer::watch(
        Api::<StorageClass>::all(client.clone()),
        tx.clone(),
        cluster_input,
    ));
    let _abort = AbortOnDrop(handles);
    let mut s = Scheduler::new(client, opts, tx);
    info!(plugins = ?s.fw.plugins(), "scheduler started");
    s.run(rx).await;
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

impl Scheduler {
    fn new(client: Client, opts: Options, tx: UnboundedSender<Input>) -> Scheduler {
        let mut alg = Algorithm::default();
        alg.percentage_of_nodes_to_score = opts.percentage_of_nodes_to_score;
        Scheduler {
            client,
            opts,
            fw: default_framework(),
            alg,
            cache: Cache::default(),
            queue: SchedulingQueue::default(),
            snapshot: Snapshot::default(),
            pods_synced: false,
            nodes_synced: false,
            kinds_synced: std::collections::HashSet::new(),
            tx,
            tasks: JoinSet::new(),
            last_flush: Instant::now(),
        }
    }

    async fn run(&mut self, mut rx: UnboundedReceiver<Input>) {
        let mut tick = tokio::time::interval(FLUSH_INTERVAL);
        loop {
            while let Ok(input) = rx.try_recv() {
                self.handle(input);
            }
            while self.tasks.try_join_next().is_some() {}
            if self.last_flush.elapsed() >= FLUSH_INTERVAL {
                self.last_flush = Instant::now();
                self.queue.flush(Instant::now());
                self.opts.metrics.queue(self.queue.sizes());
            }
            if self.pods_synced && self.nodes_synced && self.kinds_synced.len() == CLUSTER_KINDS {
                if let Some(qp) = self.queue.pop() {
                    self.schedule_one(qp.info);
                    tokio::task::yield_now().await;
                    continue;
                }
            }
            tokio::select! {
                input = rx.recv() => match input {
                    Some(i) => self.handle(i),
                    None => return,
                },
                _ = tick.tick() => {}
            }
        }
    }

    fn handle(&mut self, input: Input) {
        let now = Instant::now();
        match input {
            Input::Pod(change) => self.on_pod_change(*change, now),
            Input::Node(change) => self.on_node_change(*change, now),
            Input::Bound {
                key,
                node,
                result,
                secs,
            } => self.on_bound(&key, &node, result, secs, now),
            Input::Cluster(change) => self.on_cluster_change(change, now),
        }
    }

    fn on_pod_change(&mut self, change: Change<Pod>, now: Instant) {
        match change {
            Change::Applied(p) => self.on_pod(Arc::new(p), now),
            Change::Deleted(p) => self.on_pod_deleted(&key_of(&p), now),
            Change::Listed(pods) => {
                let seen: std::collections::HashSet<String> = pods.iter().map(key_of).collect();
                let known: Vec<String> = self
                    .cache
                    .pod_keys()
                    .into_iter()
                    .chain(self.queue.keys())
                    .filter(|k| !seen.contains(k))
                    .collect();
                for k in known {
                    if !self.cache.is_assumed(&k) {
                        self.on_pod_deleted(&k, now);
                    }
                }
                for p in pods {
                    self.on_pod(Arc::new(p), now);
                }
                self.pods_synced = true;
            }
        }
    }

    fn on_cluster_change(&mut self, change: ClusterChange, now: Instant) {
        if change.listed {
            self.kinds_synced.insert(change.kind);
        }
        let kind = change.kind;
        (change.apply)(self.cache.objects_mut());
        // Namespace labels steer InterPodAffinity's namespaceSelector, and claims, volumes and classes
        // VolumeBinding: a pod refused before may fit now. Workloads, Services and budgets only weigh
        // nodes, so they move nothing (as upstream).
        let moves = [
            std::any::type_name::<Namespace>(),
            std::any::type_name::<PersistentVolumeClaim>(),
            std::any::type_name::<PersistentVolume>(),
            std::any::type_name::<StorageClass>(),
        ];
        if moves.contains(&kind) {
            self.queue.move_all(now);
        }
    }

    fn on_node_change(&mut self, change: Change<Node>, now: Instant) {
        match change {
            Change::Applied(n) => self.on_node(n, now),
            Change::Deleted(n) => {
                if let Some(name) = n.metadata.name.as_deref() {
                    self.cache.remove_node(name);
                }
            }
            Change::Listed(nodes) => {
                let seen: std::collections::HashSet<String> = nodes
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .collect();
                for name in self.cache.node_names() {
                    if !seen.contains(&name) {
                        self.cache.remove_node(&name);
                    }
                }
                for n in nodes {
                    self.on_node(n, now);
                }
                self.nodes_synced = true;
            }
        }
    }

    fn on_pod(&mut self, pod: Arc<Pod>, now: Instant) {
        let info = PodInfo::new(pod);
        let key = info.key.clone();
        if is_terminal(&info.pod) {
            self.queue.delete(&key);
            if self.cache.remove_pod(&key) {
                self.queue.move_all(now);
            }
            return;
        }
        if !info.node_name().is_empty() {
            self.queue.delete(&key);
            let new_here = !self.cache.has_pod(&key);
            self.cache.add_bound_pod(info);
            if new_here {
                // A pod this scheduler did not place (another scheduler's, or one created with
                // spec.nodeName) may satisfy an affinity or change a spread: retry the waiting pods.
                self.queue.move_all(now);
            }
            return;
        }
        if self.cache.is_assumed(&key) {
            // Our binding is under way; this is an older state of the pod.
            if self.queue.is_in_flight(&key) {
                self.queue.add(info, now);
            }
            return;
        }
        if info.pod.metadata.deletion_timestamp.is_some()
            || !is_ours(&info.pod, &self.opts.scheduler_name)
        {
            self.queue.delete(&key);
            self.cache.unnominate(&key);
            return;
        }
        if let Some(node) = nominated_node_name(&info) {
            self.cache.nominate(info.clone(), node);
        }
        self.queue.add(info, now);
    }

    fn on_pod_deleted(&mut self, key: &str, now: Instant) {
        self.queue.delete(key);
        if self.cache.remove_pod(key) {
            // Resources came free.
            self.queue.move_all(now);
        }
    }

    fn on_node(&mut self, node: Node, now: Instant) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let old = self.cache.node(&name);
        let relevant = match old.as_deref() {
            None => true,
            Some(o) => {
                o.spec != node.spec
                    || o.metadata.labels != node.metadata.labels
                    || o.status.as_ref().and_then(|s| s.allocatable.as_ref())
                        != node.status.as_ref().and_then(|s| s.allocatable.as_ref())
            }
        };
        self.cache.set_node(Arc::new(node));
        if relevant {
            self.queue.move_all(now);
        }
    }

    fn schedule_one(&mut self, info: PodInfo) {
        let key = info.key.clone();
        if info.pod.metadata.deletion_timestamp.is_some() {
            self.queue.done(&key);
            return;
        }
        let started = Instant::now();
        self.cache.update_snapshot(&mut self.snapshot);
        let mut state = CycleState::default();
        match self
            .alg
            .schedule(&self.fw, &mut state, &self.snapshot, &info)
        {
            Ok(decision) => {
                debug!(pod = %key, node = %decision.node, feasible = decision.feasible,
                       evaluated = decision.evaluated, "scheduled");
                let volumes = self
                    .snapshot
                    .get(&decision.node)
                    .and_then(|n| volume_binding::plan(&state, &info, n));
                self.cache.assume(info.clone(), &decision.node);
                let (client, tx, holder) = (
                    self.client.clone(),
                    self.tx.clone(),
                    self.opts.holder.clone(),
                );
                self.tasks.spawn(async move {
                    let node = decision.node;
                    let prebound = match &volumes {
                        Some(plan) => volume_binding::pre_bind(&client, plan, &info, &node)
                            .await
                            .map_err(binder::BindError::Volumes),
                        None => Ok(()),
                    };
                    let result = match prebound {
                        Ok(()) => binder::bind(&client, &info, &node)
                            .await
                            .map_err(binder::BindError::Api),
                        Err(e) => Err(e),
                    };
                    if result.is_ok() {
                        let note = format!(
                            "Successfully assigned {}/{} to {node}",
                            info.namespace(),
                            info.name()
                        );
                        if let Err(e) = report::event(
                            &client,
                            &holder,
                            &info.pod,
                            Note {
                                kind: Kind::Normal,
                                reason: "Scheduled",
                                action: "Binding",
                                note,
                                related: None,
                            },
                        )
                        .await
                        {
                            debug!(error = %e, "posting the Scheduled event failed");
                        }
                    }
                    let secs = started.elapsed().as_secs_f64();
                    let _ = tx.send(Input::Bound {
                        key,
                        node,
                        result,
                        secs,
                    });
                });
            }
            Err(failure) => {
                let (message, nominated) = match failure {
                    Failure::NoNodes => (NO_NODES_AVAILABLE.to_string(), None),
                    Failure::Fit(mut e) => {
                        let outcome = preemption::preempt(
                            &self.fw,
                            &state,
                            &self.snapshot,
                            &info,
                            &e.diagnosis,
                            self.alg.rng(),
                        );
                        self.opts.metrics.preemption(match &outcome {
                            Outcome::Preempt { victims, .. } => Some(victims.pods.len()),
                            Outcome::NotHelpful(_) => None,
                        });
                        match outcome {
                            Outcome::NotHelpful(msg) => {
                                e.diagnosis.post_filter_msg = Some(msg);
                                (e.to_string(), None)
                            }
                            Outcome::Preempt {
                                node,
                                victims,
                                lower_nominated,
                            } => {
                                info!(pod = %key, node = %node, victims = victims.pods.len(),
                                      pdb_violations = victims.pdb_violations, "preempting");
                                self.cache.nominate(info.clone(), &node);
                                for p in &lower_nominated {
                                    self.cache.unnominate(&p.key);
                                }
                                self.evict(&info, &node, victims.pods, lower_nominated);
                                (e.to_string(), Some(node))
                            }
                        }
                    }
                };
                self.opts.metrics.attempt(
                    &self.opts.scheduler_name,
                    "unschedulable",
                    started.elapsed().as_secs_f64(),
                );
                debug!(pod = %key, %message, "unschedulable");
                self.report_failure(&info, "Unschedulable", message, nominated);
                self.queue.requeue_unschedulable(&key, Instant::now());
            }
        }
    }

    /// Evicts preemption victims off the loop, as upstream's prepareCandidate: each gets the
    /// DisruptionTarget condition, is deleted (its uid as precondition) and gets a `Preempted` Event;
    /// pods of lower priority nominated to the node lose their nomination.
    fn evict(
        &mut self,
        preemptor: &PodInfo,
        node: &str,
        victims: Vec<PodInfo>,
        lower: Vec<PodInfo>,
    ) {
        let (client, holder, scheduler_name) = (
            self.client.clone(),
            self.opts.holder.clone(),
            self.opts.scheduler_name.clone(),
        );
        let (preemptor, node) = (preemptor.pod.clone(), node.to_string());
        self.tasks.spawn(async move {
            let uid = preemptor.metadata.uid.clone().unwrap_or_default();
            for v in victims {
                let pod = &v.pod;
                if let Err(e) = report::disruption_target(&client, pod, &scheduler_name).await {
                    debug!(victim = %v.key, error = %e, "marking the preemption victim failed");
                }
                let dp = kube::api::DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        uid: pod.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match Api::<Pod>::namespaced(client.clone(), v.namespace())
                    .delete(v.name(), &dp)
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => continue,
                    Err(e) => {
                        warn!(victim = %v.key, error = %e, "deleting the preemption victim failed");
                        continue;
                    }
                }
                let note = Note {
                    kind: Kind::Normal,
                    reason: "Preempted",
                    action: "Preempting",
                    note: format!("Preempted by pod {uid} on node {node}"),
                    related: Some(&preemptor),
                };
                if let Err(e) = report::event(&client, &holder, pod, note).await {
                    debug!(error = %e, "posting the Preempted event failed");
                }
            }
            for p in lower {
                if let Err(e) = report::clear_nomination(&client, &p.pod).await {
                    debug!(pod = %p.key, error = %e, "clearing a nomination failed");
                }
            }
        });
    }

    /// Writes the pod's condition (and nomination) and a FailedScheduling Event, off the loop.
    fn report_failure(
        &mut self,
        info: &PodInfo,
        reason: &'static str,
        message: String,
        nominated: Option<String>,
    ) {
        let (client, holder, pod) = (
            self.client.clone(),
            self.opts.holder.clone(),
            info.pod.clone(),
        );
        self.tasks.spawn(async move {
            if let Err(e) = report::unschedulable_condition(
                &client,
                &pod,
                reason,
                &message,
                nominated.as_deref(),
            )
            .await
            {
                debug!(error = %e, "writing the PodScheduled condition failed");
            }
            let note = Note {
                kind: Kind::Warning,
                reason: "FailedScheduling",
                action: "Scheduling",
                note: message,
                related: None,
            };
            if let Err(e) = report::event(&client, &holder, &pod, note).await {
                debug!(error = %e, "posting the FailedScheduling event failed");
            }
        });
    }

    fn on_bound(
        &mut self,
        key: &str,
        node: &str,
        result: Result<(), binder::BindError>,
        secs: f64,
        now: Instant,
    ) {
        match result {
            Ok(()) => {
                let name = &self.opts.scheduler_name;
                self.opts.metrics.attempt(name, "scheduled", secs);
                self.queue.done(key);
            }
            Err(e) => {
                if !self.cache.is_assumed(key) {
                    // The watch already shows the pod bound elsewhere or gone.
                    self.queue.done(key);
                    return;
                }
                warn!(pod = %key, node, error = %e, "binding failed");
                self.opts
                    .metrics
                    .attempt(&self.opts.scheduler_name, "error", secs);
                self.cache.forget(key);
                self.queue.move_all(now);
                let pod = self.queue_pod(key);
                if let Some(info) = pod {
                    self.report_failure(&info, "SchedulerError", e.to_string(), None);
                }
                self.queue.requeue_after_error(key, now);
            }
        }
    }

    fn queue_pod(&self, key: &str) -> Option<PodInfo> {
        self.queue.in_flight(key).map(|qp| qp.info.clone())
    }
}
