//! How keel is started: `keel server` with its defaults (fsync of the WAL before a write is
//! acknowledged) and quiet logs.

use std::path::Path;
use std::process::Command;

/// `keel server` with the benchmark's fixed flags; the member flags are added by the caller.
pub(crate) fn command(binary: &Path) -> Command {
    let mut cmd = super::base(binary);
    // The etcd API alone, as the etcd it is compared with.
    cmd.arg("server")
        .args(["--kube-listen", "", "--log-level", "error"]);
    cmd
}
