//! Duties of the member that leads: passes that must run on exactly one member (namespace lifecycle, CRD
//! status, the `kubernetes` Service, compaction) run while this member is the Raft leader.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tracing::warn;

use crate::status::ApiError;
use crate::storage::Storage;

/// Runs `pass` every `period` while this member leads (and at once when it becomes leader), until `stop`
/// fires. A failed pass is logged and retried on the next tick.
pub(crate) async fn while_leading<F, Fut>(
    storage: &Storage,
    what: &'static str,
    period: Duration,
    stop: watch::Receiver<bool>,
    pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), ApiError>>,
{
    while_leading_woken(storage, what, period, stop, &Notify::new(), pass).await
}

/// [`while_leading`], with a pass also as soon as `wake` is notified (a change the duty answers).
pub(crate) async fn while_leading_woken<F, Fut>(
    storage: &Storage,
    what: &'static str,
    period: Duration,
    mut stop: watch::Receiver<bool>,
    wake: &Notify,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), ApiError>>,
{
    let mut leading = storage.leadership();
    loop {
        let lead = leading.borrow_and_update().is_leader();
        if lead {
            if let Err(e) = pass().await {
                warn!(error = %e, duty = what, "leader pass failed; will retry");
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            changed = leading.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(period), if lead => {}
            _ = wake.notified(), if lead => {}
        }
    }
}
