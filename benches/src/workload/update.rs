//! kube-apiserver's guarded update: a transaction that puts a key only if its mod_revision is
//! still the one last read (`GuaranteedUpdate`), otherwise returns the current value.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use futures::future::BoxFuture;

use crate::error::Result;
use crate::load::{closed_loop, Op, Pool, Sample, Window};
use crate::target::Cluster;

struct Update {
    client: Client,
    key: String,
    rev: i64,
    value: Vec<u8>,
}

impl Op for Update {
    fn call(&mut self) -> BoxFuture<'_, std::result::Result<u64, etcd_client::Error>> {
        Box::pin(async move {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    self.key.clone(),
                    CompareOp::Equal,
                    self.rev,
                )])
                .and_then([TxnOp::put(self.key.clone(), self.value.clone(), None)])
                .or_else([TxnOp::get(self.key.clone(), None)]);
            let resp = self.client.txn(txn).await?;
            if resp.succeeded() {
                self.rev = resp.header().map_or(self.rev, |h| h.revision());
                return Ok(1);
            }
            // Someone else moved it (never in this workload, each client owns its key).
            for r in resp.op_responses() {
                if let TxnOpResponse::Get(g) = r {
                    if let Some(kv) = g.kvs().first() {
                        self.rev = kv.mod_revision();
                    }
                }
            }
            Ok(0)
        })
    }
}

/// `clients` concurrent updaters, each guarding its own key with `value_len`-byte values.
pub(crate) async fn run(
    cluster: &Cluster,
    name: &str,
    clients: usize,
    value_len: usize,
    window: Window,
) -> Result<Sample> {
    let pool = Pool::for_clients(&cluster.urls, clients).await?;
    let mut ops: Vec<Box<dyn Op>> = Vec::with_capacity(clients);
    for w in 0..clients {
        let client = pool.client(w);
        let key = format!("/registry/pods/bench/pod-{w:04}");
        let value = vec![b'u'; value_len];
        let resp = super::retry(|| {
            let (mut c, key, value) = (client.clone(), key.clone(), value.clone());
            async move { c.put(key, value, None).await }
        })
        .await?;
        let rev = resp.header().map_or(0, |h| h.revision());
        ops.push(Box::new(Update {
            client,
            key,
            rev,
            value,
        }));
    }
    closed_loop(name, cluster.kind.name(), ops, window).await
}
