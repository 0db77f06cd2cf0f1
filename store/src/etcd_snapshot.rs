//! etcd-format snapshots of the store: export to, and import from, the bbolt file that
//! `Maintenance.Snapshot`, `etcdctl snapshot save/status/restore` and etcd's own backend use.
//!
//! keel's backend already keeps history the way etcd's bucket `key` does (revision key →
//! `mvccpb.KeyValue` bytes) and leases as `leasepb.Lease`, so both directions copy entries
//! byte for byte; only the bookkeeping (revision, compaction marks, Raft state) is translated.
//!
//! Export is consistent at one revision R while writes go on: history at or below R never
//! changes except through compaction, so the export reads R, the compaction point and the
//! leases under the state lock, pins history against compaction (see
//! [`Store::pin_history`]), and streams the rest without the state lock. Import streams a
//! file into a fresh store directory in bounded batches. Both keep memory independent of the
//! number of keys (except when an import has to finish an interrupted compaction, which needs
//! one entry per key with history below the compaction point).

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::backend::fjall_backend::FjallBackend;
use crate::backend::{Backend, Space, WriteBatch};
use crate::bbolt::{
    show_key, write_etcd_db, BoltReader, DbSummary, EtcdDbInput, EtcdMember, PairIter,
    SnapshotError, SHA256_LEN,
};
use crate::error::StoreError;
use crate::lease::LeaseRecord;
use crate::mvcc::revision::Revision;
use crate::pb::mvccpb::KeyValue;
use crate::store::{Store, META_COMPACT, META_RAFT, META_REV};

/// Progress callbacks fire every this many entries (and once at the end).
const PROGRESS_EVERY: u64 = 4096;
/// An import batch is written once it has this many entries ...
///
/// Each batch is one journal record; bounded so an import of millions of entries holds little.
const BATCH_OPS: usize = 4096;
/// ... or this many bytes of keys and values, whichever comes first.
const BATCH_BYTES: usize = 1 << 20;

/// Everything that can go wrong exporting or importing an etcd-format snapshot.
#[derive(Debug, Error)]
pub enum EtcdSnapshotError {
    /// The bbolt file is damaged, or could not be read or written.
    #[error(transparent)]
    File(#[from] SnapshotError),
    /// keel's store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file or directory operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Import refuses to mix a snapshot with existing data.
    #[error("cannot import into {0}: the directory is not empty")]
    TargetNotEmpty(PathBuf),
    /// A well-formed bbolt file that is not an etcd backend.
    #[error("not an etcd snapshot: {0}")]
    NotEtcd(String),
    /// An entry of an etcd bucket that etcd itself could not have written.
    #[error("bucket {bucket:?}, entry {key}: {reason}")]
    BadEntry {
        bucket: &'static str,
        key: String,
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EtcdSnapshotError + '_ {
    move |source| EtcdSnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// SHA-256 over a byte stream: the digest that ends an etcd snapshot stream and trails an
/// `etcdctl snapshot save` file. Here so that the API and the CLI need no hashing crate.
#[derive(Clone, Default)]
pub struct SnapshotDigest(Sha256);

impl SnapshotDigest {
    /// An empty digest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of everything added.
    pub fn finish(self) -> [u8; SHA256_LEN] {
        self.0.finalize().into()
    }
}

impl Store {
    /// Writes an etcd 3.4 backend file (bbolt, without the SHA-256 trailer) of the store at
    /// its current revision to `out_path` (created with mode 0600, replaced if it exists, not
    /// fsynced: callers that keep the file sync it). Writes may continue meanwhile; a
    /// compaction waits until the export is done. `members` fill bucket `members`;
    /// `consistent_index` is the Raft index applied at about this revision (etcd's restore
    /// rewrites it anyway). `progress` gets the number of `key` entries written so far.
    /// Memory stays bounded whatever the store's size. On error the file is removed.
    pub fn export_etcd(
        &self,
        out_path: &Path,
        members: Vec<EtcdMember>,
        consistent_index: u64,
        progress: &dyn Fn(u64),
    ) -> Result<DbSummary, EtcdSnapshotError> {
        let res = self.export_etcd_inner(out_path, members, consistent_index, progress);
        if res.is_err() {
            // A partial file is useless and may be large; the error is what matters.
            let _ = std::fs::remove_file(out_path);
        }
        res
    }

    fn export_etcd_inner(
        &self,
        out_path: &Path,
        members: Vec<EtcdMember>,
        consistent_index: u64,
        progress: &dyn Fn(u64),
    ) -> Result<DbSummary, EtcdSnapshotError> {
        let pin = self.pin_history()?;
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut file = opts.open(out_path).map_err(io_err(out_path))?;

        // Everything at or below the pinned revision; newer entries keep arriving above it.
        let end = Revision::new(pin.revision.saturating_add(1), 0).to_bytes();
        let written = std::cell::Cell::new(0u64);
        let kvs: PairIter<'_> =
            Box::new(self.backend().scan(Space::Kv, &[], Some(&end)).map(|r| {
                let n = written.get() + 1;
                written.set(n);
                if n.is_multiple_of(PROGRESS_EVERY) {
                    progress(n);
                }
                r.map_err(SnapshotError::from)
            }));
        let leases: PairIter<'_> = Box::new(pin.leases.iter().cloned().map(Ok));
        let mut input = EtcdDbInput::new(kvs, leases);
        input.members = members;
        input.consistent_index = consistent_index;
        input.compact_revision = (pin.compacted > 0).then_some(pin.compacted);
        input.alarms = pin
            .alarms
            .iter()
            .map(|m| (crate::alarm::bucket_key(m), Vec::new()))
            .collect();
        input.auth = pin.auth.auth.clone();
        input.auth_users = pin.auth.users.clone();
        input.auth_roles = pin.auth.roles.clone();
        let summary = write_etcd_db(&mut file, input)?;
        progress(written.get());
        // The pin (and with it the history guard) is released only now.
        drop(pin);
        Ok(summary)
    }
}

/// Options of [`import_etcd`].
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Stored as the store's Raft bookkeeping (what [`Store::raft_meta`] returns), so the
    /// Raft layer starts from the imported state; `None` leaves it unset (nothing applied).
    pub raft_meta: Option<Vec<u8>>,
}

/// What [`import_etcd`] loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// The store's revision after the import (etcd's rule: the last revision in bucket
    /// `key`, or the compaction revision if that is higher; 1 for an empty store).
    pub revision: i64,
    /// Compaction revision (0 = never compacted).
    pub compact_revision: i64,
    /// Revision entries (puts and tombstones) in the store.
    pub kv_entries: u64,
    /// Of those, tombstones.
    pub tombstones: u64,
    /// Leases imported.
    pub leases: u64,
    /// Entries a compaction the snapshot had scheduled but not finished removed here.
    pub finished_compaction_dropped: u64,
    /// etcd's `meta/consistent_index` (informational: the new cluster has its own log).
    pub consistent_index: Option<u64>,
    /// etcd's `cluster/clusterVersion`.
    pub cluster_version: Option<String>,
}

/// Walks a whole bbolt file with every structural check, makes sure it is an etcd backend
/// (it has bucket `key`), and returns what `etcdctl snapshot status` would report. The SHA-256
/// trailer is checked by [`BoltReader::open_snapshot`], not here.
pub fn verify_etcd_file(reader: &BoltReader) -> Result<DbSummary, EtcdSnapshotError> {
    let summary = reader.summary()?;
    if !reader.bucket_names()?.iter().any(|n| n == b"key") {
        return Err(EtcdSnapshotError::NotEtcd(
            "the bbolt file has no bucket \"key\"".into(),
        ));
    }
    Ok(summary)
}

/// Loads an etcd backend file into a fresh store directory `dir` (created if missing; refused
/// unless empty): bucket `key` byte for byte (revision keys and `mvccpb.KeyValue` values,
/// Kubernetes protobuf values included), bucket `lease`, and the compaction marks from `meta`.
/// [`Store::open`] on `dir` then has the same revision, compaction point and leases as the
/// etcd member the file came from. Writes go in bounded batches; `progress` gets the number
/// of entries (keys and leases) loaded so far. The file's structure is checked as it is read,
/// so a damaged file stops the import with an error (the caller removes `dir`).
pub fn import_etcd(
    dir: &Path,
    reader: &BoltReader,
    opts: &ImportOptions,
    progress: &dyn Fn(u64),
) -> Result<ImportSummary, EtcdSnapshotError> {
    match std::fs::read_dir(dir) {
        Ok(mut rd) => {
            if rd.next().is_some() {
                return Err(EtcdSnapshotError::TargetNotEmpty(dir.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        Err(e) => return Err(io_err(dir)(e)),
    }
    let meta = reader.etcd_meta()?;
    let Some(keys) = reader.bucket(b"key")? else {
        return Err(EtcdSnapshotError::NotEtcd(
            "the bbolt file has no bucket \"key\"".into(),
        ));
    };
    let backend = FjallBackend::open(dir)?;
    let mut sum = ImportSummary {
        consistent_index: meta.consistent_index,
        cluster_version: meta.cluster_version.clone(),
        ..Default::default()
    };
    let mut batch = Batcher::new(&backend);
    let mut loaded = 0u64;
    let mut max_rev = 0i64;
    for pair in keys {
        let (k, v) = pair?;
        let bad = |reason: String| EtcdSnapshotError::BadEntry {
            bucket: "key",
            key: show_key(&k),
            reason,
        };
        let Some((rev, tomb)) = Revision::from_key(&k) else {
            return Err(bad(
                "not a revision key (8-byte main, '_', 8-byte sub, optional 't')".into(),
            ));
        };
        // Decoded only to refuse what the store could not read back; stored as it came.
        let kv = KeyValue::decode(v.as_slice())
            .map_err(|e| bad(format!("value is not an mvccpb.KeyValue: {e}")))?;
        if kv.key.is_empty() {
            return Err(bad("KeyValue without a key".into()));
        }
        max_rev = max_rev.max(rev.main);
        sum.kv_entries += 1;
        sum.tombstones += u64::from(tomb);
        batch.put(Space::Kv, k, v)?;
        loaded += 1;
        if loaded.is_multiple_of(PROGRESS_EVERY) {
            progress(loaded);
        }
    }
    if let Some(leases) = reader.bucket(b"lease")? {
        for pair in leases {
            let (k, v) = pair?;
            let bad = |reason: String| EtcdSnapshotError::BadEntry {
                bucket: "lease",
                key: show_key(&k),
                reason,
            };
            let id = <[u8; 8]>::try_from(k.as_slice())
                .map(i64::from_be_bytes)
                .map_err(|_| bad("not an 8-byte lease ID".into()))?;
            let rec = LeaseRecord::decode(v.as_slice())
                .map_err(|e| bad(format!("value is not a leasepb.Lease: {e}")))?;
            if rec.id != id || id == 0 {
                return Err(bad(format!("lease record has ID {}", rec.id)));
            }
            batch.put(Space::Lease, k, rec.encode_to_vec())?;
            sum.leases += 1;
            loaded += 1;
            if loaded.is_multiple_of(PROGRESS_EVERY) {
                progress(loaded);
            }
        }
    }
    // Alarms survive a restore, as with etcd's own (an operator disarms them as usual).
    if let Some(alarms) = reader.bucket(b"alarm")? {
        for pair in alarms {
            let (k, _) = pair?;
            let m = crate::pb::etcdserverpb::AlarmMember::decode(k.as_slice()).map_err(|e| {
                EtcdSnapshotError::BadEntry {
                    bucket: "alarm",
                    key: show_key(&k),
                    reason: format!("key is not an etcdserverpb.AlarmMember: {e}"),
                }
            })?;
            let mut key = crate::alarm::META_ALARM_PREFIX.to_vec();
            key.extend_from_slice(&crate::alarm::bucket_key(&m));
            batch.put(Space::Meta, key, Vec::new())?;
        }
    }
    // Users, roles and the auth flag and revision survive a restore, as with etcd's own.
    for bucket in [&b"auth"[..], b"authUsers", b"authRoles"] {
        if let Some(entries) = reader.bucket(bucket)? {
            for pair in entries {
                let (k, v) = pair?;
                let key = crate::auth::import_key(bucket, &k, &v).map_err(|reason| {
                    EtcdSnapshotError::BadEntry {
                        bucket: bucket_name(bucket),
                        key: show_key(&k),
                        reason,
                    }
                })?;
                batch.put(Space::Meta, key, v)?;
            }
        }
    }
    batch.flush()?;

    // etcd marks a compaction scheduled before deleting anything and finished after the last
    // batch, so a file taken in between may lack some of the entries below the scheduled
    // revision: only the scheduled revision describes it safely, and what it would still
    // delete is deleted here (as etcd does when it starts on such a file).
    let finished = meta.finished_compact_rev.unwrap_or(0).max(0);
    let scheduled = meta.scheduled_compact_rev.unwrap_or(0).max(0);
    let compacted = finished.max(scheduled);
    if scheduled > finished {
        let dropped = finish_compaction(&backend, scheduled)?;
        sum.finished_compaction_dropped = dropped;
        sum.kv_entries -= dropped.min(sum.kv_entries);
    }
    sum.compact_revision = compacted;
    sum.revision = max_rev.max(compacted).max(1);

    // The bookkeeping goes last, in its own batch: a store without it is visibly unfinished.
    let mut meta_batch = WriteBatch::default();
    meta_batch.put(
        Space::Meta,
        META_REV.to_vec(),
        sum.revision.to_be_bytes().to_vec(),
    );
    if compacted > 0 {
        meta_batch.put(
            Space::Meta,
            META_COMPACT.to_vec(),
            compacted.to_be_bytes().to_vec(),
        );
    }
    if let Some(raft) = &opts.raft_meta {
        meta_batch.put(Space::Meta, META_RAFT.to_vec(), raft.clone());
    }
    backend.write(meta_batch)?;
    // The backend's flush fsyncs its journal; the caller renames the directory into place
    // only after this.
    backend.flush()?;
    progress(loaded);
    Ok(sum)
}

/// The static name of an auth bucket, for errors.
fn bucket_name(bucket: &[u8]) -> &'static str {
    match bucket {
        b"auth" => "auth",
        b"authUsers" => "authUsers",
        _ => "authRoles",
    }
}

/// Deletes what a compaction at `at` removes: for every key, each revision at or below `at`
/// except the newest, and that one too when it is a tombstone. Returns how many entries went.
fn finish_compaction(backend: &FjallBackend, at: i64) -> Result<u64, EtcdSnapshotError> {
    let end = Revision::new(at.saturating_add(1), 0).to_bytes();
    // Key → its newest revision key seen so far (at or below `at`) and whether it is a tombstone.
    let mut newest: HashMap<Bytes, (Vec<u8>, bool)> = HashMap::new();
    let mut batch = Batcher::new(backend);
    let mut dropped = 0u64;
    for pair in backend.scan(Space::Kv, &[], Some(&end)) {
        let (k, v) = pair?;
        let (_, tomb) = Revision::from_key(&k)
            .ok_or_else(|| StoreError::Corrupt(format!("bad revision key {k:?}")))?;
        let kv = KeyValue::decode(v.as_slice()).map_err(StoreError::from)?;
        // The scan is in revision order, so a later entry of the same key replaces the older.
        if let Some((older, _)) = newest.insert(kv.key, (k, tomb)) {
            batch.delete(Space::Kv, older)?;
            dropped += 1;
        }
    }
    for (k, tomb) in newest.into_values() {
        if tomb {
            batch.delete(Space::Kv, k)?;
            dropped += 1;
        }
    }
    batch.flush()?;
    Ok(dropped)
}

/// Collects writes and sends them to the backend in bounded batches.
struct Batcher<'a> {
    backend: &'a dyn Backend,
    batch: WriteBatch,
    bytes: usize,
}

impl<'a> Batcher<'a> {
    fn new(backend: &'a dyn Backend) -> Self {
        Batcher {
            backend,
            batch: WriteBatch::default(),
            bytes: 0,
        }
    }

    fn put(&mut self, space: Space, k: Vec<u8>, v: Vec<u8>) -> Result<(), StoreError> {
        self.bytes += k.len() + v.len();
        self.batch.put(space, k, v);
        self.maybe_flush()
    }

    fn delete(&mut self, space: Space, k: Vec<u8>) -> Result<(), StoreError> {
        self.bytes += k.len();
        self.batch.delete(space, k);
        self.maybe_flush()
    }

    fn maybe_flush(&mut self) -> Result<(), StoreError> {
        if self.batch.ops.len() >= BATCH_OPS || self.bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if !self.batch.is_empty() {
            self.backend.write(std::mem::take(&mut self.batch))?;
        }
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::bbolt::{BoltWriter, Pair};
    use crate::command::{Command, CommandKind};
    use crate::pb::etcdserverpb::{
        CompactionRequest, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest,
    };
    use crate::StoreOptions;

    fn apply(store: &Store, kind: CommandKind) {
        let r = store.apply(vec![Some(Command::new(kind))], b"meta".to_vec());
        let r = r.expect("apply");
        assert!(r[0].is_ok(), "command failed: {:?}", r[0]);
    }

    fn put(store: &Store, key: &str, value: &str, lease: i64) {
        apply(
            store,
            CommandKind::Put(PutRequest {
                key: Bytes::copy_from_slice(key.as_bytes()),
                value: Bytes::copy_from_slice(value.as_bytes()),
                lease,
                ..Default::default()
            }),
        );
    }

    fn delete(store: &Store, key: &str) {
        apply(
            store,
            CommandKind::DeleteRange(DeleteRangeRequest {
                key: Bytes::copy_from_slice(key.as_bytes()),
                ..Default::default()
            }),
        );
    }

    fn compact(store: &Store, rev: i64) {
        apply(
            store,
            CommandKind::Compaction(CompactionRequest {
                revision: rev,
                physical: false,
            }),
        );
    }

    fn everything(store: &Store, rev: i64) -> Vec<KeyValue> {
        store
            .range(&RangeRequest {
                key: Bytes::from_static(b"\0"),
                range_end: Bytes::from_static(b"\0"),
                revision: rev,
                ..Default::default()
            })
            .expect("range")
            .kvs
    }

    fn kv_space(store: &Store) -> Vec<Pair> {
        store
            .backend()
            .scan(Space::Kv, &[], None)
            .collect::<Result<_, _>>()
            .expect("scan")
    }

    fn sample_store(dir: &Path) -> Arc<Store> {
        let store = Store::open(dir, StoreOptions::default()).expect("open");
        apply(
            &store,
            CommandKind::LeaseGrant(LeaseGrantRequest { ttl: 300, id: 77 }),
        );
        put(&store, "/a", "1", 0);
        put(&store, "/a", "2", 0);
        put(&store, "/b", "x", 77);
        put(&store, "/c", "gone", 0);
        delete(&store, "/c");
        put(&store, "/a", "3", 0);
        compact(&store, 4);
        put(&store, "/d", "after compaction", 77);
        put(&store, "/a", "4", 0);
        store
    }

    fn no_progress(_: u64) {}

    #[test]
    fn export_then_import_gives_the_same_store() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = sample_store(&tmp.path().join("a"));
        let file = tmp.path().join("x.db");
        let members = vec![EtcdMember {
            id: 0x1234,
            name: "n1".into(),
            peer_urls: vec!["http://127.0.0.1:2380".into()],
            client_urls: vec!["http://127.0.0.1:2379".into()],
            is_learner: false,
        }];
        let summary = store
            .export_etcd(&file, members, 42, &no_progress)
            .expect("export");
        assert_eq!(summary.revision, store.revision());

        let reader = BoltReader::open(&file).expect("open file");
        assert_eq!(verify_etcd_file(&reader).expect("verify"), summary);
        let meta = reader.etcd_meta().expect("meta");
        assert_eq!(meta.consistent_index, Some(42));
        assert_eq!(meta.finished_compact_rev, Some(4));
        // Bucket `key` is keel's Kv space byte for byte.
        let bucket: Vec<Pair> = reader
            .bucket(b"key")
            .expect("bucket")
            .expect("key bucket")
            .collect::<Result<_, _>>()
            .expect("read");
        assert_eq!(bucket, kv_space(&store));

        let dir = tmp.path().join("b");
        let seen = std::cell::Cell::new(0);
        let imported = import_etcd(
            &dir,
            &reader,
            &ImportOptions {
                raft_meta: Some(b"raft".to_vec()),
            },
            &|n| seen.set(n),
        )
        .expect("import");
        assert_eq!(imported.revision, store.revision());
        assert_eq!(imported.compact_revision, 4);
        assert_eq!(imported.leases, 1);
        assert_eq!(imported.consistent_index, Some(42));
        assert_eq!(seen.get(), imported.kv_entries + imported.leases);
        drop(reader);

        let back = Store::open(&dir, StoreOptions::default()).expect("open imported");
        assert_eq!(back.revision(), store.revision());
        assert_eq!(back.compact_revision(), store.compact_revision());
        assert_eq!(back.raft_meta(), Some(b"raft".to_vec()));
        assert_eq!(kv_space(&back), kv_space(&store));
        for rev in [0, 4, 6, store.revision()] {
            assert_eq!(everything(&back, rev), everything(&store, rev), "at {rev}");
        }
        assert_eq!(
            back.hash_kv(0).expect("hash"),
            store.hash_kv(0).expect("hash")
        );
        assert_eq!(back.lease_ids(), store.lease_ids());
        let ttl = |s: &Store| s.lease_time_to_live(crate::LeaseId(77), true).map(|t| t.2);
        assert_eq!(ttl(&back), ttl(&store));
        assert_eq!(ttl(&back).map(|k| k.len()), Some(2));
    }

    #[test]
    fn export_is_consistent_while_writes_and_a_compaction_go_on() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&tmp.path().join("s"), StoreOptions::default()).expect("open");
        for i in 0..(3 * PROGRESS_EVERY) {
            put(&store, &format!("/k/{}", i % 1000), &format!("v{i}"), 0);
        }
        let pinned_rev = store.revision();
        let expected = kv_space(&store);

        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (writes_done_tx, writes_done_rx) = mpsc::channel::<()>();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                started_rx.recv().expect("export started");
                for i in 0..100 {
                    put(&store, &format!("/k/{i}"), "new", 0);
                }
                writes_done_tx.send(()).expect("signal");
                // Compacts history the export is streaming: must wait for it.
                compact(&store, pinned_rev + 50);
                store.compact_revision()
            })
        };
        let file = tmp.path().join("x.db");
        let first = std::cell::Cell::new(true);
        let progress = |_: u64| {
            if first.replace(false) {
                started_tx.send(()).expect("signal");
                writes_done_rx.recv().expect("writes done");
                // Give the compaction time to reach the guard.
                std::thread::sleep(Duration::from_millis(300));
            }
        };
        let summary = store
            .export_etcd(&file, Vec::new(), 1, &progress)
            .expect("export");
        assert_eq!(writer.join().expect("writer"), pinned_rev + 50);
        assert_eq!(summary.revision, pinned_rev);
        let reader = BoltReader::open(&file).expect("open");
        let bucket: Vec<Pair> = reader
            .bucket(b"key")
            .expect("bucket")
            .expect("key bucket")
            .collect::<Result<_, _>>()
            .expect("read");
        assert_eq!(bucket.len(), expected.len());
        assert!(
            bucket == expected,
            "the export is not the state at its revision"
        );
        assert_eq!(reader.etcd_meta().expect("meta").finished_compact_rev, None);
    }

    #[test]
    fn import_refuses_a_non_empty_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = sample_store(&tmp.path().join("a"));
        let file = tmp.path().join("x.db");
        store
            .export_etcd(&file, Vec::new(), 1, &no_progress)
            .expect("export");
        let reader = BoltReader::open(&file).expect("open");
        let dir = tmp.path().join("b");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("junk"), b"x").expect("write");
        let err = import_etcd(&dir, &reader, &ImportOptions::default(), &no_progress)
            .expect_err("non-empty target");
        assert!(matches!(err, EtcdSnapshotError::TargetNotEmpty(_)), "{err}");
    }

    /// A file with the given `key` entries and meta marks, built with the raw bbolt writer.
    fn etcd_file(path: &Path, keys: Vec<Pair>, meta: Vec<Pair>) {
        let f = std::fs::File::create(path).expect("create");
        let mut w = BoltWriter::new(f).expect("writer");
        w.bucket(b"key", keys.into_iter().map(Ok)).expect("key");
        w.bucket(b"meta", meta.into_iter().map(Ok)).expect("meta");
        w.finish().expect("finish");
    }

    fn entry(main: i64, key: &str, value: &str, create: i64, version: i64) -> Pair {
        let kv = KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: create,
            mod_revision: main,
            version,
            lease: 0,
        };
        (Revision::new(main, 0).to_key(false), kv.encode_to_vec())
    }

    fn tomb(main: i64, key: &str) -> Pair {
        let kv = KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            ..Default::default()
        };
        (Revision::new(main, 0).to_key(true), kv.encode_to_vec())
    }

    #[test]
    fn import_finishes_a_compaction_the_file_caught_halfway() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("half.db");
        // /a: 2, 3, 5 ; /b: 4, tombstone 6 ; /c: 7. Scheduled at 6, finished at 0: etcd had
        // already deleted /a@2 when the file was taken, the rest of the compaction was pending.
        let keys = vec![
            entry(3, "/a", "a2", 2, 2),
            entry(4, "/b", "b1", 4, 1),
            entry(5, "/a", "a3", 2, 3),
            tomb(6, "/b"),
            entry(7, "/c", "c1", 7, 1),
        ];
        let meta = vec![(
            b"scheduledCompactRev".to_vec(),
            Revision::new(6, 0).to_bytes().to_vec(),
        )];
        etcd_file(&path, keys, meta);
        let reader = BoltReader::open(&path).expect("open");
        let dir = tmp.path().join("s");
        let sum =
            import_etcd(&dir, &reader, &ImportOptions::default(), &no_progress).expect("import");
        assert_eq!(sum.compact_revision, 6);
        assert_eq!(sum.revision, 7);
        // /a@3 (superseded by /a@5), /b@4 and its tombstone at 6 go.
        assert_eq!(sum.finished_compaction_dropped, 3);
        assert_eq!(sum.kv_entries, 2);
        let store = Store::open(&dir, StoreOptions::default()).expect("open store");
        assert_eq!(store.compact_revision(), 6);
        let keys: Vec<(Bytes, i64)> = everything(&store, 6)
            .into_iter()
            .map(|kv| (kv.key, kv.mod_revision))
            .collect();
        assert_eq!(
            keys,
            vec![(Bytes::from_static(b"/a"), 5)],
            "reads at the compaction point"
        );
        let kvs = everything(&store, 0);
        assert_eq!(kvs.len(), 2);
        assert_eq!(kvs[0].version, 3);
        assert_eq!(kvs[0].create_revision, 2);
    }

    #[test]
    fn import_refuses_entries_etcd_could_not_have_written() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cases: Vec<(&str, Vec<Pair>)> = vec![
            ("short key", vec![(b"not-a-revision".to_vec(), Vec::new())]),
            (
                "bad value",
                vec![(Revision::new(2, 0).to_key(false), vec![0xff, 0xff, 0xff])],
            ),
        ];
        for (i, (what, keys)) in cases.into_iter().enumerate() {
            let path = tmp.path().join(format!("bad{i}.db"));
            etcd_file(&path, keys, Vec::new());
            let reader = BoltReader::open(&path).expect("open");
            let err = import_etcd(
                &tmp.path().join(format!("s{i}")),
                &reader,
                &ImportOptions::default(),
                &no_progress,
            )
            .expect_err(what);
            assert!(
                matches!(err, EtcdSnapshotError::BadEntry { bucket: "key", .. }),
                "{what}: {err}"
            );
        }
        // A bbolt file without bucket `key` is not an etcd backend.
        let path = tmp.path().join("nokey.db");
        let f = std::fs::File::create(&path).expect("create");
        let mut w = BoltWriter::new(f).expect("writer");
        w.bucket(b"other", std::iter::empty()).expect("bucket");
        w.finish().expect("finish");
        let reader = BoltReader::open(&path).expect("open");
        assert!(matches!(
            verify_etcd_file(&reader),
            Err(EtcdSnapshotError::NotEtcd(_))
        ));
    }

    #[test]
    fn digest_is_sha256() {
        let mut d = SnapshotDigest::new();
        d.update(b"a");
        d.update(b"bc");
        let hex: String = d.finish().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
