//! openraft log storage on the segmented WAL, with group commit.
//!
//! `append` buffers records and returns at once; a flusher thread makes everything buffered
//! durable with one `fdatasync` and then completes the waiting appends in submission order.
//! Truncate, purge and vote are rare and synced before they return. The vote lives in its own
//! small file, replaced atomically.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, RaftLogReader, StorageIOError};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::wal::record::{self, Decoded};
use crate::wal::segment::{self, check_frame, encode_frame};
use crate::wal::{PendingSync, Wal, WalError, WalOptions};

/// Name of the vote file inside the log directory.
const VOTE_FILE: &str = "vote";
const VOTE_TMP: &str = "vote.tmp";

/// Completion of one append: told whether its records are durable.
type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

/// The Raft log store: a WAL on disk plus the live entries in memory.
pub struct LogStore {
    shared: Arc<Shared>,
    dir: PathBuf,
    vote: Option<Vote>,
    committed: Option<LogId>,
    flusher: Option<JoinHandle<()>>,
}

/// A cloneable reader of the live entries, for openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    log: Arc<RwLock<MemLog>>,
}

/// State shared with the flusher thread.
struct Shared {
    io: Mutex<Io>,
    /// Signalled when appends are waiting or on shutdown.
    wake: Condvar,
    log: Arc<RwLock<MemLog>>,
    /// Held by tests to hold the flusher back while appends pile up.
    #[cfg(test)]
    gate: Mutex<()>,
}

/// Everything that must change in WAL order, behind one lock.
struct Io {
    wal: Wal,
    /// Appends written to the WAL buffer and waiting for the next sync, oldest first.
    pending: Vec<Done>,
    /// The latest purge and committed records, copied into each new segment so that deleting
    /// old segments never loses them.
    purge_seed: Option<Vec<u8>>,
    committed_seed: Option<Vec<u8>>,
    shutdown: bool,
}

impl Io {
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.purge_seed.iter().chain(self.committed_seed.iter()).cloned().collect()
    }
}

/// The live log in memory.
#[derive(Debug, Default)]
struct MemLog {
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
}

impl MemLog {
    /// Inserts an entry; it replaces any entry at its index and everything after it, so the log
    /// never holds a stale suffix.
    fn insert(&mut self, entry: Entry) {
        let index = entry.log_id.index;
        if self.entries.last_key_value().is_some_and(|(&last, _)| last >= index) {
            self.entries.split_off(&index);
        }
        self.entries.insert(index, entry);
    }

    fn truncate(&mut self, from_index: u64) {
        self.entries.split_off(&from_index);
    }

    fn purge(&mut self, upto: LogId) {
        self.entries = match upto.index.checked_add(1) {
            Some(first_kept) => self.entries.split_off(&first_kept),
            None => BTreeMap::new(),
        };
        if self.last_purged.is_none_or(|p| p.index <= upto.index) {
            self.last_purged = Some(upto);
        }
    }

    fn last_log_id(&self) -> Option<LogId> {
        self.entries.last_key_value().map(|(_, e)| e.log_id).or(self.last_purged)
    }

    /// Rejects appends that would leave a hole or rewrite purged history.
    fn check_append(&self, entries: &[Entry]) -> Result<(), String> {
        let mut next = self.last_log_id().map(|l| l.index + 1);
        for e in entries {
            let index = e.log_id.index;
            if let Some(p) = self.last_purged.filter(|p| index <= p.index) {
                return Err(format!("append of entry {index} at or below purged entry {}", p.index));
            }
            if let Some(n) = next.filter(|&n| index > n) {
                return Err(format!("append of entry {index} would leave a hole after entry {}", n - 1));
            }
            next = Some(index + 1);
        }
        Ok(())
    }

    fn range(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => match s.checked_add(1) {
                Some(s) => s,
                None => return Vec::new(),
            },
            Bound::Unbounded => 0,
        };
        let end = range.end_bound().cloned();
        // BTreeMap::range panics on inverted ranges; openraft may ask for empty ones.
        let empty = match end {
            Bound::Included(e) => e < start,
            Bound::Excluded(e) => e <= start,
            Bound::Unbounded => false,
        };
        if empty {
            return Vec::new();
        }
        self.entries.range((Bound::Included(start), end)).map(|(_, e)| e.clone()).collect()
    }
}

fn write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(AnyError::error(e.to_string())).into()
}

fn vote_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_vote(AnyError::error(e.to_string())).into()
}

/// Runs blocking disk work off the async executor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f).await.map_err(write_err)?
}

impl LogStore {
    /// Opens the log in `dir` with default options, replaying the WAL.
    pub fn open(dir: impl AsRef<Path>) -> Result<LogStore, WalError> {
        Self::open_with_options(dir, WalOptions::default())
    }

    /// Opens the log in `dir`, replaying the WAL; fails on corruption rather than guessing.
    pub fn open_with_options(dir: impl AsRef<Path>, options: WalOptions) -> Result<LogStore, WalError> {
        let dir = dir.as_ref().to_path_buf();
        let mut log = MemLog::default();
        let mut committed = None;
        let mut purge_seed = None;
        let mut committed_seed = None;
        let wal = Wal::open_with(&dir, options, |bytes| {
            match record::decode(bytes).map_err(|e| e.to_string())? {
                Decoded::Entry(e) => {
                    let index = e.log_id.index;
                    log.insert(e);
                    return Ok(Some(index));
                }
                Decoded::Truncate { from_index } => log.truncate(from_index),
                Decoded::Purge(id) => {
                    log.purge(id);
                    purge_seed = Some(bytes.to_vec());
                }
                Decoded::Committed(id) => {
                    committed = id;
                    committed_seed = Some(bytes.to_vec());
                }
            }
            Ok(None)
        })?;
        let vote = read_vote_file(&dir)?;
        tracing::info!(
            dir = %dir.display(),
            entries = log.entries.len(),
            last_purged = ?log.last_purged,
            last = ?log.last_log_id(),
            ?committed,
            ?vote,
            "opened raft log"
        );
        let shared = Arc::new(Shared {
            io: Mutex::new(Io { wal, pending: Vec::new(), purge_seed, committed_seed, shutdown: false }),
            wake: Condvar::new(),
            log: Arc::new(RwLock::new(log)),
            #[cfg(test)]
            gate: Mutex::new(()),
        });
        let worker = Arc::clone(&shared);
        let flusher = std::thread::Builder::new()
            .name("keel-wal-sync".into())
            .spawn(move || run_flusher(&worker))
            .map_err(WalError::io(&dir))?;
        Ok(LogStore { shared, dir, vote, committed, flusher: Some(flusher) })
    }

    /// Number of `fdatasync` calls on the WAL so far (for metrics and tests).
    pub fn sync_count(&self) -> u64 {
        self.shared.io.lock().wal.sync_count()
    }

    /// Writes entries to the WAL buffer and makes them readable; `done` runs after they are
    /// durable (or with the error that stopped the log).
    fn append_with(&mut self, entries: Vec<Entry>, done: Done) -> Result<(), StorageError> {
        // Encode before taking the lock so the flusher is held up as little as possible.
        let records: Vec<(Vec<u8>, u64)> =
            entries.iter().map(|e| (record::encode_entry(e), e.log_id.index)).collect();
        let mut io = self.shared.io.lock();
        self.shared.log.read().check_append(&entries).map_err(write_err)?;
        for (bytes, index) in &records {
            io.wal.write_indexed(bytes, Some(*index)).map_err(write_err)?;
        }
        let mut log = self.shared.log.write();
        for e in entries {
            log.insert(e);
        }
        drop(log);
        io.pending.push(done);
        drop(io);
        self.shared.wake.notify_one();
        Ok(())
    }
}

impl Drop for LogStore {
    fn drop(&mut self) {
        self.shared.io.lock().shutdown = true;
        self.shared.wake.notify_all();
        // Joining lets the flusher finish pending appends, so a reopened store never races it.
        if let Some(handle) = self.flusher.take() {
            if handle.join().is_err() {
                tracing::error!("wal flusher thread panicked");
            }
        }
    }
}

/// The flusher: one `fdatasync` for all appends that arrived since the previous one.
fn run_flusher(shared: &Shared) {
    let mut io = shared.io.lock();
    loop {
        while io.pending.is_empty() && !io.shutdown {
            shared.wake.wait(&mut io);
        }
        if io.pending.is_empty() {
            // Shutdown: make the unsynced committed records durable too.
            if let Err(e) = io.wal.sync() {
                tracing::warn!(error = %e, "final wal sync at shutdown failed");
            }
            return;
        }
        #[cfg(test)]
        MutexGuard::unlocked(&mut io, || drop(shared.gate.lock()));
        let batch = std::mem::take(&mut io.pending);
        let pending = io.wal.begin_sync();
        // The disk works without the lock, so new appends gather for the next sync meanwhile.
        let res = MutexGuard::unlocked(&mut io, || pending.and_then(PendingSync::wait));
        if res.is_ok() {
            let seeds = io.seeds();
            if let Err(e) = io.wal.rotate_if_full(&seeds) {
                // The log is stopped now; later appends fail. This batch is durable, though.
                tracing::error!(error = %e, "wal segment rotation failed");
            }
        }
        MutexGuard::unlocked(&mut io, || complete(batch, res));
    }
}

/// Reports one sync's outcome to its appends, in submission order.
fn complete(batch: Vec<Done>, res: Result<(), WalError>) {
    match res {
        Ok(()) => batch.into_iter().for_each(|done| done(Ok(()))),
        Err(e) => {
            tracing::error!(error = %e, appends = batch.len(), "wal sync failed; the raft log is stopped");
            let msg = e.to_string();
            batch.into_iter().for_each(|done| done(Err(io::Error::other(msg.clone()))));
        }
    }
}

fn read_vote_file(dir: &Path) -> Result<Option<Vote>, WalError> {
    let tmp = dir.join(VOTE_TMP);
    if tmp.exists() {
        // An interrupted save: the rename never happened, so the old vote file is current.
        std::fs::remove_file(&tmp).map_err(WalError::io(&tmp))?;
    }
    let path = dir.join(VOTE_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WalError::Io { path, source: e }),
    };
    let corrupt = |reason: String| WalError::Corrupt { segment: path.clone(), offset: 0, reason };
    match check_frame(&data, 0) {
        Ok(len) if segment::FRAME_HEADER + len == data.len() => {
            let vote = record::decode_vote(&data[segment::FRAME_HEADER..]).map_err(|e| corrupt(e.to_string()))?;
            Ok(Some(vote))
        }
        Ok(_) => Err(corrupt("trailing bytes after the vote record".into())),
        Err(reason) => Err(corrupt(reason.into())),
    }
}

/// Replaces the vote file atomically and durably: write a temp file, fsync, rename, fsync dir.
fn write_vote_file(dir: &Path, vote: &Vote) -> Result<(), WalError> {
    let mut bytes = Vec::new();
    encode_frame(&mut bytes, &record::encode_vote(vote));
    let tmp = dir.join(VOTE_TMP);
    let path = dir.join(VOTE_FILE);
    let file = std::fs::File::create(&tmp).map_err(WalError::io(&tmp))?;
    io::Write::write_all(&mut &file, &bytes).map_err(WalError::io(&tmp))?;
    file.sync_all().map_err(WalError::io(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(WalError::io(&path))?;
    segment::sync_dir(dir)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.log.read().range(range))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.shared.log.read().range(range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let log = self.shared.log.read();
        Ok(LogState { last_purged_log_id: log.last_purged, last_log_id: log.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader { log: Arc::clone(&self.shared.log) }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let shared = Arc::clone(&self.shared);
        let dir = self.dir.clone();
        let v = *vote;
        blocking(move || {
            // Log writes submitted before this vote must be durable before it is.
            shared.io.lock().wal.sync().map_err(vote_err)?;
            write_vote_file(&dir, &v).map_err(vote_err)
        })
        .await?;
        self.vote = Some(v);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // No sync of its own: it becomes durable with the next append batch (or at shutdown).
        let bytes = record::encode_committed(committed.as_ref());
        let mut io = self.shared.io.lock();
        io.wal.write(&bytes).map_err(write_err)?;
        io.committed_seed = Some(bytes);
        self.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.append_with(entries, Box::new(move |res| callback.log_io_completed(res)))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let mut io = shared.io.lock();
            io.wal.write(&record::encode_truncate(log_id.index)).map_err(write_err)?;
            io.wal.sync().map_err(write_err)?;
            shared.log.write().truncate(log_id.index);
            let seeds = io.seeds();
            io.wal.rotate_if_full(&seeds).map_err(write_err)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let mut io = shared.io.lock();
            let bytes = record::encode_purge(&log_id);
            io.wal.write(&bytes).map_err(write_err)?;
            io.purge_seed = Some(bytes);
            io.wal.sync().map_err(write_err)?;
            shared.log.write().purge(log_id);
            let seeds = io.seeds();
            io.wal.rotate_if_full(&seeds).map_err(write_err)?;
            // Safe now: the purge record is durable in the active segment and the latest
            // committed record is there too (written there, or seeded at rotation).
            let upto = log_id.index;
            if let Err(e) = io.wal.remove_segments(|s| s.max_index.is_some_and(|m| m > upto)) {
                // Only space is at stake; the next purge retries.
                tracing::warn!(error = %e, "could not remove purged wal segments");
            }
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests;
