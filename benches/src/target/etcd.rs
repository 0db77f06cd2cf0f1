//! How real etcd is started: its defaults (fsync of the WAL on every commit), quiet logs, and
//! a backend quota large enough that the 1M-key footprint step fits.

use std::path::Path;
use std::process::Command;

/// 8 GiB, etcd's suggested maximum; the default 2 GiB could fill up during the 4 KiB puts.
const QUOTA_BYTES: &str = "8589934592";

/// `etcd` with the benchmark's fixed flags; the member flags are added by the caller.
pub(crate) fn command(binary: &Path) -> Command {
    let mut cmd = super::base(binary);
    cmd.args(["--quota-backend-bytes", QUOTA_BYTES])
        .args(["--log-level", "error"]);
    cmd
}
