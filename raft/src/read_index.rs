//! ReadIndex batching: linearizable reads that arrive while a ReadIndex round is under way
//! wait for the next round and share it, so one quorum check serves many reads (etcd's
//! linearizable read loop does the same).
//!
//! Sharing is safe because every caller in a round registered before the round started: the
//! index it returns was obtained after each of their requests arrived.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::error::ProposeError;

type Waiter = oneshot::Sender<Result<u64, ProposeError>>;

/// Queues ReadIndex requests and runs one round for everything queued.
pub(crate) struct ReadIndexBatcher {
    tx: mpsc::UnboundedSender<Waiter>,
}

impl ReadIndexBatcher {
    /// Starts the batching task; `fetch` runs one ReadIndex round and returns the read index.
    /// The task ends when the batcher is dropped.
    pub(crate) fn start<F, Fut>(fetch: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<u64, ProposeError>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Waiter>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut waiters = vec![first];
                while let Ok(w) = rx.try_recv() {
                    waiters.push(w);
                }
                let r = fetch().await;
                for w in waiters {
                    let _ = w.send(r.clone());
                }
            }
        });
        ReadIndexBatcher { tx }
    }

    /// A read index obtained after this call began.
    pub(crate) async fn read_index(&self) -> Result<u64, ProposeError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn concurrent_reads_share_rounds_and_every_round_starts_after_its_callers() {
        let rounds = Arc::new(AtomicU64::new(0));
        let r = rounds.clone();
        let b = Arc::new(ReadIndexBatcher::start(move || {
            let r = r.clone();
            async move {
                // The index is the round's number: a caller must get a round that began after it.
                let n = r.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok(n)
            }
        }));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let b = b.clone();
            let rounds = rounds.clone();
            tasks.push(tokio::spawn(async move {
                let before = rounds.load(Ordering::SeqCst);
                let idx = b.read_index().await;
                (before, idx)
            }));
        }
        for t in tasks {
            let (before, idx) = t.await.unwrap();
            assert!(idx.unwrap() > before);
        }
        assert!(rounds.load(Ordering::SeqCst) < 50, "reads were not batched");
    }

    #[tokio::test]
    async fn errors_reach_every_waiter() {
        let b = ReadIndexBatcher::start(|| async { Err(ProposeError::NoLeader) });
        assert_eq!(b.read_index().await, Err(ProposeError::NoLeader));
    }
}
