//! Creations the cache has not shown yet, per DaemonSet and node: a pod made with a generated name is
//! counted as there until the informer sees it (or the expectation expires), so a stale cache never
//! makes a second pod for one node (upstream's ControllerExpectations).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How long an unobserved creation is trusted (upstream's ExpectationsTimeout is 5 minutes; the API
/// answers in well under this, so a lost watch event only delays a retry).
const TTL: Duration = Duration::from_secs(60);

static PENDING: LazyLock<Mutex<HashMap<(String, String), Instant>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Records a creation for `node` by the DaemonSet with `uid`.
pub fn expect(uid: &str, node: &str) {
    if let Ok(mut m) = PENDING.lock() {
        m.insert((uid.into(), node.into()), Instant::now());
    }
}

/// The cache shows a pod for `node` (or the creation failed): stop expecting it.
pub fn observed(uid: &str, node: &str) {
    if let Ok(mut m) = PENDING.lock() {
        m.remove(&(uid.to_string(), node.to_string()));
    }
}

/// Whether a creation for `node` is still awaited.
pub fn pending(uid: &str, node: &str) -> bool {
    let Ok(mut m) = PENDING.lock() else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_until_observed() {
        expect("u-test", "n1");
        assert!(pending("u-test", "n1"));
        assert!(!pending("u-test", "n2"));
        observed("u-test", "n1");
        assert!(!pending("u-test", "n1"));
    }
}
