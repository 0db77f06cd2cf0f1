//! Multi-member clusters of real processes — etcd 3.4 or `keel server`, same API for both — for integration
//! tests: start, kill -9, SIGTERM, restart, leader discovery, membership changes, partitions (with
//! [`crate::netns`]), and etcd-client / etcdctl access to any member.
//!
//! - Every member is a real process ([`Process`]) with its own data dir and log file under one temp dir. By
//!   default all members listen on 127.0.0.1 with free ports; with [`Options::netns`] each member runs inside its
//!   own network namespace on its own address (`10.213.<S>.<i+1>`, ports 2379/2380/6443) so that
//!   [`Cluster::net_mut`] can cut links. Either way the test process reaches every member's URLs directly.
//! - With [`Options::kube`] (keel only) every member also serves the Kubernetes API (`--kube-listen`) and is
//!   ready only once its admin kubeconfig exists and kubectl gets `ok` from `/readyz`;
//!   [`KubeCluster`](crate::KubeCluster) adds kubectl and `kube` clients on top.
//! - Members are numbered in order of creation; the index of a removed member stays taken, so indexes never
//!   shift. Initial members are named `n1`, `n2`, …
//! - Every wait is bounded; on timeout the harness panics with the last lines of every member's log
//!   ([`Cluster::fail`]). `Drop` SIGKILLs every process (then the namespaces go); when the test is panicking
//!   (or `KEEL_KEEP_CLUSTER_DIRS` is set), the cluster's directory (data dirs and logs) is kept and its path
//!   printed.
//! - [`kind_under_test`]: keel, or a real etcd when `KEEL_DIFF_AGAINST_ETCD=1` (self-check of the harness and of
//!   the tests themselves).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::binaries::{against_etcd, keel_bin, require_etcd_tools, Kind, ETCD_BIN};
use crate::etcdctl::ctl_endpoints;
use crate::kubectl::{kubectl_command, require_kubectl, run_kubectl};
use crate::netns::Net;
use crate::process::{describe, Capture, CtlOutput, Process};

/// Client port of every member in netns mode (each member has its own address).
pub const NS_CLIENT_PORT: u16 = 2379;
/// Peer port of every member in netns mode.
pub const NS_PEER_PORT: u16 = 2380;
/// Kubernetes API port of every member in netns mode.
pub const NS_KUBE_PORT: u16 = 6443;
/// Default bound for a member to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound for a member serving the Kubernetes API to become ready (it also writes its PKI and kubeconfig).
pub const KUBE_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long SIGTERM may take before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a removed member gets to exit on its own.
pub const REMOVED_EXIT_TIMEOUT: Duration = Duration::from_secs(15);
/// Env var: when set, every cluster's directory (data dirs, logs) is kept, not only a failed test's.
pub const KEEP_ENV: &str = "KEEL_KEEP_CLUSTER_DIRS";
/// Lines of each member's log shown in a failure message.
const LOG_TAIL_LINES: usize = 25;

static CLUSTER_COUNTER: AtomicUsize = AtomicUsize::new(0);
static SERIAL: Mutex<()> = Mutex::new(());

/// Keel, or a real etcd standing in for it when `KEEL_DIFF_AGAINST_ETCD=1`.
pub fn kind_under_test() -> Kind {
    if against_etcd() {
        Kind::Etcd
    } else {
        Kind::Keel
    }
}

/// Runs cluster tests of one test binary one at a time (hold the guard for the whole test): several 3–5 member
/// clusters at once on a 2-CPU machine distort election timings. A previous test's panic does not poison it.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// How to build a cluster.
#[derive(Clone, Debug)]
pub struct Options {
    pub kind: Kind,
    pub size: usize,
    /// The `keel` binary (none: [`keel_bin()`], looked up when the first keel member starts).
    pub keel_bin: Option<PathBuf>,
    /// Each member in its own network namespace (needs root), see [`crate::netns`].
    pub netns: bool,
    /// Every member serves the Kubernetes API (keel only; needs kubectl for the readiness probe).
    pub kube: bool,
    /// `--snapshot-count` for every member (none: the server's default).
    pub snapshot_count: Option<u64>,
    /// `--heartbeat-interval` in ms.
    pub heartbeat_ms: u64,
    /// `--election-timeout` in ms.
    pub election_ms: u64,
    /// `--initial-cluster-token` (unique per cluster by default).
    pub token: String,
    /// `--log-level`.
    pub log_level: String,
    /// Extra flags for every member.
    pub extra_args: Vec<String>,
}

impl Options {
    /// `size` members of `kind` on loopback, heartbeat 100 ms, election timeout 1000 ms (etcd's defaults).
    pub fn new(kind: Kind, size: usize) -> Options {
        Options {
            kind,
            size,
            keel_bin: None,
            netns: false,
            kube: false,
            snapshot_count: None,
            heartbeat_ms: 100,
            election_ms: 1000,
            token: format!(
                "keel-test-{}-{}",
                std::process::id(),
                CLUSTER_COUNTER.fetch_add(1, Ordering::SeqCst)
            ),
            log_level: "info".into(),
            extra_args: Vec::new(),
        }
    }

    /// `size` members of keel from `keel` (pass [`keel_bin!`](crate::keel_bin!)), or of real etcd when
    /// `KEEL_DIFF_AGAINST_ETCD=1` ([`kind_under_test`]).
    pub fn under_test(keel: impl Into<PathBuf>, size: usize) -> Options {
        Options::new(kind_under_test(), size).keel_bin(keel)
    }

    /// The `keel` binary to run.
    pub fn keel_bin(mut self, keel: impl Into<PathBuf>) -> Self {
        self.keel_bin = Some(keel.into());
        self
    }

    /// Each member in its own network namespace (needs root).
    pub fn netns(mut self) -> Self {
        self.netns = true;
        self
    }

    /// Every member serves the Kubernetes API on its own port (`--kube-listen https://<host>:<port>`).
    pub fn kube(mut self) -> Self {
        self.kube = true;
        self
    }

    pub fn snapshot_count(mut self, n: u64) -> Self {
        self.snapshot_count = Some(n);
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.extra_args.push(a.to_string());
        self
    }

    /// Starts the cluster and waits until every member is ready and a leader is agreed on.
    pub fn start(self) -> Cluster {
        Cluster::start_with(self)
    }
}

/// The cluster-related flags one member is started with (tests may change them before a start, see
/// [`Cluster::spawn_with`]).
#[derive(Clone, Debug)]
pub struct StartArgs {
    /// `--name`.
    pub name: String,
    /// `--initial-cluster`.
    pub initial_cluster: String,
    /// `--initial-cluster-state`: `new` or `existing`.
    pub state: String,
    /// `--initial-cluster-token`.
    pub token: String,
    /// Extra flags for this member only.
    pub extra: Vec<String>,
}

/// One member (running or not).
pub struct Member {
    pub name: String,
    /// Address clients and peers reach it on (`127.0.0.1`, or its namespace's address).
    pub host: String,
    pub client_port: u16,
    pub peer_port: u16,
    /// Port of its Kubernetes API ([`Options::kube`] only).
    pub kube_port: Option<u16>,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    /// Added with `--learner` (and not promoted by the harness).
    pub learner: bool,
    /// Removed with `member remove`: never restarted, left out of [`Cluster::live`].
    pub removed: bool,
    /// Member ID (learned from `member list`/`member add`).
    pub id: Option<u64>,
    /// Flags of the next (re)start.
    pub start_args: StartArgs,
    /// The last command line it was started with.
    pub cmdline: String,
    /// How many times it was started.
    pub starts: u32,
    process: Option<Process>,
    last_exit: Option<ExitStatus>,
}

impl Member {
    /// `host:port`, as etcdctl's `--endpoints` wants it.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.client_port)
    }

    pub fn client_url(&self) -> String {
        format!("http://{}:{}", self.host, self.client_port)
    }

    pub fn peer_url(&self) -> String {
        format!("http://{}:{}", self.host, self.peer_port)
    }

    /// `https://<host>:<kube port>`, its Kubernetes API. Panics unless the cluster was started with
    /// [`Options::kube`].
    pub fn kube_url(&self) -> String {
        match self.kube_port {
            Some(p) => format!("https://{}:{p}", self.host),
            None => panic!(
                "member {} does not serve the Kubernetes API (start the cluster with Options::kube())",
                self.name
            ),
        }
    }

    /// Its admin kubeconfig, written by the member into its data dir (pointing at its own API).
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
    }

    /// How the process last ended, if it did.
    pub fn last_exit(&self) -> Option<ExitStatus> {
        self.last_exit
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    /// The last lines of its log (all starts appended, each preceded by a `==== harness:` line).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| {
                if l.len() > 400 {
                    let mut end = 400;
                    while !l.is_char_boundary(end) {
                        end -= 1;
                    }
                    format!("{}…", &l[..end])
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// What `etcdctl endpoint status -w json` reports for one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub member_id: u64,
    /// 0 when the member knows no leader.
    pub leader: u64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub revision: i64,
    pub is_learner: bool,
}

/// One entry of `etcdctl member list -w json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedMember {
    pub id: u64,
    /// Empty until the member has started and published itself.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

fn json_u64(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

fn json_strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Parses the `members` array of `member list/add/remove -w json`.
pub fn parse_members(v: &Value) -> Vec<ListedMember> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|m| ListedMember {
                    id: json_u64(&m["ID"]),
                    name: m["name"].as_str().unwrap_or("").to_string(),
                    peer_urls: json_strings(&m["peerURLs"]),
                    client_urls: json_strings(&m["clientURLs"]),
                    is_learner: m["isLearner"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Parses `etcdctl endpoint status -w json` for one endpoint.
pub fn parse_status(stdout: &str) -> Result<Status, String> {
    let v: Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("endpoint status -w json: {e}: {stdout}"))?;
    let s = v
        .as_array()
        .and_then(|a| a.first())
        .map(|e| &e["Status"])
        .ok_or_else(|| format!("endpoint status -w json: no entry: {stdout}"))?;
    if s.is_null() {
        return Err(format!("endpoint status -w json: no Status: {stdout}"));
    }
    Ok(Status {
        member_id: json_u64(&s["header"]["member_id"]),
        leader: json_u64(&s["leader"]),
        raft_term: json_u64(&s["raftTerm"]),
        raft_index: json_u64(&s["raftIndex"]),
        raft_applied_index: json_u64(&s["raftAppliedIndex"]),
        revision: s["header"]["revision"].as_i64().unwrap_or(0),
        is_learner: s["isLearner"].as_bool().unwrap_or(false),
    })
}

/// etcdctl messages after which a membership change is worth retrying (etcd's strict reconfiguration check
/// refuses changes until every member has been connected for 5 s; elections in between).
const RETRYABLE: &[&str] = &[
    "unhealthy cluster",
    "not enough started members",
    "request timed out",
    "leader changed",
    "no leader",
    // A membership change that met an election in flight (etcd answers the same while a new leader
    // is chosen); an operator runs the command again.
    "not leader",
    "context deadline exceeded",
    "connection refused",
];

fn retryable(out: &CtlOutput) -> bool {
    RETRYABLE
        .iter()
        .any(|m| out.stderr.contains(m) || out.stdout.contains(m))
}

/// N real server processes forming one cluster. See the module documentation.
pub struct Cluster {
    pub opts: Options,
    members: Vec<Member>,
    /// Where `dir` is (also once it was kept on drop).
    path: PathBuf,
    /// kubectl runs so far (each gets a fresh cache dir).
    kubectl_runs: AtomicUsize,
    // Dropped after the processes are killed in Drop::drop, then the temp dir.
    net: Option<Net>,
    dir: Option<tempfile::TempDir>,
}

/// Where one member is reached.
struct Addr {
    host: String,
    client_port: u16,
    peer_port: u16,
    kube_port: Option<u16>,
}

impl Cluster {
    /// `n` members of `kind` on loopback with default options (the `keel` binary from [`keel_bin()`]).
    pub fn start(kind: Kind, n: usize) -> Cluster {
        Options::new(kind, n).start()
    }

    /// Starts the cluster `opts` describes and waits until every member is ready and a leader is agreed on.
    pub fn start_with(opts: Options) -> Cluster {
        require_etcd_tools();
        assert!(opts.size >= 1, "a cluster needs at least one member");
        assert!(
            !opts.kube || opts.kind == Kind::Keel,
            "only keel serves the Kubernetes API (Options::kube with {:?})",
            opts.kind
        );
        if opts.kube {
            require_kubectl();
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("keel-cluster-{}-", opts.kind.label()))
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for the cluster: {e}"));
        let net = opts
            .netns
            .then(|| Net::new(&Net::unique_run_id(), opts.size));
        let mut cluster = Cluster {
            opts,
            members: Vec::new(),
            path: dir.path().to_path_buf(),
            kubectl_runs: AtomicUsize::new(0),
            net,
            dir: Some(dir),
        };
        let n = cluster.opts.size;
        // Members are pushed only after all addresses are known, so each pick must avoid the earlier picks.
        let mut addrs: Vec<Addr> = Vec::with_capacity(n);
        for i in 0..n {
            let used: Vec<u16> = addrs
                .iter()
                .flat_map(|a| [Some(a.client_port), Some(a.peer_port), a.kube_port])
                .flatten()
                .collect();
            addrs.push(cluster.new_addr(i, &used));
        }
        let initial_cluster = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{}=http://{}:{}", i + 1, a.host, a.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        for (i, addr) in addrs.into_iter().enumerate() {
            let name = format!("n{}", i + 1);
            let m = cluster.new_member(
                &name,
                addr,
                StartArgs {
                    name: name.clone(),
                    initial_cluster: initial_cluster.clone(),
                    state: "new".into(),
                    token: cluster.opts.token.clone(),
                    extra: Vec::new(),
                },
            );
            cluster.members.push(m);
        }
        for i in 0..n {
            cluster.spawn(i);
        }
        let all: Vec<usize> = (0..n).collect();
        cluster.wait_ready_all(&all, cluster.ready_timeout());
        cluster.learn_ids(0);
        cluster.wait_leader(Duration::from_secs(15));
        // From now on every member uses its data dir: a restart is a plain restart.
        for m in &mut cluster.members {
            m.start_args.state = "existing".into();
        }
        cluster
    }

    /// The address of member `i` (in netns mode node `i` must exist): its namespace's address and the fixed
    /// ports, or 127.0.0.1 with free ports none of `used` (nor any member's) has.
    fn new_addr(&self, i: usize, used: &[u16]) -> Addr {
        let kube = self.opts.kube;
        if let Some(net) = &self.net {
            return Addr {
                host: net.ip(i).to_string(),
                client_port: NS_CLIENT_PORT,
                peer_port: NS_PEER_PORT,
                kube_port: kube.then_some(NS_KUBE_PORT),
            };
        }
        let taken: Vec<u16> = self
            .members
            .iter()
            .flat_map(|m| [Some(m.client_port), Some(m.peer_port), m.kube_port])
            .flatten()
            .chain(used.iter().copied())
            .collect();
        let p = loop {
            let p = crate::free_ports(if kube { 3 } else { 2 });
            if !p.iter().any(|p| taken.contains(p)) {
                break p;
            }
        };
        Addr {
            host: "127.0.0.1".to_string(),
            client_port: p[0],
            peer_port: p[1],
            kube_port: p.get(2).copied(),
        }
    }

    fn new_member(&self, name: &str, addr: Addr, start_args: StartArgs) -> Member {
        let base = self.dir().join(format!("{}-{name}", self.members.len()));
        std::fs::create_dir_all(&base)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", base.display()));
        Member {
            name: name.to_string(),
            host: addr.host,
            client_port: addr.client_port,
            peer_port: addr.peer_port,
            kube_port: addr.kube_port,
            data_dir: base.join("data"),
            log_path: base.join("server.log"),
            learner: false,
            removed: false,
            id: None,
            start_args,
            cmdline: String::new(),
            starts: 0,
            process: None,
            last_exit: None,
        }
    }

    /// The cluster's directory (one `<index>-<name>/` per member with `data/` and `server.log`); free for the
    /// test's own files too.
    pub fn dir(&self) -> PathBuf {
        self.path.clone()
    }

    /// How long a member may take to become ready ([`READY_TIMEOUT`], [`KUBE_READY_TIMEOUT`] with the
    /// Kubernetes API).
    pub fn ready_timeout(&self) -> Duration {
        if self.opts.kube {
            KUBE_READY_TIMEOUT
        } else {
            READY_TIMEOUT
        }
    }

    pub fn kind(&self) -> Kind {
        self.opts.kind
    }

    /// Number of members ever created (removed ones included).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member(&self, i: usize) -> &Member {
        &self.members[i]
    }

    pub fn member_mut(&mut self, i: usize) -> &mut Member {
        &mut self.members[i]
    }

    /// `host:port` of member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    /// Endpoints of the given members.
    pub fn endpoints(&self, set: &[usize]) -> Vec<String> {
        set.iter().map(|&i| self.endpoint(i)).collect()
    }

    /// Client URLs (`http://…`) of the given members.
    pub fn client_urls(&self, set: &[usize]) -> Vec<String> {
        set.iter().map(|&i| self.members[i].client_url()).collect()
    }

    /// The network namespaces (netns mode only).
    pub fn net(&self) -> &Net {
        match &self.net {
            Some(net) => net,
            None => panic!("this cluster was not started with Options::netns()"),
        }
    }

    pub fn net_mut(&mut self) -> &mut Net {
        match &mut self.net {
            Some(net) => net,
            None => panic!("this cluster was not started with Options::netns()"),
        }
    }

    /// True while member `i`'s process runs (reaps it if it exited).
    pub fn is_running(&mut self, i: usize) -> bool {
        let m = &mut self.members[i];
        if let Some(st) = m.process.as_mut().and_then(Process::try_wait) {
            m.last_exit = Some(st);
            m.process = None;
        }
        m.process.is_some()
    }

    /// Members whose process runs and that were not removed.
    pub fn live(&mut self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| !self.members[i].removed && self.is_running(i))
            .collect()
    }

    /// Live members that vote (not learners).
    pub fn live_voters(&mut self) -> Vec<usize> {
        self.live()
            .into_iter()
            .filter(|&i| !self.members[i].learner)
            .collect()
    }

    // -------------------------------------------------------------------------------------------------------
    // Processes
    // -------------------------------------------------------------------------------------------------------

    /// Starts member `i`'s process with its [`StartArgs`] and returns at once (see [`Cluster::wait_ready`]).
    pub fn spawn(&mut self, i: usize) {
        let args = self.members[i].start_args.clone();
        self.spawn_with(i, args);
    }

    /// Starts member `i`'s process with the given cluster flags (the member's own [`StartArgs`] are unchanged).
    pub fn spawn_with(&mut self, i: usize, args: StartArgs) {
        assert!(
            !self.is_running(i),
            "member {i} ({}) is already running",
            self.members[i].name
        );
        assert!(
            !self.members[i].removed,
            "member {i} ({}) was removed",
            self.members[i].name
        );
        let kind = self.opts.kind;
        let program = match kind {
            Kind::Etcd => PathBuf::from(ETCD_BIN),
            Kind::Keel => self.opts.keel_bin.get_or_insert_with(keel_bin).clone(),
        };
        let mut cmd = match &self.net {
            Some(net) => net.command(i, program),
            None => Command::new(program),
        };
        if kind == Kind::Keel {
            cmd.arg("server");
            if !self.opts.kube {
                // etcd-level cluster tests: no Kubernetes API (it would take port 6443 of each client host).
                cmd.args(["--kube-listen", ""]);
            }
        }
        let m = &self.members[i];
        let client_url = m.client_url();
        let peer_url = m.peer_url();
        cmd.arg("--name")
            .arg(&args.name)
            .arg("--data-dir")
            .arg(&m.data_dir)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(&args.initial_cluster)
            .arg("--initial-cluster-state")
            .arg(&args.state)
            .arg("--initial-cluster-token")
            .arg(&args.token)
            .arg("--heartbeat-interval")
            .arg(self.opts.heartbeat_ms.to_string())
            .arg("--election-timeout")
            .arg(self.opts.election_ms.to_string())
            .arg("--log-level")
            .arg(&self.opts.log_level);
        if let Some(n) = self.opts.snapshot_count {
            cmd.arg("--snapshot-count").arg(n.to_string());
        }
        if kind == Kind::Etcd {
            cmd.args(["--logger", "zap", "--log-outputs", "stderr"]);
        }
        if self.opts.kube {
            cmd.arg("--kube-listen").arg(m.kube_url());
        }
        cmd.args(&self.opts.extra_args).args(&args.extra);
        // etcd refuses ETCD_* variables that shadow a flag; keel reads KEEL_LOG.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("ETCD") || k == "KEEL_LOG" {
                cmd.env_remove(k);
            }
        }
        let cmdline = describe(&cmd);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .unwrap_or_else(|e| panic!("open {:?}: {e}", m.log_path));
        let _ = writeln!(
            log,
            "==== harness: start #{} of member {i}: {cmdline}",
            m.starts + 1
        );
        drop(log);
        let process = Process::start(&mut cmd, Capture::Log(m.log_path.clone()), None)
            .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));
        let m = &mut self.members[i];
        m.cmdline = cmdline;
        m.starts += 1;
        m.process = Some(process);
        m.last_exit = None;
    }

    /// Whether member `i` answers as a ready member: `endpoint health` (a linearizable read through Raft) for
    /// voters, `endpoint status` for learners (which refuse linearizable reads); with the Kubernetes API also
    /// its admin kubeconfig exists and kubectl gets `ok` from `/readyz`.
    pub fn probe_ready(&self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let args: &[&str] = if m.learner {
            &["endpoint", "status"]
        } else {
            &["endpoint", "health"]
        };
        let out = self.ctl_with(i, args, &["--command-timeout=2s", "--dial-timeout=1s"]);
        // With etcd auth on, the unauthenticated health read is refused, but only once the member has
        // passed the read's linearizable barrier (the auth check follows it): it is serving.
        let auth_refused = out
            .stderr
            .contains("failed to commit proposal: etcdserver: user name is empty");
        if !out.success() && !auth_refused {
            return Err(format!("{}{}", out.stdout.trim(), out.stderr.trim()));
        }
        if !self.opts.kube {
            return Ok(());
        }
        if !m.kubeconfig().exists() {
            return Err(format!("no {} yet", m.kubeconfig().display()));
        }
        let cmd = self.kubectl_cmd(i, &["--request-timeout=5s", "get", "--raw", "/readyz"]);
        let r = run_kubectl(cmd, None, Duration::from_secs(15));
        if r.ok && r.stdout.trim() == "ok" {
            Ok(())
        } else {
            Err(format!(
                "kubectl get --raw /readyz: {}{}",
                r.stdout.trim(),
                r.stderr.trim()
            ))
        }
    }

    /// A kubectl command against member `i`: its admin kubeconfig, a fresh `KUBECACHEDIR` and `HOME` in the
    /// cluster's directory, stdin `/dev/null`. Add nothing but what a user would type after `kubectl`.
    pub fn kubectl_cmd(&self, i: usize, args: &[&str]) -> Command {
        let n = self.kubectl_runs.fetch_add(1, Ordering::SeqCst);
        kubectl_command(
            &self.members[i].kubeconfig(),
            &self.path,
            &self.path.join(format!("kubecache-{n}")),
            args,
        )
    }

    /// Waits until member `i` is ready ([`Cluster::probe_ready`]); panics (with logs) if its process exits or
    /// `timeout` passes.
    pub fn wait_ready(&mut self, i: usize, timeout: Duration) {
        self.wait_ready_all(&[i], timeout)
    }

    /// Waits until all of `set` are ready, at most `timeout` in total.
    pub fn wait_ready_all(&mut self, set: &[usize], timeout: Duration) {
        let start = Instant::now();
        let mut pending: Vec<usize> = set.to_vec();
        let mut last: Vec<String> = Vec::new();
        loop {
            for &i in &pending {
                if !self.is_running(i) {
                    let st = self.members[i].last_exit;
                    self.fail(format!(
                        "member {i} ({}) exited with {st:?} before becoming ready\ncommand: {}",
                        self.members[i].name, self.members[i].cmdline
                    ));
                }
            }
            last.clear();
            let results = self.parallel(&pending, |c, i| c.probe_ready(i));
            pending = results
                .into_iter()
                .filter_map(|(i, r)| match r {
                    Ok(()) => None,
                    Err(e) => {
                        last.push(format!("member {i}: {e}"));
                        Some(i)
                    }
                })
                .collect();
            if pending.is_empty() {
                return;
            }
            if start.elapsed() > timeout {
                self.fail(format!(
                    "members {pending:?} not ready within {timeout:?}; last probes:\n{}",
                    last.join("\n")
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `f(self, i)` for every `i` in `set` on parallel threads.
    fn parallel<T: Send>(
        &self,
        set: &[usize],
        f: impl Fn(&Cluster, usize) -> T + Sync,
    ) -> Vec<(usize, T)> {
        thread::scope(|s| {
            let handles: Vec<_> = set
                .iter()
                .map(|&i| {
                    let f = &f;
                    (i, s.spawn(move || f(self, i)))
                })
                .collect();
            handles
                .into_iter()
                .map(|(i, h)| {
                    let r = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                    (i, r)
                })
                .collect()
        })
    }

    /// SIGKILL member `i` (no-op if it is not running) and reap it.
    pub fn kill9(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut p) = m.process.take() {
            m.last_exit = p.kill();
        }
    }

    /// SIGTERM member `i`, wait up to [`STOP_TIMEOUT`], then SIGKILL. Returns the exit status and whether
    /// SIGKILL was needed (`None` if it was not running).
    pub fn stop(&mut self, i: usize) -> Option<(ExitStatus, bool)> {
        let m = &mut self.members[i];
        let mut p = m.process.take()?;
        let r = p.stop(STOP_TIMEOUT);
        m.last_exit = r.map(|(st, _)| st);
        r
    }

    /// Starts member `i` again (same data dir, `--initial-cluster-state existing`) and waits until it is ready.
    /// Needs a quorum to be up; to restart a majority at once use [`Cluster::restart_all`].
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_ready(i, self.ready_timeout());
    }

    /// Starts all of `set` again, then waits until all are ready.
    pub fn restart_all(&mut self, set: &[usize]) {
        for &i in set {
            self.spawn(i);
        }
        self.wait_ready_all(set, self.ready_timeout());
    }

    /// Waits until member `i`'s process exits on its own; `None` on timeout (it keeps running).
    pub fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if !self.is_running(i) {
                return self.members[i].last_exit;
            }
            if start.elapsed() > timeout {
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    // -------------------------------------------------------------------------------------------------------
    // etcdctl
    // -------------------------------------------------------------------------------------------------------

    /// etcdctl against member `i` (`--command-timeout=5s --dial-timeout=2s`).
    pub fn ctl(&self, i: usize, args: &[&str]) -> CtlOutput {
        self.ctl_with(i, args, &["--command-timeout=5s", "--dial-timeout=2s"])
    }

    /// etcdctl against member `i` with explicit global flags; killed after the command timeout + 10 s.
    pub fn ctl_with(&self, i: usize, args: &[&str], global: &[&str]) -> CtlOutput {
        ctl_endpoints(&[self.endpoint(i)], args, global)
    }

    /// Like [`Cluster::ctl`], panicking (with logs) unless etcdctl succeeds; returns stdout.
    pub fn ctl_ok(&self, i: usize, args: &[&str]) -> String {
        let out = self.ctl(i, args);
        if !out.success() {
            self.fail(format!(
                "etcdctl {} against member {i} ({}) failed ({:?}):\nstdout: {}\nstderr: {}",
                args.join(" "),
                self.endpoint(i),
                out.code,
                out.stdout,
                out.stderr
            ));
        }
        out.stdout
    }

    /// `endpoint status -w json` of member `i`.
    pub fn status(&self, i: usize) -> Result<Status, String> {
        let out = self.ctl_with(
            i,
            &["endpoint", "status", "-w", "json"],
            &["--command-timeout=1s", "--dial-timeout=1s"],
        );
        if !out.success() {
            return Err(format!(
                "endpoint status on member {i}: {}{}",
                out.stdout.trim(),
                out.stderr.trim()
            ));
        }
        parse_status(&out.stdout)
    }

    /// Status of every member of `set`, queried in parallel (records their member IDs).
    pub fn statuses(&mut self, set: &[usize]) -> Vec<(usize, Result<Status, String>)> {
        let res = self.parallel(set, |c, i| c.status(i));
        for (i, r) in &res {
            if let Ok(s) = r {
                if s.member_id != 0 {
                    self.members[*i].id = Some(s.member_id);
                }
            }
        }
        res
    }

    /// `member list -w json` as member `i` sees it.
    pub fn member_list(&self, i: usize) -> Result<Vec<ListedMember>, String> {
        let out = self.ctl(i, &["member", "list", "-w", "json"]);
        if !out.success() {
            return Err(format!("{}{}", out.stdout.trim(), out.stderr.trim()));
        }
        let v: Value = serde_json::from_str(out.stdout.trim())
            .map_err(|e| format!("member list -w json: {e}: {}", out.stdout))?;
        Ok(parse_members(&v["members"]))
    }

    /// Records every member's ID from `member list` on member `via` (matched by peer URL).
    pub fn learn_ids(&mut self, via: usize) {
        let list = match self.member_list(via) {
            Ok(l) => l,
            Err(e) => self.fail(format!("member list on member {via}: {e}")),
        };
        for m in &mut self.members {
            if let Some(l) = list.iter().find(|l| l.peer_urls.contains(&m.peer_url())) {
                m.id = Some(l.id);
            }
        }
    }

    /// Member `i`'s ID (from an earlier `member list`/`status`, else asked now on a live member).
    pub fn member_id(&mut self, i: usize) -> u64 {
        if let Some(id) = self.members[i].id {
            return id;
        }
        if let Some(&via) = self.live().first() {
            self.learn_ids(via);
        }
        match self.members[i].id {
            Some(id) => id,
            None => self.fail(format!("member {i} has no known member ID")),
        }
    }

    /// The index of the member with ID `id`.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.members.iter().position(|m| m.id == Some(id))
    }

    /// `endpoint hashkv --rev rev` of member `i`: (hash, compact revision, header revision).
    pub fn hashkv(&self, i: usize, rev: i64) -> Result<(u64, i64, i64), String> {
        let r = format!("--rev={rev}");
        let out = self.ctl(i, &["endpoint", "hashkv", &r, "-w", "json"]);
        if !out.success() {
            return Err(format!("{}{}", out.stdout.trim(), out.stderr.trim()));
        }
        let v: Value = serde_json::from_str(out.stdout.trim())
            .map_err(|e| format!("hashkv -w json: {e}: {}", out.stdout))?;
        let h = &v[0]["HashKV"];
        Ok((
            json_u64(&h["hash"]),
            h["compact_revision"].as_i64().unwrap_or(0),
            h["header"]["revision"].as_i64().unwrap_or(0),
        ))
    }

    // -------------------------------------------------------------------------------------------------------
    // Leader
    // -------------------------------------------------------------------------------------------------------

    /// The leader all members of `set` agree on, if every one of them answers `endpoint status`, all name the
    /// same non-zero leader, and that leader is in `set` and reports itself as leader.
    pub fn leader_among(&mut self, set: &[usize]) -> Option<usize> {
        if set.is_empty() {
            return None;
        }
        let res = self.statuses(set);
        let mut leader = None;
        for (_, r) in &res {
            let s = r.as_ref().ok()?;
            if s.leader == 0 || leader.is_some_and(|l| l != s.leader) {
                return None;
            }
            leader = Some(s.leader);
        }
        let l = leader?;
        res.iter()
            .find(|(_, r)| r.as_ref().is_ok_and(|s| s.member_id == l))
            .map(|(i, _)| *i)
    }

    /// The leader agreed on by every live voter.
    pub fn leader(&mut self) -> Option<usize> {
        let set = self.live_voters();
        self.leader_among(&set)
    }

    /// Waits for a leader agreed on by every live voter.
    pub fn wait_leader(&mut self, timeout: Duration) -> usize {
        let set = self.live_voters();
        self.wait_leader_among(&set, timeout, None)
    }

    /// Waits until the members of `set` agree on a leader in `set` other than `not`; panics with logs on
    /// timeout. Polls every ~50 ms (plus the etcdctl round trip).
    pub fn wait_leader_among(
        &mut self,
        set: &[usize],
        timeout: Duration,
        not: Option<usize>,
    ) -> usize {
        let start = Instant::now();
        loop {
            if let Some(l) = self.leader_among(set) {
                if Some(l) != not {
                    return l;
                }
            }
            if start.elapsed() > timeout {
                let st = self.statuses(set);
                let detail: Vec<String> = st
                    .iter()
                    .map(|(i, r)| format!("member {i}: {r:?}"))
                    .collect();
                self.fail(format!(
                    "no agreed leader among {set:?} (other than {not:?}) within {timeout:?}:\n{}",
                    detail.join("\n")
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    // -------------------------------------------------------------------------------------------------------
    // Membership
    // -------------------------------------------------------------------------------------------------------

    /// `member add` of a fresh member `name` (new data dir; in netns mode a new namespace) through a live voter,
    /// then starts it with `--initial-cluster-state existing` and waits until it is ready. Returns its index.
    pub fn add_member(&mut self, name: &str, learner: bool) -> usize {
        let i = self.add_member_unstarted(name, learner);
        self.spawn(i);
        self.wait_ready(i, self.ready_timeout());
        i
    }

    /// The `member add` part of [`Cluster::add_member`]: the member exists in the cluster (unstarted) and in
    /// the harness with its [`StartArgs`] (`--initial-cluster` = every named member plus itself, state
    /// `existing`), its process is not started. Retries while the cluster refuses reconfiguration as unhealthy
    /// (etcd wants all members connected for 5 s first), at most 30 s.
    pub fn add_member_unstarted(&mut self, name: &str, learner: bool) -> usize {
        let index = self.members.len();
        if let Some(net) = &mut self.net {
            let k = net.add_node();
            assert_eq!(k, index, "netns node index out of step with member index");
        }
        let addr = self.new_addr(index, &[]);
        let peer_url = format!("http://{}:{}", addr.host, addr.peer_port);
        let start = Instant::now();
        let mut attempts = 0;
        let response: Value = loop {
            let voters = self.live_voters();
            let Some(&via) = voters.first() else {
                self.fail("member add: no live voting member")
            };
            let mut args = vec![
                "member".to_string(),
                "add".into(),
                name.into(),
                format!("--peer-urls={peer_url}"),
            ];
            if learner {
                args.push("--learner".into());
            }
            args.extend(["-w".into(), "json".into()]);
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = self.ctl_with(via, &argv, &["--command-timeout=10s", "--dial-timeout=2s"]);
            attempts += 1;
            if out.success() {
                break serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
                    self.fail(format!("member add -w json: {e}: {}", out.stdout))
                });
            }
            // An earlier attempt that timed out may have been applied after all.
            if attempts > 1 && out.stderr.contains("Peer URLs already exists") {
                let list = self.member_list(via).unwrap_or_default();
                if let Some(m) = list.iter().find(|m| m.peer_urls.contains(&peer_url)) {
                    let members: Vec<Value> = list
                        .iter()
                        .map(|l| {
                            serde_json::json!({"ID": l.id, "name": l.name, "peerURLs": l.peer_urls})
                        })
                        .collect();
                    break serde_json::json!({"member": {"ID": m.id}, "members": members});
                }
            }
            if !retryable(&out) || start.elapsed() > Duration::from_secs(30) {
                self.fail(format!(
                    "member add {name} --peer-urls={peer_url} on member {via} failed after {attempts} attempts \
                     ({:?}):\n{}{}",
                    out.code, out.stdout, out.stderr
                ));
            }
            thread::sleep(Duration::from_millis(500));
        };
        let id = json_u64(&response["member"]["ID"]);
        let listed = parse_members(&response["members"]);
        let initial_cluster = listed
            .iter()
            .filter_map(|l| {
                let n = if l.id == id {
                    name.to_string()
                } else {
                    l.name.clone()
                };
                (!n.is_empty()).then(|| {
                    l.peer_urls
                        .iter()
                        .map(|u| format!("{n}={u}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
            })
            .collect::<Vec<_>>()
            .join(",");
        eprintln!(
            "harness: member add {name} ({id:016x}, learner={learner}) after {attempts} attempt(s), {:?}",
            start.elapsed()
        );
        let mut m = self.new_member(
            name,
            addr,
            StartArgs {
                name: name.to_string(),
                initial_cluster,
                state: "existing".into(),
                token: self.opts.token.clone(),
                extra: Vec::new(),
            },
        );
        m.learner = learner;
        m.id = Some(id);
        self.members.push(m);
        index
    }

    /// `member remove` of member `i` through another live voter (retrying while the cluster is unhealthy, at
    /// most 30 s). The member is marked removed; its process, if running, gets [`REMOVED_EXIT_TIMEOUT`] to exit
    /// on its own (etcd's does, at once), else it is killed. Returns how long it took to exit on its own, if it
    /// did.
    pub fn remove_member(&mut self, i: usize) -> Option<Duration> {
        let id = self.member_id(i);
        let hex = format!("{id:x}");
        let start = Instant::now();
        loop {
            let voters: Vec<usize> = self.live_voters().into_iter().filter(|&j| j != i).collect();
            let Some(&via) = voters.first() else {
                self.fail(format!("member remove {hex}: no other live voting member"))
            };
            let out = self.ctl_with(
                via,
                &["member", "remove", &hex],
                &["--command-timeout=10s", "--dial-timeout=2s"],
            );
            if out.success() {
                break;
            }
            if start.elapsed() > Duration::from_secs(2) && out.stderr.contains("member not found") {
                // An earlier attempt that timed out was applied.
                break;
            }
            if !retryable(&out) || start.elapsed() > Duration::from_secs(30) {
                self.fail(format!(
                    "member remove {hex} (member {i}) on member {via} failed ({:?}):\n{}{}",
                    out.code, out.stdout, out.stderr
                ));
            }
            thread::sleep(Duration::from_millis(500));
        }
        self.members[i].removed = true;
        if !self.is_running(i) {
            return None;
        }
        let removed_at = Instant::now();
        match self.wait_exit(i, REMOVED_EXIT_TIMEOUT) {
            Some(st) => {
                let took = removed_at.elapsed();
                eprintln!(
                    "harness: removed member {i} ({}) exited on its own after {took:?} with {st}",
                    self.members[i].name
                );
                Some(took)
            }
            None => {
                eprintln!(
                    "harness: removed member {i} ({}) still running after {REMOVED_EXIT_TIMEOUT:?}: killing it",
                    self.members[i].name
                );
                self.kill9(i);
                None
            }
        }
    }

    // -------------------------------------------------------------------------------------------------------
    // Clients
    // -------------------------------------------------------------------------------------------------------

    /// An etcd-client for member `i` only.
    pub async fn client(&self, i: usize) -> etcd_client::Client {
        connect(&[self.endpoint(i)]).await
    }

    /// An etcd-client balancing over the given members.
    pub async fn client_for(&self, set: &[usize]) -> etcd_client::Client {
        connect(&self.endpoints(set)).await
    }

    /// An etcd-client balancing over every member not removed (dead ones are skipped by the balancer).
    pub async fn client_all(&self) -> etcd_client::Client {
        let set: Vec<usize> = (0..self.members.len())
            .filter(|&i| !self.members[i].removed)
            .collect();
        self.client_for(&set).await
    }

    // -------------------------------------------------------------------------------------------------------
    // Failure reports
    // -------------------------------------------------------------------------------------------------------

    /// State and log tail of every member.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let state = if m.removed {
                "removed".to_string()
            } else if m.process.is_some() {
                format!("running (pid {})", m.pid().unwrap_or(0))
            } else {
                format!("not running (last exit {:?})", m.last_exit)
            };
            out.push_str(&format!(
                "\n---- member {i} {} {} id={} {state}, {} start(s); log {:?}, last {LOG_TAIL_LINES} lines:\n{}\n",
                m.name,
                m.endpoint(),
                m.id.map(|id| format!("{id:016x}")).unwrap_or_default(),
                m.starts,
                m.log_path,
                m.log_tail(LOG_TAIL_LINES)
            ));
        }
        if let Some(net) = &self.net {
            out.push_str(&format!(
                "\n---- netns run {}: blocked links {:?}\n",
                net.run_id(),
                net.blocked()
            ));
        }
        out
    }

    /// Panics with `msg` and every member's state and log tail.
    pub fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!(
            "{msg}\n==== {} cluster of {} member(s):{}",
            self.opts.kind.label(),
            self.members.len(),
            self.report()
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGKILL everyone first, then reap (each Process's drop waits, bounded).
        for m in &self.members {
            if let Some(p) = &m.process {
                p.signal(libc::SIGKILL);
            }
        }
        for m in &mut self.members {
            drop(m.process.take());
        }
        if thread::panicking() || std::env::var_os(KEEP_ENV).is_some() {
            if let Some(dir) = self.dir.take() {
                let path = dir.keep();
                eprintln!("cluster files (data dirs, logs) kept at {}", path.display());
            }
        }
    }
}

/// etcd-client options used by the harness: 2 s connect timeout, 10 s per request.
pub fn connect_options() -> etcd_client::ConnectOptions {
    etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(10))
}

/// An etcd-client for the given `host:port` endpoints (lazy: a dead endpoint fails at request time).
pub async fn connect(endpoints: &[String]) -> etcd_client::Client {
    let eps: Vec<String> = endpoints.iter().map(|e| format!("http://{e}")).collect();
    etcd_client::Client::connect(eps, Some(connect_options()))
        .await
        .unwrap_or_else(|e| panic!("etcd-client connect {endpoints:?}: {e}"))
}

/// The gRPC status inside an etcd-client error, if any.
pub fn grpc_status(e: &etcd_client::Error) -> Option<&tonic::Status> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(s),
        _ => None,
    }
}
