//! Events leave the pod workers through a queue: one task publishes them in order, each with a deadline,
//! so an API server that is slow or between leaders delays Events, never a pod's sync. A full queue
//! drops the newest Event (logged) rather than block.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::mpsc;
use tracing::debug;

/// Events waiting to be published, at most.
const QUEUE: usize = 1024;
/// How long one Event may take to publish.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// The pod workers' side of the queue.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<(ObjectReference, Event)>,
}

impl EventSink {
    /// Starts the publishing task on `recorder`; it ends when every sink is dropped.
    pub fn start(recorder: Recorder) -> EventSink {
        let (tx, mut rx) = mpsc::channel::<(ObjectReference, Event)>(QUEUE);
        tokio::spawn(async move {
            while let Some((obj, ev)) = rx.recv().await {
                match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&ev, &obj)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => debug!(error = %e, reason = %ev.reason, "event not recorded"),
                    Err(_) => debug!(reason = %ev.reason, "event not recorded: timed out"),
                }
            }
        });
        EventSink { tx }
    }

    /// Queues `ev` about `obj`.
    pub fn send(&self, obj: ObjectReference, ev: Event) {
        if let Err(e) = self.tx.try_send((obj, ev)) {
            debug!(error = %e, "event queue full; event dropped");
        }
    }
}
