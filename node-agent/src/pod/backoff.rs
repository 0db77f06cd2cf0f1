//! Restart back-off per (pod, container), the kubelet's CrashLoopBackOff: 10 s after the first
//! failure, doubling to 5 min, forgotten once a container has run for 10 min. The same shape holds
//! image pulls back (ImagePullBackOff).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// First delay.
pub const INITIAL: Duration = Duration::from_secs(10);
/// Longest delay.
pub const MAX: Duration = Duration::from_secs(300);
/// Running this long resets the back-off.
pub const RESET_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    not_before: Instant,
}

/// Back-off state of one pod's containers, keyed by container name.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

impl Backoff {
    /// How long `key` must still wait; None when it may go now.
    pub fn remaining(&self, key: &str, now: Instant) -> Option<Duration> {
        let e = self.entries.get(key)?;
        (e.not_before > now).then(|| e.not_before - now)
    }

    /// The delay currently in force for `key` (what the message reports).
    pub fn delay(&self, key: &str) -> Duration {
        self.entries.get(key).map_or(INITIAL, |e| e.delay)
    }

    /// Records a failure of `key` at `at`: the next try waits the current delay, which then doubles.
    /// `ran` is how long the failed instance ran; a long run starts over from the first delay.
    pub fn failed(&mut self, key: &str, at: Instant, ran: Duration) {
        let delay = match self.entries.get(key) {
            Some(e) if ran < RESET_AFTER => (e.delay * 2).min(MAX),
            _ => INITIAL,
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                delay,
                not_before: at + delay,
            },
        );
    }

    /// Forgets `key` (it succeeded).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets_after_a_long_run() {
        let mut b = Backoff::default();
        let t = Instant::now();
        assert_eq!(b.remaining("c", t), None);
        b.failed("c", t, Duration::from_secs(1));
        assert_eq!(b.delay("c"), INITIAL);
        assert_eq!(b.remaining("c", t), Some(INITIAL));
        for _ in 0..10 {
            b.failed("c", t, Duration::from_secs(1));
        }
        assert_eq!(b.delay("c"), MAX);
        b.failed("c", t, RESET_AFTER);
        assert_eq!(b.delay("c"), INITIAL);
        assert_eq!(b.remaining("c", t + INITIAL), None);
    }
}
