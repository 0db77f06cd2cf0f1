//! The workloads, each run the same way against keel and etcd.

pub(crate) mod controllers;
pub(crate) mod failover;
pub(crate) mod footprint;
pub(crate) mod ingress;
pub(crate) mod kube_writes;
pub(crate) mod lease;
pub(crate) mod netns;
pub(crate) mod netprog;
pub(crate) mod pod_startup;
pub(crate) mod programming;
pub(crate) mod put;
pub(crate) mod range;
pub(crate) mod scheduling;
pub(crate) mod update;
pub(crate) mod watch;
pub(crate) mod webhook_cost;

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};

use crate::error::Result;

/// The `q` quantile (0..1, nearest rank) of `sorted`; the default value when it is empty.
pub(crate) fn nearest_rank<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Most operations etcd accepts in one transaction (`--max-txn-ops` default 128).
const TXN_OPS: usize = 100;

/// Attempts a setup call gets before the step gives up (about 10 s).
const SETUP_ATTEMPTS: u32 = 50;

/// Runs a setup call again after a transient failure, such as "no leader" while a loaded
/// machine delays heartbeats into an election; measured requests are never retried.
pub(crate) async fn retry<T, F, Fut>(mut f: F) -> std::result::Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(_) if attempt < SETUP_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes `count` keys `{prefix}{i:08}` (values of `value_len` bytes), starting at `first`,
/// 100 per transaction over `conns` concurrent writers; used to preload data quickly.
pub(crate) async fn preload(
    urls: &[String],
    prefix: &str,
    first: usize,
    count: usize,
    value_len: usize,
    writers: usize,
) -> Result<()> {
    let pool = crate::load::Pool::for_clients(urls, writers).await?;
    let value = vec![b'x'; value_len];
    let chunks: Vec<(usize, usize)> = (first..first + count)
        .step_by(TXN_OPS)
        .map(|s| (s, (s + TXN_OPS).min(first + count)))
        .collect();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let c: Client = pool.client(w);
        let mine: Vec<(usize, usize)> = chunks.iter().copied().skip(w).step_by(writers).collect();
        let prefix = prefix.to_string();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for (s, e) in mine {
                let ops: Vec<TxnOp> = (s..e)
                    .map(|i| TxnOp::put(format!("{prefix}{i:08}"), value.clone(), None))
                    .collect();
                let txn = Txn::new().and_then(ops);
                retry(|| {
                    let (mut c, txn) = (c.clone(), txn.clone());
                    async move { c.txn(txn).await }
                })
                .await?;
            }
            Ok::<(), etcd_client::Error>(())
        }));
    }
    for t in tasks {
        match t.await {
            Ok(r) => r?,
            Err(e) => {
                return Err(crate::error::BenchError::Io {
                    what: "preload task".into(),
                    source: std::io::Error::other(e.to_string()),
                })
            }
        }
    }
    Ok(())
}
