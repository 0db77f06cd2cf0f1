//! How keel is started: `keel server` with its defaults (fsync of the WAL before a write is
//! acknowledged) and quiet logs.

use std::path::Path;
use std::process::Command;

/// `keel server` with the benchmark's fixed flags; the member flags are added by the caller.
/// With `kube_url` the member also serves the Kubernetes API there (and leads the controllers);
/// without, the etcd API alone, as the etcd it is compared with.
pub(crate) fn command(binary: &Path, kube_url: Option<&str>) -> Command {
    let mut cmd = super::base(binary);
    cmd.arg("server").args([
        "--kube-listen",
        kube_url.unwrap_or(""),
        "--log-level",
        "error",
    ]);
    cmd
}
