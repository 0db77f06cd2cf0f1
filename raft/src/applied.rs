//! The index this member's state machine has applied, for the requests that wait for it (a
//! forwarded write's answer, a ReadIndex read). A watch of one number: a waiter wakes only when
//! the index moves and compares one integer, where waiting on openraft's metrics would clone the
//! whole metrics struct for every waiter at every change of any field.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::error::ProposeError;

/// This member's applied index, shared by the state machine (which moves it) and the waiters.
#[derive(Clone, Debug)]
pub(crate) struct AppliedIndex(Arc<watch::Sender<u64>>);

impl AppliedIndex {
    /// Starts at what the store has applied already.
    pub(crate) fn new(applied: u64) -> AppliedIndex {
        AppliedIndex(Arc::new(watch::channel(applied).0))
    }

    /// Records that everything up to `index` is applied (never moves back).
    pub(crate) fn advance(&self, index: u64) {
        self.0.send_if_modified(|v| {
            let moved = index > *v;
            if moved {
                *v = index;
            }
            moved
        });
    }

    /// The applied index now.
    pub(crate) fn get(&self) -> u64 {
        *self.0.borrow()
    }

    /// Waits up to `timeout` until `index` is applied here.
    pub(crate) async fn wait_for(&self, index: u64, timeout: Duration) -> Result<(), ProposeError> {
        if self.get() >= index {
            return Ok(());
        }
        let mut rx = self.0.subscribe();
        let reached = tokio::time::timeout(timeout, async {
            rx.wait_for(|&v| v >= index).await.map(|_| ())
        })
        .await;
        match reached {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(ProposeError::Stopped),
            Err(_) => Err(ProposeError::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wake_when_their_index_is_applied() {
        let applied = AppliedIndex::new(3);
        assert!(applied.wait_for(3, Duration::ZERO).await.is_ok());
        let waiter = {
            let applied = applied.clone();
            tokio::spawn(async move { applied.wait_for(7, Duration::from_secs(30)).await })
        };
        applied.advance(5);
        applied.advance(4);
        assert_eq!(applied.get(), 5);
        assert!(!waiter.is_finished());
        applied.advance(7);
        assert!(matches!(waiter.await, Ok(Ok(()))));
        assert!(matches!(
            applied.wait_for(9, Duration::from_millis(1)).await,
            Err(ProposeError::Timeout)
        ));
    }
}
