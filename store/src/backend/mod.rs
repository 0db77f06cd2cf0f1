//! The narrow storage interface the store needs: atomic batches, point gets, ordered scans.
//!
//! The backend is a materialised view: durability comes from the Raft WAL and snapshots, so
//! a backend that lost its tail is rebuilt by replaying the log. Keeping the trait small lets
//! the engine be swapped when measurements say so.

pub mod fjall_backend;

use bytes::Bytes;

use crate::error::StoreError;

/// The key spaces of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// Revision key (etcd's 17/18-byte encoding) → encoded `KeyValue`.
    Kv,
    /// Named bookkeeping values (applied index, compaction marks).
    Meta,
    /// Lease ID (8 bytes big-endian) → encoded lease record.
    Lease,
}

/// One write in a batch.
#[derive(Debug, Clone)]
pub enum BatchOp {
    Put(Space, Vec<u8>, Vec<u8>),
    Delete(Space, Vec<u8>),
}

/// Writes applied atomically, in order.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub ops: Vec<BatchOp>,
}

impl WriteBatch {
    /// Queues a put.
    pub fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(BatchOp::Put(space, key, value));
    }
    /// Queues a delete.
    pub fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.ops.push(BatchOp::Delete(space, key));
    }
    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// A key/value pair read from the backend.
pub type Pair = (Vec<u8>, Vec<u8>);

/// A point-in-time view of the backend: writes after it was taken are invisible to it, and
/// nothing it sees is dropped while it lives. For long reads (a snapshot export) that must not
/// hold off writers.
pub trait BackendView: Send {
    /// Every pair of one space, in key order.
    fn scan_space<'a>(
        &'a self,
        space: Space,
    ) -> Box<dyn Iterator<Item = Result<Pair, StoreError>> + 'a>;
}

/// The storage engine behind the store.
pub trait Backend: Send + Sync + 'static {
    /// Applies every op of the batch atomically.
    fn write(&self, batch: WriteBatch) -> Result<(), StoreError>;
    /// Reads one value, sharing the engine's buffer as [`Backend::scan_shared`] does.
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>, StoreError>;
    /// Scans `[start, end)` in key order (`end = None` = to the end of the space).
    fn scan<'a>(
        &'a self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = Result<Pair, StoreError>> + 'a>;
    /// Like [`Backend::scan`], but keys and values share the engine's buffers instead of being
    /// copied: for reads answered and dropped at once, never for anything kept (a kept slice
    /// would pin a whole block of the engine's cache).
    fn scan_shared<'a>(
        &'a self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = Result<(Bytes, Bytes), StoreError>> + 'a>;
    /// Makes every write so far durable (fsync); the store's own durability never waits on it
    /// (see module docs), but an offline import does.
    fn flush(&self) -> Result<(), StoreError>;
    /// The size of the data the backend holds, what `--quota-backend-bytes` limits and what
    /// Status reports as `dbSize`: for fjall, the bytes of its sorted tables on disk plus its
    /// memtables (written, not yet flushed to a table). fjall's journal is not counted: it is
    /// the engine's own write-ahead log (at most about 128 MiB: a 64 MiB active file, rotated
    /// sealed files flushed away at 64 MiB), as etcd does not count its WAL in the quota.
    fn size_on_disk(&self) -> u64;
    /// Gives back the space of deleted entries now rather than whenever the engine gets to it
    /// (etcd's Defragment): for fjall, flush the memtable (so old journal files can go) and
    /// compact every table into one run. Blocks until done.
    fn reclaim(&self) -> Result<(), StoreError>;
    /// Removes every entry (used before loading a snapshot).
    fn clear(&self) -> Result<(), StoreError>;
    /// A view of everything written so far (the caller keeps writes from being half done).
    fn view(&self) -> Box<dyn BackendView>;
}
