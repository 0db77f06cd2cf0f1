//! etcdctl 3.4 (`/usr/bin/etcdctl`, API v3) against one or more endpoints, always with bounded time: its own
//! `--command-timeout`, and a hard limit after which the kit kills it.

use std::process::Command;
use std::time::Duration;

use crate::binaries::ETCDCTL_BIN;
use crate::process::{run_bounded, CtlOutput};

/// Hard cap for one [`etcdctl`] invocation (its own `--command-timeout` is shorter).
pub const CTL_HARD_TIMEOUT: Duration = Duration::from_secs(20);
/// The global flags [`etcdctl`] uses.
pub const DEFAULT_FLAGS: &[&str] = &["--command-timeout=5s", "--dial-timeout=2s"];

/// Runs etcdctl with `ETCDCTL_API=3`, `--endpoints`, `--command-timeout=5s` and `--dial-timeout=2s`.
pub fn etcdctl(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> CtlOutput {
    etcdctl_with(endpoint, args, stdin, DEFAULT_FLAGS)
}

/// Like [`etcdctl`] with explicit global flags (timeouts) in front of `args`; killed after
/// [`CTL_HARD_TIMEOUT`].
pub fn etcdctl_with(
    endpoint: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    global: &[&str],
) -> CtlOutput {
    let mut cmd = etcdctl_command(endpoint, global);
    cmd.args(args);
    run_bounded(cmd, stdin, CTL_HARD_TIMEOUT)
}

/// An etcdctl `Command` with API v3, the endpoint(s) (comma-separated) and the given global flags; add the
/// subcommand yourself.
pub fn etcdctl_command(endpoint: &str, global: &[&str]) -> Command {
    let mut cmd = Command::new(ETCDCTL_BIN);
    // ETCDCTL_* variables (endpoints, certificates) would conflict with the flags below.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ETCDCTL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(global);
    cmd
}

/// Runs etcdctl against the given endpoints, killed after the `--command-timeout` in `global` (default 5 s)
/// plus 10 s.
pub fn ctl_endpoints(endpoints: &[String], args: &[&str], global: &[&str]) -> CtlOutput {
    let mut cmd = etcdctl_command(&endpoints.join(","), global);
    cmd.args(args);
    let secs = global
        .iter()
        .find_map(|g| g.strip_prefix("--command-timeout="))
        .and_then(|v| {
            v.strip_suffix("ms")
                .and_then(|ms| ms.parse::<u64>().ok().map(|ms| ms.div_ceil(1000)))
                .or_else(|| v.strip_suffix('s').and_then(|s| s.parse().ok()))
        })
        .unwrap_or(5);
    run_bounded(cmd, None, Duration::from_secs(secs + 10))
}
