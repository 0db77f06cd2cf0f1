//! The hub proper: watchers grouped by gRPC stream, fan-out of published revisions, catch-up from
//! history, progress notifications and fragmentation (etcd's `watchable_store.go`, `watcher.go`
//! and the stream half of `v3rpc/watch.go`).
//!
//! Model (as etcd's): a watcher is *synced* when every event below the hub's revision that it
//! wants has been queued for it; `publish` queues live events only for synced watchers. A watcher
//! that starts in the past, or whose stream queue was full when `publish` tried to queue for it
//! (a "victim"), is *unsynced* and remembers the next revision it needs; a background thread
//! reads that history from [`History`] in batches of at most [`WATCH_BATCH_MAX_REVS`] revisions and
//! moves the watcher to the synced set once it has caught up with the hub's revision. Every
//! change of a watcher's group and every enqueue happens under one lock, so the hand-over from
//! history to live events has neither a gap nor a duplicate.
//!
//! Each stream has one bounded queue. Replies to the client's own requests (created, canceled,
//! requested progress) wait for room in it, which pushes back on the client's request stream;
//! events never wait: `publish` must not block on a slow client.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::wire::{EncodedBatch, WireEvents};
use super::History;
use crate::error::StoreError;
use crate::pb::etcdserverpb::{
    watch_create_request::FilterType, ResponseHeader, WatchCreateRequest, WatchResponse,
};
use crate::pb::mvccpb::{event::EventType, Event, KeyValue};

#[cfg(test)]
mod tests;

/// etcd's default `--experimental-watch-progress-notify-interval`.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(600);
/// etcd's fragment threshold: max-request-bytes plus 512 KiB of gRPC overhead (2 MiB by default).
pub const DEFAULT_FRAGMENT_LIMIT: usize = crate::MAX_REQUEST_BYTES + 512 * 1024;
/// Responses a stream may have queued before its watchers become victims (etcd's `chanBufLen`).
pub const DEFAULT_STREAM_QUEUE: usize = 128;
/// Most revisions replayed from history in one response (etcd's `watchBatchMaxRevs`).
pub const WATCH_BATCH_MAX_REVS: usize = 1000;
/// The watch ID of responses addressed to a whole stream, and of refused creates.
pub const INVALID_WATCH_ID: i64 = -1;
/// `cancel_reason` when a client-chosen watch ID is already in use on the stream.
pub const DUPLICATE_WATCH_ID_REASON: &str = "mvcc: duplicate watch ID provided on the WatchStream";
/// `cancel_reason` for a negative `start_revision` (etcd answers it with a confusing compaction).
pub const INVALID_START_REVISION_REASON: &str = "etcdserver: watch start revision is negative";

/// Watch ID 0 in a create request asks the server to pick one (etcd's `AutoWatchID`).
const AUTO_WATCH_ID: i64 = 0;
/// Unsynced watchers handled per catch-up pass, so one pass reads a bounded amount of history.
const MAX_WATCHERS_PER_SYNC: usize = 512;
/// How soon a catch-up pass retries watchers whose stream queue was full (etcd's victim loop).
const BLOCKED_RETRY: Duration = Duration::from_millis(10);
/// Longest the catch-up thread sleeps without looking, which bounds a missed wake-up.
const MAX_IDLE: Duration = Duration::from_secs(1);

/// Tuning of a [`WatchHub`]; `Default` gives etcd's defaults.
#[derive(Debug, Clone)]
pub struct WatchHubOptions {
    /// Period of progress notifications for watchers created with `progress_notify`.
    pub progress_interval: Duration,
    /// Encoded size at which a response to a `fragment=true` watcher is split.
    pub fragment_limit: usize,
    /// Capacity, in responses, of each stream's queue.
    pub stream_queue: usize,
    /// Most revisions per catch-up response.
    pub max_revs_per_batch: usize,
}

impl Default for WatchHubOptions {
    fn default() -> Self {
        WatchHubOptions {
            progress_interval: DEFAULT_PROGRESS_INTERVAL,
            fragment_limit: DEFAULT_FRAGMENT_LIMIT,
            stream_queue: DEFAULT_STREAM_QUEUE,
            max_revs_per_batch: WATCH_BATCH_MAX_REVS,
        }
    }
}

/// One response for the client of a watch stream, still without its header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamMessage {
    /// Revision for the response header. 0 only in the compaction cancel, where etcd leaves it 0.
    pub revision: i64,
    /// The response; `header` is `None` (the front door adds cluster, member and term).
    pub response: WatchResponse,
    /// Live events already encoded, on streams opened with [`WatchHub::open_wire_stream`]; they
    /// follow `response.events` (which then holds only events replayed from history).
    pub wire: WireEvents,
}

/// The client side of a watch stream is gone; nothing more can be sent on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("watch stream closed")]
pub struct StreamClosed;

/// What sits in a stream's queue: a response and whether its watcher accepts fragments.
#[derive(Debug)]
struct Outgoing {
    msg: StreamMessage,
    fragment: bool,
}

/// The keys a watcher covers, after etcd's normalisation of the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum KeyRange {
    /// Exactly one key (empty `range_end`).
    Single(Bytes),
    /// Every key `>= key` (`range_end` = "\0").
    From(Bytes),
    /// `key <= k < end`.
    Range(Bytes, Bytes),
}

impl KeyRange {
    fn contains(&self, k: &[u8]) -> bool {
        match self {
            KeyRange::Single(key) => k == key.as_ref(),
            KeyRange::From(key) => k >= key.as_ref(),
            KeyRange::Range(key, end) => k >= key.as_ref() && k < end.as_ref(),
        }
    }
}

/// Per-watcher options that decide which events it gets and how.
#[derive(Debug, Clone)]
struct Filter {
    range: KeyRange,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
}

impl Filter {
    /// Whether the watcher wants this event at all (revision aside).
    fn wants(&self, ev: &Event) -> bool {
        let Some(kv) = ev.kv.as_ref() else {
            return false;
        };
        self.wants_type(ev) && self.range.contains(&kv.key)
    }

    /// Whether the event's type passes the watcher's filters (its key aside).
    fn wants_type(&self, ev: &Event) -> bool {
        let is_delete = ev.r#type == EventType::Delete as i32;
        !((is_delete && self.no_delete) || (!is_delete && self.no_put))
    }
}

#[derive(Debug)]
struct Watcher {
    /// The client connection its stream arrived on ([`WatchHub::open_stream_on`]).
    conn: u64,
    stream: u64,
    id: i64,
    filter: Filter,
    /// First revision the watcher asked for (after resolving 0 to current + 1).
    start_rev: i64,
    /// Next revision to deliver; only meaningful while unsynced (synced watchers are implicitly
    /// at the hub's revision + 1, so `publish` does not have to touch every watcher).
    next_rev: i64,
    synced: bool,
    progress_notify: bool,
    fragment: bool,
    /// Events were queued since the last progress tick (etcd elides the next notification).
    active: bool,
    /// Live events go out pre-encoded (the stream's choice).
    wire: bool,
    tx: mpsc::Sender<Outgoing>,
}

impl Watcher {
    fn response(&self, events: Vec<Event>, revision: i64) -> Outgoing {
        Outgoing {
            msg: StreamMessage {
                revision,
                response: WatchResponse {
                    watch_id: self.id,
                    events,
                    ..Default::default()
                },
                wire: WireEvents::default(),
            },
            fragment: self.fragment,
        }
    }

    fn wire_response(&self, wire: WireEvents, revision: i64) -> Outgoing {
        Outgoing {
            msg: StreamMessage {
                revision,
                response: WatchResponse {
                    watch_id: self.id,
                    ..Default::default()
                },
                wire,
            },
            fragment: self.fragment,
        }
    }
}

#[derive(Debug)]
struct StreamState {
    tx: mpsc::Sender<Outgoing>,
    /// Watch IDs in use: the live watcher's hub key, or `None` for a watcher cancelled by
    /// compaction, whose ID stays taken until the client cancels it (as in etcd).
    ids: HashMap<i64, Option<u64>>,
    next_id: i64,
    /// A progress request waits for every watcher of the stream to be synced.
    progress_pending: bool,
}

#[derive(Debug)]
struct State {
    /// Latest published revision; everything up to it is in history.
    rev: i64,
    next_key: u64,
    next_stream: u64,
    watchers: HashMap<u64, Watcher>,
    /// Synced single-key watchers by key, so an event finds them with one lookup.
    synced_keys: HashMap<Bytes, Vec<u64>>,
    /// Synced range watchers by range: an event's key is compared once per distinct range
    /// (many watchers usually share a prefix, e.g. one per resource type and client).
    synced_ranges: HashMap<KeyRange, Vec<u64>>,
    /// Ordered so the oldest watchers catch up first.
    unsynced: BTreeSet<u64>,
    streams: HashMap<u64, StreamState>,
    /// Streams with a deferred progress request.
    deferred: HashSet<u64>,
    /// Bumped on every change of the synced set, so `publish` can reuse a match it made before it
    /// released the lock to read `prev_kv`s.
    generation: u64,
    /// The catch-up thread has work now.
    wake: bool,
    shutdown: bool,
}

impl State {
    fn index_add(&mut self, wk: u64, range: &KeyRange) {
        match range {
            KeyRange::Single(k) => self.synced_keys.entry(k.clone()).or_default().push(wk),
            _ => self
                .synced_ranges
                .entry(range.clone())
                .or_default()
                .push(wk),
        }
    }

    fn index_remove(&mut self, wk: u64, range: &KeyRange) {
        match range {
            KeyRange::Single(k) => {
                if let Some(list) = self.synced_keys.get_mut(k) {
                    list.retain(|&x| x != wk);
                    if list.is_empty() {
                        self.synced_keys.remove(k);
                    }
                }
            }
            _ => {
                if let Some(list) = self.synced_ranges.get_mut(range) {
                    if let Some(pos) = list.iter().position(|&x| x == wk) {
                        list.swap_remove(pos);
                    }
                    if list.is_empty() {
                        self.synced_ranges.remove(range);
                    }
                }
            }
        }
    }

    fn make_synced(&mut self, wk: u64) {
        let Some(w) = self.watchers.get_mut(&wk) else {
            return;
        };
        if w.synced {
            return;
        }
        w.synced = true;
        let range = w.filter.range.clone();
        self.unsynced.remove(&wk);
        self.index_add(wk, &range);
        self.generation += 1;
    }

    fn make_unsynced(&mut self, wk: u64, next_rev: i64) {
        let Some(w) = self.watchers.get_mut(&wk) else {
            return;
        };
        w.next_rev = next_rev;
        if !w.synced {
            return;
        }
        w.synced = false;
        let range = w.filter.range.clone();
        self.index_remove(wk, &range);
        self.unsynced.insert(wk);
        self.generation += 1;
        self.wake = true;
    }

    fn remove_watcher(&mut self, wk: u64) -> Option<Watcher> {
        let w = self.watchers.remove(&wk)?;
        if w.synced {
            self.index_remove(wk, &w.filter.range);
            self.generation += 1;
        } else {
            self.unsynced.remove(&wk);
        }
        Some(w)
    }

    /// True when a progress revision of `self.rev` is honest for every watcher of the stream:
    /// all are synced (nothing <= rev is still to come) and none starts beyond rev + 1.
    fn progress_ready(&self, stream: &StreamState) -> bool {
        stream.ids.values().flatten().all(|wk| {
            self.watchers
                .get(wk)
                .is_none_or(|w| w.synced && self.rev >= w.start_rev - 1)
        })
    }

    /// Answers deferred progress requests whose stream is now ready. Returns true when one could
    /// not be queued because the stream's queue is full (the caller retries later).
    fn answer_deferred(&mut self) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let mut blocked = false;
        let ids: Vec<u64> = self.deferred.iter().copied().collect();
        for sid in ids {
            let Some(stream) = self.streams.get(&sid) else {
                self.deferred.remove(&sid);
                continue;
            };
            if !self.progress_ready(stream) {
                continue;
            }
            match stream
                .tx
                .try_send(progress_message(INVALID_WATCH_ID, self.rev))
            {
                Err(TrySendError::Full(_)) => blocked = true,
                Ok(()) | Err(TrySendError::Closed(_)) => {
                    if let Some(s) = self.streams.get_mut(&sid) {
                        s.progress_pending = false;
                    }
                    self.deferred.remove(&sid);
                }
            }
        }
        blocked
    }

    /// Which synced watchers get which of `events` (indices), and which events need a `prev_kv`.
    /// Watchers come out ordered by connection, then stream (see [`WatchHub::open_wire_stream`]).
    fn match_synced(&self, events: &[Event]) -> Plan {
        // One (connection, stream, watcher, event) per match; sorted, each watcher's events are
        // adjacent and in order.
        let mut matches: Vec<(u64, u64, u64, usize)> = Vec::new();
        let mut needs_prev = vec![false; events.len()];
        let (mut wire, mut wire_prev) = (false, false);
        for (i, ev) in events.iter().enumerate() {
            let Some(kv) = ev.kv.as_ref() else {
                continue;
            };
            let mut consider = |wk: u64| {
                let Some(w) = self.watchers.get(&wk) else {
                    return;
                };
                // The key already matched (by the index that led here).
                if kv.mod_revision < w.start_rev || !w.filter.wants_type(ev) {
                    return;
                }
                if w.filter.prev_kv && !is_create(ev) {
                    needs_prev[i] = true;
                }
                if w.wire {
                    if w.filter.prev_kv {
                        wire_prev = true;
                    } else {
                        wire = true;
                    }
                }
                matches.push((w.conn, w.stream, wk, i));
            };
            if let Some(list) = self.synced_keys.get(&kv.key) {
                list.iter().for_each(|&wk| consider(wk));
            }
            for (range, list) in &self.synced_ranges {
                if range.contains(&kv.key) {
                    list.iter().for_each(|&wk| consider(wk));
                }
            }
        }
        matches.sort_unstable();
        let mut per_watcher: Vec<(u64, Vec<usize>)> = Vec::new();
        for (_, _, wk, i) in matches {
            match per_watcher.last_mut() {
                Some((last, idxs)) if *last == wk => idxs.push(i),
                _ => per_watcher.push((wk, vec![i])),
            }
        }
        Plan {
            per_watcher,
            needs_prev: needs_prev
                .iter()
                .enumerate()
                .filter_map(|(i, &n)| n.then_some(i))
                .collect(),
            wire,
            wire_prev,
        }
    }
}

/// The result of matching a batch of events against the synced watchers.
#[derive(Debug, Default)]
struct Plan {
    per_watcher: Vec<(u64, Vec<usize>)>,
    needs_prev: Vec<usize>,
    /// Some matched wire-stream watcher wants the events without `prev_kv`.
    wire: bool,
    /// Some matched wire-stream watcher wants them with `prev_kv`.
    wire_prev: bool,
}

/// A published batch encoded once per form that some wire-stream watcher needs.
#[derive(Debug, Default)]
struct WireBatches {
    plain: Option<EncodedBatch>,
    with_prev: Option<EncodedBatch>,
}

impl WireBatches {
    /// The batch in the form a watcher with or without `prev_kv` gets, encoded on first use.
    fn get(&mut self, prev_kv: bool, events: &[Event], prevs: &PrevCache) -> &EncodedBatch {
        if prev_kv {
            self.with_prev.get_or_insert_with(|| {
                EncodedBatch::new((0..events.len()).map(|i| prevs.with_prev(events, i)))
            })
        } else {
            self.plain
                .get_or_insert_with(|| EncodedBatch::new(events.iter()))
        }
    }

    /// Encodes what `plan` will need, so little of it happens under the hub's lock.
    fn prepare(&mut self, plan: &Plan, events: &[Event], prevs: &PrevCache) {
        if plan.wire {
            self.get(false, events, prevs);
        }
        if plan.wire_prev {
            self.get(true, events, prevs);
        }
    }
}

/// `prev_kv` lookups for one batch of events, each done at most once for all watchers.
struct PrevCache {
    /// None: not looked up yet; Some(None): looked up, absent (or compacted away).
    prev: Vec<Option<Option<KeyValue>>>,
}

impl PrevCache {
    fn new(n: usize) -> Self {
        PrevCache {
            prev: vec![None; n],
        }
    }

    fn fill(&mut self, history: &dyn History, events: &[Event], i: usize) {
        if self.prev.get(i).is_none_or(|p| p.is_some()) {
            return;
        }
        let found = events[i].kv.as_ref().and_then(|kv| {
            // etcd looks the key up at mod_revision - 1 and silently leaves prev_kv out when
            // that fails (compacted history included).
            match history.kv_at(&kv.key, kv.mod_revision - 1) {
                Ok(found) => found,
                Err(StoreError::Compacted) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "watch: prev_kv lookup failed");
                    None
                }
            }
        });
        self.prev[i] = Some(found);
    }

    /// The event as a watcher with `prev_kv` gets it.
    fn with_prev(&self, events: &[Event], i: usize) -> Event {
        let mut ev = events[i].clone();
        if let Some(Some(prev)) = self.prev.get(i) {
            ev.prev_kv = prev.clone();
        }
        ev
    }
}

/// A creation: a PUT whose key did not exist just before, so it has no previous value.
fn is_create(ev: &Event) -> bool {
    ev.r#type == EventType::Put as i32
        && ev
            .kv
            .as_ref()
            .is_some_and(|kv| kv.create_revision == kv.mod_revision)
}

fn event_rev(ev: &Event) -> i64 {
    ev.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

fn progress_message(watch_id: i64, revision: i64) -> Outgoing {
    Outgoing {
        msg: StreamMessage {
            revision,
            response: WatchResponse {
                watch_id,
                ..Default::default()
            },
            wire: WireEvents::default(),
        },
        fragment: false,
    }
}

fn control_message(revision: i64, response: WatchResponse) -> Outgoing {
    Outgoing {
        msg: StreamMessage {
            revision,
            response,
            wire: WireEvents::default(),
        },
        fragment: false,
    }
}

/// State shared by the hub, its streams and its catch-up thread.
struct Shared {
    history: Arc<dyn History>,
    opts: WatchHubOptions,
    state: Mutex<State>,
    cond: Condvar,
    /// Kept outside the lock so `compacted` never waits on the hub (the store may call it while
    /// holding its own locks, and the hub calls into the store).
    compact_rev: AtomicI64,
}

/// The hub: owns every watcher of every stream and feeds them published revisions.
pub struct WatchHub {
    shared: Arc<Shared>,
    /// Joined on drop, so the history (and the backend it holds) is released with the hub.
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl WatchHub {
    /// A hub over `history` with etcd's defaults and the given progress-notification interval.
    pub fn new(history: Arc<dyn History>, progress_interval: Duration) -> Arc<Self> {
        Self::with_options(
            history,
            WatchHubOptions {
                progress_interval,
                ..WatchHubOptions::default()
            },
        )
    }

    /// A hub with explicit tuning. Starts the catch-up thread, which ends when the hub is dropped.
    pub fn with_options(history: Arc<dyn History>, mut opts: WatchHubOptions) -> Arc<Self> {
        // Guard against settings that would spin or never let anything through.
        opts.progress_interval = opts.progress_interval.max(Duration::from_millis(1));
        opts.stream_queue = opts.stream_queue.max(2);
        opts.max_revs_per_batch = opts.max_revs_per_batch.max(1);
        let rev = history.current_revision();
        let compact = history.compact_revision();
        let shared = Arc::new(Shared {
            history,
            opts,
            state: Mutex::new(State {
                rev,
                next_key: 0,
                next_stream: 0,
                watchers: HashMap::new(),
                synced_keys: HashMap::new(),
                synced_ranges: HashMap::new(),
                unsynced: BTreeSet::new(),
                streams: HashMap::new(),
                deferred: HashSet::new(),
                generation: 0,
                wake: false,
                shutdown: false,
            }),
            cond: Condvar::new(),
            compact_rev: AtomicI64::new(compact),
        });
        let worker = Arc::clone(&shared);
        let handle = match std::thread::Builder::new()
            .name("keel-watch-sync".into())
            .spawn(move || worker.run())
        {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::error!(error = %e, "watch: cannot start the catch-up thread; watches from the past will stall");
                None
            }
        };
        Arc::new(WatchHub {
            shared,
            worker: Mutex::new(handle),
        })
    }

    /// The latest published revision (what a watch with start_revision 0 is created at).
    pub fn revision(&self) -> i64 {
        self.shared.state.lock().rev
    }

    /// Number of live watchers on all streams.
    pub fn watcher_count(&self) -> usize {
        self.shared.state.lock().watchers.len()
    }

    /// Delivers the events of newly applied revisions (in revision order; `revision` is the
    /// store's revision after the batch, `events` may be empty). Call once per applied batch,
    /// from one thread, after the events are readable through [`History`], without holding
    /// store locks. Never blocks on clients.
    pub fn publish(&self, mut events: Vec<Event>, revision: i64) {
        let sh = &*self.shared;
        // Match under the lock, but look prev_kvs up outside it: they are backend reads and
        // would stall creates and the catch-up thread.
        let (base, generation, plan) = {
            let st = sh.state.lock();
            let base = st.rev;
            // Revisions at or below the hub's are already delivered (or were never ours).
            events.retain(|ev| event_rev(ev) > base);
            let plan = if events.is_empty() {
                Plan::default()
            } else {
                st.match_synced(&events)
            };
            (base, st.generation, plan)
        };
        let mut prevs = PrevCache::new(events.len());
        for &i in &plan.needs_prev {
            prevs.fill(&*sh.history, &events, i);
        }
        let mut batches = WireBatches::default();
        batches.prepare(&plan, &events, &prevs);

        let mut st = sh.state.lock();
        let plan = if st.generation == generation {
            plan
        } else {
            // The synced set changed meanwhile (rare); redo the match and any missing lookups.
            let plan = st.match_synced(&events);
            for &i in &plan.needs_prev {
                prevs.fill(&*sh.history, &events, i);
            }
            plan
        };
        let mut per_watcher = plan.per_watcher;
        per_watcher
            .sort_unstable_by_key(|(wk, _)| st.watchers.get(wk).map(|w| (w.conn, w.stream, *wk)));
        let mut victims = Vec::new();
        for (wk, idxs) in per_watcher {
            let Some(w) = st.watchers.get_mut(&wk) else {
                continue;
            };
            if !w.synced {
                continue;
            }
            let out = if w.wire {
                let batch = batches.get(w.filter.prev_kv, &events, &prevs);
                w.wire_response(batch.select(&idxs), revision)
            } else if w.filter.prev_kv {
                w.response(
                    idxs.iter().map(|&i| prevs.with_prev(&events, i)).collect(),
                    revision,
                )
            } else {
                w.response(idxs.iter().map(|&i| events[i].clone()).collect(), revision)
            };
            match w.tx.try_send(out) {
                Ok(()) => w.active = true,
                // Slow client: drop back to catching up from history, from the first revision of
                // this batch it did not get (or its start, if that is later).
                Err(TrySendError::Full(_)) => victims.push((wk, w.start_rev.max(base + 1))),
                // The stream is being torn down; its drop removes the watcher.
                Err(TrySendError::Closed(_)) => {}
            }
        }
        for (wk, next) in victims {
            st.make_unsynced(wk, next);
        }
        st.rev = st.rev.max(revision);
        st.answer_deferred();
        if st.wake {
            sh.cond.notify_one();
        }
    }

    /// Tells the hub that history below `revision` is gone. Watchers that still need it are
    /// cancelled with `compact_revision` when the catch-up thread gets to them. Does not block.
    pub fn compacted(&self, revision: i64) {
        self.shared
            .compact_rev
            .fetch_max(revision, Ordering::SeqCst);
        self.shared.cond.notify_one();
    }

    /// After the store's state was replaced (e.g. a Raft snapshot was installed) at `revision`:
    /// every synced watcher re-reads from history from its next revision, as etcd's `Restore`.
    pub fn restored(&self, revision: i64) {
        let compact = self.shared.history.compact_revision();
        self.shared.compact_rev.store(compact, Ordering::SeqCst);
        let mut st = self.shared.state.lock();
        let base = st.rev;
        let synced: Vec<(u64, i64)> = st
            .watchers
            .iter()
            .filter(|(_, w)| w.synced)
            .map(|(&wk, w)| (wk, w.start_rev.max(base + 1)))
            .collect();
        for (wk, next) in synced {
            st.make_unsynced(wk, next);
        }
        st.rev = revision;
        st.wake = true;
        self.shared.cond.notify_one();
    }

    /// Opens a watch stream: the handle takes the client's requests, the receiver yields the
    /// responses in order. Dropping the handle cancels all its watchers.
    pub fn open_stream(&self) -> (WatchStream, WatchReceiver) {
        self.open(0, false)
    }

    /// [`open_stream`](Self::open_stream) for a gRPC client on connection `conn` (any stable
    /// key). Live events arrive pre-encoded in [`StreamMessage::wire`], each encoded once for
    /// all the watchers that get it. `publish` queues a revision's responses connection by
    /// connection, so the server's tasks that write them to one socket run back to back and
    /// their frames leave in one write.
    pub fn open_wire_stream(&self, conn: u64) -> (WatchStream, WatchReceiver) {
        self.open(conn, true)
    }

    fn open(&self, conn: u64, wire: bool) -> (WatchStream, WatchReceiver) {
        let (tx, rx) = mpsc::channel(self.shared.opts.stream_queue);
        let mut st = self.shared.state.lock();
        let stream = st.next_stream;
        st.next_stream += 1;
        st.streams.insert(
            stream,
            StreamState {
                tx: tx.clone(),
                ids: HashMap::new(),
                next_id: 0,
                progress_pending: false,
            },
        );
        drop(st);
        (
            WatchStream {
                shared: Arc::clone(&self.shared),
                conn,
                stream,
                wire,
                tx,
            },
            WatchReceiver {
                rx,
                pending: VecDeque::new(),
                fragment_limit: self.shared.opts.fragment_limit,
            },
        )
    }
}

impl Drop for WatchHub {
    fn drop(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.cond.notify_all();
        if let Some(h) = self.worker.lock().take() {
            let _ = h.join();
        }
    }
}

/// What a catch-up pass left behind.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// Nothing unsynced.
    Idle,
    /// Some watchers wait for room in their stream's queue.
    Blocked,
    /// More history to read right away.
    More,
}

/// An unsynced watcher as the catch-up pass saw it when it chose what to read.
struct Candidate {
    wk: u64,
    next_rev: i64,
    filter: Filter,
}

impl Shared {
    /// The catch-up thread: replays history to unsynced watchers and sends periodic progress.
    fn run(&self) {
        let interval = self.opts.progress_interval;
        let mut next_tick = Instant::now() + interval;
        let mut retry_at: Option<Instant> = None;
        loop {
            {
                let mut st = self.state.lock();
                loop {
                    if st.shutdown {
                        return;
                    }
                    let now = Instant::now();
                    if st.wake || now >= next_tick || retry_at.is_some_and(|r| now >= r) {
                        break;
                    }
                    let mut deadline = next_tick.min(now + MAX_IDLE);
                    if let Some(r) = retry_at {
                        deadline = deadline.min(r);
                    }
                    let timed_out = self.cond.wait_until(&mut st, deadline).timed_out();
                    // A compaction notice is not seen under the lock; look at timeouts anyway.
                    if timed_out && !st.unsynced.is_empty() {
                        break;
                    }
                }
                st.wake = false;
            }
            if Instant::now() >= next_tick {
                self.progress_tick();
                next_tick = Instant::now() + interval;
            }
            retry_at = match self.sync_pass() {
                Pass::Idle => None,
                Pass::Blocked => Some(Instant::now() + BLOCKED_RETRY),
                Pass::More => Some(Instant::now()),
            };
        }
    }

    /// Periodic progress: each `progress_notify` watcher that is synced and got no events since
    /// the last tick is told the current revision (dropped if its queue is full, as in etcd).
    fn progress_tick(&self) {
        let mut st = self.state.lock();
        let rev = st.rev;
        for w in st.watchers.values_mut() {
            if !w.progress_notify {
                continue;
            }
            // Never claim a revision below start - 1: the client would resume from it and get
            // events its watch did not ask for.
            if !w.active && w.synced && rev >= w.start_rev - 1 {
                let _ = w.tx.try_send(progress_message(w.id, rev));
            }
            w.active = false;
        }
    }

    /// One round of catch-up for up to [`MAX_WATCHERS_PER_SYNC`] unsynced watchers.
    fn sync_pass(&self) -> Pass {
        let compact = self.compact_rev.load(Ordering::SeqCst);
        let mut blocked = false;
        let mut more = false;

        // 1. Under the lock: settle what needs no history, choose what to read.
        let (cur, cands) = {
            let mut st = self.state.lock();
            let cur = st.rev;
            let mut cands = Vec::new();
            let keys: Vec<u64> = st.unsynced.iter().copied().collect();
            for wk in keys {
                let Some(w) = st.watchers.get(&wk) else {
                    continue;
                };
                if w.tx.is_closed() {
                    // The client is gone; the stream's drop removes the watcher.
                    continue;
                }
                if w.tx.capacity() == 0 {
                    // Reading history for a client that is not reading would be wasted.
                    blocked = true;
                    continue;
                }
                if w.next_rev < compact {
                    let resp = WatchResponse {
                        watch_id: w.id,
                        canceled: true,
                        compact_revision: compact,
                        ..Default::default()
                    };
                    // etcd leaves this header's revision 0.
                    match w.tx.try_send(control_message(0, resp)) {
                        Err(TrySendError::Full(_)) => blocked = true,
                        Ok(()) | Err(TrySendError::Closed(_)) => {
                            let (sid, id) = (w.stream, w.id);
                            st.remove_watcher(wk);
                            if let Some(s) = st.streams.get_mut(&sid) {
                                s.ids.insert(id, None);
                            }
                        }
                    }
                    continue;
                }
                if w.next_rev > cur {
                    st.make_synced(wk);
                    continue;
                }
                if cands.len() >= MAX_WATCHERS_PER_SYNC {
                    more = true;
                    continue;
                }
                cands.push(Candidate {
                    wk,
                    next_rev: w.next_rev,
                    filter: w.filter.clone(),
                });
            }
            blocked |= st.answer_deferred();
            (cur, cands)
        };
        let Some(from) = cands.iter().map(|c| c.next_rev).min() else {
            return if more {
                Pass::More
            } else if blocked {
                Pass::Blocked
            } else {
                Pass::Idle
            };
        };

        // 2. Without the lock: read history and prepare each watcher's share.
        let max_revs = self.opts.max_revs_per_batch;
        let events = match self.history.events(from, cur, max_revs) {
            Ok(events) => events,
            Err(StoreError::Compacted) => {
                // Compacted under our feet: learn the new point and let the next pass cancel.
                let c = self.history.compact_revision().max(from + 1);
                self.compact_rev.fetch_max(c, Ordering::SeqCst);
                return Pass::More;
            }
            Err(e) => {
                tracing::error!(error = %e, from, to = cur, "watch: reading history failed");
                self.cancel_with_reason(&cands, &e.to_string());
                return Pass::More;
            }
        };
        // A compaction that ran during the read may have removed part of what we asked for
        // without the read failing; then the batch has a gap and must not be delivered.
        let compact_now = self.history.compact_revision();
        if compact_now > compact {
            self.compact_rev.fetch_max(compact_now, Ordering::SeqCst);
            if from < compact_now {
                return Pass::More;
            }
        }
        let covered_to = covered_to(&events, max_revs, cur);
        let mut prevs = PrevCache::new(events.len());
        let mut shares: Vec<(Candidate, Vec<usize>)> = Vec::with_capacity(cands.len());
        for c in cands {
            let idxs: Vec<usize> = events
                .iter()
                .enumerate()
                .filter(|(_, ev)| {
                    let r = event_rev(ev);
                    r >= c.next_rev && r <= covered_to && c.filter.wants(ev)
                })
                .map(|(i, _)| i)
                .collect();
            if c.filter.prev_kv {
                for &i in &idxs {
                    if !is_create(&events[i]) {
                        prevs.fill(&*self.history, &events, i);
                    }
                }
            }
            shares.push((c, idxs));
        }

        // 3. Under the lock: queue, advance, and promote those that caught up.
        let mut st = self.state.lock();
        for (c, idxs) in shares {
            let Some(w) = st.watchers.get_mut(&c.wk) else {
                continue; // cancelled meanwhile
            };
            if w.synced || w.next_rev != c.next_rev {
                continue;
            }
            if c.next_rev > covered_to {
                // Another watcher needed older history; this one waits for the next batch.
                more = true;
                continue;
            }
            if !idxs.is_empty() {
                let evs: Vec<Event> = if c.filter.prev_kv {
                    idxs.iter().map(|&i| prevs.with_prev(&events, i)).collect()
                } else {
                    idxs.iter().map(|&i| events[i].clone()).collect()
                };
                match w.tx.try_send(w.response(evs, cur)) {
                    Ok(()) => w.active = true,
                    Err(TrySendError::Full(_)) => {
                        blocked = true;
                        continue;
                    }
                    Err(TrySendError::Closed(_)) => continue,
                }
            }
            w.next_rev = covered_to + 1;
            if w.next_rev > st.rev {
                st.make_synced(c.wk);
            } else {
                more = true;
            }
        }
        blocked |= st.answer_deferred();
        if more {
            Pass::More
        } else if blocked {
            Pass::Blocked
        } else {
            Pass::Idle
        }
    }

    /// Ends watchers whose history cannot be read, telling the client why.
    fn cancel_with_reason(&self, cands: &[Candidate], reason: &str) {
        let mut st = self.state.lock();
        let rev = st.rev;
        for c in cands {
            let Some(w) = st.watchers.get(&c.wk) else {
                continue;
            };
            let resp = WatchResponse {
                watch_id: w.id,
                canceled: true,
                cancel_reason: reason.to_string(),
                ..Default::default()
            };
            if w.tx.try_send(control_message(rev, resp)).is_err() {
                continue; // retried on the next pass
            }
            let (sid, id) = (w.stream, w.id);
            st.remove_watcher(c.wk);
            if let Some(s) = st.streams.get_mut(&sid) {
                s.ids.remove(&id);
            }
        }
        st.answer_deferred();
    }
}

/// The last revision a history read covers: all of `[from, cur]` unless it stopped at the
/// revision limit, in which case the last revision it returned.
fn covered_to(events: &[Event], max_revs: usize, cur: i64) -> i64 {
    let mut distinct = 0usize;
    let mut last = i64::MIN;
    for ev in events {
        let r = event_rev(ev);
        if r != last {
            distinct += 1;
            last = r;
        }
    }
    if distinct >= max_revs {
        last
    } else {
        cur
    }
}

/// The request side of one watch stream (one gRPC `Watch` call). Dropping it cancels every
/// watcher it created.
pub struct WatchStream {
    shared: Arc<Shared>,
    conn: u64,
    stream: u64,
    wire: bool,
    tx: mpsc::Sender<Outgoing>,
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// A create request after etcd's normalisation, or why it is refused.
fn normalize(req: &WatchCreateRequest) -> Result<(KeyRange, i64), String> {
    // Empty key means "\0", the smallest key.
    let key = if req.key.is_empty() {
        Bytes::from_static(b"\0")
    } else {
        req.key.clone()
    };
    let range = if req.range_end.is_empty() {
        KeyRange::Single(key)
    } else if req.range_end.as_ref() == b"\0" {
        KeyRange::From(key)
    } else if key.as_ref() >= req.range_end.as_ref() {
        return Err(StoreError::EmptyWatchRange.to_string());
    } else {
        KeyRange::Range(key, req.range_end.clone())
    };
    if req.start_revision < 0 {
        return Err(INVALID_START_REVISION_REASON.to_string());
    }
    Ok((range, req.start_revision))
}

impl WatchStream {
    /// Creates a watcher. The `created` response (or the refusal: `created` and `canceled` with
    /// watch ID -1 and a reason) is queued before any event of the watcher, and creates are
    /// answered in call order. Returns the watch ID, or -1 when refused. Waits while the stream's
    /// queue is full.
    pub async fn create(&self, req: WatchCreateRequest) -> Result<i64, StreamClosed> {
        let permit = self.tx.reserve().await.map_err(|_| StreamClosed)?;
        self.create_locked(req, permit)
    }

    fn create_locked(
        &self,
        req: WatchCreateRequest,
        permit: mpsc::Permit<'_, Outgoing>,
    ) -> Result<i64, StreamClosed> {
        let normalized = normalize(&req);
        let mut st = self.shared.state.lock();
        let st = &mut *st;
        let cur = st.rev;
        let refuse = |reason: String| {
            control_message(
                cur,
                WatchResponse {
                    watch_id: INVALID_WATCH_ID,
                    created: true,
                    canceled: true,
                    cancel_reason: reason,
                    ..Default::default()
                },
            )
        };
        let (range, start) = match normalized {
            Ok(n) => n,
            Err(reason) => {
                permit.send(refuse(reason));
                return Ok(INVALID_WATCH_ID);
            }
        };
        let Some(stream) = st.streams.get_mut(&self.stream) else {
            return Err(StreamClosed);
        };
        let id = if req.watch_id == AUTO_WATCH_ID {
            while stream.ids.contains_key(&stream.next_id) {
                stream.next_id = stream.next_id.wrapping_add(1);
            }
            let id = stream.next_id;
            stream.next_id = stream.next_id.wrapping_add(1);
            id
        } else if stream.ids.contains_key(&req.watch_id) {
            permit.send(refuse(DUPLICATE_WATCH_ID_REASON.to_string()));
            return Ok(INVALID_WATCH_ID);
        } else {
            req.watch_id
        };
        let wk = st.next_key;
        st.next_key += 1;
        stream.ids.insert(id, Some(wk));

        let start_rev = if start == 0 { cur + 1 } else { start };
        let mut no_put = false;
        let mut no_delete = false;
        for f in &req.filters {
            // Unknown filter values are ignored, as etcd does.
            match FilterType::try_from(*f) {
                Ok(FilterType::Noput) => no_put = true,
                Ok(FilterType::Nodelete) => no_delete = true,
                Err(_) => {}
            }
        }
        let watcher = Watcher {
            conn: self.conn,
            stream: self.stream,
            id,
            filter: Filter {
                range: range.clone(),
                no_put,
                no_delete,
                prev_kv: req.prev_kv,
            },
            start_rev,
            next_rev: start_rev,
            synced: start_rev > cur,
            progress_notify: req.progress_notify,
            fragment: req.fragment,
            active: false,
            wire: self.wire,
            tx: self.tx.clone(),
        };
        // The created response goes in before the watcher is visible to publish or catch-up,
        // which is what keeps it ahead of the watcher's events.
        permit.send(control_message(
            cur,
            WatchResponse {
                watch_id: id,
                created: true,
                ..Default::default()
            },
        ));
        let synced = watcher.synced;
        st.watchers.insert(wk, watcher);
        if synced {
            st.index_add(wk, &range);
            st.generation += 1;
        } else {
            st.unsynced.insert(wk);
            st.wake = true;
            self.shared.cond.notify_one();
        }
        Ok(id)
    }

    /// Refuses a create before it reaches the hub (the auth layer's answer): queues `created`
    /// and `canceled` with watch ID -1 and `reason`, in order with the other answers.
    pub async fn refuse(&self, reason: String) -> Result<(), StreamClosed> {
        let permit = self.tx.reserve().await.map_err(|_| StreamClosed)?;
        let cur = self.shared.state.lock().rev;
        permit.send(control_message(
            cur,
            WatchResponse {
                watch_id: INVALID_WATCH_ID,
                created: true,
                canceled: true,
                cancel_reason: reason,
                ..Default::default()
            },
        ));
        Ok(())
    }

    /// Cancels a watcher: queues `{watch_id, canceled}` at the current revision; an unknown ID
    /// gets no answer (etcd 3.4). Waits while the stream's queue is full.
    pub async fn cancel(&self, watch_id: i64) -> Result<(), StreamClosed> {
        let permit = self.tx.reserve().await.map_err(|_| StreamClosed)?;
        let mut st = self.shared.state.lock();
        let Some(stream) = st.streams.get_mut(&self.stream) else {
            return Err(StreamClosed);
        };
        let Some(slot) = stream.ids.remove(&watch_id) else {
            return Ok(());
        };
        if let Some(wk) = slot {
            st.remove_watcher(wk);
        }
        let resp = WatchResponse {
            watch_id,
            canceled: true,
            ..Default::default()
        };
        permit.send(control_message(st.rev, resp));
        // The cancelled watcher may have been the one holding back a progress request.
        st.answer_deferred();
        Ok(())
    }

    /// A progress request: one response with watch ID -1 and the current revision, sent as soon
    /// as every watcher of the stream is synced up to it (at once if none is lagging or there
    /// are none). Requests made while one is pending are answered by that one.
    pub async fn request_progress(&self) -> Result<(), StreamClosed> {
        let permit = self.tx.reserve().await.map_err(|_| StreamClosed)?;
        let mut st = self.shared.state.lock();
        let st = &mut *st;
        let Some(stream) = st.streams.get(&self.stream) else {
            return Err(StreamClosed);
        };
        if stream.progress_pending {
            return Ok(());
        }
        if st.progress_ready(stream) {
            permit.send(progress_message(INVALID_WATCH_ID, st.rev));
        } else if let Some(stream) = st.streams.get_mut(&self.stream) {
            stream.progress_pending = true;
            st.deferred.insert(self.stream);
        }
        Ok(())
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        if let Some(stream) = st.streams.remove(&self.stream) {
            for wk in stream.ids.values().flatten() {
                st.remove_watcher(*wk);
            }
        }
        st.deferred.remove(&self.stream);
    }
}

/// The response side of one watch stream: yields responses in order, split into fragments for
/// watchers that asked for them. Ends when the [`WatchStream`] is dropped and the queue is empty.
#[derive(Debug)]
pub struct WatchReceiver {
    rx: mpsc::Receiver<Outgoing>,
    /// Remaining fragments of a split response.
    pending: VecDeque<StreamMessage>,
    fragment_limit: usize,
}

impl WatchReceiver {
    /// The next response, waiting for one.
    pub async fn recv(&mut self) -> Option<StreamMessage> {
        if let Some(m) = self.pending.pop_front() {
            return Some(m);
        }
        let out = self.rx.recv().await?;
        Some(self.unpack(out))
    }

    /// Polls for the next response (for serving the receiver directly as a stream, without a
    /// task and a second channel in between).
    pub fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<StreamMessage>> {
        if let Some(m) = self.pending.pop_front() {
            return std::task::Poll::Ready(Some(m));
        }
        match self.rx.poll_recv(cx) {
            std::task::Poll::Ready(Some(out)) => std::task::Poll::Ready(Some(self.unpack(out))),
            std::task::Poll::Ready(None) => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    /// The next response if one is ready.
    pub fn try_recv(&mut self) -> Option<StreamMessage> {
        if let Some(m) = self.pending.pop_front() {
            return Some(m);
        }
        let out = self.rx.try_recv().ok()?;
        Some(self.unpack(out))
    }

    fn unpack(&mut self, out: Outgoing) -> StreamMessage {
        if !out.fragment {
            return out.msg;
        }
        let mut parts = fragment(out.msg, self.fragment_limit);
        let first = parts.pop_front();
        self.pending.extend(parts);
        // `fragment` never returns an empty list; this is only a fallback.
        first.unwrap_or_default()
    }
}

/// Upper bound of the encoded header the front door will add (all fields at their widest).
fn header_len(revision: i64) -> usize {
    let h = ResponseHeader {
        cluster_id: u64::MAX,
        member_id: u64::MAX,
        revision,
        raft_term: u64::MAX,
    };
    prost::encoding::message::encoded_len(1, &h)
}

/// Splits a response as etcd's `sendFragments`: if its encoded size (with header) is at least
/// `limit` and it has more than one event, into parts each below `limit` (or of one event), all
/// but the last with `fragment = true`. Otherwise the response unchanged. Decoded events stay
/// decoded and pre-encoded ones stay encoded; a response with both comes out all encoded.
pub fn fragment(msg: StreamMessage, limit: usize) -> VecDeque<StreamMessage> {
    use prost::Message;
    let header = header_len(msg.revision);
    let total = header + msg.response.encoded_len() + msg.wire.encoded_len();
    if total < limit {
        return VecDeque::from([msg]);
    }
    let wire_fields = msg.wire.split();
    if msg.response.events.len() + wire_fields.len() < 2 {
        return VecDeque::from([msg]);
    }
    let StreamMessage {
        revision,
        mut response,
        wire,
    } = msg;
    let events = std::mem::take(&mut response.events);
    let mut shell = response;
    shell.fragment = true;
    let base = header + shell.encoded_len();
    let part = |response: WatchResponse, wire: WireEvents| StreamMessage {
        revision,
        response,
        wire,
    };

    let mut parts: VecDeque<StreamMessage> = if wire.is_empty() {
        let sized = events.into_iter().map(|ev| {
            let sz = prost::encoding::message::encoded_len(11, &ev);
            (ev, sz)
        });
        group(sized, base, limit)
            .into_iter()
            .map(|evs| {
                part(
                    WatchResponse {
                        events: evs,
                        ..shell.clone()
                    },
                    WireEvents::default(),
                )
            })
            .collect()
    } else {
        let mut fields = WireEvents::encode(&events).split();
        fields.extend(wire_fields);
        let sized = fields.into_iter().map(|f| {
            let sz = f.len();
            (f, sz)
        });
        group(sized, base, limit)
            .into_iter()
            .map(|fs| part(shell.clone(), WireEvents::from_fields(fs)))
            .collect()
    };
    if let Some(last) = parts.back_mut() {
        last.response.fragment = false;
    }
    parts
}

/// Groups sized items in order so each group's `base` plus sizes stays below `limit`, except a
/// group of one item that alone reaches it.
fn group<T>(items: impl Iterator<Item = (T, usize)>, base: usize, limit: usize) -> Vec<Vec<T>> {
    let mut groups = Vec::new();
    let mut cur = Vec::new();
    let mut size = base;
    for (item, sz) in items {
        if !cur.is_empty() && size + sz >= limit {
            groups.push(std::mem::take(&mut cur));
            size = base;
        }
        cur.push(item);
        size += sz;
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    groups
}
