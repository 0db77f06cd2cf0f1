//! Watch fan-out: many watchers on one prefix while a few writers put under it; measures the
//! events per second delivered to all watchers together and the put-to-delivery latency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::WatchOptions;
use hdrhistogram::Histogram;
use tokio::sync::{oneshot, watch};

use crate::error::{BenchError, Result};
use crate::load::{Pool, Sample, Window};
use crate::target::Cluster;

/// Watch streams per gRPC connection.
const WATCHERS_PER_CONN: usize = 50;
/// Value size of the watched puts; a timestamp leads it.
const VALUE_LEN: usize = 64;
/// How long delivery may lag behind the last write before the step gives up waiting.
const DRAIN: Duration = Duration::from_secs(15);

struct Seen {
    events: u64,
    last: Option<Instant>,
    hist: Histogram<u64>,
}

/// `watchers` watchers on a fresh prefix, `writers` concurrent writers for the window.
pub(crate) async fn run(
    cluster: &Cluster,
    name: &str,
    watchers: usize,
    writers: usize,
    window: Window,
) -> Result<Sample> {
    let kind = cluster.kind.name();
    let prefix = format!("watch/{watchers}/");
    let base = Instant::now();
    let pool = Pool::open(&cluster.urls, watchers.div_ceil(WATCHERS_PER_CONN).min(64)).await?;
    let delivered = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::with_capacity(watchers);
    let mut created = Vec::with_capacity(watchers);
    for w in 0..watchers {
        let mut client = pool.client(w);
        let prefix = prefix.clone();
        let delivered = delivered.clone();
        let mut stop = stop_rx.clone();
        let (ready_tx, ready_rx) = oneshot::channel::<std::result::Result<(), String>>();
        created.push(ready_rx);
        tasks.push(tokio::spawn(async move {
            let mut seen = Seen { events: 0, last: None, hist: crate::load::histogram() };
            let mut stream = match client.watch(prefix, Some(WatchOptions::new().with_prefix())).await {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return seen;
                }
            };
            let mut ready_tx = Some(ready_tx);
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    msg = stream.message() => match msg {
                        Ok(Some(resp)) => {
                            if resp.created() {
                                if let Some(tx) = ready_tx.take() {
                                    let _ = tx.send(Ok(()));
                                }
                                continue;
                            }
                            let now = Instant::now();
                            let since = now.duration_since(base).as_micros() as u64;
                            for ev in resp.events() {
                                if let Some(sent) = ev.kv().and_then(|kv| kv.value().get(..8)) {
                                    let mut b = [0u8; 8];
                                    b.copy_from_slice(sent);
                                    let _ = seen.hist.record(since.saturating_sub(u64::from_le_bytes(b)).max(1));
                                }
                            }
                            let n = resp.events().len() as u64;
                            seen.events += n;
                            seen.last = Some(now);
                            delivered.fetch_add(n, Ordering::Relaxed);
                        }
                        Ok(None) | Err(_) => {
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(Err("watch stream ended before it was created".into()));
                            }
                            break;
                        }
                    },
                }
            }
            seen
        }));
    }
    for rx in created {
        match rx.await {
            Ok(Ok(())) => {}
            Ok(Err(last)) => {
                return Err(BenchError::NoProgress {
                    workload: name.into(),
                    kind,
                    errors: 1,
                    last,
                })
            }
            Err(_) => {
                return Err(BenchError::NoProgress {
                    workload: name.into(),
                    kind,
                    errors: 1,
                    last: "watcher task ended".into(),
                })
            }
        }
    }

    // Writers run for the whole window; a timestamp (µs since `base`) leads every value.
    let wpool = Pool::for_clients(&cluster.urls, writers).await?;
    let started = Instant::now();
    let end = started + window.warmup + window.measure;
    let mut wtasks = Vec::new();
    for w in 0..writers {
        let mut c = wpool.client(w);
        let prefix = prefix.clone();
        wtasks.push(tokio::spawn(async move {
            let (mut ok, mut errors, mut last) = (0u64, 0u64, None);
            let mut n = 0u64;
            while Instant::now() < end {
                n += 1;
                let mut value = vec![b'w'; VALUE_LEN];
                let at = Instant::now().duration_since(base).as_micros() as u64;
                value[..8].copy_from_slice(&at.to_le_bytes());
                match c.put(format!("{prefix}{w:03}/{n:010}"), value, None).await {
                    Ok(_) => ok += 1,
                    Err(e) => {
                        errors += 1;
                        last = Some(format!("put: {e}"));
                    }
                }
            }
            (ok, errors, last)
        }));
    }
    let (mut puts, mut errors, mut last_error) = (0u64, 0u64, None);
    for t in wtasks {
        let (ok, err, last) = t
            .await
            .unwrap_or_else(|e| (0, 1, Some(format!("writer task: {e}"))));
        puts += ok;
        errors += err;
        last_error = last.or(last_error);
    }
    let expected = puts * watchers as u64;
    let drain_end = Instant::now() + DRAIN;
    while delivered.load(Ordering::Relaxed) < expected && Instant::now() < drain_end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    let mut hist = crate::load::histogram();
    let mut events = 0u64;
    let mut last = started;
    for t in tasks {
        if let Ok(seen) = t.await {
            events += seen.events;
            let _ = hist.add(&seen.hist);
            if let Some(l) = seen.last {
                last = last.max(l);
            }
        }
    }
    if events == 0 {
        return Err(BenchError::NoProgress {
            workload: name.into(),
            kind,
            errors,
            last: "no event delivered".into(),
        });
    }
    let secs = last.duration_since(started).as_secs_f64().max(1e-3);
    let missing = expected.saturating_sub(events);
    if missing > 0 {
        last_error = Some(format!(
            "{missing} of {expected} events not delivered within {} s after the writers stopped",
            DRAIN.as_secs()
        ));
    }
    Ok(Sample {
        rate: events as f64 / secs,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        errors: errors + missing,
        last_error,
        ops_total: events,
    })
}
