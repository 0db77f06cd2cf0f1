//! Shared informers: one watch per resource type, a reflector store every controller reads, and a fan-out
//! of every touched object (created, changed *and deleted*) to each controller that subscribed.
//!
//! kube-runtime's own shared streams drop deletions, and a ReplicaSet must hear that one of its pods was
//! deleted, so the fan-out is ours; the store and the watcher (list, watch, re-list, back-off) are kube's.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, store::Writer, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use serde::de::DeserializeOwned;
use tracing::debug;

/// One resource type's shared watch: its store and its subscribers.
pub struct Shared<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    writer: Mutex<Option<Writer<K>>>,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>,
    api: Api<K>,
    config: watcher::Config,
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// A shared watch of `api` (not started until [`Shared::start`]).
    pub fn new(api: Api<K>, config: watcher::Config) -> Self {
        let (store, writer) = reflector::store();
        Shared {
            store,
            writer: Mutex::new(Some(writer)),
            subscribers: Arc::new(Mutex::new(Vec::new())),
            api,
            config,
        }
    }

    /// The cache every controller reads.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A stream of every object this watch touches from now on, deleted ones included (their last state).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Arc<K>> {
        let (tx, rx) = mpsc::unbounded();
        if let Ok(mut subs) = self.subscribers.lock() {
            subs.push(tx);
        }
        rx
    }

    /// Starts the watch; returns its driving task. Calling it twice does nothing the second time.
    pub fn start(&self) -> Option<tokio::task::JoinHandle<()>> {
        let mut writer = self.writer.lock().ok()?.take()?;
        let subscribers = self.subscribers.clone();
        let old = self.store.clone();
        let stream = watcher::watcher(self.api.clone(), self.config.clone()).default_backoff();
        Some(tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut initial: Vec<Arc<K>> = Vec::new();
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        debug!(error = %e, kind = %K::kind(&()), "watch failed; retrying");
                        continue;
                    }
                };
                let touched: Vec<Arc<K>> = match &ev {
                    Event::Apply(o) | Event::Delete(o) => vec![Arc::new(o.clone())],
                    Event::Init => {
                        initial.clear();
                        Vec::new()
                    }
                    Event::InitApply(o) => {
                        initial.push(Arc::new(o.clone()));
                        Vec::new()
                    }
                    Event::InitDone => {
                        // What a re-list no longer holds was deleted while the watch was down.
                        let seen: HashSet<ObjectRef<K>> = initial
                            .iter()
                            .map(|o| ObjectRef::from_obj(o.as_ref()))
                            .collect();
                        let mut all = std::mem::take(&mut initial);
                        all.extend(
                            old.state()
                                .into_iter()
                                .filter(|o| !seen.contains(&ObjectRef::from_obj(o.as_ref()))),
                        );
                        all
                    }
                };
                writer.apply_watcher_event(&ev);
                if touched.is_empty() {
                    continue;
                }
                if let Ok(mut subs) = subscribers.lock() {
                    subs.retain(|tx| touched.iter().all(|o| tx.unbounded_send(o.clone()).is_ok()));
                }
            }
        }))
    }
}
