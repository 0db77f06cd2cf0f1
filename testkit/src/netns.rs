//! Network partitions on one Linux machine: every node in its own network namespace, all joined by a bridge in a
//! dedicated "hub" namespace, partitions as nftables drop rules inside the node namespaces.
//!
//! Layout of one [`Net`] (run id `p<pid>c<counter>`, subnet `10.213.<S>.0/24` with `S` claimed per run):
//!
//! ```text
//!   root namespace (the test process, etcd-client, etcdctl)
//!     keelnet<S>  10.213.S.254/24 ──┐ veth
//!   keel-<run>-hub                  │
//!     br0 ── up0 ───────────────────┘
//!         ├─ m0 ── veth ── keel-<run>-0: eth0 10.213.S.1/24   (node 0)
//!         ├─ m1 ── veth ── keel-<run>-1: eth0 10.213.S.2/24   (node 1)
//!         └─ …
//! ```
//!
//! - The test process reaches every node's address directly from the root namespace (via `keelnet<S>`); that
//!   link is never cut, so clients can always talk to an isolated node (and see it refuse linearizable reads).
//! - A partition drops, in each node's own `inet keelpart` table (input hook), the packets whose source is a node
//!   it must not hear from. Dropped, not rejected: to the peers it looks like a dead link (TCP retransmits, then
//!   timeouts), as with a real network split.
//! - Traffic never leaves the test's own namespaces: nothing is routed or NATed, no rule is added to the root
//!   namespace, the only root-namespace change is the `keelnet<S>` interface.
//! - Everything is removed in `Drop` (also on panic): processes left inside the node namespaces are killed, the
//!   namespaces deleted (which deletes their veths, bridge and nftables tables). Leftovers of a run that was
//!   SIGKILLed (its pid no longer exists) are removed by the next [`Net::new`].
//!
//! Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN), `ip` (iproute2) and `nft` (nftables). Without them [`Net::new`]
//! panics with a clear message: a test that needs partitions fails, it does not silently skip.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::process::{describe, Capture, Process};

/// Second octet of every subnet used here: `10.213.<S>.0/24`.
pub const SUBNET_PREFIX: &str = "10.213";
/// Host part of the root namespace's address in every run's subnet.
pub const ROOT_HOST: u8 = 254;
/// Prefix of every namespace this module creates (`keel-<run>-<i>`, `keel-<run>-hub`).
pub const NS_PREFIX: &str = "keel-";
/// Bound for one `ip` or `nft` run.
const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// One run's namespaces, bridge and partition rules. See the module documentation.
pub struct Net {
    run_id: String,
    subnet: u8,
    hub: String,
    root_if: String,
    nodes: Vec<String>,
    /// Directed links `(from, to)` whose packets `to` drops.
    blocked: BTreeSet<(usize, usize)>,
}

/// Panics unless this process can manage network namespaces (root) and `ip`/`nft` exist.
pub fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        panic!(
            "this test needs root (network namespaces, veth, nftables; euid is {euid}): run it as root, as CI does \
             (e.g. `sudo -E cargo test --test cluster`); it does not skip itself"
        );
    }
    for (bin, pkg) in [("ip", "iproute2"), ("nft", "nftables")] {
        let mut cmd = Command::new(bin);
        cmd.arg("-V");
        let ok = Process::start(&mut cmd, Capture::Temp, None)
            .is_ok_and(|mut p| p.wait_timeout(TOOL_TIMEOUT).is_some_and(|st| st.success()));
        if !ok {
            panic!("`{bin}` is missing: install {pkg} (scripts/setup.sh does)");
        }
    }
}

/// What a finished `ip` or `nft` run printed.
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` with `stdin` (`None`: empty), panicking if it cannot start or does not finish within
/// [`TOOL_TIMEOUT`].
fn run_with(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    let mut p = Process::start(cmd, Capture::Temp, stdin)
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", describe(cmd)));
    let Some(status) = p.wait_timeout(TOOL_TIMEOUT) else {
        panic!("`{}` did not finish within {TOOL_TIMEOUT:?}", describe(cmd));
    };
    Output {
        status,
        stdout: p.stdout(),
        stderr: p.stderr(),
    }
}

fn run(cmd: &mut Command) -> Output {
    run_with(cmd, None)
}

/// Runs `ip <args>`, panicking with its stderr on failure.
fn ip(args: &[&str]) {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    let out = run(&mut cmd);
    if !out.status.success() {
        panic!(
            "`{}` failed ({}): {}",
            describe(&cmd),
            out.status,
            out.stderr.trim()
        );
    }
}

/// Runs `ip <args>` and returns whether it worked (for cleanup and claiming).
fn ip_try(args: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    let out = run(&mut cmd);
    if out.status.success() {
        Ok(())
    } else {
        Err(out.stderr.trim().to_string())
    }
}

/// Names of all named network namespaces (`ip netns list`).
fn netns_list() -> Vec<String> {
    let out = run(Command::new("ip").args(["netns", "list"]));
    out.stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Kills every process inside namespace `ns` (they were started there by a harness) and deletes it.
fn kill_and_delete_ns(ns: &str) {
    let out = run(Command::new("ip").args(["netns", "pids", ns]));
    for pid in out.stdout.split_whitespace() {
        if let Ok(pid) = pid.parse::<libc::pid_t>() {
            // SAFETY: kill(2) on a pid that lives in a namespace this harness created.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    if let Err(e) = ip_try(&["netns", "del", ns]) {
        eprintln!("netns: cannot delete namespace {ns}: {e}");
    }
}

/// The pid encoded in a run id `p<pid>c<counter>`.
fn run_pid(run_id: &str) -> Option<u32> {
    let rest = run_id.strip_prefix('p')?;
    let (pid, _) = rest.split_once('c')?;
    pid.parse().ok()
}

/// Removes namespaces left behind by runs whose process no longer exists (SIGKILLed test binaries).
pub fn cleanup_stale() {
    for ns in netns_list() {
        let Some(rest) = ns.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some(run_id) = rest.split('-').next() else {
            continue;
        };
        let Some(pid) = run_pid(run_id) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("netns: removing stale namespace {ns} (its test process {pid} is gone)");
            kill_and_delete_ns(&ns);
        }
    }
}

impl Net {
    /// A run id unique on this machine while this process lives: `p<pid>c<counter>`.
    pub fn unique_run_id() -> String {
        format!(
            "p{}c{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        )
    }

    /// `n` nodes (0..n) in namespaces `keel-<run_id>-<i>`, each with address [`Net::ip`]`(i)`, all reachable from
    /// the root namespace. `run_id` must be unique among concurrently existing `Net`s (see
    /// [`Net::unique_run_id`]) and short (namespace names are built from it); use `p<pid>c<n>` so that leftovers
    /// of a killed run can be recognised and removed.
    pub fn new(run_id: &str, n: usize) -> Net {
        require_root();
        assert!(
            !run_id.is_empty()
                && run_id.len() <= 24
                && run_id.bytes().all(|b| b.is_ascii_alphanumeric()),
            "run id {run_id:?} must be 1-24 ASCII letters/digits"
        );
        cleanup_stale();
        let hub = format!("{NS_PREFIX}{run_id}-hub");
        ip(&["netns", "add", &hub]);
        let mut net = Net {
            run_id: run_id.to_string(),
            subnet: 0,
            hub: hub.clone(),
            root_if: String::new(),
            nodes: Vec::new(),
            blocked: BTreeSet::new(),
        };
        // From here on, Drop cleans up whatever exists.
        ip(&["-n", &hub, "link", "set", "lo", "up"]);
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        net.claim_subnet();
        for _ in 0..n {
            net.add_node();
        }
        net
    }

    /// Claims a /24 no other run uses: the root-namespace interface `keelnet<S>` is the lock (creating an
    /// interface whose name exists fails), and subnets already routed in the root namespace are skipped.
    fn claim_subnet(&mut self) {
        let pid = std::process::id() as usize;
        let start = (pid * 7 + COUNTER.load(Ordering::SeqCst) * 13) % 250;
        let mut last_err = String::new();
        for k in 0..250 {
            let s = ((start + k) % 250 + 1) as u8;
            // Skip subnets the root namespace already uses (addresses or routes of anyone else).
            let taken = format!("{SUBNET_PREFIX}.{s}.");
            let routes = run(Command::new("ip").args(["-4", "route", "show", "table", "all"]));
            let addrs = run(Command::new("ip").args(["-4", "-o", "addr", "show"]));
            if routes.stdout.contains(&taken) || addrs.stdout.contains(&taken) {
                continue;
            }
            let root_if = format!("keelnet{s}");
            let me = std::process::id().to_string();
            match ip_try(&[
                "-n", &self.hub, "link", "add", "up0", "type", "veth", "peer", "name", &root_if,
                "netns", &me,
            ]) {
                Ok(()) => {
                    self.subnet = s;
                    self.root_if = root_if.clone();
                    ip(&["-n", &self.hub, "link", "set", "up0", "master", "br0"]);
                    ip(&["-n", &self.hub, "link", "set", "up0", "up"]);
                    let addr = format!("{SUBNET_PREFIX}.{s}.{ROOT_HOST}/24");
                    ip(&["addr", "add", &addr, "dev", &root_if]);
                    ip(&["link", "set", &root_if, "up"]);
                    return;
                }
                Err(e) => last_err = e,
            }
        }
        panic!("netns: no free subnet {SUBNET_PREFIX}.<1-250>.0/24 (last error: {last_err})");
    }

    /// Adds one more node (for a member that joins later) and returns its index. Existing partition rules are
    /// kept; the new node is connected to everyone.
    pub fn add_node(&mut self) -> usize {
        let i = self.nodes.len();
        assert!(i < 250, "netns: at most 250 nodes");
        let ns = format!("{NS_PREFIX}{}-{i}", self.run_id);
        ip(&["netns", "add", &ns]);
        self.nodes.push(ns.clone());
        let port = format!("m{i}");
        ip(&[
            "-n", &self.hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &ns,
        ]);
        ip(&["-n", &self.hub, "link", "set", &port, "master", "br0"]);
        ip(&["-n", &self.hub, "link", "set", &port, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/24", self.ip(i)),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        self.apply_node(i);
        i
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Name of node `i`'s namespace.
    pub fn ns(&self, i: usize) -> &str {
        &self.nodes[i]
    }

    /// Node `i`'s address (`10.213.<S>.<i+1>`).
    pub fn ip(&self, i: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 213, self.subnet, i as u8 + 1))
    }

    /// The root namespace's address on the bridge (source of every client connection from the test process).
    pub fn root_ip(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 213, self.subnet, ROOT_HOST))
    }

    /// `ip netns exec keel-<run>-<i>`: add the program and its arguments.
    pub fn exec_cmd(&self, i: usize) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(i)]);
        cmd
    }

    /// `ip netns exec keel-<run>-<i> <program>`. `ip netns exec` execs the program, so the child's pid is the
    /// program's pid (SIGKILL on the `Child` kills the program itself).
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.exec_cmd(i);
        cmd.arg(program);
        cmd
    }

    /// Cuts every link between nodes of different groups (both directions). Nodes not listed in any group are
    /// each cut off from everyone. Replaces any previous partition. The root namespace keeps reaching everyone.
    pub fn partition(&mut self, groups: &[&[usize]]) {
        let n = self.len();
        let mut group_of: Vec<Option<usize>> = vec![None; n];
        for (g, members) in groups.iter().enumerate() {
            for &m in members.iter() {
                assert!(m < n, "partition: node {m} does not exist ({n} nodes)");
                assert!(
                    group_of[m].is_none(),
                    "partition: node {m} is in two groups"
                );
                group_of[m] = Some(g);
            }
        }
        self.blocked.clear();
        for a in 0..n {
            for b in 0..n {
                if a != b && (group_of[a].is_none() || group_of[a] != group_of[b]) {
                    self.blocked.insert((a, b));
                }
            }
        }
        self.apply_all();
    }

    /// Cuts node `i` off from every other node (both directions).
    pub fn isolate(&mut self, i: usize) {
        let others: Vec<usize> = (0..self.len()).filter(|&j| j != i).collect();
        self.partition(&[&[i], &others]);
    }

    /// One-way cut: packets from `from` no longer reach `to` (a TCP connection between them then fails in both
    /// directions, since its replies are lost; UDP would flow the other way). Adds to the current rules.
    pub fn block(&mut self, from: usize, to: usize) {
        assert!(from != to && from < self.len() && to < self.len());
        self.blocked.insert((from, to));
        self.apply_node(to);
    }

    /// Removes every rule: all nodes reach each other again.
    pub fn heal(&mut self) {
        self.blocked.clear();
        self.apply_all();
    }

    /// The directed links currently cut, as `(from, to)`.
    pub fn blocked(&self) -> Vec<(usize, usize)> {
        self.blocked.iter().copied().collect()
    }

    fn apply_all(&self) {
        for i in 0..self.len() {
            self.apply_node(i);
        }
    }

    /// Atomically replaces node `to`'s `inet keelpart` table with drops for every blocked source.
    fn apply_node(&self, to: usize) {
        let sources: Vec<String> = self
            .blocked
            .iter()
            .filter(|(_, t)| *t == to)
            .map(|(f, _)| self.ip(*f).to_string())
            .collect();
        let mut script = String::from(
            "table inet keelpart\ndelete table inet keelpart\ntable inet keelpart {\n  chain input {\n    type filter hook input priority -10; policy accept;\n",
        );
        if !sources.is_empty() {
            script.push_str(&format!("    ip saddr {{ {} }} drop\n", sources.join(", ")));
        }
        script.push_str("  }\n}\n");
        let mut cmd = self.command(to, "nft");
        cmd.args(["-f", "-"]);
        let out = run_with(&mut cmd, Some(script.as_bytes()));
        if !out.status.success() {
            panic!(
                "nft in {} failed ({}): {}\nscript:\n{script}",
                self.ns(to),
                out.status,
                out.stderr.trim()
            );
        }
    }

    /// Runs `f` on a thread of its own that has entered node `i`'s network namespace, so every socket
    /// `f` opens (a client's, a runtime's) is inside it; its result.
    pub fn run_inside<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        self.spawn_inside(i, f)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// As [`Net::run_inside`], without waiting: the thread's handle.
    pub fn spawn_inside<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.ns(i));
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns(2) on a descriptor we own; it changes only this thread's namespace.
            let rc =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// `nft list ruleset` of node `i` (for failure messages).
    pub fn ruleset(&self, i: usize) -> String {
        run(self.command(i, "nft").args(["list", "ruleset"])).stdout
    }

    /// Runs `f` on a thread that has entered node `i`'s network namespace: sockets created there stay in that
    /// namespace wherever they are used afterwards.
    pub fn in_ns<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.ns(i));
        std::thread::scope(|s| {
            s.spawn(|| {
                let file =
                    std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                use std::os::fd::AsRawFd;
                // SAFETY: setns(2) on a valid namespace fd; it only changes this (scoped, short-lived) thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                if rc != 0 {
                    panic!("setns({path}): {}", std::io::Error::last_os_error());
                }
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// A TCP listener on `ip(i):port` inside node `i`'s namespace.
    pub fn listen_in(&self, i: usize, port: u16) -> TcpListener {
        let addr = SocketAddr::new(self.ip(i), port);
        self.in_ns(i, || TcpListener::bind(addr))
            .unwrap_or_else(|e| panic!("bind {addr} in {}: {e}", self.ns(i)))
    }

    /// A TCP connection from node `i`'s namespace to `to`, or the error after at most `timeout`.
    pub fn connect_from(
        &self,
        i: usize,
        to: SocketAddr,
        timeout: Duration,
    ) -> std::io::Result<TcpStream> {
        self.in_ns(i, || TcpStream::connect_timeout(&to, timeout))
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().rev() {
            kill_and_delete_ns(ns);
        }
        kill_and_delete_ns(&self.hub);
        // Deleting the hub deleted the veth pair; make sure the root end is gone even if it was not.
        if !self.root_if.is_empty() {
            let out = run(Command::new("ip").args(["link", "show", &self.root_if]));
            if out.status.success() {
                let _ = ip_try(&["link", "del", &self.root_if]);
            }
        }
    }
}
