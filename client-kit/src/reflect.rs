//! One reflector per watched kind: a cache kept by a watch (with kube's backoff), and a wake-up on
//! every change, so a component rebuilds its table from the caches after each burst (the agent's
//! resolver and Ingress controller, netprog).

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::Notify;
use tracing::debug;

/// A kind a reflector can keep (a typed, cluster- or namespace-scoped object).
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Runs a reflector for `K` over the objects `cfg` selects, waking `wake` on every change; the cache,
/// and the future that keeps it (it ends only if the watch stream does).
pub fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    wake: Arc<Notify>,
) -> (Store<K>, impl std::future::Future<Output = ()>)
where
    K: Watched,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher::watcher(api, cfg)
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let driver = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                debug!(error = %e, kind = std::any::type_name::<K>(), "watch error; retrying");
            }
            wake.notify_one();
        }
    };
    (reader, driver)
}

/// [`reflect`] over every object of `K` in the cluster (every namespace).
pub fn reflect_all<K>(
    client: &Client,
    wake: &Arc<Notify>,
) -> (Store<K>, impl std::future::Future<Output = ()>)
where
    K: Watched,
{
    reflect(
        Api::all(client.clone()),
        watcher::Config::default(),
        wake.clone(),
    )
}
