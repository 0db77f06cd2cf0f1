//! Memory and disk footprint: a fresh cluster loaded with N keys of 256-byte values; RSS and
//! data-directory size of every member once the load has settled.

use std::path::Path;
use std::time::Duration;

use crate::error::Result;
use crate::target::{Binaries, Cluster, Kind};

/// Footprint of one cluster at one key count.
#[derive(Clone, Debug)]
pub(crate) struct Footprint {
    /// Keys stored.
    pub keys: usize,
    /// Largest member RSS, bytes.
    pub rss: u64,
    /// Largest member data directory, bytes.
    pub disk: u64,
}

/// Time the servers get after loading before they are measured (background flushes, GC).
const SETTLE: Duration = Duration::from_secs(3);
/// Concurrent loaders.
const WRITERS: usize = 16;

/// Loads a fresh `kind` cluster to each of `sizes` keys in turn and measures it.
pub(crate) async fn run(
    kind: Kind,
    members: usize,
    root: &Path,
    bins: &Binaries,
    sizes: &[usize],
) -> Result<Vec<Footprint>> {
    let cluster = Cluster::start(kind, members, &root.join("footprint"), bins).await?;
    let mut loaded = 0;
    let mut out = Vec::new();
    for &keys in sizes {
        if keys > loaded {
            super::preload(
                &cluster.urls,
                "/registry/footprint/",
                loaded,
                keys - loaded,
                256,
                WRITERS,
            )
            .await?;
            loaded = keys;
        }
        tokio::time::sleep(SETTLE).await;
        out.push(Footprint {
            keys,
            rss: cluster.rss().into_iter().max().unwrap_or(0),
            disk: cluster.disk().into_iter().max().unwrap_or(0),
        });
    }
    Ok(out)
}
