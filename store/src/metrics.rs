//! Timings of the store's own disk work, shown on the etcd port's `/metrics`.

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// etcd's buckets for its disk histograms (`ExponentialBuckets(0.001, 2, 14)`: 1 ms to about 8 s),
/// so dashboards' quantiles over them mean the same thing.
pub fn disk_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

/// What the store records while it works; cloning shares the series.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    /// Seconds per backend write of an applied batch (`etcd_disk_backend_commit_duration_seconds`).
    pub backend_commit: Histogram,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            backend_commit: disk_histogram(),
        }
    }
}
