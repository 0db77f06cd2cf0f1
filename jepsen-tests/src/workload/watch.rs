//! Watchers and leases: one watcher per member on the phase's watch prefix, all from the same start revision,
//! each resuming from the revision after its last event whenever its stream breaks and also every few seconds
//! on purpose (to exercise resumption); writers putting unique values; and a lease task writing groups of keys
//! under short leases that are never kept alive, so they expire during the faults.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{bounded, Conn, Ctx, ERROR_BACKOFF};
use crate::checker::watch::{AckedPut, LeaseGroup, WatchEvent, WatchHistory, WatcherLog};

/// TTL of the workload's leases (etcd's minimum with a 1 s election timeout is 2 s).
pub const LEASE_TTL: i64 = 3;
/// Keys per lease.
pub const LEASE_KEYS: usize = 3;
/// Bound for expired leases' keys to disappear after the phase.
pub const LEASE_VANISH_BOUND: Duration = Duration::from_secs(60);
/// Bound for every watcher to reach the fence revision after the phase.
pub const CATCH_UP_BOUND: Duration = Duration::from_secs(60);

/// The watch and lease workload of one phase.
pub struct WatchWorkload {
    prefix: String,
    start: i64,
    logs: Vec<Arc<Mutex<WatcherLog>>>,
    acked: Arc<Mutex<Vec<AckedPut>>>,
    written: Arc<Mutex<HashSet<String>>>,
    leases: Arc<Mutex<Vec<LeaseGroup>>>,
    /// Violations seen while running (a watch cancelled by the server).
    errors: Arc<Mutex<Vec<String>>>,
    /// The fence revision, once written (0 before).
    end: Arc<AtomicI64>,
    /// Tells watchers to give up.
    abort: Arc<AtomicBool>,
    /// Puts attempted (plain and lease groups).
    pub puts: Arc<AtomicUsize>,
    watcher_tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl WatchWorkload {
    /// Reads the current revision (through any member) so that every watcher starts right after it.
    pub async fn new(ctx: &Ctx) -> Result<WatchWorkload, String> {
        let mut conn = Conn::new(0);
        let mut last = String::from("no member reachable");
        for _ in 0..20 {
            if let Some(c) = conn.get(ctx).await {
                match bounded(ctx, c.get(format!("{}watch/", ctx.prefix), None)).await {
                    Ok(Ok(r)) => {
                        let rev = r.header().map(|h| h.revision()).unwrap_or(0);
                        return Ok(WatchWorkload {
                            prefix: format!("{}watch/", ctx.prefix),
                            start: rev + 1,
                            logs: Vec::new(),
                            acked: Default::default(),
                            written: Default::default(),
                            leases: Default::default(),
                            errors: Default::default(),
                            end: Arc::new(AtomicI64::new(0)),
                            abort: Arc::new(AtomicBool::new(false)),
                            puts: Arc::new(AtomicUsize::new(0)),
                            watcher_tasks: Vec::new(),
                        });
                    }
                    Ok(Err(e)) => last = e.to_string(),
                    Err(()) => last = "timeout".into(),
                }
            }
            conn.reset();
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
        Err(format!(
            "watch workload: cannot read the start revision: {last}"
        ))
    }

    /// Starts `watchers` watchers (watcher `w` on member `w`), `writers` writers and the lease task. The
    /// returned handles end when the phase stops; the watchers are joined by [`WatchWorkload::finish`].
    pub fn spawn(
        &mut self,
        rt: &tokio::runtime::Handle,
        ctx: &Ctx,
        watchers: usize,
        writers: usize,
        seed: u64,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        for w in 0..watchers {
            let log = Arc::new(Mutex::new(WatcherLog::default()));
            self.logs.push(log.clone());
            let rng = StdRng::seed_from_u64(seed.wrapping_add(31 * w as u64));
            self.watcher_tasks.push(rt.spawn(watcher(
                ctx.clone(),
                self.prefix.clone(),
                self.start,
                w,
                log,
                self.end.clone(),
                self.abort.clone(),
                self.errors.clone(),
                rng,
            )));
        }
        let mut handles = Vec::new();
        for w in 0..writers {
            let rng = StdRng::seed_from_u64(seed.wrapping_add(1_000 + w as u64));
            handles.push(rt.spawn(writer(
                ctx.clone(),
                self.prefix.clone(),
                w + 1,
                self.acked.clone(),
                self.written.clone(),
                self.puts.clone(),
                rng,
            )));
        }
        handles.push(rt.spawn(lease_task(
            ctx.clone(),
            self.prefix.clone(),
            self.leases.clone(),
            self.written.clone(),
            self.puts.clone(),
        )));
        handles
    }

    /// After the writers stopped: waits (bounded) for expired leases' keys to vanish, writes the fence, waits
    /// (bounded) for every watcher to reach it, and returns the history to check.
    pub async fn finish(&mut self, ctx: &Ctx) -> WatchHistory {
        let mut conn = Conn::new(0);
        let lease_prefix = format!("{}lease/", self.prefix);
        let t = Instant::now();
        let mut vanished = false;
        let mut remaining = -1;
        while t.elapsed() < LEASE_VANISH_BOUND {
            if let Some(c) = conn.get(ctx).await {
                let opts = GetOptions::new().with_prefix().with_count_only();
                match bounded(ctx, c.get(lease_prefix.as_str(), Some(opts))).await {
                    Ok(Ok(r)) if r.count() == 0 => {
                        vanished = true;
                        break;
                    }
                    Ok(Ok(r)) => remaining = r.count(),
                    _ => conn.reset(),
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if !vanished {
            self.errors.lock().push(format!(
                "{remaining} keys of expired leases still present {LEASE_VANISH_BOUND:?} after the phase"
            ));
        }
        let fence_value = format!("fence-{}", ctx.fresh_value());
        self.written.lock().insert(fence_value.clone());
        let mut end = 0;
        for _ in 0..20 {
            if let Some(c) = conn.get(ctx).await {
                let key = format!("{}fence", self.prefix);
                if let Ok(Ok(r)) = bounded(ctx, c.put(key, fence_value.as_str(), None)).await {
                    end = r.header().map(|h| h.revision()).unwrap_or(0);
                    break;
                }
            }
            conn.reset();
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
        if end == 0 {
            self.errors
                .lock()
                .push("could not write the fence key after the phase".into());
            end = i64::MAX;
        }
        self.end.store(end, Ordering::SeqCst);
        let t = Instant::now();
        for mut h in self.watcher_tasks.drain(..) {
            let left = CATCH_UP_BOUND.saturating_sub(t.elapsed());
            if tokio::time::timeout(left, &mut h).await.is_err() {
                // Past the bound: stop every watcher (they look at the flag at least every 500 ms).
                self.abort.store(true, Ordering::SeqCst);
                let _ = h.await;
            }
        }
        self.abort.store(true, Ordering::SeqCst);
        WatchHistory {
            start: self.start,
            end,
            watchers: self.logs.iter().map(|l| l.lock().clone()).collect(),
            acked: self.acked.lock().clone(),
            written: self.written.lock().clone(),
            leases: self.leases.lock().clone(),
        }
    }

    /// Violations seen while running.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().clone()
    }
}

#[allow(clippy::too_many_arguments)]
async fn watcher(
    ctx: Ctx,
    prefix: String,
    start: i64,
    home: usize,
    log: Arc<Mutex<WatcherLog>>,
    end: Arc<AtomicI64>,
    abort: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
    mut rng: StdRng,
) {
    let mut next = start;
    let mut conn = Conn::new(home);
    let reached = |next: i64| {
        let e = end.load(Ordering::SeqCst);
        e > 0 && next > e
    };
    'outer: while !reached(next) && !abort.load(Ordering::SeqCst) {
        let Some(c) = conn.get(&ctx).await else {
            tokio::time::sleep(ERROR_BACKOFF).await;
            continue;
        };
        let opts = WatchOptions::new().with_prefix().with_start_revision(next);
        let mut stream = match bounded(&ctx, c.watch(prefix.as_str(), Some(opts))).await {
            Ok(Ok(s)) => s,
            _ => {
                conn.reset();
                tokio::time::sleep(ERROR_BACKOFF).await;
                continue;
            }
        };
        log.lock().resumes += 1;
        // Resume on purpose after a while even if nothing broke.
        let session = Instant::now() + Duration::from_millis(rng.gen_range(2_000..6_000));
        loop {
            if reached(next) || abort.load(Ordering::SeqCst) {
                break 'outer;
            }
            let left = session.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match tokio::time::timeout(left.min(Duration::from_millis(500)), stream.message()).await
            {
                Err(_) => continue,
                Ok(Ok(Some(r))) => {
                    if r.canceled() {
                        errors.lock().push(format!(
                            "watcher {home}: watch from revision {next} cancelled (compact revision {}, reason {:?})",
                            r.compact_revision(),
                            r.cancel_reason()
                        ));
                        conn.reset();
                        tokio::time::sleep(ERROR_BACKOFF).await;
                        break;
                    }
                    let mut l = log.lock();
                    for ev in r.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let rev = kv.mod_revision();
                        l.events.push(WatchEvent {
                            revision: rev,
                            key: String::from_utf8_lossy(kv.key()).into_owned(),
                            value: match ev.event_type() {
                                EventType::Put => {
                                    Some(String::from_utf8_lossy(kv.value()).into_owned())
                                }
                                EventType::Delete => None,
                            },
                        });
                        next = next.max(rev + 1);
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    conn.reset();
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    break;
                }
            }
        }
    }
}

async fn writer(
    ctx: Ctx,
    prefix: String,
    home: usize,
    acked: Arc<Mutex<Vec<AckedPut>>>,
    written: Arc<Mutex<HashSet<String>>>,
    puts: Arc<AtomicUsize>,
    mut rng: StdRng,
) {
    let mut conn = Conn::new(home);
    while !ctx.stopped() {
        let key = format!("{prefix}w/{}", rng.gen_range(0..5));
        let value = format!("v{}", ctx.fresh_value());
        let Some(c) = conn.get(&ctx).await else {
            tokio::time::sleep(ERROR_BACKOFF).await;
            continue;
        };
        written.lock().insert(value.clone());
        puts.fetch_add(1, Ordering::Relaxed);
        match bounded(&ctx, c.put(key.as_str(), value.as_str(), None)).await {
            Ok(Ok(r)) => acked.lock().push(AckedPut {
                key,
                value,
                revision: r.header().map(|h| h.revision()).unwrap_or(0),
            }),
            _ => {
                conn.reset();
                tokio::time::sleep(ERROR_BACKOFF).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(10..60))).await;
    }
}

async fn lease_task(
    ctx: Ctx,
    prefix: String,
    leases: Arc<Mutex<Vec<LeaseGroup>>>,
    written: Arc<Mutex<HashSet<String>>>,
    puts: Arc<AtomicUsize>,
) {
    let mut conn = Conn::new(0);
    while !ctx.stopped() {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let Some(c) = conn.get(&ctx).await else {
            continue;
        };
        let id = match bounded(&ctx, c.lease_grant(LEASE_TTL, None)).await {
            Ok(Ok(r)) => r.id(),
            _ => {
                conn.reset();
                continue;
            }
        };
        let keys: Vec<String> = (0..LEASE_KEYS)
            .map(|j| format!("{prefix}lease/{id:x}/{j}"))
            .collect();
        let ops: Vec<TxnOp> = keys
            .iter()
            .map(|k| {
                let v = format!("l{}", ctx.fresh_value());
                written.lock().insert(v.clone());
                TxnOp::put(k.as_str(), v, Some(PutOptions::new().with_lease(id)))
            })
            .collect();
        puts.fetch_add(1, Ordering::Relaxed);
        let revision = match bounded(&ctx, c.txn(Txn::new().and_then(ops))).await {
            Ok(Ok(r)) => r.header().map(|h| h.revision()),
            _ => {
                conn.reset();
                None
            }
        };
        leases.lock().push(LeaseGroup {
            lease: id,
            keys,
            revision,
        });
    }
}
