//! Network programming latency (upstream's SLI, kube-proxy's `network_programming_duration_seconds`):
//! from the change that caused an EndpointSlice write (its `last-change-trigger-time` annotation) to
//! the end of the transaction that put the resulting rules in force.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use jiff::Timestamp;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

/// The annotation the EndpointSlice controller writes.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Upper bounds of the histogram's buckets, in seconds: kube-proxy's (0.25 and 0.5, then every
/// second to a minute, every 5 s to 2 min, every 30 s to 5 min).
pub fn bucket_bounds() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// A histogram snapshot: sum, count and per-bucket (not cumulative) counts with their upper bounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Sum of all observations, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
    /// (upper bound, observations in this bucket only); the last bound is +Inf.
    pub buckets: Vec<(f64, u64)>,
}

#[derive(Debug)]
struct Inner {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
    /// Trigger time last seen per slice (`ns/name`), so each change is observed once.
    seen: HashMap<String, String>,
}

/// The histogram, and which slice changes it has already counted.
#[derive(Debug)]
pub struct ProgrammingLatency {
    inner: Mutex<Inner>,
    /// Changes older than this were made before netprog started and are not observed.
    since: Timestamp,
}

impl Default for ProgrammingLatency {
    fn default() -> Self {
        let bounds = bucket_bounds();
        let counts = vec![0; bounds.len() + 1];
        ProgrammingLatency {
            inner: Mutex::new(Inner {
                bounds,
                counts,
                sum: 0.0,
                count: 0,
                seen: HashMap::new(),
            }),
            since: Timestamp::now(),
        }
    }
}

impl ProgrammingLatency {
    /// Records one observation of `secs`.
    pub fn observe(&self, secs: f64) {
        let Ok(mut i) = self.inner.lock() else { return };
        let at = i
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(i.bounds.len());
        i.counts[at] += 1;
        i.sum += secs;
        i.count += 1;
    }

    /// Called after a transaction made of `slices` went into force at `now`: observes every slice whose
    /// trigger time is new since the previous call, and forgets slices that are gone.
    pub fn programmed<'a>(
        &self,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
        now: SystemTime,
    ) -> usize {
        let now = Timestamp::try_from(now).unwrap_or_else(|_| Timestamp::now());
        let mut fresh = Vec::new();
        let mut current = HashMap::new();
        {
            let Ok(i) = self.inner.lock() else { return 0 };
            for s in slices {
                let Some(v) = s.annotations().get(LAST_CHANGE_TRIGGER_TIME) else {
                    continue;
                };
                let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
                if i.seen.get(&key) != Some(v) {
                    if let Ok(t) = v.parse::<Timestamp>() {
                        if t >= self.since {
                            fresh.push(now.duration_since(t).as_secs_f64().max(0.0));
                        }
                    }
                }
                current.insert(key, v.clone());
            }
        }
        for secs in &fresh {
            self.observe(*secs);
        }
        if let Ok(mut i) = self.inner.lock() {
            i.seen = current;
        }
        fresh.len()
    }

    /// The histogram as it stands.
    pub fn snapshot(&self) -> Snapshot {
        let Ok(i) = self.inner.lock() else {
            return Snapshot::default();
        };
        let mut buckets: Vec<(f64, u64)> = i
            .bounds
            .iter()
            .copied()
            .zip(i.counts.iter().copied())
            .collect();
        buckets.push((f64::INFINITY, i.counts.last().copied().unwrap_or(0)));
        Snapshot {
            sum: i.sum,
            count: i.count,
            buckets,
        }
    }
}

impl Snapshot {
    /// The `q` quantile (0..1) by linear interpolation inside its bucket, as Prometheus's
    /// `histogram_quantile` does; `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let mut below = 0u64;
        let mut lower = 0.0;
        for (upper, n) in &self.buckets {
            if (below + n) as f64 >= rank && *n > 0 {
                if upper.is_infinite() {
                    return Some(lower);
                }
                let into = (rank - below as f64) / *n as f64;
                return Some(lower + (upper - lower) * into);
            }
            below += n;
            if upper.is_finite() {
                lower = *upper;
            }
        }
        Some(lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::Duration;

    fn slice(name: &str, trigger: Option<Timestamp>) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                annotations: trigger
                    .map(|t| [(LAST_CHANGE_TRIGGER_TIME.to_string(), t.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Vec::new(),
            ports: None,
        }
    }

    #[test]
    fn each_change_is_observed_once_and_old_ones_never() {
        let l = ProgrammingLatency::default();
        let before = l.since - jiff::SignedDuration::from_secs(60);
        let t = l.since + jiff::SignedDuration::from_millis(1500);
        let now = SystemTime::from(t) + Duration::from_millis(700);
        let old = slice("old", Some(before));
        let a = slice("a", Some(t));
        let none = slice("n", None);
        assert_eq!(l.programmed([&old, &a, &none], now), 1);
        // The same annotations again: nothing new.
        assert_eq!(l.programmed([&old, &a, &none], now), 0);
        let s = l.snapshot();
        assert_eq!(s.count, 1);
        assert!((s.sum - 0.7).abs() < 1e-6, "{s:?}");
        // Counted in the (0.5, 1] bucket.
        assert_eq!(s.buckets[2], (1.0, 1));
        // A slice that goes and comes back with the same time is a new write.
        assert_eq!(l.programmed([&old], now), 0);
        assert_eq!(l.programmed([&old, &a], now), 1);
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let l = ProgrammingLatency::default();
        for _ in 0..50 {
            l.observe(0.2);
        }
        for _ in 0..50 {
            l.observe(3.5);
        }
        let s = l.snapshot();
        // Half the observations are at or below 0.25 s.
        assert_eq!(s.quantile(0.5), Some(0.25));
        // The 99th is inside (3, 4].
        let p99 = s.quantile(0.99).unwrap_or_default();
        assert!(p99 > 3.0 && p99 <= 4.0, "{p99}");
        assert_eq!(Snapshot::default().quantile(0.5), None);
    }
}
