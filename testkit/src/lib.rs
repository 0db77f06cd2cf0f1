//! keel's test kit: what every black-box test of keel shares. It drives the binaries from outside, as users do —
//! real `keel server` processes, real etcd 3.4, the real etcdctl and kubectl — and depends on none of keel's own
//! crates. Dev-only: a dev-dependency of the root package (its `tests/*.rs`) and a dependency of `jepsen-tests`.
//!
//! - [`process`]: [`Process`], a child that is SIGKILLed and reaped when dropped, whose every wait is bounded and
//!   whose stdout and stderr go to files; [`run_bounded`] for one command with a time limit.
//! - [`binaries`]: where etcd, etcdctl and the `keel` under test are ([`keel_bin!`], [`keel_bin()`]), [`Kind`],
//!   and the etcd-instead-of-keel self-check switch ([`against_etcd`]).
//! - [`server`]: [`Server`], one member (keel, or real etcd 3.4) on free loopback ports in its own temp dir.
//! - [`cluster`]: [`Cluster`] of N members built from [`Options`] (size, keel or etcd, Kubernetes API on or off,
//!   one network namespace per member for partitions): start, kill -9, SIGTERM, restart, leader discovery,
//!   membership changes, etcd-client and etcdctl access, failure reports with every member's log tail.
//! - [`kube`]: [`KubeCluster`], a keel [`Cluster`] serving the Kubernetes API with kubectl and `kube` clients
//!   bound to each member's admin kubeconfig; [`kube::raw_request`].
//! - [`etcdctl`](mod@etcdctl) and [`kubectl`]: the two command-line clients, always with bounded time. kubectl must be on
//!   `PATH` ([`kubectl::require_kubectl`] fails with a clear message otherwise); the kit never downloads it.
//! - [`heartbeat`](mod@heartbeat): a kubelet's Ready status and Lease renewals for a Node object a test made.
//! - [`agent`](mod@agent): [`agent::AgentNode`], a worker (private containerd, built-in images, a real `keel agent`).
//! - [`containerd`](mod@containerd): [`containerd::Containerd`], a private containerd under a test's directory, torn down by PID.
//! - [`netns`]: [`Net`], nodes in network namespaces joined by a bridge, partitions as nftables drops (root).
//! - [`normalize`](mod@normalize): [`Normalizer`] and [`line_diff`], to compare etcdctl outputs of etcd and keel byte for byte.
//! - [`free_port`], [`free_ports`]: loopback ports for servers started on 127.0.0.1.
//!
//! # The `keel` binary under test
//! A test of the root package passes the binary cargo built for it: `Server::start_keel(keel_bin!())`,
//! `KubeCluster::start(keel_bin!(), 1)`, `Options::under_test(keel_bin!(), 3)`. [`keel_bin!`] expands
//! `env!("CARGO_BIN_EXE_keel")` in the calling test (only the package that owns the binary has it), overridden by
//! `$KEEL_BIN`. Crates without the binary (jepsen-tests) use [`keel_bin()`]: `$KEEL_BIN`, else `keel` in the
//! target directory the running executable was built into (or the workspace's `target/<profile>/` when cargo's
//! build dir is elsewhere); a [`cluster::Options`] without [`cluster::Options::keel_bin`] looks it up that way
//! when it first starts a keel member.
//!
//! # Environment
//! | variable | effect |
//! | --- | --- |
//! | `KEEL_BIN` | the `keel` binary to test instead of the one cargo built |
//! | `KEEL_DIFF_AGAINST_ETCD=1` | the "keel" side of [`Server::start_keel`] and [`cluster::kind_under_test`] is a real etcd 3.4 (self-check of the kit and of the tests) |
//! | `KEEL_KEEP_CLUSTER_DIRS` | keep every cluster's directory (data dirs, logs), not only a failed test's |
//!
//! # Machines
//! etcd and etcdctl 3.4 are Debian's `etcd-server` and `etcd-client` in `/usr/bin`, kubectl 1.32 comes with the
//! machine image, `ip` and `nft` are `iproute2` and `nftables`; `scripts/setup.sh` installs the Debian packages.
//! Network namespaces need root. A test whose tool is missing fails with a message naming it: nothing skips.
//!
//! # containerd and images for the node agent
//! [`containerd::Containerd`] starts a private containerd 1.6 (its own config, root, state and socket under the
//! test's directory, CNI plugins from `/usr/lib/cni`) and removes it, its shims, containers and mounts on drop. The
//! images the tests run (a pause image and `localhost/busybox:latest` from Debian's `busybox-static`) are written by
//! `keel images --out DIR` and imported with [`containerd::Containerd::import`], since no registry is reachable.

pub mod agent;
pub mod binaries;
pub mod cluster;
pub mod containerd;
pub mod etcdctl;
pub mod heartbeat;
pub mod https;
pub mod kube;
pub mod kubectl;
pub mod netns;
pub mod normalize;
pub mod pods;
pub mod poll;
pub mod ports;
pub mod process;
pub mod server;
pub mod upstream;

pub use binaries::{
    against_etcd, keel_bin, require_etcd_tools, Kind, AGAINST_ETCD_ENV, ETCDCTL_BIN, ETCD_BIN,
};
pub use cluster::{Cluster, Options};
pub use etcdctl::{etcdctl, etcdctl_command, etcdctl_with};
pub use kube::KubeCluster;
pub use netns::Net;
pub use normalize::{line_diff, normalize, Normalizer, Vars};
pub use process::{run_bounded, Capture, CtlOutput, Process};
pub use server::Server;

/// A loopback port no other test server in this run will be given (see [`ports`]).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// A directory named `keel-<name>-<pid>` under the temp dir for files a test binary shares across its
/// tests (the inputs of its shared cluster), removed when the test process exits (after the shared
/// cluster is stopped: exit handlers run in reverse order, and this one is registered first).
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    static DIRS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    static HOOK: std::sync::Once = std::sync::Once::new();
    extern "C" fn remove_all() {
        let dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
        for d in dirs.iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("create {}: {e}", dir.display());
    }
    let mut dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
    if !dirs.contains(&dir) {
        dirs.push(dir.clone());
    }
    // SAFETY: registers a plain extern "C" function with no captured state.
    HOOK.call_once(|| unsafe {
        libc::atexit(remove_all);
    });
    dir
}

/// `n` distinct loopback ports, reserved for the rest of this test process.
pub fn free_ports(n: usize) -> Vec<u16> {
    ports::reserve(n)
}
