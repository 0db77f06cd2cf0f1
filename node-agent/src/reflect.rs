//! One reflector per kind the agent's resolver and Ingress controller read: a cache kept by a watch,
//! with a wake-up on every change so their tables are rebuilt from the caches.

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tokio::sync::Notify;
use tracing::debug;

/// Runs a reflector for `K`, waking `wake` on every change.
pub(crate) fn reflect<K>(
    api: Api<K>,
    wake: Arc<Notify>,
) -> (Store<K>, impl std::future::Future<Output = ()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher::watcher(api, watcher::Config::default())
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
