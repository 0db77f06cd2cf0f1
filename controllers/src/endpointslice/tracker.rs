//! Which slice writes the cache has not shown yet (upstream's endpointSliceTracker): a reconcile that
//! reads a cache older than its own last writes would create duplicates, so it waits instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

/// How long an unconfirmed write is waited for; after that someone else changed the slice meanwhile.
const PATIENCE: Duration = Duration::from_secs(30);

/// One Service's unconfirmed writes: slice name → (resourceVersion written or none for a delete, when).
type Writes = HashMap<String, (Option<u64>, Instant)>;

/// Writes per Service (`ns/name`), each slice by name: the resourceVersion written, or none for a delete.
#[derive(Default)]
pub struct Tracker {
    writes: Mutex<HashMap<String, Writes>>,
}

fn rv(slice: &EndpointSlice) -> Option<u64> {
    slice.resource_version().and_then(|v| v.parse().ok())
}

impl Tracker {
    /// Records that `slice` was created or updated for `service`.
    pub fn wrote(&self, service: &str, slice: &EndpointSlice) {
        if let Ok(mut w) = self.writes.lock() {
            w.entry(service.to_string()).or_default().insert(
                slice.name_any(),
                (Some(rv(slice).unwrap_or(0)), Instant::now()),
            );
        }
    }

    /// Records that slice `name` of `service` was deleted.
    pub fn deleted(&self, service: &str, name: &str) {
        if let Ok(mut w) = self.writes.lock() {
            w.entry(service.to_string())
                .or_default()
                .insert(name.to_string(), (None, Instant::now()));
        }
    }

    /// Whether `cached` (the Service's slices in the cache) misses one of its recorded writes; writes the
    /// cache shows are forgotten.
    pub fn stale(&self, service: &str, cached: &[Arc<EndpointSlice>]) -> bool {
        let Ok(mut w) = self.writes.lock() else {
            return false;
        };
        let Some(writes) = w.get_mut(service) else {
            return false;
        };
        writes.retain(|name, (want, at)| {
            if at.elapsed() > PATIENCE {
                return false;
            }
            let seen = cached.iter().find(|s| s.name_any() == *name);
            match (want, seen) {
                (Some(v), Some(s)) => rv(s).is_some_and(|have| have < *v),
                (Some(_), None) => true,
                (None, found) => found.is_some(),
            }
        });
        let stale = !writes.is_empty();
        if !stale {
            w.remove(service);
        }
        stale
    }
}
