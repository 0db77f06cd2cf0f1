//! Lease keepalives: many leases each kept alive on its own stream, as node heartbeats and
//! kube-apiserver's event leases are; measures keepalives answered per second.

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use futures::future::BoxFuture;

use crate::error::{BenchError, Result};
use crate::load::{closed_loop, Op, Pool, Sample, Window};
use crate::target::Cluster;

/// Keepalive streams per gRPC connection.
const STREAMS_PER_CONN: usize = 100;
/// TTL of the granted leases: long enough that none expires during the run.
const TTL_SECS: i64 = 600;

struct KeepAlive {
    keepers: Vec<(LeaseKeeper, LeaseKeepAliveStream)>,
    next: usize,
}

impl Op for KeepAlive {
    fn call(&mut self) -> BoxFuture<'_, std::result::Result<u64, etcd_client::Error>> {
        Box::pin(async move {
            let i = self.next;
            self.next = (self.next + 1) % self.keepers.len();
            let (keeper, stream) = &mut self.keepers[i];
            keeper.keep_alive().await?;
            match stream.message().await? {
                Some(_) => Ok(1),
                None => Err(etcd_client::Error::LeaseKeepAliveError(
                    "keepalive stream ended".into(),
                )),
            }
        })
    }
}

/// Grants `leases` leases, opens a keepalive stream for each, and has `clients` workers
/// cycle through them.
pub(crate) async fn run(
    cluster: &Cluster,
    name: &str,
    leases: usize,
    clients: usize,
    window: Window,
) -> Result<Sample> {
    let pool = Pool::open(
        &cluster.urls,
        leases.div_ceil(STREAMS_PER_CONN).clamp(1, 64),
    )
    .await?;
    let mut setup = Vec::with_capacity(clients);
    let per = leases.div_ceil(clients);
    for w in 0..clients {
        let count = per.min(leases.saturating_sub(w * per));
        let base = w * per;
        let pool_clients: Vec<_> = (0..count).map(|i| pool.client(base + i)).collect();
        setup.push(tokio::spawn(async move {
            let mut keepers = Vec::with_capacity(count);
            for c in pool_clients {
                let id = super::retry(|| {
                    let mut c = c.clone();
                    async move { c.lease_grant(TTL_SECS, None).await }
                })
                .await?
                .id();
                // The client has already read the answer to the first keepalive.
                let (keeper, stream) = super::retry(|| {
                    let mut c = c.clone();
                    async move { c.lease_keep_alive(id).await }
                })
                .await?;
                keepers.push((keeper, stream));
            }
            Ok::<_, etcd_client::Error>(keepers)
        }));
    }
    let mut ops: Vec<Box<dyn Op>> = Vec::with_capacity(clients);
    for t in setup {
        let keepers = t.await.map_err(|e| BenchError::NoProgress {
            workload: name.into(),
            kind: cluster.kind.name(),
            errors: 1,
            last: e.to_string(),
        })??;
        if !keepers.is_empty() {
            ops.push(Box::new(KeepAlive { keepers, next: 0 }));
        }
    }
    closed_loop(name, cluster.kind.name(), ops, window).await
}
