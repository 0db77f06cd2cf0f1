//! A private containerd for a worker that has none of its own (`keel up`): its configuration, with every
//! path under one directory so it never touches the system instance (`/run/containerd`, `/var/lib/containerd`).

use std::path::Path;

use crate::image::oci::PAUSE_IMAGE;

/// Where Debian's CNI plugins are.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// containerd 1.6's config with root, state, sockets, runc state, network namespaces and the CNI config
/// directory under `dir`: the CRI plugin on, overlayfs, runc with the cgroupfs driver (the agent gives
/// cgroup parents such as `/kubepods/besteffort/pod<uid>`), the sandbox image the agent imports, and OOM
/// score adjustments clamped to containerd's own (a sandboxed host may not let it lower them), and
/// `certs.d` for the `hosts.toml` files the agent renders from its registry mirrors.
pub fn containerd_config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{d}/net.d"
    max_conf_num = 1
"#
    )
}

/// The socket of the containerd configured for `dir`.
pub fn socket(dir: &Path) -> std::path::PathBuf {
    dir.join("containerd.sock")
}

/// The CNI config directory of the containerd configured for `dir`.
pub fn cni_conf_dir(dir: &Path) -> std::path::PathBuf {
    dir.join("net.d")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_under_the_directory() {
        let c = containerd_config(Path::new("/x/ctd"));
        for line in c.lines().filter(|l| l.contains("= \"/")) {
            let path = line.split('"').nth(1).unwrap_or_default();
            assert!(path.starts_with("/x/ctd/") || path == CNI_BIN_DIR, "{line}");
        }
    }
}
