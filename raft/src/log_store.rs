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

use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig, Vote};
use crate::wal::record::{self, Decoded};
use crate::wal::segment::{self, check_frame, encode_frame};
use crate::wal::{PendingSync, RecordPos, Wal, WalError, WalOptions};

/// Name of the vote file inside the log directory.
const VOTE_FILE: &str = "vote";
const VOTE_TMP: &str = "vote.tmp";

/// Completion of one append: told whether its records are durable.
type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

/// The Raft log store: a WAL on disk plus the live entries in memory.
pub(crate) struct LogStore {
    shared: Arc<Shared>,
    dir: PathBuf,
    vote: Option<Vote>,
    committed: Option<LogId>,
    flusher: Option<JoinHandle<()>>,
}

/// A cloneable reader of the live entries, for openraft's replication tasks.
#[derive(Clone)]
pub(crate) struct LogReader {
    log: Arc<RwLock<MemLog>>,
}

/// State shared with the flusher thread.
struct Shared {
    io: Mutex<Io>,
    /// Signalled when appends are waiting or on shutdown.
    wake: Condvar,
    log: Arc<RwLock<MemLog>>,
    metrics: Arc<crate::metrics::RaftMetrics>,
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
    /// Index of the last entry record written (possibly still buffered).
    last_written: Option<u64>,
    shutdown: bool,
}

impl Io {
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.purge_seed
            .iter()
            .chain(self.committed_seed.iter())
            .cloned()
            .collect()
    }
}

/// Bytes of entries kept in memory; older committed entries are read back from the WAL.
///
/// Entries are appended, replicated and applied while they are young, so almost every read
/// finds them here; only a follower far behind (or a restart's replay) reads from disk. Without
/// a bound, everything since the last snapshot stayed in memory: hundreds of MiB when entries
/// are large batches (see docs/benchmarks.md).
const RESIDENT_BYTES: usize = 32 << 20;

/// One entry of the live log.
#[derive(Debug)]
struct Slot {
    log_id: LogId,
    /// `None` once evicted: read back from the WAL at `pos`.
    entry: Option<Entry>,
    pos: RecordPos,
}

/// The live log: recent entries in memory, older ones as positions in the WAL.
#[derive(Debug)]
struct MemLog {
    entries: BTreeMap<u64, Slot>,
    last_purged: Option<LogId>,
    /// The WAL directory, to read evicted entries back.
    dir: PathBuf,
    /// Bytes (as encoded) of the entries held in memory.
    resident: usize,
    /// Highest index whose current record has been handed to the OS, so it can be read back.
    readable: Option<u64>,
    /// Highest committed index: only committed entries are evicted, so apply reads memory.
    committed: Option<u64>,
    /// Every entry below this index is evicted (where the next eviction starts looking).
    evicted_below: u64,
    /// [`RESIDENT_BYTES`], smaller in tests.
    resident_limit: usize,
}

impl MemLog {
    fn new(dir: PathBuf) -> Self {
        MemLog {
            entries: BTreeMap::new(),
            last_purged: None,
            dir,
            resident: 0,
            readable: None,
            committed: None,
            evicted_below: 0,
            resident_limit: RESIDENT_BYTES,
        }
    }

    /// Forgets slots taken out of the map.
    fn forget(&mut self, gone: BTreeMap<u64, Slot>) {
        for slot in gone.values() {
            if slot.entry.is_some() {
                self.resident = self.resident.saturating_sub(slot.pos.frame_len as usize);
            }
        }
    }

    /// Inserts an entry written at `pos`; it replaces any entry at its index and everything
    /// after it, so the log never holds a stale suffix.
    fn insert(&mut self, entry: Entry, pos: RecordPos) {
        let index = entry.log_id.index;
        if self
            .entries
            .last_key_value()
            .is_some_and(|(&last, _)| last >= index)
        {
            self.truncate(index);
        }
        self.resident += pos.frame_len as usize;
        self.entries.insert(
            index,
            Slot {
                log_id: entry.log_id,
                entry: Some(entry),
                pos,
            },
        );
    }

    fn truncate(&mut self, from_index: u64) {
        let gone = self.entries.split_off(&from_index);
        self.forget(gone);
        // Records written again at these indexes are not in the OS yet.
        let below = from_index.checked_sub(1);
        self.readable = self.readable.min(below);
        self.evicted_below = self.evicted_below.min(from_index);
    }

    fn purge(&mut self, upto: LogId) {
        let kept = match upto.index.checked_add(1) {
            Some(first_kept) => self.entries.split_off(&first_kept),
            None => BTreeMap::new(),
        };
        let gone = std::mem::replace(&mut self.entries, kept);
        self.forget(gone);
        if self.last_purged.is_none_or(|p| p.index <= upto.index) {
            self.last_purged = Some(upto);
        }
    }

    /// Drops the oldest committed, readable entries from memory while more than the limit
    /// ([`RESIDENT_BYTES`]) is held.
    fn evict(&mut self) {
        if self.resident <= self.resident_limit {
            return;
        }
        let Some(bound) = self.committed.min(self.readable) else {
            return;
        };
        let mut resident = self.resident;
        let mut next = self.evicted_below;
        for (&index, slot) in self.entries.range_mut(self.evicted_below..) {
            if resident <= self.resident_limit || index > bound {
                break;
            }
            if slot.entry.take().is_some() {
                resident = resident.saturating_sub(slot.pos.frame_len as usize);
            }
            next = index + 1;
        }
        self.resident = resident;
        self.evicted_below = next;
    }

    fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .last_key_value()
            .map(|(_, s)| s.log_id)
            .or(self.last_purged)
    }

    /// Drops entries at or below the purge point (a snapshot already covers them, and keeping
    /// them would put a hole between them and the purge point).
    fn skip_purged(&self, entries: &mut Vec<Entry>) {
        if let Some(p) = self.last_purged {
            let before = entries.len();
            entries.retain(|e| e.log_id.index > p.index);
            if entries.len() < before {
                tracing::warn!(
                    purged = p.index,
                    skipped = before - entries.len(),
                    "ignoring appended entries that are already purged"
                );
            }
        }
    }

    /// Rejects appends that would leave a hole after the current last entry.
    fn check_append(&self, entries: &[Entry]) -> Result<(), String> {
        let mut next = self.last_log_id().map(|l| l.index + 1);
        for e in entries {
            let index = e.log_id.index;
            if let Some(n) = next.filter(|&n| index > n) {
                return Err(format!(
                    "append of entry {index} would leave a hole after entry {}",
                    n - 1
                ));
            }
            next = Some(index + 1);
        }
        Ok(())
    }

    /// The entries in `range`, evicted ones read back from the WAL. Called under the read
    /// lock, so a purge cannot remove a segment while it is being read.
    fn range(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, WalError> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => match s.checked_add(1) {
                Some(s) => s,
                None => return Ok(Vec::new()),
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
            return Ok(Vec::new());
        }
        self.entries
            .range((Bound::Included(start), end))
            .map(|(_, slot)| match &slot.entry {
                Some(e) => Ok(e.clone()),
                None => self.read_back(slot),
            })
            .collect()
    }

    fn read_back(&self, slot: &Slot) -> Result<Entry, WalError> {
        let corrupt = |reason: String| WalError::Corrupt {
            segment: self.dir.join(segment::segment_name(slot.pos.seq)),
            offset: slot.pos.offset,
            reason,
        };
        let bytes = Wal::read(&self.dir, slot.pos)?;
        match record::decode(&bytes).map_err(|e| corrupt(e.to_string()))? {
            Decoded::Entry(e) if e.log_id == slot.log_id => Ok(e),
            other => Err(corrupt(format!(
                "expected entry {} when reading it back, found {other:?}",
                slot.log_id
            ))),
        }
    }
}

fn write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(AnyError::error(e.to_string())).into()
}

fn read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(AnyError::error(e.to_string())).into()
}

fn vote_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_vote(AnyError::error(e.to_string())).into()
}

/// Why an append was refused.
#[derive(Debug, thiserror::Error)]
enum AppendError {
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("{0}")]
    Hole(String),
}

/// Runs blocking disk work off the async executor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WalError> + Send + 'static,
) -> Result<T, WalError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(res) => res,
        Err(e) => Err(WalError::Failed(format!("blocking wal task died: {e}"))),
    }
}

impl LogStore {
    /// Opens the log in `dir` with default options, replaying the WAL.
    pub(crate) fn open(dir: impl AsRef<Path>) -> Result<LogStore, WalError> {
        Self::open_with_options(dir, WalOptions::default())
    }

    /// Opens the log in `dir`, replaying the WAL; fails on corruption rather than guessing.
    pub(crate) fn open_with_options(
        dir: impl AsRef<Path>,
        options: WalOptions,
    ) -> Result<LogStore, WalError> {
        let dir = dir.as_ref().to_path_buf();
        let mut log = MemLog::new(dir.clone());
        let mut committed = None;
        let mut purge_seed = None;
        let mut committed_seed = None;
        let wal = Wal::open_with(&dir, options, |bytes, pos| {
            match record::decode(bytes).map_err(|e| e.to_string())? {
                Decoded::Entry(e) => {
                    let index = e.log_id.index;
                    log.insert(e, pos);
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
        // Everything replayed is in the files; keep only the newest part in memory.
        log.readable = log.last_log_id().map(|l| l.index);
        log.committed = committed.map(|c: LogId| c.index);
        log.evict();
        tracing::info!(
            dir = %dir.display(),
            entries = log.entries.len(),
            resident_bytes = log.resident,
            last_purged = ?log.last_purged,
            last = ?log.last_log_id(),
            ?committed,
            ?vote,
            "opened raft log"
        );
        let metrics = Arc::new(crate::metrics::RaftMetrics::default());
        wal.instrument(metrics.clone());
        if let Some(c) = committed {
            metrics.committed(c.index);
        }
        let shared = Arc::new(Shared {
            metrics,
            io: Mutex::new(Io {
                wal,
                pending: Vec::new(),
                purge_seed,
                committed_seed,
                last_written: None,
                shutdown: false,
            }),
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
        Ok(LogStore {
            shared,
            dir,
            vote,
            committed,
            flusher: Some(flusher),
        })
    }

    /// The series this log and the rest of the member's Raft layer record into.
    pub(crate) fn metrics(&self) -> Arc<crate::metrics::RaftMetrics> {
        self.shared.metrics.clone()
    }

    /// Index of the last entry (or of the purge point when no entry is left), if any.
    pub(crate) fn last_index(&self) -> Option<u64> {
        self.shared.log.read().last_log_id().map(|l| l.index)
    }

    /// Index of the last purged entry, if any (entries up to it exist only in snapshots).
    pub(crate) fn last_purged_index(&self) -> Option<u64> {
        self.shared.log.read().last_purged.map(|l| l.index)
    }

    /// Makes a member that led before it stopped start as a follower: its saved vote for
    /// itself is handed to openraft as not yet granted, so it wins a new term before it leads.
    ///
    /// openraft 0.9 would otherwise restore it as leader of its old term at once, taking the
    /// committed index from the WAL as the truth. That record is not synced on its own, so it
    /// can be older than writes this leader already acknowledged, and a ReadIndex read served
    /// before the followers answer again would miss them (found by jepsen-tests' kill-all
    /// fault). A new term's blank entry commits everything before it, as etcd's restarts do.
    pub(crate) fn step_down_after_restart(&mut self, me: NodeId) -> bool {
        match &mut self.vote {
            Some(v) if v.committed && v.leader_id.voted_for() == Some(me) => {
                v.committed = false;
                tracing::info!(vote = %v, "led before restart; will stand for election again");
                true
            }
            _ => false,
        }
    }

    /// Number of `fdatasync` calls on the WAL so far (for tests).
    #[cfg(test)]
    pub(crate) fn sync_count(&self) -> u64 {
        self.shared.io.lock().wal.sync_count()
    }

    /// Writes entries to the WAL buffer and makes them readable; `done` runs after they are
    /// durable (or with the error that stopped the log).
    fn append_with(&mut self, mut entries: Vec<Entry>, done: Done) -> Result<(), AppendError> {
        {
            // Only this owner changes the log, so the checks stay valid after the read lock.
            let log = self.shared.log.read();
            log.skip_purged(&mut entries);
            log.check_append(&entries).map_err(AppendError::Hole)?;
        }
        // Encode before taking the lock so the flusher is held up as little as possible.
        let records: Vec<(Vec<u8>, u64)> = entries
            .iter()
            .map(|e| (record::encode_entry(e), e.log_id.index))
            .collect();
        let mut io = self.shared.io.lock();
        let mut positions = Vec::with_capacity(records.len());
        for (bytes, index) in &records {
            positions.push(io.wal.write_indexed(bytes, Some(*index))?);
        }
        let mut log = self.shared.log.write();
        for (e, pos) in entries.into_iter().zip(positions) {
            io.last_written = Some(e.log_id.index);
            log.insert(e, pos);
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
        if pending.is_ok() {
            // Handed to the OS: readable from the files from now on.
            let mut log = shared.log.write();
            log.readable = io.last_written;
            log.evict();
        }
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
            batch
                .into_iter()
                .for_each(|done| done(Err(io::Error::other(msg.clone()))));
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
    let corrupt = |reason: String| WalError::Corrupt {
        segment: path.clone(),
        offset: 0,
        reason,
    };
    match check_frame(&data, 0) {
        Ok(len) if segment::FRAME_HEADER + len == data.len() => {
            let vote = record::decode_vote(&data[segment::FRAME_HEADER..])
                .map_err(|e| corrupt(e.to_string()))?;
            Ok(Some(vote))
        }
        Ok(_) => Err(corrupt("trailing bytes after the vote record".into())),
        Err(reason) => Err(corrupt(reason.into())),
    }
}

/// Replaces the vote file atomically and durably: write a temp file, fsync, rename, fsync dir.
pub(crate) fn write_vote_file(dir: &Path, vote: &Vote) -> Result<(), WalError> {
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
        self.log.read().range(range).map_err(read_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.shared.log.read().range(range).map_err(read_err)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let log = self.shared.log.read();
        Ok(LogState {
            last_purged_log_id: log.last_purged,
            last_log_id: log.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            log: Arc::clone(&self.shared.log),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let shared = Arc::clone(&self.shared);
        let dir = self.dir.clone();
        let v = *vote;
        blocking(move || {
            // Log writes submitted before this vote must be durable before it is.
            shared.io.lock().wal.sync()?;
            write_vote_file(&dir, &v)
        })
        .await
        .map_err(vote_err)?;
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
        drop(io);
        if let Some(c) = committed {
            self.shared.metrics.committed(c.index);
        }
        let mut log = self.shared.log.write();
        log.committed = committed.map(|c| c.index);
        log.evict();
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.append_with(entries, Box::new(move |res| callback.log_io_completed(res)))
            .map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let mut io = shared.io.lock();
            io.wal.write(&record::encode_truncate(log_id.index))?;
            io.wal.sync()?;
            shared.log.write().truncate(log_id.index);
            io.last_written = log_id.index.checked_sub(1);
            let seeds = io.seeds();
            io.wal.rotate_if_full(&seeds)?;
            Ok(())
        })
        .await
        .map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let mut io = shared.io.lock();
            let bytes = record::encode_purge(&log_id);
            io.wal.write(&bytes)?;
            io.purge_seed = Some(bytes);
            // Repeat the latest committed record here, so the removal below can never take its
            // only copy (rotation seeding already ensures this; this keeps purge self-evident).
            if let Some(committed) = io.committed_seed.clone() {
                io.wal.write(&committed)?;
            }
            io.wal.sync()?;
            shared.log.write().purge(log_id);
            let seeds = io.seeds();
            io.wal.rotate_if_full(&seeds)?;
            // Safe now: the latest purge and committed records are durable in the active segment.
            let upto = log_id.index;
            if let Err(e) = io
                .wal
                .remove_segments(|s| s.max_index.is_some_and(|m| m > upto))
            {
                // Only space is at stake; the next purge retries.
                tracing::warn!(error = %e, "could not remove purged wal segments");
            }
            Ok(())
        })
        .await
        .map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::sync::mpsc;

    use keel_store::command::CommandKind;
    use keel_store::pb::etcdserverpb::PutRequest;
    use keel_store::Command;
    use openraft::storage::{RaftLogStorageExt, RaftStateMachine};
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder, Snapshot, SnapshotMeta};

    use super::*;
    use crate::types::{Applied, MemberNode, NodeId, StoredMembership};

    /// A throwaway in-memory state machine, only so openraft's suite can run.
    #[derive(Clone, Default)]
    struct MemSm(Arc<Mutex<SmState>>);

    #[derive(Default)]
    struct SmState {
        applied: Option<LogId>,
        membership: StoredMembership,
        snapshot: Option<(SnapshotMeta<NodeId, MemberNode>, Vec<u8>)>,
        built: u64,
    }

    impl RaftSnapshotBuilder<TypeConfig> for MemSm {
        async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
            let mut s = self.0.lock();
            s.built += 1;
            let meta = SnapshotMeta {
                last_log_id: s.applied,
                last_membership: s.membership.clone(),
                snapshot_id: format!("snap-{}", s.built),
            };
            s.snapshot = Some((meta.clone(), Vec::new()));
            Ok(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(Vec::new())),
            })
        }
    }

    impl RaftStateMachine<TypeConfig> for MemSm {
        type SnapshotBuilder = MemSm;

        async fn applied_state(
            &mut self,
        ) -> Result<(Option<LogId>, StoredMembership), StorageError> {
            let s = self.0.lock();
            Ok((s.applied, s.membership.clone()))
        }

        async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
        where
            I: IntoIterator<Item = Entry> + Send,
            I::IntoIter: Send,
        {
            let mut s = self.0.lock();
            let mut out = Vec::new();
            for e in entries {
                s.applied = Some(e.log_id);
                if let EntryPayload::Membership(m) = e.payload {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                }
                out.push(Applied(Ok(None)));
            }
            Ok(out)
        }

        async fn get_snapshot_builder(&mut self) -> MemSm {
            self.clone()
        }

        async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
            Ok(Box::new(Cursor::new(Vec::new())))
        }

        async fn install_snapshot(
            &mut self,
            meta: &SnapshotMeta<NodeId, MemberNode>,
            snapshot: Box<Cursor<Vec<u8>>>,
        ) -> Result<(), StorageError> {
            let mut s = self.0.lock();
            s.applied = meta.last_log_id;
            s.membership = meta.last_membership.clone();
            s.snapshot = Some((meta.clone(), snapshot.into_inner()));
            Ok(())
        }

        async fn get_current_snapshot(
            &mut self,
        ) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
            let s = self.0.lock();
            Ok(s.snapshot.as_ref().map(|(meta, data)| Snapshot {
                meta: meta.clone(),
                snapshot: Box::new(Cursor::new(data.clone())),
            }))
        }
    }

    struct Builder;

    impl StoreBuilder<TypeConfig, LogStore, MemSm, tempfile::TempDir> for Builder {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, MemSm), StorageError> {
            let dir = tempfile::tempdir().map_err(write_err)?;
            let store = LogStore::open(dir.path()).map_err(write_err)?;
            Ok((dir, store, MemSm::default()))
        }
    }

    #[test]
    fn openraft_conformance_suite() {
        Suite::test_all(Builder).unwrap();
    }

    fn lid(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn put(term: u64, index: u64) -> Entry {
        let cmd = Command::new(CommandKind::Put(PutRequest {
            key: format!("key-{index}").into_bytes().into(),
            value: vec![b'v'; 40].into(),
            ..Default::default()
        }));
        Entry {
            log_id: lid(term, index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    fn puts(term: u64, range: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
        range.map(|i| put(term, i)).collect()
    }

    fn ids(entries: &[Entry]) -> Vec<LogId> {
        entries.iter().map(|e| e.log_id).collect()
    }

    fn segment_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "wal"))
            .collect();
        files.sort();
        files
    }

    #[tokio::test]
    async fn reopen_restores_entries_vote_committed_and_purge() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.blocking_append(puts(1, 1..=10)).await.unwrap();
            s.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
            s.blocking_append(puts(2, 11..=12)).await.unwrap();
            s.truncate(lid(2, 12)).await.unwrap();
            s.blocking_append(puts(3, 12..=14)).await.unwrap();
            s.save_committed(Some(lid(3, 13))).await.unwrap();
            s.purge(lid(1, 3)).await.unwrap();
        }
        let mut s = LogStore::open(dir.path()).unwrap();
        let state = s.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(lid(1, 3)));
        assert_eq!(state.last_log_id, Some(lid(3, 14)));
        assert_eq!(
            s.read_vote().await.unwrap(),
            Some(Vote::new_committed(2, 1))
        );
        // The committed record had no sync of its own; the clean shutdown synced it.
        assert_eq!(s.read_committed().await.unwrap(), Some(lid(3, 13)));
        let got = s.try_get_log_entries(0..100).await.unwrap();
        let mut want: Vec<LogId> = (4..=10).map(|i| lid(1, i)).collect();
        want.extend([lid(2, 11), lid(3, 12), lid(3, 13), lid(3, 14)]);
        assert_eq!(ids(&got), want);
        match &got[0].payload {
            EntryPayload::Normal(c) => assert_eq!(
                c,
                match &put(1, 4).payload {
                    EntryPayload::Normal(c) => c,
                    _ => unreachable!(),
                }
            ),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn torn_tail_is_cut_and_log_continues() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.blocking_append(puts(1, 1..=5)).await.unwrap();
        }
        let seg = segment_files(dir.path()).pop().unwrap();
        let mut data = std::fs::read(&seg).unwrap();
        // Cut the last record in the middle and add a zero-filled page, as a crash can leave.
        data.truncate(data.len() - 20);
        data.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&seg, &data).unwrap();
        let mut s = LogStore::open(dir.path()).unwrap();
        let state = s.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(lid(1, 4)));
        s.blocking_append([put(1, 5), put(1, 6)]).await.unwrap();
        drop(s);
        let mut s = LogStore::open(dir.path()).unwrap();
        assert_eq!(
            ids(&s.try_get_log_entries(..).await.unwrap()),
            (1..=6).map(|i| lid(1, i)).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn flipped_byte_mid_log_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.blocking_append(puts(1, 1..=20)).await.unwrap();
        }
        let seg = segment_files(dir.path()).pop().unwrap();
        let mut data = std::fs::read(&seg).unwrap();
        let mid = data.len() / 2;
        data[mid] ^= 0x10;
        std::fs::write(&seg, &data).unwrap();
        match LogStore::open(dir.path()) {
            Err(e @ WalError::Corrupt { .. }) => {
                let name = seg.file_name().unwrap().to_str().unwrap();
                assert!(e.to_string().contains(name), "{e}");
            }
            Err(e) => panic!("expected corruption, got {e}"),
            Ok(_) => panic!("a corrupt log opened"),
        }
    }

    #[tokio::test]
    async fn purge_deletes_old_segments_and_keeps_committed() {
        let dir = tempfile::tempdir().unwrap();
        let opts = WalOptions { segment_size: 2048 };
        {
            let mut s = LogStore::open_with_options(dir.path(), opts.clone()).unwrap();
            s.blocking_append(puts(1, 1..=5)).await.unwrap();
            // Written once, early: it must survive the removal of the segment holding it.
            s.save_committed(Some(lid(1, 5))).await.unwrap();
            for i in 6..=200 {
                s.blocking_append([put(1, i)]).await.unwrap();
            }
            let before = segment_files(dir.path()).len();
            assert!(before > 5, "only {before} segments");
            s.purge(lid(1, 150)).await.unwrap();
            let after = segment_files(dir.path());
            assert!(
                after.len() < before / 2,
                "{} of {before} segments left",
                after.len()
            );
            assert!(!after.iter().any(|p| p.ends_with("0000000000000000.wal")));
        }
        let mut s = LogStore::open_with_options(dir.path(), opts).unwrap();
        let state = s.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(lid(1, 150)));
        assert_eq!(state.last_log_id, Some(lid(1, 200)));
        assert_eq!(s.read_committed().await.unwrap(), Some(lid(1, 5)));
        let got = s.try_get_log_entries(..).await.unwrap();
        assert_eq!(
            ids(&got),
            (151..=200).map(|i| lid(1, i)).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn old_committed_entries_leave_memory_and_are_read_back_from_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let opts = WalOptions { segment_size: 4096 };
        let mut s = LogStore::open_with_options(dir.path(), opts.clone()).unwrap();
        s.shared.log.write().resident_limit = 1000;
        s.blocking_append(puts(1, 1..=100)).await.unwrap();
        // Nothing is committed yet, so everything stays in memory.
        assert!(s.shared.log.read().resident > 5000);
        s.save_committed(Some(lid(1, 60))).await.unwrap();
        {
            let log = s.shared.log.read();
            assert!(log.entries[&1].entry.is_none());
            assert!(log.entries[&61].entry.is_some(), "uncommitted entries stay");
        }
        // A truncation and rewrite above the evicted part, then more entries.
        s.truncate(lid(1, 90)).await.unwrap();
        s.blocking_append(puts(2, 90..=150)).await.unwrap();
        s.save_committed(Some(lid(2, 150))).await.unwrap();
        s.purge(lid(1, 10)).await.unwrap();
        assert_eq!(s.shared.log.read().entries.len(), 140);
        assert!(s.shared.log.read().resident <= 1000);
        let mut want: Vec<LogId> = (11..=89).map(|i| lid(1, i)).collect();
        want.extend((90..=150).map(|i| lid(2, i)));
        let got = s.try_get_log_entries(..).await.unwrap();
        assert_eq!(ids(&got), want);
        let mut expected: Vec<Entry> = puts(1, 11..=89);
        expected.extend(puts(2, 90..=150));
        assert_eq!(got, expected, "entries read back equal those appended");
        // A sub-range that starts in the evicted part.
        assert_eq!(
            ids(&s.try_get_log_entries(85..95).await.unwrap()),
            want[74..84].to_vec()
        );
        drop(s);
        // Reopened: the replay keeps only the newest part in memory as well.
        let mut s = LogStore::open_with_options(dir.path(), opts).unwrap();
        s.shared.log.write().resident_limit = 1000;
        s.save_committed(Some(lid(2, 150))).await.unwrap();
        assert!(s.shared.log.read().resident <= 1000);
        assert_eq!(ids(&s.try_get_log_entries(..).await.unwrap()), want);
    }

    #[tokio::test]
    async fn one_sync_per_batch_in_submission_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = LogStore::open(dir.path()).unwrap();
        s.blocking_append([put(1, 1)]).await.unwrap();
        let syncs_before = s.sync_count();
        let (tx, rx) = mpsc::channel();
        let gate = Arc::clone(&s.shared);
        let held = gate.gate.lock();
        for i in 2..=501u64 {
            let tx = tx.clone();
            s.append_with(
                vec![put(1, i)],
                Box::new(move |res| tx.send((i, res.is_ok())).unwrap()),
            )
            .unwrap();
        }
        // Appends are readable before they are durable.
        assert_eq!(s.shared.log.read().last_log_id(), Some(lid(1, 501)));
        drop(held);
        let done: Vec<(u64, bool)> = (2..=501).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(done, (2..=501).map(|i| (i, true)).collect::<Vec<_>>());
        assert_eq!(s.sync_count() - syncs_before, 1);
    }

    #[tokio::test]
    async fn many_appends_share_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = LogStore::open(dir.path()).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 1..=2000u64 {
            let tx = tx.clone();
            s.append_with(
                vec![put(1, i)],
                Box::new(move |res| tx.send(res.is_ok()).unwrap()),
            )
            .unwrap();
        }
        assert!((1..=2000).all(|_| rx.recv().unwrap()));
        let syncs = s.sync_count();
        assert!((1..=2000).contains(&syncs), "{syncs} syncs");
    }

    #[tokio::test]
    async fn sync_failure_stops_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = LogStore::open(dir.path()).unwrap();
        s.blocking_append([put(1, 1)]).await.unwrap();
        s.shared.io.lock().wal.inject_sync_failure();
        let (tx, rx) = mpsc::channel();
        s.append_with(vec![put(1, 2)], Box::new(move |res| tx.send(res).unwrap()))
            .unwrap();
        assert!(
            rx.recv().unwrap().is_err(),
            "a failed fsync was reported durable"
        );
        assert!(s.blocking_append([put(1, 3)]).await.is_err());
        assert!(s.save_vote(&Vote::new(2, 1)).await.is_err());
        assert!(s.truncate(lid(1, 2)).await.is_err());
    }

    #[tokio::test]
    async fn a_restarted_leader_stands_for_election_again() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.save_vote(&Vote::new_committed(4, 2)).await.unwrap();
        }
        // Another member's granted vote, or a vote not granted, stays as saved.
        let mut s = LogStore::open(dir.path()).unwrap();
        assert!(!s.step_down_after_restart(1));
        assert_eq!(
            s.read_vote().await.unwrap(),
            Some(Vote::new_committed(4, 2))
        );
        assert!(s.step_down_after_restart(2));
        assert_eq!(s.read_vote().await.unwrap(), Some(Vote::new(4, 2)));
        assert!(!s.step_down_after_restart(2));
        drop(s);
        // Only openraft's view changed: the file still holds the granted vote.
        let mut s = LogStore::open(dir.path()).unwrap();
        assert_eq!(
            s.read_vote().await.unwrap(),
            Some(Vote::new_committed(4, 2))
        );
    }

    #[tokio::test]
    async fn vote_file_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            assert_eq!(s.read_vote().await.unwrap(), None);
            s.save_vote(&Vote::new(3, 2)).await.unwrap();
        }
        std::fs::write(dir.path().join(VOTE_TMP), b"half-written").unwrap();
        let mut s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
        assert!(!dir.path().join(VOTE_TMP).exists());
        drop(s);
        let path = dir.path().join(VOTE_FILE);
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 1;
        data[last] ^= 1;
        std::fs::write(&path, &data).unwrap();
        assert!(matches!(
            LogStore::open(dir.path()),
            Err(WalError::Corrupt { .. })
        ));
    }

    #[tokio::test]
    async fn reader_and_append_checks() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = LogStore::open(dir.path()).unwrap();
        s.blocking_append(puts(1, 1..=5)).await.unwrap();
        let mut r = s.get_log_reader().await;
        assert_eq!(
            ids(&r.try_get_log_entries(2..4).await.unwrap()),
            [lid(1, 2), lid(1, 3)]
        );
        #[allow(clippy::reversed_empty_ranges)]
        let inverted = 4..2;
        assert!(r.try_get_log_entries(inverted).await.unwrap().is_empty());
        assert!(r.try_get_log_entries(3..3).await.unwrap().is_empty());
        assert_eq!(r.try_get_log_entries(5..=u64::MAX).await.unwrap().len(), 1);
        // A hole is refused; entries at or below the purge point are ignored.
        assert!(s.blocking_append([put(1, 7)]).await.is_err());
        s.purge(lid(1, 2)).await.unwrap();
        s.blocking_append([put(2, 2)]).await.unwrap();
        assert_eq!(
            ids(&r.try_get_log_entries(..).await.unwrap()),
            [lid(1, 3), lid(1, 4), lid(1, 5)]
        );
        // Overwriting from an index drops the old suffix.
        s.blocking_append([put(2, 4)]).await.unwrap();
        assert_eq!(
            ids(&r.try_get_log_entries(..).await.unwrap()),
            [lid(1, 3), lid(2, 4)]
        );
    }
}
