//! Hub tests against a tiny in-memory history that behaves like the store's.

use super::*;
use std::time::Duration;
use tokio::time::timeout;

/// The store's history as the hub sees it, kept in a vector of events.
#[derive(Default)]
struct Mem {
    events: Vec<Event>,
    rev: i64,
    compact: i64,
    live: HashMap<Bytes, KeyValue>,
}

struct MemHistory {
    inner: Mutex<Mem>,
    /// While set, history reads wait: tests use it to keep a watcher unsynced.
    paused: std::sync::atomic::AtomicBool,
    /// Like the store's backend scan: reads below the compaction point do not fail.
    lenient: std::sync::atomic::AtomicBool,
    /// Serialises writers so append + publish is one step, as in the store's apply thread.
    writer: Mutex<()>,
}

impl MemHistory {
    fn new() -> Arc<Self> {
        Arc::new(MemHistory {
            inner: Mutex::new(Mem {
                rev: 1,
                ..Default::default()
            }),
            paused: Default::default(),
            lenient: Default::default(),
            writer: Mutex::new(()),
        })
    }
}

impl History for MemHistory {
    fn current_revision(&self) -> i64 {
        self.inner.lock().rev
    }

    fn compact_revision(&self) -> i64 {
        self.inner.lock().compact
    }

    fn events(&self, from: i64, to: i64, max_revs: usize) -> Result<Vec<Event>, StoreError> {
        while self.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let m = self.inner.lock();
        if from < m.compact && !self.lenient.load(Ordering::SeqCst) {
            return Err(StoreError::Compacted);
        }
        let mut out = Vec::new();
        let (mut distinct, mut last) = (0, 0);
        for ev in &m.events {
            let r = event_rev(ev);
            if r < from || r > to {
                continue;
            }
            if r != last {
                if distinct == max_revs {
                    break;
                }
                distinct += 1;
                last = r;
            }
            out.push(ev.clone());
        }
        Ok(out)
    }

    fn kv_at(&self, key: &[u8], rev: i64) -> Result<Option<KeyValue>, StoreError> {
        let m = self.inner.lock();
        if rev < m.compact {
            return Ok(None);
        }
        let mut found = None;
        for ev in &m.events {
            let Some(kv) = ev.kv.as_ref() else { continue };
            if kv.mod_revision > rev {
                break;
            }
            if kv.key.as_ref() == key {
                found = (ev.r#type == EventType::Put as i32).then(|| kv.clone());
            }
        }
        Ok(found)
    }
}

/// One operation of a revision: a put (`Some(value)`) or a delete (`None`).
type Op<'a> = (&'a str, Option<&'a str>);

struct Fixture {
    hist: Arc<MemHistory>,
    hub: Arc<WatchHub>,
}

impl Fixture {
    fn new() -> Self {
        Self::with(WatchHubOptions::default())
    }

    fn with(opts: WatchHubOptions) -> Self {
        let hist = MemHistory::new();
        let hub = WatchHub::with_options(hist.clone(), opts);
        Fixture { hist, hub }
    }

    /// Builds the events of one revision into history (no publish). None when nothing changed.
    fn stage(m: &mut Mem, ops: &[Op<'_>]) -> Option<Vec<Event>> {
        let rev = m.rev + 1;
        let mut evs = Vec::new();
        for (k, v) in ops {
            let key = Bytes::copy_from_slice(k.as_bytes());
            match v {
                Some(v) => {
                    let prev = m.live.get(&key);
                    let kv = KeyValue {
                        key: key.clone(),
                        create_revision: prev.map_or(rev, |p| p.create_revision),
                        mod_revision: rev,
                        version: prev.map_or(1, |p| p.version + 1),
                        value: Bytes::copy_from_slice(v.as_bytes()),
                        lease: 0,
                    };
                    m.live.insert(key, kv.clone());
                    evs.push(Event {
                        r#type: EventType::Put as i32,
                        kv: Some(kv),
                        prev_kv: None,
                    });
                }
                None => {
                    if m.live.remove(&key).is_some() {
                        evs.push(Event {
                            r#type: EventType::Delete as i32,
                            kv: Some(KeyValue {
                                key,
                                mod_revision: rev,
                                ..Default::default()
                            }),
                            prev_kv: None,
                        });
                    }
                }
            }
        }
        if evs.is_empty() {
            return None;
        }
        m.rev = rev;
        m.events.extend(evs.iter().cloned());
        Some(evs)
    }

    /// Applies several revisions as one batch and publishes them with one call.
    fn batch(&self, txns: &[&[Op<'_>]]) -> i64 {
        let _w = self.hist.writer.lock();
        let (evs, rev) = {
            let mut m = self.hist.inner.lock();
            let mut all = Vec::new();
            for ops in txns {
                all.extend(Self::stage(&mut m, ops).unwrap_or_default());
            }
            (all, m.rev)
        };
        self.hub.publish(evs, rev);
        rev
    }

    fn txn(&self, ops: &[Op<'_>]) -> i64 {
        self.batch(&[ops])
    }

    fn put(&self, k: &str, v: &str) -> i64 {
        self.txn(&[(k, Some(v))])
    }

    fn del(&self, k: &str) -> i64 {
        self.txn(&[(k, None)])
    }

    fn compact(&self, rev: i64) {
        self.hist.inner.lock().compact = rev;
        self.hub.compacted(rev);
    }

    fn rev(&self) -> i64 {
        self.hist.inner.lock().rev
    }

    /// All events in history with revision >= from, as a watcher on everything would get them.
    fn history_from(&self, from: i64) -> Vec<Event> {
        let m = self.hist.inner.lock();
        m.events
            .iter()
            .filter(|e| event_rev(e) >= from)
            .cloned()
            .collect()
    }
}

fn watch(key: &str) -> WatchCreateRequest {
    WatchCreateRequest {
        key: Bytes::copy_from_slice(key.as_bytes()),
        ..Default::default()
    }
}

fn watch_all(start: i64) -> WatchCreateRequest {
    WatchCreateRequest {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        start_revision: start,
        ..Default::default()
    }
}

async fn next(rx: &mut WatchReceiver) -> StreamMessage {
    timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no watch response within 10s")
        .expect("watch stream ended")
}

async fn quiet(rx: &mut WatchReceiver, wait: Duration) {
    if let Ok(m) = timeout(wait, rx.recv()).await {
        panic!("unexpected watch response {m:?}");
    }
}

fn is_progress(m: &StreamMessage) -> bool {
    let r = &m.response;
    r.events.is_empty()
        && m.wire.is_empty()
        && !r.created
        && !r.canceled
        && r.compact_revision == 0
        && m.revision != 0
}

fn revs(m: &StreamMessage) -> Vec<i64> {
    all_events(m).iter().map(event_rev).collect()
}

#[tokio::test]
async fn ids_duplicates_and_refusals() {
    let f = Fixture::new();
    let (ws, mut rx) = f.hub.open_stream();

    assert_eq!(ws.create(watch("a")).await, Ok(0));
    let m = next(&mut rx).await;
    assert_eq!(
        m.revision, 1,
        "created header revision is the store revision"
    );
    assert!(m.response.created && !m.response.canceled);
    assert_eq!(m.response.watch_id, 0);

    let mut req = watch("b");
    req.watch_id = 2;
    assert_eq!(ws.create(req.clone()).await, Ok(2));
    assert_eq!(next(&mut rx).await.response.watch_id, 2);
    assert_eq!(ws.create(watch("c")).await, Ok(1));
    assert_eq!(next(&mut rx).await.response.watch_id, 1);
    assert_eq!(
        ws.create(watch("d")).await,
        Ok(3),
        "auto IDs skip used ones"
    );
    assert_eq!(next(&mut rx).await.response.watch_id, 3);

    assert_eq!(ws.create(req).await, Ok(INVALID_WATCH_ID));
    let m = next(&mut rx).await;
    assert_eq!(m.response.watch_id, -1);
    assert!(m.response.created && m.response.canceled);
    assert_eq!(m.response.cancel_reason, DUPLICATE_WATCH_ID_REASON);

    for (key, end) in [("b", "a"), ("a", "a")] {
        let req = WatchCreateRequest {
            key: Bytes::copy_from_slice(key.as_bytes()),
            range_end: Bytes::copy_from_slice(end.as_bytes()),
            ..Default::default()
        };
        assert_eq!(ws.create(req).await, Ok(-1));
        let m = next(&mut rx).await;
        assert!(m.response.created && m.response.canceled);
        assert_eq!(m.response.watch_id, -1);
        assert_eq!(m.response.cancel_reason, "mvcc: watcher range is empty");
    }
    let mut neg = watch("a");
    neg.start_revision = -3;
    assert_eq!(ws.create(neg).await, Ok(-1));
    assert_eq!(
        next(&mut rx).await.response.cancel_reason,
        INVALID_START_REVISION_REASON
    );

    // Refusals consume no ID; an empty key is "\0", so with range_end "\0" it sees everything.
    let all = WatchCreateRequest {
        range_end: Bytes::from_static(b"\0"),
        ..Default::default()
    };
    assert_eq!(ws.create(all).await, Ok(4));
    assert!(next(&mut rx).await.response.created);
    let rev = f.put("zzz", "1");
    let m = next(&mut rx).await;
    assert_eq!(
        (m.response.watch_id, m.revision, revs(&m)),
        (4, rev, vec![rev])
    );
    quiet(&mut rx, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn start_zero_sees_only_the_future_and_ranges_match() {
    let f = Fixture::new();
    f.put("a", "1");
    let (ws, mut rx) = f.hub.open_stream();
    ws.create(watch("a")).await.unwrap();
    assert_eq!(next(&mut rx).await.revision, 2);
    let prefix = WatchCreateRequest {
        key: Bytes::from_static(b"p/"),
        range_end: Bytes::from_static(b"p0"),
        ..Default::default()
    };
    ws.create(prefix).await.unwrap();
    next(&mut rx).await;

    f.put("b", "1");
    let r = f.put("a", "2");
    let m = next(&mut rx).await;
    assert_eq!((m.response.watch_id, revs(&m)), (0, vec![r]));
    let kv = m.response.events[0].kv.clone().unwrap();
    assert_eq!((kv.version, kv.create_revision), (2, 2));
    f.put("p0", "x");
    let r = f.put("p/x", "1");
    let m = next(&mut rx).await;
    assert_eq!((m.response.watch_id, revs(&m)), (1, vec![r]));
    quiet(&mut rx, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn one_publish_of_several_revisions() {
    let f = Fixture::new();
    let (ws, mut rx) = f.hub.open_stream();
    ws.create(watch_all(0)).await.unwrap();
    next(&mut rx).await;
    // A watcher that starts in the middle of the coming batch.
    ws.create(watch_all(3)).await.unwrap();
    next(&mut rx).await;
    let rev = f.batch(&[
        &[("a", Some("1"))],
        &[("b", Some("1")), ("c", Some("1"))],
        &[("a", None)],
    ]);
    assert_eq!(rev, 4);
    let mut got = HashMap::new();
    for _ in 0..2 {
        let m = next(&mut rx).await;
        assert_eq!(m.revision, 4);
        got.insert(m.response.watch_id, revs(&m));
    }
    assert_eq!(got[&0], vec![2, 3, 3, 4]);
    assert_eq!(got[&1], vec![3, 3, 4]);
}

/// Checks one watcher's responses: created first, then every event of `expected` exactly once
/// and in order, no revision split across responses, at most `max_revs` revisions per response.
async fn collect_until(
    rx: &mut WatchReceiver,
    watch_id: i64,
    last_rev: i64,
    max_revs: usize,
) -> Vec<Event> {
    let mut got = Vec::new();
    let mut prev_last = i64::MIN;
    let mut seen_last = last_rev <= 0;
    while !seen_last {
        let m = next(rx).await;
        assert_eq!(m.response.watch_id, watch_id);
        assert!(!m.response.canceled, "unexpected cancel {m:?}");
        let rs = revs(&m);
        if rs.is_empty() {
            continue;
        }
        assert!(
            rs[0] > prev_last,
            "revision {} split across responses",
            rs[0]
        );
        let mut distinct = rs.clone();
        distinct.dedup();
        assert!(
            distinct.len() <= max_revs,
            "{} revisions in one response",
            distinct.len()
        );
        prev_last = *rs.last().unwrap();
        seen_last = prev_last >= last_rev;
        got.extend(m.response.events);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_hands_over_to_live_without_gap_or_duplicate() {
    let f = Arc::new(Fixture::new());
    for i in 0..1500 {
        f.put(&format!("k{}", i % 10), &i.to_string());
    }
    let writer = {
        let f = f.clone();
        std::thread::spawn(move || {
            for i in 0..3000 {
                let k = format!("k{}", i % 10);
                match i % 7 {
                    0 => {
                        f.del(&k);
                    }
                    1 => {
                        let a = format!("k{}", (i + 1) % 10);
                        f.batch(&[&[(&k, Some("x"))], &[(&a, Some("y")), (&k, Some("z"))]]);
                    }
                    _ => {
                        f.put(&k, &i.to_string());
                    }
                }
                if i % 500 == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })
    };
    // Watchers created while the writer runs, from the deep past to the future.
    let mut watchers = Vec::new();
    for start in [1, 2, 700, 1501, 0, -1, 4000] {
        let start = if start == -1 { f.rev() - 3 } else { start };
        let (ws, mut rx) = f.hub.open_stream();
        let id = ws.create(watch_all(start)).await.unwrap();
        let created = next(&mut rx).await;
        assert!(created.response.created, "created must come first");
        let from = if start == 0 {
            created.revision + 1
        } else {
            start
        };
        watchers.push((ws, rx, id, from));
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    writer.join().unwrap();
    let last = f.rev();
    for (ws, mut rx, id, from) in watchers {
        let got = collect_until(&mut rx, id, last, WATCH_BATCH_MAX_REVS).await;
        let want = f.history_from(from.max(1));
        assert_eq!(got.len(), want.len(), "watch from {from}");
        assert!(got == want, "watch from {from}: events differ");
        quiet(&mut rx, Duration::from_millis(20)).await;
        drop(ws);
    }
    assert_eq!(f.hub.watcher_count(), 0);
}

#[tokio::test]
async fn compacted_start_is_cancelled_after_created() {
    let f = Fixture::new();
    for i in 0..10 {
        f.put("a", &i.to_string());
    }
    f.compact(6);
    let (ws, mut rx) = f.hub.open_stream();
    let mut req = watch_all(3);
    req.watch_id = 7;
    let id = ws.create(req).await.unwrap();
    assert_eq!(id, 7);
    let m = next(&mut rx).await;
    assert!(m.response.created && !m.response.canceled);
    assert_eq!(m.revision, 11);
    let m = next(&mut rx).await;
    assert_eq!(
        m.revision, 0,
        "etcd leaves the compaction cancel's header revision 0"
    );
    assert_eq!(m.response.watch_id, id);
    assert!(m.response.canceled);
    assert_eq!(m.response.compact_revision, 6);
    assert_eq!(f.hub.watcher_count(), 0);

    // The ID stays taken until the client cancels it.
    let mut dup = watch_all(6);
    dup.watch_id = id;
    assert_eq!(ws.create(dup.clone()).await, Ok(-1));
    assert_eq!(
        next(&mut rx).await.response.cancel_reason,
        DUPLICATE_WATCH_ID_REASON
    );
    ws.cancel(id).await.unwrap();
    let m = next(&mut rx).await;
    assert!(m.response.canceled && m.response.watch_id == id && m.revision == 11);

    // Watching from exactly the compaction revision is allowed.
    assert_eq!(ws.create(dup).await, Ok(id));
    next(&mut rx).await;
    let m = next(&mut rx).await;
    assert_eq!(revs(&m), (6..=11).collect::<Vec<_>>());
}

#[tokio::test]
async fn compaction_while_unsynced_cancels() {
    let f = Fixture::new();
    for i in 0..10 {
        f.put("a", &i.to_string());
    }
    let (ws, mut rx) = f.hub.open_stream();
    f.hist.paused.store(true, Ordering::SeqCst);
    ws.create(watch_all(2)).await.unwrap();
    next(&mut rx).await;
    // The store compacts before the hub hears of it: the history read itself fails.
    f.hist.inner.lock().compact = 5;
    f.hist.paused.store(false, Ordering::SeqCst);
    let m = next(&mut rx).await;
    assert!(m.response.canceled);
    assert_eq!(m.response.compact_revision, 5);
}

#[tokio::test]
async fn compaction_during_a_read_that_does_not_fail_cancels() {
    let f = Fixture::new();
    for i in 0..10 {
        f.put("a", &i.to_string());
    }
    f.hist.lenient.store(true, Ordering::SeqCst);
    f.hist.paused.store(true, Ordering::SeqCst);
    let (ws, mut rx) = f.hub.open_stream();
    ws.create(watch_all(2)).await.unwrap();
    next(&mut rx).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Compaction lands while the read is in flight; the hub is told only afterwards.
    f.hist.inner.lock().compact = 5;
    f.hist.paused.store(false, Ordering::SeqCst);
    let m = next(&mut rx).await;
    assert!(m.response.canceled && m.response.events.is_empty(), "{m:?}");
    assert_eq!(m.response.compact_revision, 5);
}

#[tokio::test]
async fn filters_drop_puts_or_deletes() {
    let f = Fixture::new();
    let (ws, mut rx) = f.hub.open_stream();
    let mut no_put = watch("a");
    no_put.filters = vec![FilterType::Noput as i32];
    let mut no_del = watch("a");
    no_del.filters = vec![FilterType::Nodelete as i32, 7];
    let np = ws.create(no_put).await.unwrap();
    let nd = ws.create(no_del).await.unwrap();
    next(&mut rx).await;
    next(&mut rx).await;
    let p = f.put("a", "1");
    let m = next(&mut rx).await;
    assert_eq!((m.response.watch_id, revs(&m)), (nd, vec![p]));
    let d = f.del("a");
    let m = next(&mut rx).await;
    assert_eq!((m.response.watch_id, revs(&m)), (np, vec![d]));
    assert_eq!(m.response.events[0].r#type, EventType::Delete as i32);
    quiet(&mut rx, Duration::from_millis(50)).await;
}

fn prevs_of(m: &StreamMessage) -> Vec<Option<Bytes>> {
    m.response
        .events
        .iter()
        .map(|e| e.prev_kv.as_ref().map(|kv| kv.value.clone()))
        .collect()
}

#[tokio::test]
async fn prev_kv_live_and_from_history() {
    let f = Fixture::new();
    let (ws, mut rx) = f.hub.open_stream();
    let mut req = watch("a");
    req.prev_kv = true;
    ws.create(req.clone()).await.unwrap();
    ws.create(watch("a")).await.unwrap();
    next(&mut rx).await;
    next(&mut rx).await;

    let r1 = f.put("a", "1");
    f.put("a", "2");
    f.del("a");
    f.put("a", "3");
    let mut live = Vec::new();
    for _ in 0..8 {
        let m = next(&mut rx).await;
        if m.response.watch_id == 0 {
            live.extend(prevs_of(&m));
        } else {
            assert!(
                prevs_of(&m).iter().all(Option::is_none),
                "prev_kv not asked for"
            );
        }
    }
    let b = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));
    assert_eq!(live, vec![None, b("1"), b("2"), None]);

    // The same from history.
    req.start_revision = r1;
    ws.create(req.clone()).await.unwrap();
    next(&mut rx).await;
    let m = next(&mut rx).await;
    assert_eq!(prevs_of(&m), vec![None, b("1"), b("2"), None]);
    let del = &m.response.events[2];
    let kv = del.kv.as_ref().unwrap();
    assert_eq!(
        (kv.key.as_ref(), kv.mod_revision, kv.version),
        (&b"a"[..], r1 + 2, 0)
    );

    // Below the compaction point the previous value is gone: the field is simply absent.
    f.compact(r1 + 1);
    req.start_revision = r1 + 1;
    ws.create(req).await.unwrap();
    next(&mut rx).await;
    let m = next(&mut rx).await;
    assert_eq!(prevs_of(&m), vec![None, b("2"), None]);
}

#[tokio::test]
async fn periodic_progress_for_idle_synced_watchers() {
    let f = Fixture::with(WatchHubOptions {
        progress_interval: Duration::from_millis(100),
        ..Default::default()
    });
    let (ws, mut rx) = f.hub.open_stream();
    let mut req = watch("p");
    req.progress_notify = true;
    let id = ws.create(req).await.unwrap();
    ws.create(watch("q")).await.unwrap();
    next(&mut rx).await;
    next(&mut rx).await;
    let rev = f.put("x", "1");
    let m = next(&mut rx).await;
    assert!(is_progress(&m), "{m:?}");
    assert_eq!((m.response.watch_id, m.revision), (id, rev));

    // A watcher that keeps getting events gets no progress notification.
    let mut got = Vec::new();
    for i in 0..20 {
        f.put("p", &i.to_string());
        tokio::time::sleep(Duration::from_millis(20)).await;
        while let Some(m) = rx.try_recv() {
            got.push(m);
        }
    }
    assert!(got.iter().all(|m| !is_progress(m)), "{got:?}");
    assert_eq!(got.len(), 20);
    // Idle again: notifications come back, only for the watcher that asked.
    let m = next(&mut rx).await;
    assert!(is_progress(&m) && m.response.watch_id == id && m.revision == f.rev());
}

#[tokio::test]
async fn requested_progress_waits_for_synced_watchers() {
    let f = Fixture::new();
    for i in 0..20 {
        f.put("a", &i.to_string());
    }
    let (ws, mut rx) = f.hub.open_stream();
    // No watchers: answered at once with the current revision.
    ws.request_progress().await.unwrap();
    let m = next(&mut rx).await;
    assert!(is_progress(&m));
    assert_eq!((m.response.watch_id, m.revision), (-1, 21));

    ws.create(watch("a")).await.unwrap();
    next(&mut rx).await;
    ws.request_progress().await.unwrap();
    let m = next(&mut rx).await;
    assert_eq!((m.response.watch_id, m.revision), (-1, 21));

    // An unsynced watcher (its history read is held back) defers the answer.
    f.hist.paused.store(true, Ordering::SeqCst);
    ws.create(watch_all(5)).await.unwrap();
    next(&mut rx).await;
    ws.request_progress().await.unwrap();
    ws.request_progress().await.unwrap();
    let live = f.put("a", "x");
    let m = next(&mut rx).await;
    assert_eq!((m.response.watch_id, revs(&m)), (0, vec![live]));
    quiet(&mut rx, Duration::from_millis(100)).await;
    f.hist.paused.store(false, Ordering::SeqCst);
    let mut seen = Vec::new();
    loop {
        let m = next(&mut rx).await;
        if is_progress(&m) {
            assert_eq!((m.response.watch_id, m.revision), (-1, live));
            break;
        }
        seen.extend(revs(&m));
    }
    assert_eq!(
        seen,
        (5..=live).collect::<Vec<_>>(),
        "every event <= R before progress R"
    );
    quiet(&mut rx, Duration::from_millis(100)).await;
}

#[tokio::test]
async fn progress_never_below_future_start() {
    let f = Fixture::with(WatchHubOptions {
        progress_interval: Duration::from_millis(50),
        ..Default::default()
    });
    let cur = f.rev();
    let (ws, mut rx) = f.hub.open_stream();
    let mut req = watch("a");
    req.start_revision = cur + 3;
    req.progress_notify = true;
    let id = ws.create(req).await.unwrap();
    next(&mut rx).await;
    ws.request_progress().await.unwrap();
    quiet(&mut rx, Duration::from_millis(200)).await;
    f.put("b", "1");
    quiet(&mut rx, Duration::from_millis(200)).await;
    let r = f.put("b", "2");
    assert_eq!(r, cur + 2);
    let m = next(&mut rx).await;
    assert!(is_progress(&m));
    assert_eq!((m.response.watch_id, m.revision), (-1, cur + 2));
    let m = next(&mut rx).await;
    assert!(is_progress(&m));
    assert_eq!((m.response.watch_id, m.revision), (id, cur + 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_becomes_victim_then_catches_up() {
    let f = Arc::new(Fixture::with(WatchHubOptions {
        stream_queue: 4,
        ..Default::default()
    }));
    let (slow, mut slow_rx) = f.hub.open_stream();
    let (fast, mut fast_rx) = f.hub.open_stream();
    slow.create(watch_all(0)).await.unwrap();
    fast.create(watch_all(0)).await.unwrap();
    next(&mut slow_rx).await;
    next(&mut fast_rx).await;

    // Nobody reads the slow stream: publish must go on regardless.
    let reader = tokio::spawn(async move {
        let got = collect_until(&mut fast_rx, 0, 401, 1000).await;
        (got, fast_rx)
    });
    for i in 0..200 {
        f.put(&format!("k{}", i % 3), "v");
    }
    {
        let st = f.hub.shared.state.lock();
        let victim = st
            .watchers
            .values()
            .any(|w| w.stream == slow.stream && !w.synced);
        assert!(victim, "the slow watcher is a victim");
    }
    let writer = {
        let f = f.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                f.put(&format!("k{}", i % 3), "w");
            }
        })
    };
    let got = collect_until(&mut slow_rx, 0, 401, 1000).await;
    writer.join().unwrap();
    assert!(
        got == f.history_from(2),
        "victim catch-up lost or repeated events"
    );
    let (fast_got, _fast_rx) = reader.await.unwrap();
    assert!(fast_got == f.history_from(2));
    drop((slow, fast));
}

#[test]
fn fragment_splits_like_etcd() {
    let ev = |i: i64| Event {
        r#type: EventType::Put as i32,
        kv: Some(KeyValue {
            key: Bytes::from(format!("key{i}")),
            mod_revision: 5,
            create_revision: 5,
            version: 1,
            value: Bytes::from(vec![b'v'; 100]),
            lease: 0,
        }),
        prev_kv: None,
    };
    let msg = StreamMessage {
        revision: 5,
        response: WatchResponse {
            watch_id: 3,
            events: (0..7).map(ev).collect(),
            ..Default::default()
        },
        wire: WireEvents::default(),
    };
    let limit = 350;
    let parts = fragment(msg.clone(), limit);
    assert!(parts.len() >= 3, "{} parts", parts.len());
    let n = parts.len();
    let mut all = Vec::new();
    for (i, p) in parts.into_iter().enumerate() {
        assert_eq!(p.response.fragment, i + 1 < n);
        assert_eq!((p.revision, p.response.watch_id), (5, 3));
        let size = header_len(5) + prost::Message::encoded_len(&p.response);
        assert!(
            size < limit || p.response.events.len() == 1,
            "part of {size} bytes"
        );
        all.extend(p.response.events);
    }
    assert_eq!(all, msg.response.events);

    // Small enough, or a single event however large: unchanged.
    assert_eq!(
        fragment(msg.clone(), 1 << 20),
        VecDeque::from([msg.clone()])
    );
    let mut one = msg;
    one.response.events.truncate(1);
    assert_eq!(fragment(one.clone(), 10), VecDeque::from([one]));
}

#[tokio::test]
async fn fragments_only_for_watchers_that_ask() {
    let f = Fixture::with(WatchHubOptions {
        fragment_limit: 300,
        ..Default::default()
    });
    let (ws, mut rx) = f.hub.open_stream();
    let mut req = watch_all(0);
    req.fragment = true;
    ws.create(req).await.unwrap();
    ws.create(watch_all(0)).await.unwrap();
    next(&mut rx).await;
    next(&mut rx).await;
    let big = "v".repeat(100);
    let ops: Vec<Op<'_>> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|k| (*k, Some(big.as_str())))
        .collect();
    f.txn(&ops);
    let mut frag = Vec::new();
    let mut whole = None;
    while whole.is_none()
        || frag
            .last()
            .is_none_or(|m: &StreamMessage| m.response.fragment)
    {
        let m = next(&mut rx).await;
        if m.response.watch_id == 0 {
            frag.push(m);
        } else {
            whole = Some(m);
        }
    }
    assert!(frag.len() > 1);
    let whole = whole.unwrap();
    assert!(!whole.response.fragment);
    assert_eq!(whole.response.events.len(), 6);
    let joined: Vec<Event> = frag.into_iter().flat_map(|m| m.response.events).collect();
    assert_eq!(joined, whole.response.events);
}

#[tokio::test]
async fn cancel_and_drop() {
    let f = Fixture::new();
    let (ws, mut rx) = f.hub.open_stream();
    let a = ws.create(watch("a")).await.unwrap();
    ws.create(watch("b")).await.unwrap();
    next(&mut rx).await;
    next(&mut rx).await;
    let rev = f.put("x", "1");
    ws.cancel(a).await.unwrap();
    let m = next(&mut rx).await;
    assert_eq!(
        (m.response.watch_id, m.response.canceled, m.revision),
        (a, true, rev)
    );
    ws.cancel(42).await.unwrap();
    f.put("a", "1");
    quiet(&mut rx, Duration::from_millis(50)).await;
    assert_eq!(f.hub.watcher_count(), 1);
    drop(ws);
    assert_eq!(f.hub.watcher_count(), 0);
    assert!(timeout(Duration::from_secs(1), rx.recv())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn closed_receiver_is_reported_and_publish_goes_on() {
    let f = Fixture::new();
    let (ws, rx) = f.hub.open_stream();
    ws.create(watch("a")).await.unwrap();
    drop(rx);
    f.put("a", "1");
    assert_eq!(ws.create(watch("b")).await, Err(StreamClosed));
    assert_eq!(ws.request_progress().await, Err(StreamClosed));
}

/// Watchers that share one range (indexed together) still get their own filters, and
/// cancelling one leaves the others, on the same and on other connections, in the index.
#[tokio::test]
async fn shared_ranges_keep_per_watcher_filters_and_survive_cancels() {
    let f = Fixture::new();
    let prefix = |filters: Vec<i32>| WatchCreateRequest {
        key: Bytes::from_static(b"p/"),
        range_end: Bytes::from_static(b"p0"),
        filters,
        ..Default::default()
    };
    let (ws1, mut rx1) = f.hub.open_wire_stream(7);
    let (ws2, mut rx2) = f.hub.open_wire_stream(3);
    let all1 = ws1.create(prefix(vec![])).await.unwrap();
    let np1 = ws1
        .create(prefix(vec![FilterType::Noput as i32]))
        .await
        .unwrap();
    let gone = ws1.create(prefix(vec![])).await.unwrap();
    let all2 = ws2.create(prefix(vec![])).await.unwrap();
    for _ in 0..3 {
        next(&mut rx1).await;
    }
    next(&mut rx2).await;
    ws1.cancel(gone).await.unwrap();
    assert!(next(&mut rx1).await.response.canceled);

    let p = f.put("p/a", "1");
    f.put("q", "1");
    let m = next(&mut rx1).await;
    assert_eq!((m.response.watch_id, revs(&m)), (all1, vec![p]));
    let m = next(&mut rx2).await;
    assert_eq!((m.response.watch_id, revs(&m)), (all2, vec![p]));
    let d = f.del("p/a");
    let mut got: Vec<(i64, Vec<i64>)> = Vec::new();
    for _ in 0..2 {
        let m = next(&mut rx1).await;
        got.push((m.response.watch_id, revs(&m)));
    }
    got.sort();
    assert_eq!(got, vec![(all1, vec![d]), (np1, vec![d])]);
    assert_eq!(revs(&next(&mut rx2).await), vec![d]);
    quiet(&mut rx1, Duration::from_millis(50)).await;

    // Dropping a whole stream takes its watchers out of the shared index too.
    drop(ws1);
    let p2 = f.put("p/b", "1");
    assert_eq!(revs(&next(&mut rx2).await), vec![p2]);
    assert_eq!(f.hub.watcher_count(), 1);
}

/// A message's events as the client decodes them: the decoded ones, then the pre-encoded ones.
fn all_events(m: &StreamMessage) -> Vec<Event> {
    let mut evs = m.response.events.clone();
    evs.extend(m.wire.decode().expect("the hub's own encoding decodes"));
    evs
}

#[test]
fn fragment_splits_pre_encoded_events_the_same_way() {
    let ev = |i: i64| Event {
        r#type: EventType::Put as i32,
        kv: Some(KeyValue {
            key: Bytes::from(format!("key{i}")),
            mod_revision: 5 + i,
            create_revision: 5,
            version: 1,
            value: Bytes::from(vec![b'v'; 90 + i as usize]),
            lease: 0,
        }),
        prev_kv: None,
    };
    let events: Vec<Event> = (0..7).map(ev).collect();
    let limit = 350;
    let decoded = StreamMessage {
        revision: 12,
        response: WatchResponse {
            watch_id: 3,
            events: events.clone(),
            ..Default::default()
        },
        wire: WireEvents::default(),
    };
    let mut wire = decoded.clone();
    wire.response.events.clear();
    wire.wire = WireEvents::encode(&events);
    // Two decoded (replayed) events ahead of five pre-encoded ones.
    let mut mixed = decoded.clone();
    mixed.response.events.truncate(2);
    mixed.wire = WireEvents::encode(&events[2..]);

    let plain_parts = fragment(decoded, limit);
    for msg in [wire.clone(), mixed] {
        let parts = fragment(msg, limit);
        assert_eq!(parts.len(), plain_parts.len());
        let n = parts.len();
        let mut all = Vec::new();
        for (i, (p, q)) in parts.iter().zip(&plain_parts).enumerate() {
            assert_eq!(p.response.fragment, i + 1 < n);
            assert_eq!((p.revision, p.response.watch_id), (12, 3));
            assert!(
                p.response.events.is_empty(),
                "mixed input comes out encoded"
            );
            let size = header_len(12) + prost::Message::encoded_len(&p.response);
            assert_eq!(
                size + p.wire.encoded_len(),
                header_len(12) + prost::Message::encoded_len(&q.response)
            );
            assert_eq!(all_events(p), q.response.events);
            all.extend(all_events(p));
        }
        assert_eq!(all, events);
    }
    // Small enough: unchanged, chunks and all.
    assert_eq!(fragment(wire.clone(), 1 << 20), VecDeque::from([wire]));
}

#[tokio::test]
async fn wire_streams_get_what_plain_streams_get() {
    let f = Fixture::with(WatchHubOptions {
        fragment_limit: 400,
        ..Default::default()
    });
    let (plain, mut plain_rx) = f.hub.open_stream();
    let (wire, mut wire_rx) = f.hub.open_wire_stream(7);
    let r0 = f.put("a", "0");
    let mut with_prev = watch("a");
    with_prev.prev_kv = true;
    let mut no_put = watch_all(0);
    no_put.filters = vec![FilterType::Noput as i32];
    let mut prefix_prev = WatchCreateRequest {
        key: Bytes::from_static(b"b"),
        range_end: Bytes::from_static(b"c"),
        prev_kv: true,
        fragment: true,
        ..Default::default()
    };
    let reqs = vec![watch_all(0), with_prev, no_put, prefix_prev.clone(), {
        // Starts in the past: catches up from history, then goes live.
        prefix_prev.start_revision = r0;
        prefix_prev.fragment = false;
        prefix_prev
    }];
    for req in &reqs {
        plain.create(req.clone()).await.unwrap();
        wire.create(req.clone()).await.unwrap();
    }
    let big = "x".repeat(150);
    let mut rev = r0;
    for round in 0..3 {
        let v = format!("v{round}");
        rev = f.batch(&[
            &[("a", Some(v.as_str())), ("b1", Some(big.as_str()))],
            &[("b2", Some(big.as_str())), ("z", Some(v.as_str()))],
            &[("b1", None)],
            &[("a", None), ("b3", Some(big.as_str()))],
        ]);
    }

    // Per watch ID, the responses in order: (revision, fragment, events as decoded).
    type Seen = HashMap<i64, Vec<(i64, bool, Vec<Event>)>>;
    async fn drain(rx: &mut WatchReceiver, watchers: usize, rev: i64) -> Seen {
        let mut seen: Seen = HashMap::new();
        let mut created = 0;
        loop {
            let done = created == watchers
                && seen.len() == watchers
                && seen.values().all(|v| {
                    v.last().is_some_and(|(_, frag, evs)| {
                        !frag && evs.last().is_some_and(|e| event_rev(e) == rev)
                    })
                });
            if done {
                return seen;
            }
            let m = next(rx).await;
            if m.response.created {
                created += 1;
                continue;
            }
            seen.entry(m.response.watch_id).or_default().push((
                m.revision,
                m.response.fragment,
                all_events(&m),
            ));
        }
    }
    let from_plain = drain(&mut plain_rx, reqs.len(), rev).await;
    let from_wire = drain(&mut wire_rx, reqs.len(), rev).await;
    // How history and live events group into responses depends on when the hub's sync loop runs, so
    // compare each watcher's events in order, not the response boundaries.
    let events = |seen: &Seen| -> HashMap<i64, Vec<Event>> {
        seen.iter()
            .map(|(id, rs)| (*id, rs.iter().flat_map(|(_, _, evs)| evs.clone()).collect()))
            .collect()
    };
    assert_eq!(events(&from_wire), events(&from_plain));
    // The fragmenting watcher did get fragments, and prev_kv came through encoded.
    assert!(from_wire[&3].iter().any(|(_, frag, _)| *frag));
    assert!(from_wire[&1]
        .iter()
        .flat_map(|(_, _, evs)| evs)
        .any(|e| e.prev_kv.is_some()));
    quiet(&mut wire_rx, Duration::from_millis(50)).await;
    drop((plain, wire));
}
