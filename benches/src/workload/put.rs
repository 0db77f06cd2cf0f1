//! Puts of fresh sequential keys (etcd's `benchmark put --sequential-keys`).

use etcd_client::Client;
use futures::future::BoxFuture;

use crate::error::Result;
use crate::load::{closed_loop, Op, Pool, Sample, Window};
use crate::target::Cluster;

struct Put {
    client: Client,
    worker: usize,
    n: u64,
    value: Vec<u8>,
}

impl Op for Put {
    fn call(&mut self) -> BoxFuture<'_, std::result::Result<u64, etcd_client::Error>> {
        Box::pin(async move {
            self.n += 1;
            let key = format!("put/{:04}/{:010}", self.worker, self.n);
            self.client.put(key, self.value.clone(), None).await?;
            Ok(1)
        })
    }
}

/// `clients` concurrent writers putting `value_len`-byte values.
pub(crate) async fn run(
    cluster: &Cluster,
    name: &str,
    clients: usize,
    value_len: usize,
    window: Window,
) -> Result<Sample> {
    put_via(cluster, &cluster.urls, name, clients, value_len, window).await
}

/// Like [`run`], every connection to a follower (writes forwarded to the leader, answered once
/// the follower applied them).
pub(crate) async fn run_on_followers(
    cluster: &Cluster,
    name: &str,
    clients: usize,
    value_len: usize,
    window: Window,
) -> Result<Sample> {
    let leader = cluster.leader().await?;
    let followers: Vec<String> = (0..cluster.urls.len())
        .filter(|&i| i != leader)
        .map(|i| cluster.urls[i].clone())
        .collect();
    put_via(cluster, &followers, name, clients, value_len, window).await
}

async fn put_via(
    cluster: &Cluster,
    urls: &[String],
    name: &str,
    clients: usize,
    value_len: usize,
    window: Window,
) -> Result<Sample> {
    let pool = Pool::for_clients(urls, clients).await?;
    let ops: Vec<Box<dyn Op>> = (0..clients)
        .map(|w| {
            Box::new(Put {
                client: pool.client(w),
                worker: w,
                n: 0,
                value: vec![b'v'; value_len],
            }) as Box<dyn Op>
        })
        .collect();
    closed_loop(name, cluster.kind.name(), ops, window).await
}
