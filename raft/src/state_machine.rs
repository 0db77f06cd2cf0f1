//! The store as openraft's state machine, plus durable snapshot files.
//!
//! The store's backend is a view that may lag after a crash; the WAL and the snapshot files
//! are the truth. Every snapshot is written to `snap/` and fsynced before openraft may purge
//! the log below it, so the state can always be rebuilt as "latest snapshot + log replay".

use std::fs;
use std::io::{BufWriter, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_store::{Command, Store};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, RaftTypeConfig, Snapshot, SnapshotMeta, StorageIOError};
use tracing::{info, warn};

use crate::codec::{applied_from_bytes, applied_to_bytes};
use crate::types::{
    Applied, Entry, LogId, MemberNode, NodeId, StorageError, StoredMembership, TypeConfig,
};

pub(crate) const SNAP_SUFFIX: &str = ".snap";

/// openraft's view of the store.
pub(crate) struct StateMachine {
    store: Arc<Store>,
    snap_dir: PathBuf,
    min_lease_ttl: i64,
    /// Moved after each apply, for the requests that wait for their entry here.
    applied: crate::applied::AppliedIndex,
}

fn sm_err<E: std::error::Error + 'static>(e: &E) -> StorageError {
    StorageIOError::write_state_machine(e).into()
}

fn snap_err<E: std::error::Error + 'static>(e: &E) -> StorageError {
    StorageIOError::write_snapshot(None, e).into()
}

/// A snapshot file found on disk.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotFile {
    pub path: PathBuf,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
}

impl StateMachine {
    /// Wraps the store; snapshots live in `snap_dir`.
    pub(crate) fn new(
        store: Arc<Store>,
        snap_dir: PathBuf,
        min_lease_ttl: i64,
        applied: crate::applied::AppliedIndex,
    ) -> Result<Self, std::io::Error> {
        fs::create_dir_all(&snap_dir)?;
        Ok(StateMachine {
            store,
            snap_dir,
            min_lease_ttl,
            applied,
        })
    }
}

/// The log index the store has applied (0 for none), where waiters start.
pub(crate) fn applied_index(store: &Store) -> u64 {
    applied_from_bytes(store.raft_meta().as_deref())
        .ok()
        .and_then(|(l, _)| l)
        .map_or(0, |l| l.index)
}

/// File name of a snapshot: index first so names sort by position in the log.
fn snap_name(last: Option<&LogId>) -> String {
    match last {
        Some(l) => format!("{:020}-{:016x}{SNAP_SUFFIX}", l.index, l.leader_id.term),
        None => format!("{:020}-{:016x}{SNAP_SUFFIX}", 0, 0),
    }
}

/// Finds the newest complete snapshot file and reads its header.
pub(crate) fn latest_snapshot(dir: &Path) -> Result<Option<SnapshotFile>, keel_store::StoreError> {
    let mut names: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "snap"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    names.sort();
    let Some(path) = names.pop() else {
        return Ok(None);
    };
    let mut f = std::io::BufReader::new(fs::File::open(&path)?);
    let hdr = keel_store::snapshot::read_header(&mut f)?;
    let (last_applied, membership) = applied_from_bytes(hdr.raft_meta.as_deref())?;
    Ok(Some(SnapshotFile {
        path,
        last_applied,
        membership,
    }))
}

/// Writes `bytes` to `dir/name` durably and removes older snapshot files.
fn persist_snapshot(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let (path, ()) = write_snapshot_file(dir, &format!("{name}.tmp"), |w| {
        w.write_all(bytes)?;
        Ok((name.to_string(), ()))
    })?;
    Ok(path)
}

/// Bytes of a snapshot file handed to the disk at a time.
const SYNC_EVERY: u64 = 16 << 20;

/// A file writer that starts writeback of every [`SYNC_EVERY`] bytes as it goes and waits for
/// the range before, so writing a large snapshot never leaves hundreds of MiB dirty for one
/// final flush that the WAL's own syncs would queue behind, while the export's CPU work and
/// the disk still overlap. Durability comes from the `fsync` after the last byte.
struct SyncingWriter {
    file: BufWriter<fs::File>,
    written: u64,
    /// Writeback was started for `[..started)` and is known finished for `[..done)`.
    started: u64,
    done: u64,
}

impl SyncingWriter {
    fn new(file: fs::File) -> Self {
        SyncingWriter {
            file: BufWriter::with_capacity(1 << 20, file),
            written: 0,
            started: 0,
            done: 0,
        }
    }

    fn range_sync(&self, from: u64, to: u64, flags: libc::c_uint) {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(len)) = (
            libc::off64_t::try_from(from),
            libc::off64_t::try_from(to - from),
        ) else {
            return;
        };
        // SAFETY: the descriptor is open for the writer's lifetime; nothing else is passed.
        let rc = unsafe { libc::sync_file_range(self.file.get_ref().as_raw_fd(), off, len, flags) };
        if rc != 0 {
            // Only pacing is lost: the final fsync still makes the file durable.
            tracing::debug!(err = %std::io::Error::last_os_error(), "snapshot writeback hint failed");
        }
    }
}

impl Write for SyncingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= SYNC_EVERY {
            self.file.flush()?;
            if self.started > self.done {
                self.range_sync(
                    self.done,
                    self.started,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
                self.done = self.started;
            }
            self.range_sync(self.started, self.written, libc::SYNC_FILE_RANGE_WRITE);
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Writes a snapshot file durably: `fill` streams the content into `dir/tmp_name` and returns
/// the file's final name; then fsync, rename, fsync of the directory, and removal of older
/// snapshot files. Returns the final path and what `fill` returned besides the name.
fn write_snapshot_file<T>(
    dir: &Path,
    tmp_name: &str,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<(String, T)>,
) -> std::io::Result<(PathBuf, T)> {
    let tmp = dir.join(tmp_name);
    let (name, out) = {
        let mut w = SyncingWriter::new(fs::File::create(&tmp)?);
        let out = fill(&mut w)?;
        w.flush()?;
        w.file.get_ref().sync_all()?;
        out
    };
    let path = dir.join(&name);
    fs::rename(&tmp, &path)?;
    fs::File::open(dir)?.sync_all()?;
    // Only older ones: a periodic build can finish after a newer snapshot was installed from
    // the leader, and names sort by log index.
    for e in fs::read_dir(dir)?.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| {
            n.to_string_lossy().ends_with(SNAP_SUFFIX) && n < name.as_ref() as &std::ffi::OsStr
        }) {
            if let Err(err) = fs::remove_file(&p) {
                warn!(path = %p.display(), %err, "could not remove old snapshot");
            }
        }
    }
    Ok((path, out))
}

/// Builds snapshots from the store.
pub(crate) struct SnapshotBuilder {
    store: Arc<Store>,
    snap_dir: PathBuf,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let store = self.store.clone();
        let dir = self.snap_dir.clone();
        // Streamed to disk from a point-in-time view of the store: neither the whole state in
        // memory nor applies held off while it is written.
        let (path, summary) = tokio::task::spawn_blocking(move || {
            write_snapshot_file(&dir, "build.snap.tmp", |w| {
                let summary = store.write_snapshot(w).map_err(std::io::Error::other)?;
                let (last, _) = applied_from_bytes(summary.raft_meta.as_deref())
                    .map_err(std::io::Error::other)?;
                Ok((snap_name(last.as_ref()), summary))
            })
        })
        .await
        .map_err(|e| snap_err(&e))?
        .map_err(|e| snap_err(&e))?;
        let (last_applied, membership) =
            applied_from_bytes(summary.raft_meta.as_deref()).map_err(|e| snap_err(&e))?;
        info!(path = %path.display(), revision = summary.revision, entries = summary.entries, "snapshot written");
        Ok(Snapshot {
            meta: SnapshotMeta {
                last_log_id: last_applied,
                last_membership: membership,
                snapshot_id: snap_name(last_applied.as_ref()),
            },
            // openraft keeps only the meta of a snapshot it had built; when it sends one to a
            // follower it reads the file through `get_current_snapshot`.
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

/// Whether applying `cmd` is cheap and bounded: puts, lease grants, and transactions whose
/// branches only read and put.
fn is_bounded(cmd: &Command) -> bool {
    use keel_store::command::CommandKind;
    use keel_store::pb::etcdserverpb::request_op::Request;
    let ops_bounded = |ops: &[keel_store::pb::etcdserverpb::RequestOp]| {
        ops.iter().all(|op| {
            matches!(
                op.request,
                Some(Request::RequestRange(_)) | Some(Request::RequestPut(_))
            )
        })
    };
    match &cmd.kind {
        Some(CommandKind::Put(_)) | Some(CommandKind::LeaseGrant(_)) => true,
        Some(CommandKind::Txn(t)) => ops_bounded(&t.success) && ops_bounded(&t.failure),
        Some(CommandKind::Batch(b)) => b.commands.iter().all(is_bounded),
        Some(CommandKind::Authed(a)) => a.command.as_deref().is_some_and(is_bounded),
        _ => false,
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        applied_from_bytes(self.store.raft_meta().as_deref())
            .map_err(|e| StorageIOError::read_state_machine(&e).into())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let (_, mut membership) = applied_from_bytes(self.store.raft_meta().as_deref())
            .map_err(|e| StorageIOError::read_state_machine(&e))?;
        let mut last = None;
        let mut cmds: Vec<Option<Command>> = Vec::new();
        for e in entries {
            last = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => cmds.push(None),
                EntryPayload::Normal(mut c) => {
                    // An Authenticate's token names its entry's index on every member.
                    keel_store::auth::stamp_log_index(&mut c, e.log_id.index);
                    cmds.push(Some(c))
                }
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(e.log_id), m);
                    cmds.push(None);
                }
            }
        }
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let meta = applied_to_bytes(last.as_ref(), &membership);
        // The store works synchronously (fjall). Puts and lease grants take tens of
        // microseconds, less than `block_in_place` costs in thread hand-offs, so they run
        // inline; anything that can delete without bound (compaction, range deletes, revokes)
        // moves the worker's other tasks away first.
        let results = if cmds.iter().flatten().all(is_bounded) {
            self.store.apply(cmds, meta)
        } else {
            let store = self.store.clone();
            tokio::task::block_in_place(move || store.apply(cmds, meta))
        }
        .map_err(|e| sm_err(&e))?;
        if let Some(last) = last {
            self.applied.advance(last.index);
        }
        Ok(results.into_iter().map(Applied).collect())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            store: self.store.clone(),
            snap_dir: self.snap_dir.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, MemberNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let dir = self.snap_dir.clone();
        let store = self.store.clone();
        let ttl = self.min_lease_ttl;
        let name = snap_name(meta.last_log_id.as_ref());
        let applied = applied_to_bytes(meta.last_log_id.as_ref(), &meta.last_membership);
        tokio::task::spawn_blocking(move || {
            persist_snapshot(&dir, &name, &bytes)?;
            store.install_snapshot(&mut Cursor::new(&bytes), ttl)?;
            // Record exactly the log position openraft installed.
            store.apply(Vec::new(), applied)?;
            Ok::<_, keel_store::StoreError>(())
        })
        .await
        .map_err(|e| snap_err(&e))?
        .map_err(|e| snap_err(&e))?;
        if let Some(last) = meta.last_log_id {
            self.applied.advance(last.index);
        }
        info!(last = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(file) =
            latest_snapshot(&self.snap_dir).map_err(|e| StorageIOError::read_snapshot(None, &e))?
        else {
            return Ok(None);
        };
        let bytes = fs::read(&file.path).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(Some(Snapshot {
            meta: SnapshotMeta {
                last_log_id: file.last_applied,
                last_membership: file.membership,
                snapshot_id: snap_name(file.last_applied.as_ref()),
            },
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

/// Makes sure the store is not behind the newest snapshot (it can be after a crash, or after
/// its files were lost), nor ahead of both the snapshot and the log's last entry `log_last`: in
/// either case, reload it from the snapshot. Returns the snapshot found.
pub(crate) fn reconcile_with_snapshot(
    store: &Store,
    snap_dir: &Path,
    min_lease_ttl: i64,
    log_last: Option<u64>,
) -> Result<Option<SnapshotFile>, keel_store::StoreError> {
    let Some(snap) = latest_snapshot(snap_dir)? else {
        return Ok(None);
    };
    let (applied, _) = applied_from_bytes(store.raft_meta().as_deref())?;
    let applied = applied.map(|l| l.index);
    let snap_index = snap.last_applied.map(|l| l.index);
    if applied < snap_index {
        warn!(store = ?applied, snapshot = ?snap.last_applied, "store is behind the latest snapshot; reloading it");
        let mut f = std::io::BufReader::new(fs::File::open(&snap.path)?);
        store.install_snapshot(&mut f, min_lease_ttl)?;
    } else if applied > snap_index && applied > log_last {
        // The log lost entries the store had applied (a WAL tail lost after it was synced, found by
        // jepsen-tests' torn-wal fault). openraft would take the store's applied index as a purge point
        // beyond the latest snapshot and refuse to start; go back to the snapshot instead, replay what
        // the log still holds, and let the leader send the rest again.
        warn!(store = ?applied, log = ?log_last, snapshot = ?snap.last_applied, "store is ahead of the log; reloading the latest snapshot");
        let mut f = std::io::BufReader::new(fs::File::open(&snap.path)?);
        store.install_snapshot(&mut f, min_lease_ttl)?;
    }
    Ok(Some(snap))
}

/// `C::R` needs these bounds; checked here so a type change fails to compile in one place.
const _: fn() = || {
    fn assert_r<C: RaftTypeConfig<R = Applied>>() {}
    assert_r::<TypeConfig>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use keel_store::command::{CommandBatch, CommandKind};
    use keel_store::pb::etcdserverpb::{
        request_op::Request, CompactionRequest, DeleteRangeRequest, PutRequest, RequestOp,
        TxnRequest,
    };

    fn cmd(kind: CommandKind) -> Command {
        Command { kind: Some(kind) }
    }

    fn txn(op: Request) -> CommandKind {
        CommandKind::Txn(TxnRequest {
            success: vec![RequestOp { request: Some(op) }],
            ..Default::default()
        })
    }

    #[test]
    fn a_snapshot_file_replaces_only_older_ones() {
        let dir = tempfile::tempdir().unwrap();
        let name = |index: u64| {
            snap_name(Some(&LogId::new(
                openraft::CommittedLeaderId::new(1, 0),
                index,
            )))
        };
        let files = || {
            let mut v: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        persist_snapshot(dir.path(), &name(30_000), b"newer").unwrap();
        // A build that finishes late, below the snapshot installed meanwhile, removes nothing.
        let (path, n) = write_snapshot_file(dir.path(), "build.snap.tmp", |w| {
            w.write_all(&[7u8; 100])?;
            Ok((name(20_000), 100))
        })
        .unwrap();
        assert_eq!((fs::read(&path).unwrap().len(), n), (100, 100));
        assert_eq!(files(), vec![name(20_000), name(30_000)]);
        // A newer one replaces both; this one is large enough to be handed to the disk in
        // several ranges on the way, and comes out byte for byte.
        let chunk: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
        let (path, ()) = write_snapshot_file(dir.path(), "build.snap.tmp", |w| {
            for _ in 0..40 {
                w.write_all(&chunk)?;
            }
            Ok((name(40_000), ()))
        })
        .unwrap();
        let back = fs::read(&path).unwrap();
        assert_eq!(back.len(), chunk.len() * 40);
        assert!(back.chunks(chunk.len()).all(|c| c == chunk.as_slice()));
        assert_eq!(files(), vec![name(40_000)]);
    }

    #[test]
    fn only_cheap_commands_apply_inline() {
        let put = || CommandKind::Put(PutRequest::default());
        assert!(is_bounded(&cmd(put())));
        assert!(is_bounded(&cmd(txn(Request::RequestPut(
            PutRequest::default()
        )))));
        assert!(!is_bounded(&cmd(txn(Request::RequestDeleteRange(
            DeleteRangeRequest::default()
        )))));
        assert!(!is_bounded(&cmd(CommandKind::Compaction(
            CompactionRequest::default()
        ))));
        let batch = |kinds: Vec<CommandKind>| {
            cmd(CommandKind::Batch(CommandBatch {
                commands: kinds.into_iter().map(cmd).collect(),
            }))
        };
        assert!(is_bounded(&batch(vec![put(), put()])));
        assert!(!is_bounded(&batch(vec![
            put(),
            CommandKind::DeleteRange(DeleteRangeRequest::default())
        ])));
    }
}
