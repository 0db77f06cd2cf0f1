//! A worker node for tests: a private [`Containerd`], the built-in images (`keel images`, imported into
//! it) and a real `keel agent` process registered against a cluster member, with its own root, log and
//! CNI directories, bridge and pod CIDR.
//!
//! Dropping it (also on panic) asks the agent's binary to tear every pod down through CRI (so CNI
//! releases addresses and deletes veths), kills the agent by PID, then drops the containerd (which kills
//! what is left by PID, unmounts, and deletes the bridge).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::containerd::Containerd;
use crate::process::{run_bounded, Capture, Process};

/// The busybox image every node has (sh, httpd, wget, nc, sleep …), never pulled.
pub const BUSYBOX: &str = "localhost/busybox:latest";

/// One worker: containerd + `keel agent`. See the module documentation.
pub struct AgentNode {
    keel: PathBuf,
    dir: PathBuf,
    name: String,
    kubeconfig: PathBuf,
    pod_cidr: String,
    extra: Vec<String>,
    netns: Option<String>,
    agent: Option<Process>,
    // Dropped last: the agent's teardown talks to it.
    containerd: Containerd,
}

/// The bridge device the agent makes for `node`.
pub use keel_node_agent::cni::bridge_name;

impl AgentNode {
    /// Starts a node named `name` under `dir` with pod CIDR `pod_cidr`, its agent talking to the API
    /// through `kubeconfig`; `extra` flags go to `keel agent`. Returns once the agent runs (the caller
    /// waits for the Node to be Ready).
    pub fn start(
        keel: &Path,
        dir: &Path,
        name: &str,
        kubeconfig: &Path,
        pod_cidr: &str,
        extra: &[&str],
    ) -> AgentNode {
        AgentNode::start_in(keel, dir, name, kubeconfig, pod_cidr, extra, None)
    }

    /// As [`AgentNode::start`], with containerd and the agent inside the network namespace `netns`
    /// (a node of a [`crate::netns::Net`]): the node's bridge, pods, routes and nftables table are then
    /// that namespace's, and go with it.
    pub fn start_in(
        keel: &Path,
        dir: &Path,
        name: &str,
        kubeconfig: &Path,
        pod_cidr: &str,
        extra: &[&str],
        netns: Option<&str>,
    ) -> AgentNode {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut containerd = Containerd::start_in(&dir.join("containerd"), netns);
        if netns.is_none() {
            // In a namespace of its own the bridge goes with the namespace.
            containerd.remove_link_on_drop(&bridge_name(name));
        }
        let images = dir.join("images");
        let mut cmd = Command::new(keel);
        cmd.arg("images").arg("--out").arg(&images);
        let out = run_bounded(cmd, None, Duration::from_secs(120));
        assert!(out.success(), "keel images: {}{}", out.stdout, out.stderr);
        let mut node = AgentNode {
            keel: keel.to_path_buf(),
            dir: dir.to_path_buf(),
            name: name.to_string(),
            kubeconfig: kubeconfig.to_path_buf(),
            pod_cidr: pod_cidr.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            netns: netns.map(str::to_string),
            agent: None,
            containerd,
        };
        node.spawn_agent();
        node
    }

    /// (Re)starts the `keel agent` process (after [`AgentNode::kill9_agent`]).
    pub fn spawn_agent(&mut self) {
        let mut cmd = crate::containerd::in_netns(self.netns.as_deref(), &self.keel);
        cmd.arg("agent")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cri")
            .arg(self.containerd.endpoint())
            .arg("--node-name")
            .arg(&self.name)
            .arg("--root-dir")
            .arg(self.dir.join("agent"))
            .arg("--pod-log-dir")
            .arg(self.dir.join("pods-logs"))
            .arg("--cni-conf-dir")
            .arg(self.containerd.cni_conf_dir())
            .arg("--image-dir")
            .arg(self.dir.join("images"))
            .args(&self.extra)
            // Empty: the cluster's node IPAM controller assigns the node's range.
            .args(if self.pod_cidr.is_empty() {
                vec![]
            } else {
                vec!["--pod-cidr".to_string(), self.pod_cidr.clone()]
            })
            .env(
                "KEEL_LOG",
                std::env::var("KEEL_LOG").unwrap_or_else(|_| "info".into()),
            );
        let p = Process::start(&mut cmd, Capture::Log(self.dir.join("agent.log")), None)
            .unwrap_or_else(|e| panic!("cannot start keel agent: {e}"));
        self.agent = Some(p);
    }

    /// SIGKILLs the agent (its containers keep running).
    pub fn kill9_agent(&mut self) {
        if let Some(mut p) = self.agent.take() {
            p.kill();
        }
    }

    /// The agent's PID.
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().and_then(|p| p.pid())
    }

    /// Whether the agent still runs.
    pub fn agent_running(&mut self) -> bool {
        self.agent.as_mut().is_some_and(|p| p.is_running())
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's containerd.
    pub fn containerd(&self) -> &Containerd {
        &self.containerd
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The agent's log (every start of it).
    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// The last `n` lines of the agent's and containerd's logs, for failure messages.
    pub fn log_tails(&self, n: usize) -> String {
        let tail = |s: String| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        format!(
            "--- keel agent ({}) ---\n{}\n--- containerd ---\n{}",
            self.name,
            tail(self.agent_log()),
            tail(self.containerd.log())
        )
    }

    /// Stops and removes every pod sandbox through CRI (`keel agent --remove-all-pods`), and unmounts
    /// the pods' memory-backed volumes.
    pub fn remove_all_pods(&self) {
        let mut cmd = Command::new(&self.keel);
        cmd.arg("agent")
            .arg("--remove-all-pods")
            .arg("--cri")
            .arg(self.containerd.endpoint())
            .arg("--root-dir")
            .arg(self.dir.join("agent"));
        let out = run_bounded(cmd, None, Duration::from_secs(120));
        if !out.success() {
            eprintln!(
                "warning: keel agent --remove-all-pods: {}{}",
                out.stdout, out.stderr
            );
        }
    }
}

impl Drop for AgentNode {
    fn drop(&mut self) {
        self.kill9_agent();
        self.remove_all_pods();
    }
}

/// Writes to `out` a kubeconfig with the node identity of `node` (`system:node:<node>` in
/// `system:nodes`), minted from member data directory `member_dir`, so an agent is held to the Node
/// authorizer and NodeRestriction as a kubelet is.
pub fn node_kubeconfig(keel: &Path, member_dir: &Path, node: &str, out: &Path) {
    let minted = Command::new(keel)
        .arg("kubeconfig")
        .arg("--data-dir")
        .arg(member_dir)
        .args([
            "--user",
            &format!("system:node:{node}"),
            "--group",
            "system:nodes",
            "--out",
        ])
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("keel kubeconfig: {e}"));
    assert!(
        minted.status.success(),
        "keel kubeconfig: {}",
        String::from_utf8_lossy(&minted.stderr)
    );
}
