//! The store: key space, leases and watch hub behind one handle.
//!
//! Writes arrive only through [`Store::apply`], in Raft log order, from one thread. Reads run
//! concurrently under a shared lock. The backend is updated in one atomic batch per apply call,
//! together with the caller's opaque Raft bookkeeping (last applied log id, membership), so
//! after a crash the backend is a consistent prefix of the log and replay continues from there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use prost::Message;

use crate::alarm::{Alarms, META_ALARM_PREFIX};
use crate::auth::{AuthInfo, AuthStore};
use crate::backend::fjall_backend::FjallBackend;
use crate::backend::{Backend, Space, WriteBatch};
use crate::command::{Command, CommandKind, CommandResponse};
use crate::error::StoreError;
use crate::lease::{LeaseId, LeaseRecord, Lessor, MAX_LEASE_TTL};
use crate::mvcc::kv::{header, BackendValues, KvState, WriteTxn};
use crate::mvcc::revision::Revision;
use crate::pb::etcdserverpb::{
    request_op, AlarmMember, AlarmType, CompactionRequest, CompactionResponse, LeaseGrantRequest,
    LeaseGrantResponse, LeaseRevokeRequest, LeaseRevokeResponse, RangeRequest, RangeResponse,
    TxnRequest, TxnResponse,
};
use crate::pb::mvccpb::{event::EventType, Event, KeyValue};
use crate::watch::{History, WatchHub};

pub(crate) const META_RAFT: &[u8] = b"raft";
pub(crate) const META_REV: &[u8] = b"rev";
pub(crate) const META_COMPACT: &[u8] = b"compact";

/// Tunables of the store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Interval of periodic watch progress notifications (etcd: 10 minutes).
    pub progress_interval: Duration,
    /// Smallest lease TTL in seconds (etcd: ceil(1.5 × election timeout) = 2).
    pub min_lease_ttl: i64,
    /// etcd's `--quota-backend-bytes`: 0 = the default (2 GiB), negative = no quota.
    pub quota_backend_bytes: i64,
    /// etcd's `--auth-token-ttl`: how long a simple token lives after its last use.
    pub auth_token_ttl: Duration,
}

/// etcd's default space quota (`DefaultQuotaBytes`, 2 GiB).
pub const DEFAULT_QUOTA_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// etcd's suggested maximum quota (`MaxQuotaBytes`, 8 GiB): above it etcd warns.
pub const MAX_QUOTA_BYTES: i64 = 8 * 1024 * 1024 * 1024;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            progress_interval: Duration::from_secs(600),
            min_lease_ttl: 2,
            quota_backend_bytes: 0,
            auth_token_ttl: crate::auth::tokens::DEFAULT_TOKEN_TTL,
        }
    }
}

/// Replicated state guarded together.
struct State {
    kv: KvState,
    lessor: Lessor,
    alarms: Alarms,
    raft_meta: Option<Vec<u8>>,
}

/// What the hub and readers share: the backend and the state lock.
struct Shared {
    backend: Box<dyn Backend>,
    state: RwLock<State>,
    /// Held for read by readers that stream history without the state lock (etcd-format
    /// export), for write by whatever deletes history (compaction, snapshot install).
    history: RwLock<()>,
}

/// A revision pinned for reading history without the state lock: Kv entries at or below
/// `revision` do not change while `_guard` lives (only compaction and snapshot installs
/// delete history, and they wait for the guard).
pub(crate) struct HistoryPin<'a> {
    pub(crate) _guard: parking_lot::RwLockReadGuard<'a, ()>,
    /// The store's revision when pinned.
    pub(crate) revision: i64,
    /// The compaction revision when pinned (0 = never compacted).
    pub(crate) compacted: i64,
    /// The Lease space when pinned (leases are few; they change without a new revision).
    pub(crate) leases: Vec<(Vec<u8>, Vec<u8>)>,
    /// The alarms when pinned.
    pub(crate) alarms: Vec<AlarmMember>,
    /// The auth buckets when pinned.
    pub(crate) auth: crate::auth::AuthBuckets,
}

/// The MVCC store.
pub struct Store {
    shared: Arc<Shared>,
    hub: Arc<WatchHub>,
    auth: Arc<AuthStore>,
    dir: PathBuf,
    /// The space quota in bytes (`None` = none).
    quota: Option<u64>,
    metrics: crate::metrics::StoreMetrics,
}

/// The result of applying one entry: `Ok(None)` for entries that carry no command.
pub type ApplyResult = Result<Option<CommandResponse>, StoreError>;

impl Store {
    /// Opens the store in `dir` (creating it), rebuilding the key index from the backend.
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<Arc<Store>, StoreError> {
        std::fs::create_dir_all(dir)?;
        let backend = FjallBackend::open(dir)?;
        let state = load_state(&backend, opts.min_lease_ttl)?;
        let auth = Arc::new(AuthStore::load(&backend, opts.auth_token_ttl)?);
        let shared = Arc::new(Shared {
            backend: Box::new(backend),
            state: RwLock::new(state),
            history: RwLock::new(()),
        });
        let hub = WatchHub::new(shared.clone() as Arc<dyn History>, opts.progress_interval);
        let quota = match opts.quota_backend_bytes {
            q if q < 0 => None,
            0 => Some(DEFAULT_QUOTA_BYTES as u64),
            q => Some(q as u64),
        };
        Ok(Arc::new(Store {
            shared,
            hub,
            auth,
            dir: dir.to_path_buf(),
            quota,
            metrics: Default::default(),
        }))
    }

    /// Directory the backend lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The caller's bookkeeping stored with the last applied batch.
    pub fn raft_meta(&self) -> Option<Vec<u8>> {
        self.shared.state.read().raft_meta.clone()
    }

    /// The auth store (users, roles, permissions, tokens).
    pub fn auth(&self) -> &Arc<AuthStore> {
        &self.auth
    }

    /// What the store records about its disk work.
    pub fn metrics(&self) -> &crate::metrics::StoreMetrics {
        &self.metrics
    }

    /// The watch hub.
    pub fn hub(&self) -> &Arc<WatchHub> {
        &self.hub
    }

    /// Latest revision.
    pub fn revision(&self) -> i64 {
        self.shared.state.read().kv.current
    }

    /// Last compaction revision (0 = never compacted).
    pub fn compact_revision(&self) -> i64 {
        self.shared.state.read().kv.compacted
    }

    /// Applies a batch of log entries (`None` = an entry without a command) and records
    /// `raft_meta` in the same backend batch. Request errors are per entry; a backend failure
    /// fails the whole call and the caller must stop.
    pub fn apply(
        &self,
        entries: Vec<Option<Command>>,
        raft_meta: Vec<u8>,
    ) -> Result<Vec<ApplyResult>, StoreError> {
        let mut results = Vec::with_capacity(entries.len());
        let mut events = Vec::new();
        let mut compacted = None;
        let revision;
        {
            let mut st = self.shared.state.write();
            let st = &mut *st;
            let mut batch = WriteBatch::default();
            let mut overlay = HashMap::new();
            let compacted_before = st.kv.compacted;
            for cmd in entries {
                let Some(Command { kind: Some(kind) }) = cmd else {
                    results.push(Ok(None));
                    continue;
                };
                let r = self.apply_kind(st, &mut batch, &mut overlay, &mut events, kind)?;
                results.push(r.map(Some));
            }
            if st.kv.compacted != compacted_before {
                compacted = Some(st.kv.compacted);
            }
            revision = st.kv.current;
            batch.put(
                Space::Meta,
                META_REV.to_vec(),
                revision.to_be_bytes().to_vec(),
            );
            batch.put(Space::Meta, META_RAFT.to_vec(), raft_meta.clone());
            // A compaction deletes history: wait for etcd-format exports streaming it.
            let _history = compacted.map(|_| self.shared.history.write());
            let started = std::time::Instant::now();
            self.shared.backend.write(batch)?;
            self.metrics
                .backend_commit
                .observe(started.elapsed().as_secs_f64());
            st.raft_meta = Some(raft_meta);
        }
        if let Some(rev) = compacted {
            self.hub.compacted(rev);
        }
        self.hub.publish(events, revision);
        Ok(results)
    }

    /// Applies one command (or a batch of them) to `st`, queueing its writes and events.
    /// The outer error is fatal (the backend failed); the inner one is the command's answer.
    fn apply_kind(
        &self,
        st: &mut State,
        batch: &mut WriteBatch,
        overlay: &mut HashMap<Revision, KeyValue>,
        events: &mut Vec<Event>,
        kind: CommandKind,
    ) -> Result<Result<CommandResponse, StoreError>, StoreError> {
        let kind = match kind {
            CommandKind::Auth(a) => {
                return Ok(self
                    .auth
                    .apply(a, st.kv.current, batch)
                    .map(CommandResponse::Auth));
            }
            CommandKind::Authed(a) => {
                let Some(inner) = a.command.and_then(|c| c.kind) else {
                    return Err(StoreError::Corrupt(
                        "authed command without a command".into(),
                    ));
                };
                let ai = AuthInfo {
                    username: a.username,
                    revision: a.auth_revision,
                };
                if let Err(e) = self.auth.check_authed(&ai, &inner, &st.lessor) {
                    return if e.is_fatal() { Err(e) } else { Ok(Err(e)) };
                }
                inner
            }
            k => k,
        };
        if let CommandKind::Alarm(r) = &kind {
            return Ok(st.alarms.apply(r, batch).map(CommandResponse::Alarm));
        }
        if let Some(refused) = capped(&st.alarms, &kind) {
            return Ok(Err(refused));
        }
        if let CommandKind::Batch(b) = kind {
            let mut out = Vec::with_capacity(b.commands.len());
            for c in b.commands {
                match c.kind {
                    Some(CommandKind::Batch(_)) | None => {
                        return Err(StoreError::Corrupt(
                            "nested or empty command in a batch".into(),
                        ))
                    }
                    Some(k) => out.push(self.apply_kind(st, batch, overlay, events, k)?),
                }
            }
            return Ok(Ok(CommandResponse::Batch(out)));
        }
        let begin = st.kv.current;
        let mut cmd_batch = WriteBatch::default();
        let mut cmd_events = Vec::new();
        let res = {
            let mut txn = WriteTxn {
                kv: &mut st.kv,
                lessor: &mut st.lessor,
                backend: &*self.shared.backend,
                batch: &mut cmd_batch,
                overlay,
                events: &mut cmd_events,
                begin,
                sub: 0,
            };
            let r = apply_one(&mut txn, kind);
            if r.is_ok() && txn.sub > 0 {
                txn.kv.current = begin + 1;
            }
            r
        };
        match res {
            Ok(resp) => {
                batch.ops.append(&mut cmd_batch.ops);
                events.append(&mut cmd_events);
                Ok(Ok(resp))
            }
            Err(e) if e.is_fatal() => Err(e),
            // Checks run before any write, so a failed command changed nothing.
            Err(e) => Ok(Err(e)),
        }
    }

    /// Serves a Range from local state.
    pub fn range(&self, r: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let st = self.shared.state.read();
        st.kv
            .range(r, st.kv.current, &BackendValues(&*self.shared.backend))
    }

    /// Serves a Txn that only reads (the caller checked it has no writes).
    pub fn txn_read(&self, t: &TxnRequest) -> Result<TxnResponse, StoreError> {
        let st = self.shared.state.read();
        let values = BackendValues(&*self.shared.backend);
        read_txn(&st.kv, t, &values)
    }

    /// True if the lease exists.
    pub fn lease_exists(&self, id: LeaseId) -> bool {
        self.shared.state.read().lessor.contains(id)
    }

    /// Renews a lease (on the primary); returns its TTL, or None if unknown.
    pub fn lease_renew(&self, id: LeaseId) -> Option<i64> {
        self.shared.state.write().lessor.renew(id)
    }

    /// Remaining TTL, granted TTL and (if asked) attached keys of a lease.
    pub fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Option<(i64, i64, Vec<Bytes>)> {
        let st = self.shared.state.read();
        let l = st.lessor.get(id)?;
        let remaining = st.lessor.remaining(id)?;
        let ks = if keys {
            l.keys.iter().cloned().collect()
        } else {
            Vec::new()
        };
        Some((remaining, l.ttl, ks))
    }

    /// Every lease ID.
    pub fn lease_ids(&self) -> Vec<LeaseId> {
        self.shared.state.read().lessor.ids()
    }

    /// Starts tracking lease expiry (this member became leader).
    pub fn lease_promote(&self, extend: Duration) {
        self.shared.state.write().lessor.promote(extend);
    }

    /// Stops tracking lease expiry.
    pub fn lease_demote(&self) {
        self.shared.state.write().lessor.demote();
    }

    /// True while this member tracks lease expiry.
    pub fn lease_is_primary(&self) -> bool {
        self.shared.state.read().lessor.is_primary()
    }

    /// Leases past their deadline (only while primary).
    pub fn expired_leases(&self, limit: usize) -> Vec<LeaseId> {
        self.shared
            .state
            .read()
            .lessor
            .expired(Instant::now(), limit)
    }

    /// etcd's HashKV: CRC-32C over "key" and every retained (revision key, value) pair up to
    /// `rev` (0 = current). Returns (hash, compact revision, hashed revision).
    pub fn hash_kv(&self, rev: i64) -> Result<(u32, i64, i64), StoreError> {
        let st = self.shared.state.read();
        let cur = st.kv.current;
        let rev = if rev <= 0 { cur } else { rev };
        st.kv.check_rev(rev, cur)?;
        // As etcd: below the compaction point, only revisions that a compaction at `rev` would
        // keep are hashed (if there are any), so members agree whatever their physical state.
        let keep: std::collections::HashSet<Revision> = if st.kv.compacted > 0 {
            st.kv
                .index
                .values()
                .filter_map(|ki| ki.kept_at(rev))
                .collect()
        } else {
            Default::default()
        };
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
        let mut d = crc.digest();
        d.update(b"key");
        let end = Revision::new(rev + 1, 0).to_bytes();
        for pair in self.shared.backend.scan(Space::Kv, &[], Some(&end)) {
            let (k, v) = pair?;
            let (r, _) = Revision::from_key(&k)
                .ok_or_else(|| StoreError::Corrupt(format!("bad revision key {k:?}")))?;
            if r.main <= st.kv.compacted && !keep.is_empty() && !keep.contains(&r) {
                continue;
            }
            d.update(&k);
            d.update(&v);
        }
        let compact = if st.kv.compacted == 0 {
            -1
        } else {
            st.kv.compacted
        };
        Ok((d.finalize(), compact, rev))
    }

    /// Bytes the backend occupies on disk: what the space quota limits (see
    /// [`crate::backend::Backend::size_on_disk`]).
    pub fn db_size(&self) -> u64 {
        self.shared.backend.size_on_disk()
    }

    /// etcd's quota test: true if a request costing `cost` bytes still fits under `quota`
    /// (`size + cost < quota`, as etcd's `backendQuota.Available`).
    pub fn fits_quota(&self, cost: u64, quota: u64) -> bool {
        self.db_size().saturating_add(cost) < quota
    }

    /// The space quota in bytes (`None` = disabled by a negative `quota_backend_bytes`).
    pub fn quota_bytes(&self) -> Option<u64> {
        self.quota
    }

    /// The alarms in force, ordered by member and type.
    pub fn alarms(&self) -> Vec<AlarmMember> {
        self.shared.state.read().alarms.get(AlarmType::None)
    }

    /// True if an alarm of type `t` is raised by any member.
    pub fn has_alarm(&self, t: AlarmType) -> bool {
        self.shared.state.read().alarms.has(t)
    }

    /// etcd's Defragment for this backend: writes out the memtable, rewrites the sorted tables
    /// without the entries compaction deleted, drops journal files nothing needs, and fsyncs.
    /// Blocks for as long as that takes; reads and applies go on meanwhile.
    pub fn defragment(&self) -> Result<(), StoreError> {
        self.shared.backend.reclaim()?;
        self.shared.backend.flush()
    }

    /// Number of keys live now.
    pub fn key_count(&self) -> usize {
        let st = self.shared.state.read();
        st.kv
            .index
            .values()
            .filter(|k| k.current().is_some())
            .count()
    }

    /// Asks the backend to write out its buffers.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.shared.backend.flush()
    }

    /// Pins the current revision for [`crate::etcd_snapshot`]: reads the revision, the
    /// compaction point and the leases under the state lock, and takes the history guard
    /// before releasing it, so no compaction can slip in between.
    pub(crate) fn pin_history(&self) -> Result<HistoryPin<'_>, StoreError> {
        let st = self.shared.state.read();
        let guard = self.shared.history.read();
        let leases = self
            .shared
            .backend
            .scan(Space::Lease, &[], None)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HistoryPin {
            _guard: guard,
            revision: st.kv.current,
            compacted: st.kv.compacted,
            leases,
            alarms: st.alarms.get(AlarmType::None),
            // Auth changes apply under the state lock, so this matches the pinned revision.
            auth: self.auth.export_buckets(),
        })
    }

    /// The backend, for readers that hold a [`HistoryPin`] instead of the state lock.
    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.shared.backend
    }

    /// Writes the whole replicated state (see [`crate::snapshot`]) as of this call. Only
    /// taking the backend view waits for the state lock; applies go on while the (possibly
    /// seconds long) export runs.
    pub fn write_snapshot(
        &self,
        w: &mut dyn std::io::Write,
    ) -> Result<crate::snapshot::SnapshotSummary, StoreError> {
        // Backend writes happen under the state's write lock, so a view taken under its read
        // lock matches the applied index and revision read with it.
        let (view, raft_meta, revision) = {
            let st = self.shared.state.read();
            (
                self.shared.backend.view(),
                st.raft_meta.clone(),
                st.kv.current,
            )
        };
        crate::snapshot::write(&*view, raft_meta, revision, w)
    }

    /// Replaces the whole state with a snapshot's (watchers are told via compaction marks).
    pub fn install_snapshot(
        &self,
        r: &mut dyn std::io::Read,
        min_lease_ttl: i64,
    ) -> Result<(), StoreError> {
        let mut st = self.shared.state.write();
        // Clearing deletes history: wait for etcd-format exports streaming it.
        let _history = self.shared.history.write();
        self.shared.backend.clear()?;
        crate::snapshot::read_into(&*self.shared.backend, r)?;
        self.shared.backend.flush()?;
        *st = load_state(&*self.shared.backend, min_lease_ttl)?;
        self.auth.reload(&*self.shared.backend)?;
        let rev = st.kv.current;
        drop(st);
        self.hub.restored(rev);
        Ok(())
    }
}

fn apply_one(txn: &mut WriteTxn<'_>, kind: CommandKind) -> Result<CommandResponse, StoreError> {
    Ok(match kind {
        CommandKind::Put(p) => CommandResponse::Put(txn.put(&p)?),
        CommandKind::DeleteRange(d) => CommandResponse::DeleteRange(txn.delete_range(&d)?),
        CommandKind::Txn(t) => CommandResponse::Txn(txn.txn(&t)?),
        CommandKind::Compaction(c) => CommandResponse::Compaction(compact(txn, &c)?),
        CommandKind::LeaseGrant(g) => CommandResponse::LeaseGrant(lease_grant(txn, &g)?),
        CommandKind::LeaseRevoke(r) => CommandResponse::LeaseRevoke(lease_revoke(txn, &r)?),
        CommandKind::Batch(_) => return Err(StoreError::Corrupt("batch inside a command".into())),
        CommandKind::Alarm(_) => return Err(StoreError::Corrupt("alarm inside a command".into())),
        CommandKind::Auth(_) | CommandKind::Authed(_) => {
            return Err(StoreError::Corrupt("auth inside a command".into()))
        }
    })
}

/// What the alarms in force refuse `kind` with, if anything (etcd's capped and corrupt
/// appliers): CORRUPT refuses every key-space command; NOSPACE refuses what grows the store
/// (Put, a Txn with a Put, LeaseGrant). A batch is refused item by item, later.
fn capped(alarms: &Alarms, kind: &CommandKind) -> Option<StoreError> {
    if alarms.is_empty() || matches!(kind, CommandKind::Batch(_) | CommandKind::Alarm(_)) {
        return None;
    }
    if alarms.has(AlarmType::Corrupt) {
        return Some(StoreError::CorruptCluster);
    }
    let grows = match kind {
        CommandKind::Put(_) | CommandKind::LeaseGrant(_) => true,
        CommandKind::Txn(t) => crate::alarm::txn_has_put(t),
        _ => false,
    };
    (grows && alarms.has(AlarmType::Nospace)).then_some(StoreError::NoSpace)
}

fn compact(
    txn: &mut WriteTxn<'_>,
    c: &CompactionRequest,
) -> Result<CompactionResponse, StoreError> {
    if c.revision <= txn.kv.compacted {
        return Err(StoreError::Compacted);
    }
    if c.revision > txn.kv.current {
        return Err(StoreError::FutureRev);
    }
    let mut dropped = Vec::new();
    txn.kv
        .index
        .retain(|_, ki| !ki.compact(c.revision, &mut dropped));
    for (rev, tomb) in dropped {
        txn.batch.delete(Space::Kv, rev.to_key(tomb));
    }
    txn.kv.compacted = c.revision;
    txn.batch.put(
        Space::Meta,
        META_COMPACT.to_vec(),
        c.revision.to_be_bytes().to_vec(),
    );
    Ok(CompactionResponse {
        header: header(txn.kv.current),
    })
}

fn lease_grant(
    txn: &mut WriteTxn<'_>,
    g: &LeaseGrantRequest,
) -> Result<LeaseGrantResponse, StoreError> {
    if g.id <= 0 {
        return Err(StoreError::Corrupt(format!(
            "lease grant with ID {} in the log",
            g.id
        )));
    }
    if g.ttl > MAX_LEASE_TTL {
        return Err(StoreError::LeaseTtlTooLarge);
    }
    let id = LeaseId(g.id);
    if txn.lessor.contains(id) {
        return Err(StoreError::LeaseExists);
    }
    let ttl = txn.lessor.effective_ttl(g.ttl);
    txn.lessor.grant(id, ttl);
    let rec = LeaseRecord {
        id: g.id,
        ttl,
        remaining_ttl: 0,
    };
    txn.batch.put(
        Space::Lease,
        g.id.to_be_bytes().to_vec(),
        rec.encode_to_vec(),
    );
    Ok(LeaseGrantResponse {
        header: header(txn.kv.current),
        id: g.id,
        ttl,
        error: String::new(),
    })
}

fn lease_revoke(
    txn: &mut WriteTxn<'_>,
    r: &LeaseRevokeRequest,
) -> Result<LeaseRevokeResponse, StoreError> {
    let id = LeaseId(r.id);
    let lease = txn.lessor.revoke(id).ok_or(StoreError::LeaseNotFound)?;
    // All keys go in one revision, in key order, as etcd does.
    for key in &lease.keys {
        let live = txn.kv.index.get(key).and_then(|k| k.current()).is_some();
        if live {
            txn.delete_key(key)?;
        }
    }
    txn.batch.delete(Space::Lease, r.id.to_be_bytes().to_vec());
    Ok(LeaseRevokeResponse {
        header: header(txn.view()),
    })
}

fn read_txn(
    kv: &KvState,
    t: &TxnRequest,
    values: &BackendValues<'_>,
) -> Result<TxnResponse, StoreError> {
    use crate::pb::etcdserverpb::{response_op, ResponseOp};
    let view = kv.current;
    let mut ok = true;
    for c in &t.compare {
        if !kv.compare(c, view, values)? {
            ok = false;
            break;
        }
    }
    let ops = if ok { &t.success } else { &t.failure };
    let mut responses = Vec::with_capacity(ops.len());
    for op in ops {
        let resp = match &op.request {
            Some(request_op::Request::RequestRange(r)) => {
                response_op::Response::ResponseRange(kv.range(r, view, values)?)
            }
            Some(request_op::Request::RequestTxn(nt)) => {
                let mut r = read_txn(kv, nt, values)?;
                r.header = Some(Default::default());
                response_op::Response::ResponseTxn(r)
            }
            Some(_) => return Err(StoreError::Corrupt("write in a read-only txn".into())),
            None => continue,
        };
        responses.push(ResponseOp {
            response: Some(resp),
        });
    }
    Ok(TxnResponse {
        header: header(view),
        succeeded: ok,
        responses,
    })
}

/// True if no branch of the Txn (at any depth) writes.
pub fn txn_is_read_only(t: &TxnRequest) -> bool {
    t.success
        .iter()
        .chain(t.failure.iter())
        .all(|op| match &op.request {
            Some(request_op::Request::RequestRange(_)) | None => true,
            Some(request_op::Request::RequestTxn(nt)) => txn_is_read_only(nt),
            Some(_) => false,
        })
}

/// True if every Range in the Txn asks for a serializable read.
pub fn txn_is_serializable(t: &TxnRequest) -> bool {
    t.success
        .iter()
        .chain(t.failure.iter())
        .all(|op| match &op.request {
            Some(request_op::Request::RequestRange(r)) => r.serializable,
            Some(request_op::Request::RequestTxn(nt)) => txn_is_serializable(nt),
            _ => true,
        })
}

fn load_state(backend: &dyn Backend, min_lease_ttl: i64) -> Result<State, StoreError> {
    let mut kv = KvState::default();
    let mut lessor = Lessor::new(min_lease_ttl);
    let read_i64 = |k: &[u8]| -> Result<Option<i64>, StoreError> {
        match backend.get(Space::Meta, k)? {
            Some(b) => {
                let arr: [u8; 8] = b.as_ref().try_into().map_err(|_| {
                    StoreError::Corrupt(format!("meta {:?} has {} bytes", k, b.len()))
                })?;
                Ok(Some(i64::from_be_bytes(arr)))
            }
            None => Ok(None),
        }
    };
    kv.compacted = read_i64(META_COMPACT)?.unwrap_or(0);
    let mut max_rev = 1;
    for pair in backend.scan(Space::Kv, &[], None) {
        let (k, v) = pair?;
        let (rev, tomb) = Revision::from_key(&k)
            .ok_or_else(|| StoreError::Corrupt(format!("bad revision key {k:?}")))?;
        let rec = KeyValue::decode(v.as_slice())?;
        max_rev = max_rev.max(rev.main);
        let ki = kv.index.entry(rec.key.clone()).or_default();
        ki.restore(rev, rec.create_revision, rec.version, tomb);
        ki.lease = if tomb { 0 } else { rec.lease };
    }
    kv.current = read_i64(META_REV)?
        .unwrap_or(1)
        .max(max_rev)
        .max(kv.compacted);
    for pair in backend.scan(Space::Lease, &[], None) {
        let (_, v) = pair?;
        let rec = LeaseRecord::decode(v.as_slice())?;
        lessor.grant(LeaseId(rec.id), rec.ttl);
    }
    for (k, ki) in &kv.index {
        if ki.lease != 0 && ki.current().is_some() {
            lessor.attach(LeaseId(ki.lease), k.clone());
        }
    }
    let mut alarms = Alarms::default();
    let mut alarm_end = META_ALARM_PREFIX.to_vec();
    if let Some(last) = alarm_end.last_mut() {
        *last += 1;
    }
    for pair in backend.scan(Space::Meta, META_ALARM_PREFIX, Some(&alarm_end)) {
        let (k, _) = pair?;
        alarms.restore(&k[META_ALARM_PREFIX.len()..])?;
    }
    let raft_meta = backend.get(Space::Meta, META_RAFT)?.map(|b| b.to_vec());
    Ok(State {
        kv,
        lessor,
        alarms,
        raft_meta,
    })
}

impl History for Shared {
    fn current_revision(&self) -> i64 {
        self.state.read().kv.current
    }

    fn compact_revision(&self) -> i64 {
        self.state.read().kv.compacted
    }

    fn events(&self, from: i64, to: i64, max_revs: usize) -> Result<Vec<Event>, StoreError> {
        // Holding the state lock keeps the scan off half-applied batches and installs.
        let st = self.state.read();
        if from < st.kv.compacted {
            return Err(StoreError::Compacted);
        }
        let start = Revision::new(from.max(1), 0).to_bytes();
        let end = Revision::new(to.saturating_add(1), 0).to_bytes();
        let mut out = Vec::new();
        let mut revs = 0usize;
        let mut last_main = 0;
        for pair in self.backend.scan(Space::Kv, &start, Some(&end)) {
            let (k, v) = pair?;
            let (rev, tomb) = Revision::from_key(&k)
                .ok_or_else(|| StoreError::Corrupt(format!("bad revision key {k:?}")))?;
            if rev.main != last_main {
                if revs == max_revs {
                    break;
                }
                revs += 1;
                last_main = rev.main;
            }
            let rec = KeyValue::decode(v.as_slice())?;
            out.push(if tomb {
                Event {
                    r#type: EventType::Delete as i32,
                    kv: Some(KeyValue {
                        key: rec.key,
                        mod_revision: rev.main,
                        ..Default::default()
                    }),
                    prev_kv: None,
                }
            } else {
                Event {
                    r#type: EventType::Put as i32,
                    kv: Some(rec),
                    prev_kv: None,
                }
            });
        }
        Ok(out)
    }

    fn kv_at(&self, key: &[u8], rev: i64) -> Result<Option<KeyValue>, StoreError> {
        let st = self.state.read();
        if rev < st.kv.compacted {
            return Ok(None);
        }
        let Some(a) = st.kv.index.get(key).and_then(|k| k.get(rev)) else {
            return Ok(None);
        };
        match self.backend.get(Space::Kv, &a.modified.to_bytes())? {
            Some(b) => Ok(Some(KeyValue::decode(b)?)),
            None => Ok(None),
        }
    }
}
