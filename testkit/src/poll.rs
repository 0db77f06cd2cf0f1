//! Polling until a condition holds, for tests without a cluster handle to fail through.

use std::time::{Duration, Instant};

/// Calls `f` every 200 ms until it returns `Ok`; panics with `what` and the last error after `limit`.
pub fn until_ok(what: &str, limit: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    loop {
        match f() {
            Ok(()) => return,
            Err(e) if start.elapsed() > limit => panic!("{what}: not within {limit:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}
