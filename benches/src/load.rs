//! Closed-loop load: many logical clients sharing a few gRPC connections spread over the
//! members, each issuing one request at a time, with latencies in an HDR histogram.

use std::time::{Duration, Instant};

use etcd_client::Client;
use futures::future::BoxFuture;
use hdrhistogram::Histogram;

use crate::error::{BenchError, Result};

/// Logical clients per gRPC connection (etcd's own benchmark runs 1 000 clients over 100).
const CLIENTS_PER_CONN: usize = 8;
/// Most connections opened for one workload.
const MAX_CONNS: usize = 32;

/// Connections spread round-robin over a cluster's members.
pub(crate) struct Pool {
    conns: Vec<Client>,
}

impl Pool {
    /// Opens enough connections for `clients` logical clients.
    pub(crate) async fn for_clients(urls: &[String], clients: usize) -> Result<Self> {
        Self::open(urls, clients.div_ceil(CLIENTS_PER_CONN).clamp(1, MAX_CONNS)).await
    }

    /// Opens `n` connections, connection `i` to member `i % members`.
    pub(crate) async fn open(urls: &[String], n: usize) -> Result<Self> {
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            conns.push(Client::connect([&urls[i % urls.len()]], None).await?);
        }
        Ok(Pool { conns })
    }

    /// The connection logical client `i` uses (a cheap handle on a shared channel).
    pub(crate) fn client(&self, i: usize) -> Client {
        self.conns[i % self.conns.len()].clone()
    }
}

/// One logical client's request loop body.
pub(crate) trait Op: Send + 'static {
    /// Issues one request; returns how many operations it counts as.
    fn call(&mut self) -> BoxFuture<'_, std::result::Result<u64, etcd_client::Error>>;
}

/// How long to warm up and then measure.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    /// Requests before this much time are not counted.
    pub warmup: Duration,
    /// Length of the measured part.
    pub measure: Duration,
}

/// What one workload measured on one system.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// Operations per second over the measured window.
    pub rate: f64,
    /// Median latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile latency, microseconds.
    pub p99_us: u64,
    /// Failed requests in the window.
    pub errors: u64,
    /// What the last failure said, if any failed.
    pub last_error: Option<String>,
    /// Operations completed during the whole step, warm-up included (for CPU per operation).
    pub ops_total: u64,
}

/// An empty latency histogram in microseconds.
pub(crate) fn histogram() -> Histogram<u64> {
    // 1 µs to 100 s at 3 significant digits; the bounds are constants, so this cannot fail.
    match Histogram::new_with_bounds(1, 100_000_000, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("constant histogram bounds are valid: {e}"),
    }
}

struct Outcome {
    hist: Histogram<u64>,
    ops: u64,
    all_ops: u64,
    errors: u64,
    last_error: String,
}

/// Runs every op in its own task for the window and merges the results.
pub(crate) async fn closed_loop(
    workload: &str,
    kind: &'static str,
    ops: Vec<Box<dyn Op>>,
    window: Window,
) -> Result<Sample> {
    let start = Instant::now() + window.warmup;
    let end = start + window.measure;
    let mut tasks = Vec::with_capacity(ops.len());
    for mut op in ops {
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome {
                hist: histogram(),
                ops: 0,
                all_ops: 0,
                errors: 0,
                last_error: String::new(),
            };
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let res = op.call().await;
                if let Ok(n) = res {
                    out.all_ops += n;
                }
                if t0 < start {
                    continue;
                }
                match res {
                    Ok(n) => {
                        let us = t0.elapsed().as_micros().max(1) as u64;
                        let _ = out.hist.record(us);
                        out.ops += n;
                    }
                    Err(e) => {
                        out.errors += 1;
                        out.last_error = e.to_string();
                    }
                }
            }
            out
        }));
    }
    let mut total = Outcome {
        hist: histogram(),
        ops: 0,
        all_ops: 0,
        errors: 0,
        last_error: String::new(),
    };
    for t in tasks {
        match t.await {
            Ok(o) => {
                let _ = total.hist.add(&o.hist);
                total.ops += o.ops;
                total.all_ops += o.all_ops;
                total.errors += o.errors;
                if !o.last_error.is_empty() {
                    total.last_error = o.last_error;
                }
            }
            Err(e) => {
                total.errors += 1;
                total.last_error = e.to_string();
            }
        }
    }
    if total.ops == 0 {
        return Err(BenchError::NoProgress {
            workload: workload.to_string(),
            kind,
            errors: total.errors,
            last: total.last_error,
        });
    }
    Ok(Sample {
        rate: total.ops as f64 / window.measure.as_secs_f64(),
        p50_us: total.hist.value_at_quantile(0.5),
        p99_us: total.hist.value_at_quantile(0.99),
        errors: total.errors,
        last_error: (!total.last_error.is_empty()).then_some(total.last_error),
        ops_total: total.all_ops,
    })
}
