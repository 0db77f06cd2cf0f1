//! The workloads, each run the same way against keel and etcd.

pub mod footprint;
pub mod lease;
pub mod put;
pub mod range;
pub mod update;
pub mod watch;

use etcd_client::{Client, Txn, TxnOp};

use crate::error::Result;

/// Most operations etcd accepts in one transaction (`--max-txn-ops` default 128).
const TXN_OPS: usize = 100;

/// Writes `count` keys `{prefix}{i:08}` (values of `value_len` bytes), starting at `first`,
/// 100 per transaction over `conns` concurrent writers; used to preload data quickly.
pub async fn preload(
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
        let mut c: Client = pool.client(w);
        let mine: Vec<(usize, usize)> = chunks.iter().copied().skip(w).step_by(writers).collect();
        let prefix = prefix.to_string();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for (s, e) in mine {
                let ops: Vec<TxnOp> = (s..e)
                    .map(|i| TxnOp::put(format!("{prefix}{i:08}"), value.clone(), None))
                    .collect();
                c.txn(Txn::new().and_then(ops)).await?;
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
