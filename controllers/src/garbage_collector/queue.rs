//! The collector's work queue: each item at most once in the queue, failed items again after the
//! per-item exponential back-off.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::warn;

use super::graph::Work;
use crate::backoff::Backoff;
use crate::error::Error;

/// The queue's sending side.
pub struct Queue {
    tx: mpsc::UnboundedSender<Work>,
    pending: Mutex<HashSet<Work>>,
    backoff: Backoff,
}

impl Queue {
    /// A queue and its receiving side (for [`run`]).
    pub fn new() -> (Arc<Queue>, mpsc::UnboundedReceiver<Work>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let q = Queue {
            tx,
            pending: Mutex::new(HashSet::new()),
            backoff: Backoff::default(),
        };
        (Arc::new(q), rx)
    }

    /// Queues `w` unless it is queued already.
    pub fn add(&self, w: Work) {
        let fresh = self
            .pending
            .lock()
            .map(|mut p| p.insert(w.clone()))
            .unwrap_or(true);
        if fresh {
            let _ = self.tx.send(w);
        }
    }

    fn taken(&self, w: &Work) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(w);
        }
    }
}

/// What a shared state must give [`run`].
pub trait HasQueue {
    /// The queue.
    fn queue(&self) -> &Arc<Queue>;
}

impl HasQueue for super::Gc {
    fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }
}

/// Processes the queue with `workers` at once until the queue closes.
pub async fn run<S, F, Fut>(
    rx: mpsc::UnboundedReceiver<Work>,
    workers: usize,
    state: Arc<S>,
    process: F,
) where
    S: HasQueue + Send + Sync + 'static,
    F: Fn(Arc<S>, Work) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let items =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|w| (w, rx)) });
    items
        .for_each_concurrent(workers, |w| {
            let state = state.clone();
            let queue = state.queue().clone();
            queue.taken(&w);
            let fut = process(state, w.clone());
            async move {
                let key = format!("{w:?}");
                match fut.await {
                    Ok(()) => queue.backoff.succeeded(&key),
                    Err(e) => {
                        let wait = queue.backoff.failed(&key);
                        warn!(item = %key, error = %e, retry_in = ?wait, "garbage collector: failed");
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            queue.add(w);
                        });
                    }
                }
            }
        })
        .await;
}
