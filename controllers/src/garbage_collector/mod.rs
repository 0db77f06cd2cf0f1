//! The garbage-collector controller: deletes objects whose owners are gone, and carries out the
//! Foreground and Orphan propagation policies (the `foregroundDeletion` and `orphan` finalizers the API
//! server adds on delete). It watches every deletable type through metadata-only watches, keeps a uid
//! graph of ownerReferences, and decides each deletion on a live read of the owners.

pub mod collect;
pub mod discovery;
pub mod graph;
pub mod queue;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::events::Recorder;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use crate::context::Context;
use crate::manager::ControllerDef;
use graph::{Graph, Kind, Node, Work};
use queue::Queue;

/// How often discovery runs again (upstream resyncs its monitors every 30 seconds).
const REDISCOVER: Duration = Duration::from_secs(30);
/// How long the workers wait for the first lists before they start anyway.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// How many work items are processed at once (upstream's `--concurrent-gc-syncs` default 20).
const WORKERS: usize = 20;

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "garbage-collector",
        start,
    }
}

/// The collector's shared state.
pub struct Gc {
    ctx: Arc<Context>,
    graph: Mutex<Graph>,
    by_gvk: RwLock<HashMap<(String, String, String), Arc<Kind>>>,
    watches: Mutex<HashMap<Arc<Kind>, JoinHandle<()>>>,
    queue: Arc<Queue>,
    recorder: Recorder,
}

impl Drop for Gc {
    fn drop(&mut self) {
        if let Ok(w) = self.watches.lock() {
            for t in w.values() {
                t.abort();
            }
        }
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let ctx = ctx.clone();
    async move {
        let (queue, rx) = Queue::new();
        let gc = Arc::new(Gc {
            recorder: ctx.recorder("garbage-collector-controller"),
            ctx,
            graph: Mutex::new(Graph::default()),
            by_gvk: RwLock::new(HashMap::new()),
            watches: Mutex::new(HashMap::new()),
            queue,
        });
        let synced = loop {
            match gc.refresh().await {
                Ok(s) => break s,
                Err(e) => {
                    debug!(error = %e, "garbage collector: discovery failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        // Decisions on a half-listed graph could remove a finalizer too early; wait for the lists.
        let all = futures::future::join_all(synced);
        if tokio::time::timeout(SYNC_TIMEOUT, all).await.is_err() {
            info!("garbage collector: not every type listed in time; starting anyway");
        }
        let rediscover = {
            let gc = gc.clone();
            async move {
                loop {
                    tokio::time::sleep(REDISCOVER).await;
                    if let Err(e) = gc.refresh().await {
                        debug!(error = %e, "garbage collector: discovery failed");
                    }
                }
            }
        };
        let work = queue::run(rx, WORKERS, gc.clone(), |gc: Arc<Gc>, w: Work| async move {
            collect::process(&gc, &w).await
        });
        futures::future::join(rediscover, work).await;
    }
    .boxed()
}

impl Gc {
    /// Runs discovery; watches the new types and stops watching the ones gone. Returns a receiver per
    /// new watch that fires when its first list is in the graph.
    async fn refresh(
        self: &Arc<Self>,
    ) -> Result<Vec<tokio::sync::oneshot::Receiver<()>>, kube::Error> {
        let found = discovery::discover(&self.ctx.client).await?;
        if let Ok(mut m) = self.by_gvk.write() {
            *m = found.by_gvk;
        }
        let want: HashSet<Arc<Kind>> = found.watched.into_iter().collect();
        let mut synced = Vec::new();
        let mut gone = Vec::new();
        if let Ok(mut watches) = self.watches.lock() {
            watches.retain(|k, t| {
                let keep = want.contains(k);
                if !keep {
                    t.abort();
                    gone.push(k.clone());
                }
                keep
            });
            for k in want {
                if watches.contains_key(&k) {
                    continue;
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                synced.push(rx);
                debug!(resource = %k.ar.plural, group = %k.ar.group, "garbage collector: watching");
                watches.insert(k.clone(), tokio::spawn(watch(Arc::downgrade(self), k, tx)));
            }
        }
        for k in gone {
            // The type is no longer served: its objects are gone with it.
            let uids = self.graph.lock().map(|g| g.uids_of(&k)).unwrap_or_default();
            for uid in uids {
                self.deleted(&uid);
            }
        }
        Ok(synced)
    }

    /// The type an ownerReference's apiVersion and kind name, discovering again once if unknown.
    async fn kind_of(self: &Arc<Self>, api_version: &str, kind: &str) -> Option<Arc<Kind>> {
        let (g, v) = discovery::group_version(api_version);
        let key = (g, v, kind.to_string());
        let known = |gc: &Gc| gc.by_gvk.read().ok().and_then(|m| m.get(&key).cloned());
        if let Some(k) = known(self) {
            return Some(k);
        }
        if let Err(e) = self.refresh().await {
            debug!(error = %e, "garbage collector: discovery failed");
        }
        known(self)
    }

    fn applied(
        &self,
        kind: &Arc<Kind>,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) {
        let Some(node) = Node::of(kind.clone(), meta) else {
            return;
        };
        let work = self
            .graph
            .lock()
            .map(|mut g| g.apply(node))
            .unwrap_or_default();
        for w in work {
            self.queue.add(w);
        }
    }

    fn deleted(&self, uid: &str) {
        let work = self
            .graph
            .lock()
            .map(|mut g| g.delete(uid))
            .unwrap_or_default();
        for w in work {
            self.queue.add(w);
        }
    }

    /// A copy of the node of `uid`.
    fn node(&self, uid: &str) -> Option<Node> {
        self.graph.lock().ok().and_then(|g| g.get(uid).cloned())
    }

    /// The observed dependents of `uid`.
    fn dependents(&self, uid: &str) -> Vec<Node> {
        self.graph
            .lock()
            .map(|g| g.dependents(uid))
            .unwrap_or_default()
    }
}

/// Watches one type's metadata into the graph; a relist drops what the list no longer has.
async fn watch(gc: std::sync::Weak<Gc>, kind: Arc<Kind>, synced: tokio::sync::oneshot::Sender<()>) {
    let Some(client) = gc.upgrade().map(|g| g.ctx.client.clone()) else {
        return;
    };
    // A metadata-only watch: the collector needs ownerReferences, finalizers and deletion only.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &kind.ar);
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut synced = Some(synced);
    let mut seen: HashSet<String> = HashSet::new();
    while let Some(ev) = stream.next().await {
        let Some(gc) = gc.upgrade() else {
            return;
        };
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(o)) => {
                if let Some(uid) = &o.metadata.uid {
                    seen.insert(uid.clone());
                }
                gc.applied(&kind, &o.metadata);
            }
            Ok(Event::InitDone) => {
                let stale: Vec<String> = gc
                    .graph
                    .lock()
                    .map(|g| g.uids_of(&kind))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|u| !seen.contains(u))
                    .collect();
                for uid in stale {
                    gc.deleted(&uid);
                }
                seen.clear();
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
            }
            Ok(Event::Apply(o)) => gc.applied(&kind, &o.metadata),
            Ok(Event::Delete(o)) => {
                if let Some(uid) = &o.metadata.uid {
                    gc.deleted(uid);
                }
            }
            Err(e) => {
                debug!(resource = %kind.ar.plural, error = %e, "garbage collector: watch failed")
            }
        }
    }
}
