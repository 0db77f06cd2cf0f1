//! Creations the cache has not shown yet, per DaemonSet and node: a pod made with a generated name is
//! counted as there until the informer sees it (or the expectation expires), so a stale cache never
//! makes a second pod for one node (upstream's ControllerExpectations).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an unobserved creation is trusted (upstream's ExpectationsTimeout is 5 minutes; the API
/// answers in well under this, so a lost watch event only delays a retry).
const TTL: Duration = Duration::from_secs(60);

/// The awaited creations of every DaemonSet this controller runs, by (DaemonSet uid, node).
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<(String, String), Instant>>,
}

impl Expectations {
    /// Records a creation for `node` by the DaemonSet with `uid`.
    pub fn expect(&self, uid: &str, node: &str) {
        if let Ok(mut m) = self.pending.lock() {
            m.insert((uid.into(), node.into()), Instant::now());
        }
    }

    /// The cache shows a pod for `node` (or the creation failed): stop expecting it.
    pub fn observed(&self, uid: &str, node: &str) {
        if let Ok(mut m) = self.pending.lock() {
            m.remove(&(uid.to_string(), node.to_string()));
        }
    }

    /// Whether a creation for `node` is still awaited.
    pub fn pending(&self, uid: &str, node: &str) -> bool {
        let Ok(mut m) = self.pending.lock() else {
            return false;
        };
        let key = (uid.to_string(), node.to_string());
        match m.get(&key) {
            Some(at) if at.elapsed() < TTL => true,
            Some(_) => {
                m.remove(&key);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_until_observed() {
        let e = Expectations::default();
        e.expect("u-test", "n1");
        assert!(e.pending("u-test", "n1"));
        assert!(!e.pending("u-test", "n2"));
        e.observed("u-test", "n1");
        assert!(!e.pending("u-test", "n1"));
    }
}
