//! The watch hub: streams of ordered change events to watchers, from history or live.
//!
//! The store publishes each applied revision's events to the hub after they are in the backend.
//! Watchers that start in the past catch up from [`History`] before joining the live set.

pub mod hub;
pub mod wire;

pub use hub::*;
pub use wire::{WireEvents, WireResponse};

use crate::error::StoreError;
use crate::pb::mvccpb::{Event, KeyValue};

/// Read access to the store's history, as the hub needs it.
pub trait History: Send + Sync + 'static {
    /// Latest revision whose events are in the backend.
    fn current_revision(&self) -> i64;
    /// Revision of the last compaction (0 when never compacted).
    fn compact_revision(&self) -> i64;
    /// Events with `from <= revision <= to`, in revision order, without `prev_kv`.
    /// Covers at most `max_revs` distinct main revisions; never splits one revision.
    fn events(&self, from: i64, to: i64, max_revs: usize) -> Result<Vec<Event>, StoreError>;
    /// The key's value as of revision `rev` (None if absent then or compacted away).
    fn kv_at(&self, key: &[u8], rev: i64) -> Result<Option<KeyValue>, StoreError>;
}
