//! Range reads: one key, or a 1 000-key prefix with limit 500 (a kube list page), each
//! linearizable (ReadIndex) or serializable (local).

use etcd_client::{Client, GetOptions};
use futures::future::BoxFuture;

use crate::error::Result;
use crate::load::{closed_loop, Op, Pool, Sample, Window};
use crate::target::Cluster;

/// The key read by the one-key workloads.
const ONE_KEY: &str = "range/one";
/// The prefix holding the listed keys.
const PREFIX: &str = "range/list/";
/// Keys under `PREFIX`.
const LIST_KEYS: usize = 1000;
/// Page size of a list read.
const LIMIT: i64 = 500;

/// What a range reads.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// One key.
    OneKey,
    /// 500 of the 1 000 keys under a prefix.
    Prefix,
}

/// Writes the key and the prefix that the reads use (256-byte values).
pub(crate) async fn prepare(cluster: &Cluster) -> Result<()> {
    let c = Client::connect([&cluster.urls[0]], None).await?;
    super::retry(|| {
        let mut c = c.clone();
        async move { c.put(ONE_KEY, vec![b'r'; 256], None).await }
    })
    .await?;
    super::preload(&cluster.urls, PREFIX, 0, LIST_KEYS, 256, 4).await
}

struct Range {
    client: Client,
    shape: Shape,
    serializable: bool,
}

impl Op for Range {
    fn call(&mut self) -> BoxFuture<'_, std::result::Result<u64, etcd_client::Error>> {
        Box::pin(async move {
            let mut opts = GetOptions::new();
            if self.serializable {
                opts = opts.with_serializable();
            }
            let key = match self.shape {
                Shape::OneKey => ONE_KEY,
                Shape::Prefix => {
                    opts = opts.with_prefix().with_limit(LIMIT);
                    PREFIX
                }
            };
            self.client.get(key, Some(opts)).await?;
            Ok(1)
        })
    }
}

/// `clients` concurrent readers of `shape`.
pub(crate) async fn run(
    cluster: &Cluster,
    name: &str,
    clients: usize,
    shape: Shape,
    serializable: bool,
    window: Window,
) -> Result<Sample> {
    let pool = Pool::for_clients(&cluster.urls, clients).await?;
    let ops: Vec<Box<dyn Op>> = (0..clients)
        .map(|w| {
            Box::new(Range {
                client: pool.client(w),
                shape,
                serializable,
            }) as Box<dyn Op>
        })
        .collect();
    closed_loop(name, cluster.kind.name(), ops, window).await
}
