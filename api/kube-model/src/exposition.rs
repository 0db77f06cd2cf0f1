//! Prometheus pieces the API server's metrics share (`GET /metrics` and the store-call timings the storage
//! seam keeps): upstream's latency buckets and label escaping.

use std::borrow::Cow;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::resource::Str;

/// Upstream's buckets for `apiserver_request_duration_seconds` and `etcd_request_duration_seconds`.
pub const BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// A latency histogram with [`BUCKETS`].
pub fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// A family of [`histogram`]s.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A label value as the text encoder needs it: the encoder writes values as they are, so quotes,
/// backslashes and newlines are escaped here (never present in names from the resource table).
pub fn label(v: Str) -> Str {
    if !v.contains(['"', '\\', '\n']) {
        return v;
    }
    let mut out = String::with_capacity(v.len() + 4);
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}
