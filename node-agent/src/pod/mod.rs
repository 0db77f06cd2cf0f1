//! The pods bound to this node. One watch (`spec.nodeName=<node>`) keeps the pods; a relist of the
//! runtime every second (the kubelet's PLEG) keeps their sandboxes and containers; every pod, and every
//! CRI object whose pod is gone, has a [`worker`] that is woken with the latest of both.
//!
//! - [`spec`]: sandbox and container configurations; [`env`], [`volumes`], [`resources`] feed them;
//! - [`worker`]: one pod's sync; [`status`]: the status it writes; [`backoff`]: CrashLoopBackOff;
//!   [`deadline`]: `activeDeadlineSeconds`; [`termination`]: the termination message;
//! - [`probe`]: startup, liveness and readiness probes ([`grpc_health`] for `grpc` ones).

pub mod backoff;
pub mod claims;
pub mod deadline;
pub mod env;
pub mod events;
pub mod grpc_health;
pub mod http_probe;
pub mod probe;
pub mod resources;
pub mod security;
pub mod service_env;
pub mod spec;
pub mod status;
pub mod termination;
pub mod token;
pub mod volumes;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::ResourceExt;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::cri::labels;
use worker::{Input, Next, Shared, Worker};

/// How often the runtime is relisted.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

enum Msg {
    Pods(HashMap<String, Arc<Pod>>),
    Relist(Vec<k8s_cri::v1::PodSandbox>, Vec<k8s_cri::v1::Container>),
}

/// Runs the pods of `sh.node` for ever.
pub async fn run(sh: Arc<Shared>) {
    let (tx, mut rx) = mpsc::channel::<Msg>(16);
    let pods_task = tokio::spawn(watch_pods(sh.clone(), tx.clone()));
    let relist_task = tokio::spawn(relist(sh.clone(), tx));
    let _guard = AbortOnDrop(vec![pods_task, relist_task]);
    let mut pods: HashMap<String, Arc<Pod>> = HashMap::new();
    let mut pods_synced = false;
    let mut sandboxes: HashMap<String, Vec<k8s_cri::v1::PodSandbox>> = HashMap::new();
    let mut containers: HashMap<String, Vec<k8s_cri::v1::Container>> = HashMap::new();
    let mut relisted = false;
    let mut workers: HashMap<String, watch::Sender<Input>> = HashMap::new();
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Pods(p) => {
                pods = p;
                pods_synced = true;
            }
            Msg::Relist(s, c) => {
                sandboxes.clear();
                containers.clear();
                for s in s {
                    let uid = s.labels.get(labels::POD_UID).cloned().unwrap_or_default();
                    sandboxes.entry(uid).or_default().push(s);
                }
                for c in c {
                    let uid = c.labels.get(labels::POD_UID).cloned().unwrap_or_default();
                    containers.entry(uid).or_default().push(c);
                }
                relisted = true;
            }
        }
        // Until both the pods and the runtime are known, a missing pod could be one not yet listed.
        if !(pods_synced && relisted) {
            continue;
        }
        let mut uids: Vec<String> = pods.keys().cloned().collect();
        uids.extend(sandboxes.keys().cloned());
        uids.extend(containers.keys().cloned());
        uids.sort();
        uids.dedup();
        workers.retain(|_, tx| !tx.is_closed());
        for uid in uids {
            let input = Input {
                pod: pods.get(&uid).cloned(),
                sandboxes: sandboxes.get(&uid).cloned().unwrap_or_default(),
                containers: containers.get(&uid).cloned().unwrap_or_default(),
            };
            match workers.get(&uid) {
                Some(tx) => {
                    tx.send_if_modified(|cur| {
                        let changed = !same(cur, &input);
                        if changed {
                            *cur = input;
                        }
                        changed
                    });
                }
                None => {
                    let (wtx, wrx) = watch::channel(input);
                    tokio::spawn(run_worker(sh.clone(), uid.clone(), wrx));
                    workers.insert(uid, wtx);
                }
            }
        }
    }
}

fn same(a: &Input, b: &Input) -> bool {
    let pod_rv = |i: &Input| i.pod.as_ref().map(|p| p.resource_version());
    let sb = |i: &Input| {
        let mut v: Vec<(String, i32)> = i
            .sandboxes
            .iter()
            .map(|s| (s.id.clone(), s.state))
            .collect();
        v.sort();
        v
    };
    let ct = |i: &Input| {
        let mut v: Vec<(String, i32)> = i
            .containers
            .iter()
            .map(|c| (c.id.clone(), c.state))
            .collect();
        v.sort();
        v
    };
    pod_rv(a) == pod_rv(b) && sb(a) == sb(b) && ct(a) == ct(b)
}

async fn run_worker(sh: Arc<Shared>, uid: String, mut rx: watch::Receiver<Input>) {
    let mut w = Worker::new(sh, uid.clone());
    loop {
        let input = rx.borrow_and_update().clone();
        match w.sync(&input).await {
            Next::Done => {
                debug!(pod = %uid, "pod worker done");
                return;
            }
            Next::After(d) => {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = tokio::time::sleep(d) => {}
                }
            }
        }
    }
}

async fn watch_pods(sh: Arc<Shared>, tx: mpsc::Sender<Msg>) {
    let api: Api<Pod> = Api::all(sh.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", sh.node));
    let mut stream = watcher::watcher(api, cfg).boxed();
    let mut pods: HashMap<String, Arc<Pod>> = HashMap::new();
    let mut building: HashMap<String, Arc<Pod>> = HashMap::new();
    while let Some(ev) = stream.next().await {
        let changed = match ev {
            Ok(WatchEvent::Apply(p)) => {
                pods.insert(p.uid().unwrap_or_default(), Arc::new(p));
                true
            }
            Ok(WatchEvent::Delete(p)) => {
                pods.remove(&p.uid().unwrap_or_default());
                true
            }
            Ok(WatchEvent::Init) => {
                building.clear();
                false
            }
            Ok(WatchEvent::InitApply(p)) => {
                building.insert(p.uid().unwrap_or_default(), Arc::new(p));
                false
            }
            Ok(WatchEvent::InitDone) => {
                pods = std::mem::take(&mut building);
                true
            }
            Err(e) => {
                warn!(error = %e, "pod watch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                false
            }
        };
        if changed && tx.send(Msg::Pods(pods.clone())).await.is_err() {
            return;
        }
    }
}

async fn relist(sh: Arc<Shared>, tx: mpsc::Sender<Msg>) {
    loop {
        match (
            sh.cri.list_sandboxes().await,
            sh.cri.list_containers().await,
        ) {
            (Ok(s), Ok(c)) => {
                if tx.send(Msg::Relist(s, c)).await.is_err() {
                    return;
                }
            }
            (Err(e), _) | (_, Err(e)) => warn!(error = %e, "runtime relist failed"),
        }
        tokio::time::sleep(RELIST_PERIOD).await;
    }
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}
