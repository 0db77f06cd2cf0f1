//! Per-object exponential back-off for failed reconciles, as upstream's workqueue rate limiter: 5 ms,
//! doubling per consecutive failure, capped at 1 000 s, forgotten on the first success.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

const BASE: Duration = Duration::from_millis(5);
const CAP: Duration = Duration::from_secs(1000);

/// Consecutive failures per object key.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Records a failure of `key`; returns how long to wait before the next try.
    pub fn failed(&self, key: &str) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut m) => {
                let n = m.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        delay(n)
    }

    /// Forgets the failures of `key` (it reconciled).
    pub fn succeeded(&self, key: &str) {
        if let Ok(mut m) = self.failures.lock() {
            m.remove(key);
        }
    }

    /// How many objects have failed since their last success (they wait for a retry).
    pub fn len(&self) -> usize {
        self.failures.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no object waits for a retry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The wait after `n` consecutive failures.
pub fn delay(n: u32) -> Duration {
    let factor = 1u64
        .checked_shl(n.saturating_sub(1).min(40))
        .unwrap_or(u64::MAX);
    BASE.checked_mul(u32::try_from(factor).unwrap_or(u32::MAX))
        .map_or(CAP, |d| d.min(CAP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_five_ms_and_caps() {
        assert_eq!(delay(1), Duration::from_millis(5));
        assert_eq!(delay(2), Duration::from_millis(10));
        assert_eq!(delay(11), Duration::from_millis(5120));
        assert_eq!(delay(30), CAP);
        assert_eq!(delay(u32::MAX), CAP);
        let b = Backoff::default();
        assert_eq!(b.failed("a"), Duration::from_millis(5));
        assert_eq!(b.failed("a"), Duration::from_millis(10));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_millis(5));
    }
}
