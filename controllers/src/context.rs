//! What every controller shares: the client, the shared informers, the leader's identity, Events.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::informers::Shared;

type Starter = Box<dyn Fn() -> Option<JoinHandle<()>> + Send + Sync>;

/// The shared informers, one per resource type, made on first use and started together.
#[derive(Default)]
pub struct Informers {
    by_type: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    starters: Mutex<Vec<Starter>>,
}

impl Informers {
    /// The shared watch of every `K` in the cluster, made on first use with `config`.
    pub fn get_with<K>(&self, client: &Client, config: watcher::Config) -> Arc<Shared<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let Ok(mut map) = self.by_type.lock() else {
            // A poisoned map means a panic elsewhere; a private watch still works.
            return Arc::new(Shared::new(Api::all(client.clone()), config));
        };
        if let Some(found) = map.get(&TypeId::of::<K>()) {
            if let Ok(shared) = found.clone().downcast::<Shared<K>>() {
                return shared;
            }
        }
        let shared = Arc::new(Shared::<K>::new(Api::all(client.clone()), config));
        map.insert(TypeId::of::<K>(), shared.clone());
        let started = shared.clone();
        if let Ok(mut starters) = self.starters.lock() {
            starters.push(Box::new(move || started.start()));
        }
        shared
    }

    /// Starts every informer made so far; returns their tasks.
    pub fn start(&self) -> Vec<JoinHandle<()>> {
        match self.starters.lock() {
            Ok(starters) => starters.iter().filter_map(|s| s()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The context every controller's reconcile receives.
pub struct Context {
    /// The client (in process: the local API server under `system:kube-controller-manager`).
    pub client: Client,
    /// Who leads: this member's name (the Lease's holderIdentity, the Events' reportingInstance).
    pub holder: String,
    /// The cluster CA certificate (PEM), when known.
    pub root_ca: Option<String>,
    /// How long a node may stay silent before the node-lifecycle controller calls it Unknown.
    pub node_monitor_grace_period: Duration,
    /// How node-ipam cuts the cluster CIDR into node ranges; `None` when it allocates none.
    pub node_cidrs: Option<crate::nodeipam::Allocator>,
    /// The controllers' metric handles.
    pub metrics: crate::metrics::Metrics,
    informers: Informers,
    recorders: Mutex<HashMap<String, Recorder>>,
}

impl Context {
    /// A context for controllers talking through `client`.
    pub fn new(client: Client, holder: impl Into<String>, root_ca: Option<String>) -> Arc<Context> {
        Arc::new(Context {
            client,
            holder: holder.into(),
            root_ca,
            node_monitor_grace_period: crate::manager::DEFAULT_NODE_MONITOR_GRACE_PERIOD,
            node_cidrs: Some(crate::nodeipam::Allocator::default()),
            metrics: crate::metrics::Metrics::default(),
            informers: Informers::default(),
            recorders: Mutex::default(),
        })
    }

    /// A context carrying the manager's `opts`.
    pub fn with_options(client: Client, opts: &crate::manager::Options) -> Arc<Context> {
        Arc::new(Context {
            client,
            holder: opts.holder.clone(),
            root_ca: opts.root_ca.clone(),
            node_monitor_grace_period: opts.node_monitor_grace_period,
            node_cidrs: opts.node_cidrs,
            metrics: opts.metrics.clone(),
            informers: Informers::default(),
            recorders: Mutex::default(),
        })
    }

    /// The shared informer of `K` (every object in the cluster).
    pub fn shared<K>(&self) -> Arc<Shared<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        self.informers
            .get_with(&self.client, watcher::Config::default())
    }

    /// The shared cache of `K`.
    pub fn store<K>(&self) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        self.shared::<K>().store()
    }

    /// Starts the informers every controller asked for.
    pub fn start_informers(&self) -> Vec<JoinHandle<()>> {
        self.informers.start()
    }

    /// A new Event recorder reporting as `controller` (e.g. `deployment-controller`) from this member. A
    /// recorder counts repeats of an Event in its series; kube-runtime groups Events by reason and object but
    /// not by message, so a controller keeps one recorder for Events whose repeats should count and takes a
    /// fresh one for Events that differ only in their message ("Created pod: …").
    pub fn recorder(&self, controller: &str) -> Recorder {
        Recorder::new(
            self.client.clone(),
            Reporter {
                controller: controller.to_string(),
                instance: Some(self.holder.clone()),
            },
        )
    }

    /// The one recorder of `controller` for as long as this context lives, so an Event repeated with the
    /// same reason, object and message counts up in its series instead of adding an Event each time.
    pub fn lasting_recorder(&self, controller: &str) -> Recorder {
        match self.recorders.lock() {
            Ok(mut m) => m
                .entry(controller.to_string())
                .or_insert_with(|| self.recorder(controller))
                .clone(),
            Err(_) => self.recorder(controller),
        }
    }

    /// Records an Event about `obj` as `controller`. With `lasting`, repeats count up in one Event's
    /// series ([`Context::lasting_recorder`]); without, each Event stands alone (for Events whose message
    /// names what they are about, which a series would merge). A failure is logged, not returned.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        controller: &str,
        obj: &K,
        kind: EventType,
        reason: &str,
        note: String,
        lasting: bool,
    ) {
        let ev = Event {
            type_: kind,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        let recorder = if lasting {
            self.lasting_recorder(controller)
        } else {
            self.recorder(controller)
        };
        if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, "event not recorded");
        }
    }

    /// A typed client for the namespaced kind `K` in `ns`.
    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    /// A typed client for every `K` (cluster-scoped kinds, or all namespaces).
    pub fn api_all<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = ()>,
    {
        Api::all(self.client.clone())
    }
}
