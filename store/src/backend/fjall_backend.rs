//! [`Backend`] on fjall 3 (an LSM tree): one keyspace, each [`Space`] a one-byte key prefix, so
//! a batch over several spaces is one atomic fjall write batch (one journal record, discarded
//! whole if torn).
//!
//! A batch costs one buffered journal append plus memtable inserts; flushes to sorted tables and
//! compaction run on fjall's worker threads, off the apply path. The journal is handed to the OS
//! after every batch but fsynced only by [`Backend::flush`]: the backend is a view (see the
//! module docs of [`super`]), and the Raft WAL already holds everything it could lose.
//!
//! One keyspace rather than one per space: a journal file is deleted only once every memtable
//! holding its writes has been flushed, and a small space (the applied index, rewritten by every
//! batch) would otherwise pin hundreds of MiB of journal behind a memtable that never fills.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use super::{Backend, BackendView, BatchOp, Pair, Space, WriteBatch};
use crate::error::StoreError;

/// Block cache. The key index lives in the store, so the cache only serves value reads.
const CACHE_BYTES: u64 = 32 << 20;
/// The memtable is flushed to a table at this size.
const MEMTABLE_BYTES: u64 = 16 << 20;
/// Journal on disk beyond which fjall flushes memtables early so old journal files can go.
const JOURNAL_BYTES: u64 = 64 << 20;

/// fjall-backed storage.
pub struct FjallBackend {
    db: Database,
    tree: Keyspace,
}

fn prefix(space: Space) -> u8 {
    match space {
        Space::Kv => b'k',
        Space::Meta => b'm',
        Space::Lease => b'l',
    }
}

fn prefixed(space: Space, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(key.len() + 1);
    v.push(prefix(space));
    v.extend_from_slice(key);
    v
}

impl FjallBackend {
    /// Opens (or creates) the database in `dir`.
    ///
    /// A lock left by a handle of this process that is still shutting down is waited for,
    /// briefly; a lock held by another live process stays an error.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let deadline = Instant::now() + Duration::from_secs(3);
        let db = loop {
            let opened = Database::builder(dir)
                .cache_size(CACHE_BYTES)
                .max_journaling_size(JOURNAL_BYTES)
                .open();
            match opened {
                Err(fjall::Error::Locked) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        let tree = db.keyspace("keel", || {
            KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
        })?;
        Ok(FjallBackend { db, tree })
    }
}

/// A fjall snapshot: a sequence number below which reads see everything and above which
/// nothing; compaction keeps the versions it needs until it is dropped.
struct FjallView {
    snapshot: fjall::Snapshot,
    tree: Keyspace,
}

impl BackendView for FjallView {
    fn scan_space<'a>(
        &'a self,
        space: Space,
    ) -> Box<dyn Iterator<Item = Result<Pair, StoreError>> + 'a> {
        let lo = vec![prefix(space)];
        let hi = vec![prefix(space) + 1];
        Box::new(self.snapshot.range(&self.tree, lo..hi).map(|g| {
            g.into_inner()
                .map(|(k, v)| (k.get(1..).unwrap_or_default().to_vec(), v.to_vec()))
                .map_err(StoreError::from)
        }))
    }
}

impl Backend for FjallBackend {
    fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        let mut b = self.db.batch();
        for op in batch.ops {
            match op {
                BatchOp::Put(s, k, v) => b.insert(&self.tree, prefixed(s, &k), v),
                BatchOp::Delete(s, k) => b.remove(&self.tree, prefixed(s, &k)),
            }
        }
        b.commit()?;
        Ok(())
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        Ok(self.tree.get(prefixed(space, key))?.map(Bytes::from))
    }

    fn scan<'a>(
        &'a self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = Result<Pair, StoreError>> + 'a> {
        Box::new(
            self.scan_shared(space, start, end)
                .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))),
        )
    }

    fn scan_shared<'a>(
        &'a self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = Result<(Bytes, Bytes), StoreError>> + 'a> {
        let lo = prefixed(space, start);
        let hi = match end {
            Some(e) => prefixed(space, e),
            None => vec![prefix(space) + 1],
        };
        Box::new(self.tree.range(lo..hi).map(|g| {
            g.into_inner()
                .map(|(k, v)| (Bytes::from(k).slice(1..), Bytes::from(v)))
                .map_err(StoreError::from)
        }))
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        // The sorted tables plus what the memtables hold until they become tables: both are
        // kept in memory by fjall, so this costs no system call. The journal is left out (see
        // the trait's docs).
        self.tree.disk_space() + self.db.write_buffer_size()
    }

    fn reclaim(&self) -> Result<(), StoreError> {
        // Both calls are public in fjall 3.1 but doc-hidden (its tests use them), so a fjall
        // upgrade must check them: the first seals the memtable and waits for its table (so
        // sealed journals it pinned can go); the second rewrites every table into one run,
        // leaving out what deletes and tombstones shadow.
        self.tree.rotate_memtable_and_wait()?;
        self.tree.major_compact()?;
        Ok(())
    }

    fn view(&self) -> Box<dyn BackendView> {
        Box::new(FjallView {
            snapshot: self.db.snapshot(),
            tree: self.tree.clone(),
        })
    }

    fn clear(&self) -> Result<(), StoreError> {
        self.tree.clear()?;
        Ok(())
    }
}
