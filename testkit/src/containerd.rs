//! A private containerd 1.6 for one test: its own config, root, state, socket and CNI config directory
//! under a directory the test owns, never the system instance (`/run/containerd`).
//!
//! - [`Containerd::start`] writes the config (CRI plugin on, overlayfs, runc with the cgroupfs driver,
//!   sandbox image `localhost/pause:3.10`, as `keel images` writes it, CNI binaries from Debian's `/usr/lib/cni`, network namespaces
//!   mounted under the state directory, runc's state under the directory too, and OOM score adjustments
//!   clamped to the caller's, since a sandboxed test host may not lower them) and waits until `ctr version` answers.
//! - [`Containerd::import`] puts an OCI archive into the `k8s.io` namespace the CRI plugin reads.
//! - Dropping it (also on panic) stops everything it ran: the containers' processes and their shims (found
//!   by PID: the shims that name this socket, and their children), containerd itself, then unmounts
//!   whatever is still mounted under its directory and deletes the network links registered with
//!   [`Containerd::remove_link_on_drop`]. A test that ran pods through an agent should first ask the agent
//!   to tear them down through CRI (so CNI releases addresses); this is the backstop.
//!
//! Needs root, `containerd`, `ctr` and `runc` (Debian's `containerd` and `runc`), and the CNI plugins in
//! `/usr/lib/cni` (`containernetworking-plugins`); [`Containerd::start`] panics with a clear message
//! otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{run_bounded, Capture, CtlOutput, Process};

/// The sandbox (pause) image the config names; it must be imported before the first pod.
pub use keel_node_agent::image::oci::PAUSE_IMAGE;
/// Where Debian's CNI plugins are.
pub use keel_node_agent::runtime::CNI_BIN_DIR;
/// Bound of one `ctr` call.
const CTR_TIMEOUT: Duration = Duration::from_secs(120);

/// One private containerd. See the module documentation.
pub struct Containerd {
    dir: PathBuf,
    process: Option<Process>,
    links: Vec<String>,
}

/// Panics unless this process is root and containerd, ctr, runc and the CNI plugins are installed.
pub fn require() {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test runs a private containerd and needs root (as CI has); it does not skip itself");
    }
    for bin in ["containerd", "ctr", "runc"] {
        let mut cmd = Command::new(bin);
        cmd.arg("--version");
        let out = run_bounded(cmd, None, Duration::from_secs(30));
        if !out.success() {
            panic!(
                "`{bin}` is missing: install Debian's containerd and runc (scripts/setup.sh does)"
            );
        }
    }
    if !Path::new(CNI_BIN_DIR).join("bridge").exists() {
        panic!("{CNI_BIN_DIR}/bridge is missing: install containernetworking-plugins (scripts/setup.sh does)");
    }
}

impl Containerd {
    /// Starts a containerd whose every file lives under `dir` (created if needed).
    pub fn start(dir: &Path) -> Containerd {
        Containerd::start_in(dir, None)
    }

    /// As [`Containerd::start`], inside the network namespace `netns` (`/run/netns/<netns>`) when given:
    /// its pods' bridge and CNI state are then that namespace's. Only the network namespace is entered
    /// (`nsenter --net`), so mounts and cgroups are the host's as usual.
    pub fn start_in(dir: &Path, netns: Option<&str>) -> Containerd {
        require();
        std::fs::create_dir_all(dir.join("net.d"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let conf = dir.join("config.toml");
        std::fs::write(&conf, keel_node_agent::runtime::containerd_config(dir))
            .unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
        let mut cmd = in_netns(netns, "containerd");
        cmd.arg("--config").arg(&conf);
        let process = Process::start(&mut cmd, Capture::Log(dir.join("containerd.log")), None)
            .unwrap_or_else(|e| panic!("cannot start containerd: {e}"));
        let mut c = Containerd {
            dir: dir.to_path_buf(),
            process: Some(process),
            links: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if c.ctr(&["version"]).success() {
                break;
            }
            let exited = c.process.as_mut().is_some_and(|p| p.has_exited());
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default();
                panic!("containerd did not come up (exited: {exited}); its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(|p| p.pid())
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The CRI endpoint (`unix:///…/containerd.sock`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The CNI configuration directory its CRI plugin watches.
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// `ctr -a <socket> -n k8s.io <args>`, bounded.
    pub fn ctr(&self, args: &[&str]) -> CtlOutput {
        let mut cmd = Command::new("ctr");
        cmd.arg("-a")
            .arg(self.socket())
            .args(["-n", "k8s.io"])
            .args(args);
        run_bounded(cmd, None, CTR_TIMEOUT)
    }

    /// Imports the OCI archive `tar` into the `k8s.io` namespace; panics if ctr refuses it.
    pub fn import(&self, tar: &Path) {
        let path = tar.display().to_string();
        let out = self.ctr(&["images", "import", "--platform", "linux/amd64", &path]);
        assert!(
            out.success(),
            "ctr images import {path}: {}{}",
            out.stdout,
            out.stderr
        );
    }

    /// Deletes the network link `name` (a CNI bridge) when this containerd is dropped.
    pub fn remove_link_on_drop(&mut self, name: &str) {
        self.links.push(name.to_string());
    }

    /// PIDs of the shims serving this containerd.
    fn shims(&self) -> Vec<i32> {
        let socket = self.socket().display().to_string();
        processes()
            .into_iter()
            .filter(|(_, _, cmdline)| {
                cmdline.iter().any(|a| {
                    a.starts_with("containerd-shim") || a.ends_with("/containerd-shim-runc-v2")
                }) && cmdline.iter().any(|a| a.starts_with(&socket))
            })
            .map(|(pid, _, _)| pid)
            .collect()
    }

    fn teardown(&mut self) {
        let shims = self.shims();
        // Container processes are the shims' children; killing a container's init ends its PID namespace.
        let procs = processes();
        for (pid, ppid, _) in &procs {
            if shims.contains(ppid) {
                kill(*pid);
            }
        }
        if let Some(mut p) = self.process.take() {
            p.stop(Duration::from_secs(10));
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
            std::thread::sleep(Duration::from_millis(50));
        }
        unmount_under(&self.dir);
        for link in self.links.drain(..) {
            let mut cmd = Command::new("ip");
            cmd.args(["link", "del", &link]);
            let _ = run_bounded(cmd, None, Duration::from_secs(30));
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// `program`, run inside the network namespace `netns` when given (`nsenter` execs it, so the PID is
/// the program's).
pub fn in_netns(netns: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match netns {
        Some(ns) => {
            let mut cmd = Command::new("nsenter");
            cmd.arg(format!("--net=/run/netns/{ns}"))
                .arg("--")
                .arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

fn kill(pid: i32) {
    // SAFETY: kill(2) with a pid read from /proc just now; the processes are ours (this test's runtime).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Every process as (pid, parent pid, command line).
fn processes() -> Vec<(i32, i32, Vec<String>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name in parentheses may hold spaces; the parent pid is the second field after it.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| {
                b.split(|c| *c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        out.push((pid, ppid, cmdline));
    }
    out
}

/// Lazily unmounts every mount point under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    let prefix = dir.display().to_string();
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter(|p| p == &prefix || p.starts_with(&format!("{prefix}/")))
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

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/a\040b"), "/a b");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
    }
}
