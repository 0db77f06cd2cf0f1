//! backoffQ: pods that failed an attempt wait out their back-off here (1 s, doubling per attempt, at
//! most 10 s) before they return to activeQ.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::QueuedPod;

/// The first back-off (upstream's `podInitialBackoffSeconds`).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest back-off (upstream's `podMaxBackoffSeconds`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The back-off after `attempts` failed attempts.
pub fn backoff_for(attempts: u32) -> Duration {
    let mut d = INITIAL_BACKOFF;
    for _ in 1..attempts {
        d = d.saturating_mul(2);
        if d > MAX_BACKOFF {
            return MAX_BACKOFF;
        }
    }
    d
}

/// Pods waiting out their back-off, by expiry.
#[derive(Debug, Default)]
pub struct BackoffQ {
    order: BTreeMap<(Instant, u64), String>,
    pods: HashMap<String, ((Instant, u64), QueuedPod)>,
}

impl BackoffQ {
    /// Holds `qp` until `until`.
    pub fn push(&mut self, qp: QueuedPod, until: Instant, seq: u64) {
        self.remove(&qp.info.key);
        self.order.insert((until, seq), qp.info.key.clone());
        self.pods.insert(qp.info.key.clone(), ((until, seq), qp));
    }

    /// Takes out every pod whose back-off ended by `now`.
    pub fn pop_expired(&mut self, now: Instant) -> Vec<QueuedPod> {
        let mut out = Vec::new();
        while let Some(entry) = self.order.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            if let Some((_, qp)) = self.pods.remove(&key) {
                out.push(qp);
            }
        }
        out
    }

    /// Takes `key` out.
    pub fn remove(&mut self, key: &str) -> Option<QueuedPod> {
        let (order, qp) = self.pods.remove(key)?;
        self.order.remove(&order);
        Some(qp)
    }

    /// The queued pod `key`, to update in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut QueuedPod> {
        self.pods.get_mut(key).map(|(_, qp)| qp)
    }

    /// How many pods wait.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod waits.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Keys of the pods here.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.pods.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_from_one_second_to_ten() {
        let secs: Vec<u64> = (1..=6).map(|a| backoff_for(a).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
    }
}
