//! [`Backend`] on sled 0.34: one tree, each space a one-byte key prefix, so a batch over
//! several spaces is one atomic `apply_batch`.

use std::path::Path;

use super::{Backend, BatchOp, Pair, Space, WriteBatch};
use crate::error::StoreError;

/// sled-backed storage.
pub struct SledBackend {
    db: sled::Db,
    tree: sled::Tree,
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

impl SledBackend {
    /// Opens (or creates) the sled database in `dir`.
    ///
    /// sled releases its file lock from a background thread after the last handle is dropped, so a database
    /// closed a moment ago in this process (a restore, then a start) can still be locked: such a lock is
    /// waited for, briefly. A lock held by another live process stays an error.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let db = loop {
            let opened = sled::Config::new()
                .path(dir)
                // The cache is counted in on-disk bytes; keep it modest (sled issue #1309).
                .cache_capacity(64 * 1024 * 1024)
                .open();
            match opened {
                // sled reports a held lock as an `Other` I/O error with this text.
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        let tree = db.open_tree("keel")?;
        Ok(SledBackend { db, tree })
    }
}

impl Backend for SledBackend {
    fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        let mut b = sled::Batch::default();
        for op in batch.ops {
            match op {
                BatchOp::Put(s, k, v) => b.insert(prefixed(s, &k), v),
                BatchOp::Delete(s, k) => b.remove(prefixed(s, &k)),
            }
        }
        self.tree.apply_batch(b)?;
        Ok(())
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tree.get(prefixed(space, key))?.map(|v| v.to_vec()))
    }

    fn scan<'a>(
        &'a self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Box<dyn Iterator<Item = Result<Pair, StoreError>> + 'a> {
        let lo = prefixed(space, start);
        let hi = match end {
            Some(e) => prefixed(space, e),
            None => vec![prefix(space) + 1],
        };
        Box::new(self.tree.range(lo..hi).map(|r| {
            r.map(|(k, v)| (k[1..].to_vec(), v.to_vec()))
                .map_err(StoreError::from)
        }))
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    fn clear(&self) -> Result<(), StoreError> {
        self.tree.clear()?;
        Ok(())
    }
}
