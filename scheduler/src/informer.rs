//! The scheduler's two watches (every Pod, every Node), each turned into a stream of changes on the
//! scheduler's one input channel. kube-runtime's watcher lists, watches, re-lists and backs off; a
//! completed (re-)list arrives whole, so the scheduler can drop what it no longer holds.

use std::fmt::Debug;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::debug;

/// One change of a watched kind.
#[derive(Debug)]
pub enum Change<K> {
    /// Created or changed.
    Applied(K),
    /// Deleted (its last state).
    Deleted(K),
    /// A complete (re-)list: everything that exists now.
    Listed(Vec<K>),
}

/// Starts watching every `K` through `api`, sending each change as `wrap(change)` to `tx` until the
/// channel closes.
pub fn watch<K, I>(api: Api<K>, tx: UnboundedSender<I>, wrap: fn(Change<K>) -> I) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + serde::de::DeserializeOwned + Send + 'static,
    I: Send + 'static,
{
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut listing: Vec<K> = Vec::new();
        while let Some(ev) = stream.next().await {
            let change = match ev {
                Ok(Event::Apply(o)) => Change::Applied(o),
                Ok(Event::Delete(o)) => Change::Deleted(o),
                Ok(Event::Init) => {
                    listing.clear();
                    continue;
                }
                Ok(Event::InitApply(o)) => {
                    listing.push(o);
                    continue;
                }
                Ok(Event::InitDone) => Change::Listed(std::mem::take(&mut listing)),
                Err(e) => {
                    debug!(error = %e, kind = %K::kind(&()), "scheduler watch failed; retrying");
                    continue;
                }
            };
            if tx.send(wrap(change)).is_err() {
                return;
            }
        }
    })
}
