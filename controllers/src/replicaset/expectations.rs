//! Expectations: the pods a ReplicaSet created or deleted that its cache has not shown yet. While any are
//! pending the ReplicaSet does not resize, so a cache that lags never makes it create or delete twice.
//! A pending entry expires after five minutes (upstream's timeout), in case the event was missed.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an unfulfilled expectation holds a ReplicaSet back.
pub const TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Pending {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    /// Creates whose names are not known (in flight).
    in_flight: usize,
    since: Option<Instant>,
}

/// Expectations of every ReplicaSet this controller manages, keyed `ns/name`.
#[derive(Default)]
pub struct Expectations {
    by_key: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Pending) -> T) -> Option<T> {
        let mut map = self.by_key.lock().ok()?;
        let p = map.entry(key.to_string()).or_default();
        p.since.get_or_insert_with(Instant::now);
        let out = f(p);
        if p.creates.is_empty() && p.deletes.is_empty() && p.in_flight == 0 {
            map.remove(key);
        }
        Some(out)
    }

    /// `n` creates are about to be sent.
    pub fn expect_creates(&self, key: &str, n: usize) {
        self.with(key, |p| {
            p.in_flight += n;
            p.since = Some(Instant::now());
        });
    }

    /// A create finished: `Some(name)` if it made a pod (now awaited in the cache), `None` if it failed.
    pub fn created(&self, key: &str, name: Option<String>) {
        self.with(key, |p| {
            p.in_flight = p.in_flight.saturating_sub(1);
            if let Some(n) = name {
                p.creates.insert(n);
            }
        });
    }

    /// Pod `name` is about to be deleted.
    pub fn expect_delete(&self, key: &str, name: &str) {
        self.with(key, |p| {
            p.deletes.insert(name.to_string());
            p.since = Some(Instant::now());
        });
    }

    /// The delete of `name` failed without deleting it.
    pub fn delete_failed(&self, key: &str, name: &str) {
        self.with(key, |p| {
            p.deletes.remove(name);
        });
    }

    /// The cache showed pod `name`: `present` (and not being deleted) or gone.
    pub fn observed(&self, key: &str, name: &str, present: bool) {
        let Ok(mut map) = self.by_key.lock() else {
            return;
        };
        if let Some(p) = map.get_mut(key) {
            p.creates.remove(name);
            if !present {
                p.deletes.remove(name);
            }
            if p.creates.is_empty() && p.deletes.is_empty() && p.in_flight == 0 {
                map.remove(key);
            }
        }
    }

    /// Whether the ReplicaSet may resize: nothing pending, or what is pending has expired. `present` tells
    /// whether the cache holds a live pod of that name.
    pub fn satisfied(&self, key: &str, present: impl Fn(&str) -> bool) -> bool {
        let Ok(mut map) = self.by_key.lock() else {
            return true;
        };
        let Some(p) = map.get_mut(key) else {
            return true;
        };
        p.creates.retain(|n| !present(n));
        p.deletes.retain(|n| present(n));
        let done = p.creates.is_empty() && p.deletes.is_empty() && p.in_flight == 0;
        let expired = p.since.is_some_and(|s| s.elapsed() > TIMEOUT);
        if done || expired {
            map.remove(key);
            return true;
        }
        false
    }

    /// Forgets the ReplicaSet (it was deleted).
    pub fn forget(&self, key: &str) {
        if let Ok(mut map) = self.by_key.lock() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_wait_for_the_cache() {
        let e = Expectations::default();
        e.expect_creates("ns/rs", 2);
        assert!(!e.satisfied("ns/rs", |_| false));
        e.created("ns/rs", Some("rs-a".into()));
        e.created("ns/rs", None);
        assert!(!e.satisfied("ns/rs", |_| false));
        assert!(e.satisfied("ns/rs", |n| n == "rs-a"));
    }

    #[test]
    fn deletes_wait_until_the_pod_is_gone() {
        let e = Expectations::default();
        e.expect_delete("ns/rs", "rs-a");
        assert!(!e.satisfied("ns/rs", |_| true));
        e.observed("ns/rs", "rs-a", false);
        assert!(e.satisfied("ns/rs", |_| true));
    }
}
