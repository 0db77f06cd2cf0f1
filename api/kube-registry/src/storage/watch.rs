//! Watching a key range of the store from a revision: the one way the Kubernetes API sees changes.
//!
//! A [`StoreWatch`] wraps one watcher of the member's watch hub. It yields [`WatchBatch`]es: the events of
//! one or more revisions, a progress mark (the store reached a revision with nothing in range), or the end
//! of the watch, with the compaction revision when history the watch needed is gone.

use bytes::Bytes;
use keel_store::pb::etcdserverpb::WatchCreateRequest;
use keel_store::pb::mvccpb::Event;
use keel_store::watch::{WatchReceiver, WatchStream};

use super::Storage;
use crate::status::ApiError;

/// What a watch yields next.
#[derive(Debug)]
pub enum WatchBatch {
    /// Events in revision order.
    Events(Vec<Event>),
    /// Nothing in range changed up to this revision (answer to [`StoreWatch::request_progress`]).
    Progress(i64),
    /// The history from the start revision is compacted up to this revision; the watch ended.
    Compacted(i64),
    /// The watch ended (the member is stopping, or the stream closed).
    Ended,
}

/// One watch of a key range (see the module docs). Dropping it cancels the watcher.
#[derive(Debug)]
pub struct StoreWatch {
    stream: WatchStream,
    events: WatchReceiver,
}

impl Storage {
    /// Watches `[key, range_end)` (`range_end` empty: the one key) from `start_revision` on, with each event's
    /// previous value when `prev_kv`. A start revision that is already compacted shows as the first
    /// [`StoreWatch::next`] answer, [`WatchBatch::Compacted`].
    pub async fn watch(
        &self,
        key: &[u8],
        range_end: &[u8],
        start_revision: i64,
        prev_kv: bool,
    ) -> Result<StoreWatch, ApiError> {
        let (stream, events) = self.node.store().hub().open_stream();
        stream
            .create(WatchCreateRequest {
                key: Bytes::copy_from_slice(key),
                range_end: Bytes::copy_from_slice(range_end),
                start_revision,
                prev_kv,
                ..Default::default()
            })
            .await
            .map_err(|_| ApiError::Unavailable("the member is stopping".into()))?;
        Ok(StoreWatch { stream, events })
    }
}

impl StoreWatch {
    /// The next batch, waiting for one.
    pub async fn next(&mut self) -> WatchBatch {
        loop {
            let Some(msg) = self.events.recv().await else {
                return WatchBatch::Ended;
            };
            let resp = msg.response;
            if resp.canceled {
                return if resp.compact_revision > 0 {
                    WatchBatch::Compacted(resp.compact_revision)
                } else {
                    WatchBatch::Ended
                };
            }
            if resp.created {
                continue;
            }
            if resp.events.is_empty() {
                if msg.revision > 0 {
                    return WatchBatch::Progress(msg.revision);
                }
                continue;
            }
            return WatchBatch::Events(resp.events);
        }
    }

    /// Asks for a [`WatchBatch::Progress`] once the watch has caught up.
    pub async fn request_progress(&self) -> Result<(), ApiError> {
        self.stream
            .request_progress()
            .await
            .map_err(|_| ApiError::Unavailable("the member is stopping".into()))
    }
}
