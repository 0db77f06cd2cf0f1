//! Loopback ports for servers a test starts, never handed out twice while their test process lives.
//!
//! Binding port 0 and releasing it races: the kernel may give the same ephemeral port to another
//! test's `bind(0)` or to an outgoing connection (etcdctl, kubectl) before our server binds it,
//! and two scenarios then share one server. So ports come from below the ephemeral range, each
//! claimed with an advisory lock file that the claiming process holds until it exits; test
//! binaries running side by side skip each other's ports.

use std::collections::HashSet;
use std::fs::File;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Mutex;

/// Lowest port handed out.
const FIRST: u16 = 10_000;

/// Lock files held by this process, and the ports they reserve.
static HELD: Mutex<Vec<(u16, File)>> = Mutex::new(Vec::new());

/// Reserves `n` distinct ports on 127.0.0.1 for the rest of this process's life.
pub fn reserve(n: usize) -> Vec<u16> {
    let end = ephemeral_low().max(FIRST + 1_000);
    let span = u32::from(end - FIRST);
    let dir = lock_dir();
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    let mine: HashSet<u16> = held.iter().map(|(p, _)| *p).collect();
    // Start at a place of our own so parallel test binaries rarely probe the same ports.
    let start = (std::process::id().wrapping_mul(2_654_435_761) % span) as u16;
    let mut out = Vec::with_capacity(n);
    for step in 0..span {
        if out.len() == n {
            break;
        }
        let port = FIRST + ((u32::from(start) + step) % span) as u16;
        if mine.contains(&port) {
            continue;
        }
        let Some(lock) = claim(&dir, port) else {
            continue;
        };
        // Something outside the test kit may listen there already.
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        held.push((port, lock));
        out.push(port);
    }
    assert_eq!(
        out.len(),
        n,
        "only {} of {n} loopback ports free in {FIRST}..{end}",
        out.len()
    );
    out
}

/// The lock file of `port`, locked by this process, or None when another process holds it.
fn claim(dir: &std::path::Path, port: u16) -> Option<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
        .ok()?;
    // SAFETY: flock on a descriptor this function owns; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (rc == 0).then_some(file)
}

fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("keel-test-ports");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("create {}: {e}", dir.display());
    }
    dir
}

/// The first port of the kernel's ephemeral range (where `bind(0)` and outgoing connections land).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_distinct_and_below_the_ephemeral_range() {
        let a = reserve(5);
        let b = reserve(5);
        let all: HashSet<u16> = a.iter().chain(&b).copied().collect();
        assert_eq!(all.len(), 10, "{a:?} {b:?}");
        let low = ephemeral_low().max(FIRST + 1_000);
        assert!(all.iter().all(|p| (FIRST..low).contains(p)), "{all:?}");
    }

    #[test]
    fn a_reserved_port_cannot_be_claimed_again() {
        let port = reserve(1)[0];
        // flock conflicts between open file descriptions, so another process is refused alike.
        assert!(claim(&lock_dir(), port).is_none());
    }
}
