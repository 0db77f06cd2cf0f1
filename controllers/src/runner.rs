//! Drives one kube-runtime `Controller`: reconcile, back-off on failure per object, bounded concurrency.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use crate::backoff::Backoff;
use crate::context::Context;
use crate::error::Error;

/// How many objects of one controller reconcile at once (upstream's `--concurrent-*-syncs` default 5).
pub const CONCURRENCY: u16 = 5;

fn key<K: Resource<DynamicType = ()>>(name: &str, obj: &K) -> String {
    format!(
        "{name}/{}/{}",
        obj.meta().namespace.as_deref().unwrap_or(""),
        obj.meta().name.as_deref().unwrap_or("")
    )
}

/// Runs `controller` with `reconcile` until dropped. A failed reconcile is retried after the per-object
/// exponential back-off; a successful one resets it and requeues as its `Action` says.
pub fn run<K, F, Fut>(
    name: &'static str,
    controller: Controller<K>,
    ctx: &Arc<Context>,
    reconcile: F,
) -> BoxFuture<'static, ()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let backoff = Arc::new(Backoff::default());
    let on_error = backoff.clone();
    let reconcile = Arc::new(reconcile);
    let metrics = ctx.metrics.clone();
    let ctx = ctx.clone();
    controller
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .run(
            move |obj: Arc<K>, ctx: Arc<Context>| {
                let reconcile = reconcile.clone();
                let backoff = backoff.clone();
                let running = ctx.metrics.started(name);
                async move {
                    let k = key(name, obj.as_ref());
                    let r = reconcile(obj, ctx.clone()).await;
                    drop(running);
                    if r.is_ok() {
                        backoff.succeeded(&k);
                        ctx.metrics.backoff_depth(name, backoff.len());
                    }
                    r
                }
            },
            move |obj: Arc<K>, err: &Error, _ctx: Arc<Context>| {
                let k = key(name, obj.as_ref());
                let wait = on_error.failed(&k);
                metrics.retried(name);
                metrics.backoff_depth(name, on_error.len());
                warn!(controller = name, object = %k, error = %err, retry_in = ?wait, "reconcile failed");
                Action::requeue(wait)
            },
            ctx,
        )
        .for_each(move |r| async move {
            if let Err(e) = r {
                debug!(controller = name, error = %e, "controller event");
            }
        })
        .boxed()
}
