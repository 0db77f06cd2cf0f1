//! The worker `keel up` runs on this machine: a private containerd (config, root, state, sockets, runc
//! state and network namespaces under `<data-dir>/worker/containerd`, never the system instance), the
//! built-in images, and a `keel agent` registered as a Node. Stopping it removes everything it made: the
//! pods (through CRI, so CNI releases their addresses), the agent, containerd, any shim or container
//! process left (found by PID), mounts under its directory, the pod bridge, the `unreachable` routes, and netprog's nftables table, pod routes and forwarding settings.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_node_agent::{cni, image, runtime};

use crate::server::ServerError;

/// The worker's pod CIDR (a /24 of the default cluster CIDR).
pub(crate) const POD_CIDR: &str = "10.42.0.0/24";
/// The worker Node's address: [`POD_CIDR`]'s gateway, on the pod bridge.
pub(crate) const NODE_IP: &str = "10.42.0.1";
const CLUSTER_CIDR: &str = "10.42.0.0/16";
const SERVICE_CIDR: &str = "10.96.0.0/12";

/// containerd + `keel agent`, children of `keel up`.
pub(crate) struct LocalWorker {
    dir: PathBuf,
    node: String,
    containerd: Option<Child>,
    agent: Option<Child>,
}

fn cfg(msg: impl Into<String>) -> ServerError {
    ServerError::Config(msg.into())
}

/// Checks that this machine can run the worker: root, containerd, runc, ctr, the CNI plugins.
pub(crate) fn preflight() -> Result<(), ServerError> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(cfg(
            "keel up runs a worker (containerd, runc, CNI, pod networking) and needs root; run it as root, or pass --no-worker for the control plane alone",
        ));
    }
    for bin in ["containerd", "ctr", "runc", "ip"] {
        let ok = Command::new(bin)
            .arg(if bin == "ip" { "-V" } else { "--version" })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(cfg(format!(
                "{bin} not found: scripts/setup.sh installs it (or pass --no-worker)"
            )));
        }
    }
    if !Path::new(runtime::CNI_BIN_DIR).join("bridge").exists() {
        return Err(cfg(format!(
            "{}/bridge not found: install containernetworking-plugins (scripts/setup.sh does), or pass --no-worker",
            runtime::CNI_BIN_DIR
        )));
    }
    Ok(())
}

pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "keel-worker".into())
}

impl LocalWorker {
    /// Starts containerd and the agent under `<data_dir>/worker`; the agent reaches the API through
    /// `kubeconfig`.
    pub(crate) async fn start(
        exe: &Path,
        data_dir: &Path,
        kubeconfig: &Path,
        log_level: &str,
        dns_upstream: &[String],
        registries: Option<&Path>,
    ) -> Result<LocalWorker, ServerError> {
        let dir = data_dir.join("worker");
        let ctd = dir.join("containerd");
        std::fs::create_dir_all(runtime::cni_conf_dir(&ctd))
            .map_err(|e| cfg(format!("{}: {e}", ctd.display())))?;
        let conf = ctd.join("config.toml");
        std::fs::write(&conf, runtime::containerd_config(&ctd))
            .map_err(|e| cfg(format!("{}: {e}", conf.display())))?;
        let log = std::fs::File::create(dir.join("containerd.log"))
            .map_err(|e| cfg(format!("containerd log: {e}")))?;
        let containerd = Command::new("containerd")
            .arg("--config")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| cfg(format!("cannot start containerd: {e}")))?;
        let node = host_name();
        let mut w = LocalWorker {
            dir: dir.clone(),
            node: node.clone(),
            containerd: Some(containerd),
            agent: None,
        };
        let images = dir.join("images");
        let written = image::oci::write_builtin(&images, Path::new(image::oci::BUSYBOX))
            .map_err(|e| cfg(format!("building the built-in images: {e}")));
        if let Err(e) = written {
            w.stop().await;
            return Err(e);
        }
        let socket = runtime::socket(&ctd);
        let log = match std::fs::File::create(dir.join("agent.log")) {
            Ok(f) => f,
            Err(e) => {
                w.stop().await;
                return Err(cfg(format!("agent log: {e}")));
            }
        };
        let agent = Command::new(exe)
            .arg("agent")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cri")
            .arg(format!("unix://{}", socket.display()))
            .args(["--node-name", &node, "--node-ip", NODE_IP])
            // Loopback cannot be DNATed to from a pod: the node's address is its pod bridge's
            // gateway, which pods and this machine both reach (and no packet leaves by).
            .arg("--node-ip-on-bridge")
            .args(["--pod-cidr", POD_CIDR])
            .args(dns_upstream.iter().map(|u| format!("--dns-upstream={u}")))
            .args([
                "--cluster-cidr",
                CLUSTER_CIDR,
                "--service-cidr",
                SERVICE_CIDR,
            ])
            .arg("--root-dir")
            .arg(dir.join("agent"))
            .arg("--pod-log-dir")
            .arg(dir.join("pod-logs"))
            .arg("--cni-conf-dir")
            .arg(runtime::cni_conf_dir(&ctd))
            .arg("--image-dir")
            .arg(&images)
            .args(registries.map(|r| {
                let mut a = std::ffi::OsString::from("--registries=");
                a.push(r);
                a
            }))
            .args(["--log-level", log_level])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn();
        match agent {
            Ok(a) => w.agent = Some(a),
            Err(e) => {
                w.stop().await;
                return Err(cfg(format!("cannot start keel agent: {e}")));
            }
        }
        Ok(w)
    }

    /// The Node's name.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// Its directory (logs: `containerd.log`, `agent.log`).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// An error when containerd or the agent exited by itself.
    pub(crate) fn check(&mut self) -> Result<(), ServerError> {
        for (what, child) in [
            ("containerd", &mut self.containerd),
            ("keel agent", &mut self.agent),
        ] {
            if let Some(c) = child {
                if let Ok(Some(st)) = c.try_wait() {
                    return Err(cfg(format!(
                        "{what} exited ({st}); see {}",
                        self.dir.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Stops and removes everything the worker made (see the module documentation).
    pub(crate) async fn stop(&mut self) {
        let ctd = self.dir.join("containerd");
        let socket = runtime::socket(&ctd);
        if let Some(a) = self.agent.take() {
            terminate(a, Duration::from_secs(10));
        }
        if socket.exists() {
            let endpoint = format!("unix://{}", socket.display());
            match tokio::time::timeout(
                Duration::from_secs(120),
                keel_node_agent::agent::remove_all_pods(&endpoint),
            )
            .await
            {
                Ok(Ok(n)) => eprintln!("keel up: removed {n} pod sandbox(es)"),
                Ok(Err(e)) => eprintln!("keel up: pods not removed through CRI: {e}"),
                Err(_) => eprintln!("keel up: pods not removed through CRI: timed out"),
            }
        }
        keel_node_agent::node::routes::remove(&[
            CLUSTER_CIDR.to_string(),
            SERVICE_CIDR.to_string(),
        ]);
        keel_node_agent::node::routes::remove_local_services();
        if let Err(e) = keel_netprog::sync::cleanup(&self.dir.join("agent").join("netprog")).await {
            eprintln!("keel up: Service rules not removed: {e}");
        }
        let shims = shims_of(&socket);
        for (pid, ppid, _) in processes() {
            if shims.contains(&ppid) {
                kill(pid);
            }
        }
        if let Some(c) = self.containerd.take() {
            terminate(c, Duration::from_secs(10));
        }
        for pid in &shims {
            kill(*pid);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && shims
                .iter()
                .any(|p| Path::new(&format!("/proc/{p}")).exists())
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        unmount_under(&self.dir);
        let bridge = cni::bridge_name(&self.node);
        let _ = Command::new("ip")
            .args(["link", "del", &bridge])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// SIGTERM, then SIGKILL after `grace`; reaped either way.
fn terminate(mut c: Child, grace: Duration) {
    // SAFETY: signalling our own child, not yet reaped.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

fn kill(pid: i32) {
    // SAFETY: kill(2) on a pid just read from /proc: a shim of our containerd or one of its children.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Every process as (pid, parent pid, command line).
fn processes() -> Vec<(i32, i32, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The command name in parentheses may hold spaces; the parent pid is the second field after it.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args = cmdline
                .split(|c| *c == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, ppid, args))
        })
        .collect()
}

/// PIDs of the containerd shims that serve `socket`.
fn shims_of(socket: &Path) -> Vec<i32> {
    let socket = socket.display().to_string();
    processes()
        .into_iter()
        .filter(|(_, _, args)| {
            args.first().is_some_and(|a| a.contains("containerd-shim"))
                && args.iter().any(|a| a == &socket)
        })
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Lazily unmounts every mount point under `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return;
    };
    let prefix = dir.display().to_string();
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&format!("{prefix}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for p in points {
        let Ok(c) = std::ffi::CString::new(p) else {
            continue;
        };
        // SAFETY: umount2(2) with a NUL-terminated path; MNT_DETACH never blocks.
        unsafe {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}
