//! Shared harness for the root package's integration tests.
//!
//! - [`Server`]: a real etcd 3.4 or a `keel server` on free loopback ports, in its own temp dir, ready when
//!   `etcdctl endpoint health` succeeds, stopped (SIGTERM, then SIGKILL) on drop.
//! - [`etcdctl`]: runs `/usr/bin/etcdctl` (API v3) against one endpoint with bounded time.
//! - [`Normalizer`] / [`normalize`]: replaces everything that legitimately differs between two servers
//!   (cluster/member/lease IDs, raft term and index, db size, version, ports, timestamps, durations) with
//!   placeholders so that etcd's and keel's etcdctl outputs can be compared byte for byte.
//!
//! Set `KEEL_DIFF_AGAINST_ETCD=1` to make [`Server::start_keel`] start a second real etcd instead of keel (a
//! self-check of the harness and of the normalization: both sides must then agree).
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub const ETCD_BIN: &str = "/usr/bin/etcd";
pub const ETCDCTL_BIN: &str = "/usr/bin/etcdctl";
/// Env var: when set to `1`, the "keel" side of a test is a second real etcd.
pub const AGAINST_ETCD_ENV: &str = "KEEL_DIFF_AGAINST_ETCD";
/// The member name both sides get, so that `member list` outputs compare equal.
pub const MEMBER_NAME: &str = "node1";

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Hard cap for one etcdctl invocation (its own --command-timeout is shorter).
const CTL_HARD_TIMEOUT: Duration = Duration::from_secs(20);

/// Panics with a clear message if etcd or etcdctl is missing.
pub fn require_etcd_tools() {
    for bin in [ETCD_BIN, ETCDCTL_BIN] {
        if !Path::new(bin).exists() {
            panic!(
                "{bin} is missing: these tests need etcd 3.4 and etcdctl 3.4 from Debian's etcd-server and \
                 etcd-client packages; run scripts/setup.sh (as root) first"
            );
        }
    }
}

/// Env var: path of the `keel` binary to test (overrides the one cargo built).
pub const KEEL_BIN_ENV: &str = "KEEL_BIN";

/// The `keel` binary under test: `$KEEL_BIN`, else the one cargo built for the root package's integration tests,
/// else `keel` in the target directory the running executable was built into (`target/<profile>/`, also from
/// `target/<profile>/deps/`), which is how the jepsen-tests crate (a separate package) finds it.
pub fn keel_bin() -> PathBuf {
    if let Some(p) = std::env::var_os(KEEL_BIN_ENV) {
        return PathBuf::from(p);
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_keel") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join("keel");
    if !bin.exists() {
        panic!(
            "keel binary not found at {} (set {KEEL_BIN_ENV} or run `cargo build --bin keel` first)",
            bin.display()
        );
    }
    bin
}

/// True when the "keel" side should be a second real etcd (harness self-check mode).
pub fn against_etcd() -> bool {
    matches!(
        std::env::var(AGAINST_ETCD_ENV).as_deref(),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

/// A free TCP port on 127.0.0.1 (bind port 0, read it, drop the listener).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Etcd,
    Keel,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Keel => "keel",
        }
    }
}

/// One running server process (etcd or keel) on loopback.
pub struct Server {
    /// What this server is meant to be (`Keel` even in etcd-vs-etcd mode).
    pub role: Kind,
    /// What actually runs.
    pub kind: Kind,
    /// The command line it was started with (for error messages).
    pub cmdline: String,
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    child: Option<Child>,
    log_path: PathBuf,
    data_dir: PathBuf,
    // Dropped last (after the process is stopped in Drop::drop).
    dir: tempfile::TempDir,
}

impl Server {
    /// A real etcd 3.4, single member named [`MEMBER_NAME`].
    pub fn start_etcd() -> Server {
        Self::start(Kind::Etcd, Kind::Etcd, &[])
    }

    /// [`Server::start_etcd`] with extra flags.
    pub(crate) fn start_etcd_with(extra: &[&str]) -> Server {
        Self::start(Kind::Etcd, Kind::Etcd, extra)
    }

    /// [`Server::start_keel`] with extra flags (given to etcd too when it stands in for keel).
    pub(crate) fn start_keel_with(extra: &[&str]) -> Server {
        let kind = if against_etcd() {
            Kind::Etcd
        } else {
            Kind::Keel
        };
        Self::start(Kind::Keel, kind, extra)
    }

    /// The keel binary of this package, or a second real etcd when `KEEL_DIFF_AGAINST_ETCD=1`.
    pub fn start_keel() -> Server {
        let kind = if against_etcd() {
            Kind::Etcd
        } else {
            Kind::Keel
        };
        Self::start(Kind::Keel, kind, &[])
    }

    fn start(role: Kind, kind: Kind, extra: &[&str]) -> Server {
        require_etcd_tools();
        let mut last_err = String::new();
        // Free ports can be taken by someone else between probe and bind: retry a few times.
        for _attempt in 0..3 {
            match Self::try_start(role, kind, extra) {
                Ok(s) => return s,
                Err(e) => {
                    if e.contains("address already in use") {
                        last_err = e;
                        continue;
                    }
                    panic!("{e}");
                }
            }
        }
        panic!("{last_err}");
    }

    fn try_start(role: Kind, kind: Kind, extra: &[&str]) -> Result<Server, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("keel-test-{}-", kind.label()))
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        let data_dir = dir.path().join("data");
        let log_path = dir.path().join("server.log");
        let client_port = free_port();
        let mut peer_port = free_port();
        while peer_port == client_port {
            peer_port = free_port();
        }
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let name = MEMBER_NAME.to_string();

        let mut cmd = match kind {
            Kind::Etcd => {
                let mut c = Command::new(ETCD_BIN);
                c.arg("--name")
                    .arg(&name)
                    .arg("--data-dir")
                    .arg(&data_dir)
                    .arg("--listen-client-urls")
                    .arg(&client_url)
                    .arg("--advertise-client-urls")
                    .arg(&client_url)
                    .arg("--listen-peer-urls")
                    .arg(&peer_url)
                    .arg("--initial-advertise-peer-urls")
                    .arg(&peer_url)
                    .arg("--initial-cluster")
                    .arg(format!("{name}={peer_url}"))
                    .arg("--initial-cluster-state")
                    .arg("new")
                    // Same limits as keel's defaults (these are etcd's defaults, spelled out).
                    .arg("--max-txn-ops")
                    .arg("128")
                    .arg("--max-request-bytes")
                    .arg("1572864")
                    .arg("--logger")
                    .arg("zap")
                    .arg("--log-outputs")
                    .arg("stderr")
                    .arg("--log-level")
                    .arg("info");
                c
            }
            Kind::Keel => {
                let mut c = Command::new(keel_bin());
                c.arg("server")
                    .arg("--name")
                    .arg(&name)
                    .arg("--data-dir")
                    .arg(&data_dir)
                    .arg("--listen-client-urls")
                    .arg(&client_url)
                    .arg("--advertise-client-urls")
                    .arg(&client_url)
                    .arg("--listen-peer-urls")
                    .arg(&peer_url)
                    .arg("--log-level")
                    .arg("info");
                c
            }
        };
        cmd.args(extra);
        let log = File::create(&log_path).map_err(|e| format!("create {log_path:?}: {e}"))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("clone log file: {e}"))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        // etcd refuses ETCD_* variables that shadow a flag; keep the caller's environment out.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD") {
                cmd.env_remove(k);
            }
        }
        let cmdline = format!(
            "{} {}",
            cmd.get_program().to_string_lossy(),
            cmd.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {cmdline}: {e}"))?;
        let mut server = Server {
            role,
            kind,
            cmdline,
            name,
            client_port,
            peer_port,
            child: Some(child),
            log_path,
            data_dir,
            dir,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let addr = format!("127.0.0.1:{}", self.client_port);
        let mut last = String::from("no TCP connection yet");
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let tail = self.log_tail(40);
                self.child = None;
                return Err(format!(
                    "{} exited with {status} before becoming ready on {addr}\ncommand: {}\nlast log lines:\n{tail}",
                    self.describe(),
                    self.cmdline
                ));
            }
            if start.elapsed() > READY_TIMEOUT {
                let tail = self.log_tail(40);
                return Err(format!(
                    "{} did not become ready on {addr} within {READY_TIMEOUT:?} (last probe: {last})\n\
                     command: {}\nlast log lines:\n{tail}",
                    self.describe(),
                    self.cmdline
                ));
            }
            let sock = addr.parse().expect("socket addr");
            if TcpStream::connect_timeout(&sock, Duration::from_millis(200)).is_ok() {
                let out = etcdctl_with(
                    &self.endpoint(),
                    &["endpoint", "health"],
                    None,
                    &["--command-timeout=1s", "--dial-timeout=1s"],
                );
                if out.code == Some(0) {
                    return Ok(());
                }
                last = format!(
                    "endpoint health: {}{}",
                    out.stdout.trim(),
                    out.stderr.trim()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// "keel server", "etcd", or "etcd (standing in for keel)".
    pub fn describe(&self) -> String {
        match (self.kind, self.role) {
            (Kind::Keel, _) => "keel server".to_string(),
            (Kind::Etcd, Kind::Etcd) => "etcd".to_string(),
            (Kind::Etcd, Kind::Keel) => {
                format!("etcd (standing in for keel, {AGAINST_ETCD_ENV}=1)")
            }
        }
    }

    /// `127.0.0.1:<client port>`, as etcdctl's `--endpoints` wants it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs etcdctl against this server.
    pub fn ctl(&self, args: &[&str], stdin: Option<&[u8]>) -> CtlOutput {
        etcdctl(&self.endpoint(), args, stdin)
    }

    /// The last `n` lines of the server's combined stdout/stderr.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// A normalizer that knows this server's ports (`<CLIENT>`, `<PEER>`).
    pub fn normalizer(&self) -> Normalizer {
        Normalizer::new()
            .replace(&format!("127.0.0.1:{}", self.client_port), "<CLIENT>")
            .replace(&format!("127.0.0.1:{}", self.peer_port), "<PEER>")
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status and whether SIGKILL was needed.
    pub fn stop(&mut self) -> Option<(ExitStatus, bool)> {
        let mut child = self.child.take()?;
        if let Ok(Some(st)) = child.try_wait() {
            return Some((st, false));
        }
        // SAFETY: plain kill(2) on the pid of a child we own and have not reaped yet.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(st)) = child.try_wait() {
                return Some((st, false));
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        child.wait().ok().map(|st| (st, true))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((_, killed)) = self.stop() {
            if killed {
                eprintln!(
                    "warning: {} on {} ignored SIGTERM for {STOP_TIMEOUT:?} and was killed",
                    self.describe(),
                    self.endpoint()
                );
            }
        }
    }
}

/// What one etcdctl run produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtlOutput {
    pub stdout: String,
    pub stderr: String,
    /// Exit code; `None` if it was killed (signal or harness timeout).
    pub code: Option<i32>,
}

impl CtlOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `/usr/bin/etcdctl` with `ETCDCTL_API=3`, `--endpoints`, `--command-timeout=5s` and `--dial-timeout=2s`.
pub fn etcdctl(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> CtlOutput {
    etcdctl_with(
        endpoint,
        args,
        stdin,
        &["--command-timeout=5s", "--dial-timeout=2s"],
    )
}

/// Like [`etcdctl`] with explicit global flags (timeouts) in front of `args`.
pub fn etcdctl_with(
    endpoint: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    global: &[&str],
) -> CtlOutput {
    let mut cmd = etcdctl_command(endpoint, global);
    cmd.args(args);
    run_bounded(cmd, stdin, CTL_HARD_TIMEOUT)
}

/// An etcdctl `Command` with API v3, the endpoint and the given global flags; add the subcommand yourself.
pub fn etcdctl_command(endpoint: &str, global: &[&str]) -> Command {
    let mut cmd = Command::new(ETCDCTL_BIN);
    // ETCDCTL_* variables (endpoints, certificates) would conflict with the flags below.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ETCDCTL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(global);
    cmd
}

/// Runs a command to completion with its stdin fed from `stdin` (or empty), killing it after `limit`.
pub fn run_bounded(mut cmd: Command, stdin: Option<&[u8]>, limit: Duration) -> CtlOutput {
    let mut proc = BgProcess::spawn(&mut cmd, stdin);
    proc.wait_exit(limit);
    proc.finish()
}

/// A child process whose stdout and stderr are collected by reader threads while it runs.
pub struct BgProcess {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<thread::JoinHandle<()>>,
    exited: Option<ExitStatus>,
}

impl BgProcess {
    pub fn spawn(cmd: &mut Command, stdin: Option<&[u8]>) -> BgProcess {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
        let mut readers = Vec::new();
        let input = stdin.map(|s| s.to_vec()).unwrap_or_default();
        let mut pipe = child.stdin.take().expect("stdin pipe");
        readers.push(thread::spawn(move || {
            // Errors (EPIPE when the process does not read its input) are fine.
            let _ = pipe.write_all(&input);
            drop(pipe);
        }));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        for (src, buf) in [
            (
                Box::new(child.stdout.take().expect("stdout pipe")) as Box<dyn Read + Send>,
                stdout.clone(),
            ),
            (
                Box::new(child.stderr.take().expect("stderr pipe")) as Box<dyn Read + Send>,
                stderr.clone(),
            ),
        ] {
            let mut src = src;
            readers.push(thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match src.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.lock().unwrap().extend_from_slice(&chunk[..n]),
                    }
                }
            }));
        }
        BgProcess {
            child,
            stdout,
            stderr,
            readers,
            exited: None,
        }
    }

    /// Number of complete lines on stdout so far.
    pub fn stdout_lines(&self) -> usize {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    }

    pub fn has_exited(&mut self) -> bool {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited.is_some()
    }

    /// Polls until the process exits or `limit` passes; true if it exited.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while !self.has_exited() {
            if start.elapsed() >= limit {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Polls until stdout has at least `lines` lines, the process exits, or `limit` passes.
    pub fn wait_lines(&mut self, lines: usize, limit: Duration) {
        let start = Instant::now();
        while self.stdout_lines() < lines && !self.has_exited() && start.elapsed() < limit {
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the process if still running and returns what it printed. `code` is `None` if it had to be killed.
    pub fn finish(mut self) -> CtlOutput {
        if !self.has_exited() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        // Killed by us (or by a signal): no exit code.
        let code = self.exited.and_then(|st| st.code());
        let stdout = String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned();
        let stderr = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        CtlOutput {
            stdout,
            stderr,
            code,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Normalization
// ---------------------------------------------------------------------------------------------------------------

/// Normalizes one piece of etcdctl output with a fresh [`Normalizer`] (no port knowledge: any `127.0.0.1:<port>`
/// becomes `127.0.0.1:<PORT>`).
pub fn normalize(text: &str) -> String {
    Normalizer::new().normalize(text)
}

/// Replaces what legitimately differs between two servers with placeholders.
///
/// IDs (cluster, member, lease; in decimal or in etcdctl's hex) become `<ID1>`, `<ID2>`, … in order of first
/// appearance, and the numbering is kept across calls, so one `Normalizer` per server and scenario keeps relations
/// visible (the lease granted in one step is the same `<IDn>` in a later `lease list`). Zero stays `0`.
/// Raft term → `<TERM>`, raft index → `<INDEX>`, db sizes → `<SIZE>`, server version → `<VERSION>`, durations →
/// `<DURATION>`, log timestamps → `<TS>`, client UUIDs → `<UUID>`. A remaining lease TTL within 3 s below its granted
/// TTL becomes `<REMAINING~G>` (anything else is kept, so a wrong value still shows).
#[derive(Clone, Debug, Default)]
pub struct Normalizer {
    ids: Vec<u64>,
    replacements: Vec<(String, String)>,
}

impl Normalizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an exact textual replacement applied before everything else (e.g. an endpoint → `<CLIENT>`).
    pub fn replace(mut self, from: &str, to: &str) -> Self {
        self.replacements.push((from.to_string(), to.to_string()));
        self
    }

    /// The placeholder for an ID value (`0` stays `0`).
    pub fn id(&mut self, v: u64) -> String {
        if v == 0 {
            return "0".into();
        }
        let n = match self.ids.iter().position(|x| *x == v) {
            Some(i) => i + 1,
            None => {
                self.ids.push(v);
                self.ids.len()
            }
        };
        format!("<ID{n}>")
    }

    fn id_hex(&mut self, s: &str) -> Option<String> {
        if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(s, 16).ok().map(|v| self.id(v))
    }

    fn id_dec(&mut self, s: &str) -> Option<String> {
        s.parse::<u64>().ok().map(|v| self.id(v))
    }

    pub fn normalize(&mut self, text: &str) -> String {
        let mut t = text.to_string();
        for (from, to) in &self.replacements {
            t = t.replace(from.as_str(), to);
        }
        let t = replace_loopback_ports(&t);
        let lines: Vec<&str> = t.split('\n').collect();
        // `-w fields` prints GrantedTTL after TTL: look it up first.
        let granted_field = lines.iter().find_map(|l| {
            l.strip_prefix("\"GrantedTTL\" : ")
                .and_then(|v| v.trim().parse::<i64>().ok())
        });
        let mut table_header: Option<Vec<String>> = None;
        let mut out = Vec::with_capacity(lines.len());
        for line in lines {
            let trimmed = line.trim();
            if trimmed.starts_with('+') && trimmed.ends_with('+') && trimmed.contains('-') {
                out.push("+--+".to_string());
                continue;
            }
            if trimmed.starts_with('|') && trimmed.ends_with('|') && trimmed.len() > 1 {
                let cells: Vec<String> = trimmed[1..trimmed.len() - 1]
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect();
                match &table_header {
                    None => {
                        out.push(format!("| {} |", cells.join(" | ")));
                        table_header = Some(cells);
                    }
                    Some(header) => {
                        let header = header.clone();
                        let cells: Vec<String> = cells
                            .iter()
                            .enumerate()
                            .map(|(i, c)| {
                                self.table_cell(header.get(i).map(String::as_str).unwrap_or(""), c)
                            })
                            .collect();
                        out.push(format!("| {} |", cells.join(" | ")));
                    }
                }
                continue;
            }
            table_header = None;
            if (trimmed.starts_with('{') && trimmed.ends_with('}'))
                || (trimmed.starts_with('[') && trimmed.ends_with(']'))
            {
                if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(trimmed) {
                    self.json(&mut v);
                    out.push(serde_json::to_string(&v).expect("json"));
                    continue;
                }
            }
            if let Some(rest) = trimmed.strip_prefix('"') {
                if let Some((name, value)) = rest.split_once("\" : ") {
                    out.push(format!(
                        "\"{name}\" : {}",
                        self.field(name, value, granted_field)
                    ));
                    continue;
                }
            }
            out.push(self.text_line(line));
        }
        sort_runs_of_key_fields(&mut out);
        out.join("\n")
    }

    fn table_cell(&mut self, column: &str, cell: &str) -> String {
        match column {
            "ID" | "MEMBER ID" | "LEASE" | "LEADER" => {
                self.id_hex(cell).unwrap_or_else(|| cell.to_string())
            }
            "VERSION" => "<VERSION>".into(),
            "DB SIZE" | "DB SIZE IN USE" => "<SIZE>".into(),
            "RAFT TERM" => "<TERM>".into(),
            "RAFT INDEX" | "RAFT APPLIED INDEX" => "<INDEX>".into(),
            "TOOK" => "<DURATION>".into(),
            _ => self.text_line(cell),
        }
    }

    fn field(&mut self, name: &str, value: &str, granted: Option<i64>) -> String {
        let v = value.trim();
        match name {
            "ClusterID" | "MemberID" | "Leader" | "ID" | "Lease" => {
                self.id_dec(v).unwrap_or_else(|| v.to_string())
            }
            "RaftTerm" => "<TERM>".into(),
            "RaftIndex" | "RaftAppliedIndex" => "<INDEX>".into(),
            "DBSize" | "DBSizeInUse" => "<SIZE>".into(),
            "Version" if v.starts_with('"') => "<VERSION>".into(),
            "TTL" => match (v.parse::<i64>(), granted) {
                (Ok(n), Some(g)) => remaining(n, g),
                _ => v.to_string(),
            },
            _ => v.to_string(),
        }
    }

    fn json(&mut self, v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Object(map) => {
                let granted = map
                    .get("granted-ttl")
                    .or_else(|| map.get("grantedTTL"))
                    .and_then(Value::as_i64);
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    let child = map.get_mut(&k).expect("key");
                    match (k.as_str(), &*child) {
                        (
                            "cluster_id" | "member_id" | "leader" | "ID" | "id" | "lease"
                            | "memberID",
                            Value::Number(n),
                        ) => {
                            if let Some(u) = n.as_u64() {
                                *child = Value::String(self.id(u));
                            }
                        }
                        ("raft_term" | "raftTerm", Value::Number(_)) => {
                            *child = Value::String("<TERM>".into())
                        }
                        ("raftIndex" | "raftAppliedIndex", Value::Number(_)) => {
                            *child = Value::String("<INDEX>".into())
                        }
                        ("dbSize" | "dbSizeInUse", Value::Number(_)) => {
                            *child = Value::String("<SIZE>".into())
                        }
                        ("version", Value::String(_)) => *child = Value::String("<VERSION>".into()),
                        ("ts", Value::String(_)) => *child = Value::String("<TS>".into()),
                        // etcd lists a lease's keys in Go map order (random): compare them as a set.
                        ("keys", Value::Array(items)) if items.iter().all(Value::is_string) => {
                            let mut keys: Vec<String> = items
                                .iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect();
                            keys.sort();
                            *child = Value::Array(keys.into_iter().map(Value::String).collect());
                        }
                        ("took", Value::String(_)) => *child = Value::String("<DURATION>".into()),
                        ("target", Value::String(s)) => {
                            *child = Value::String(replace_client_uuid(s))
                        }
                        ("ttl" | "TTL", Value::Number(n)) if granted.is_some() => {
                            if let Some(p) = n
                                .as_i64()
                                .and_then(|n| expected_remaining(n, granted.unwrap()))
                            {
                                *child = Value::String(p);
                            }
                        }
                        _ => self.json(child),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.json(item);
                }
            }
            // Other strings (keys and values are base64, error texts) stay as they are.
            _ => {}
        }
    }

    /// Rules for plain text lines (simple output, error messages).
    fn text_line(&mut self, line: &str) -> String {
        let mut l = replace_client_uuid(line);
        // alarms (alarm list, endpoint status errors): "memberID:<decimal id> alarm:NOSPACE "
        if let Some(i) = l.find("memberID:") {
            let start = i + "memberID:".len();
            let digits = l[start..].bytes().take_while(u8::is_ascii_digit).count();
            if let Some(id) = self.id_dec(&l[start..start + digits]) {
                l = format!("{}{id}{}", &l[..start], &l[start + digits..]);
            }
        }
        // endpoint health: "... took = 2.49ms"
        if let Some(i) = l.find("took = ") {
            let end = l[i + 7..]
                .find(|c: char| c.is_whitespace() || c == ',')
                .map(|e| i + 7 + e)
                .unwrap_or(l.len());
            l = format!("{}took = <DURATION>{}", &l[..i], &l[end..]);
        }
        // lease timetolive: "lease X granted with TTL(100s), remaining(99s), attached keys([k1])"
        if let (Some(a), Some(b)) = (l.find("TTL("), l.find("remaining(")) {
            let granted = l[a + 4..]
                .split('s')
                .next()
                .and_then(|s| s.parse::<i64>().ok());
            let rem_str: String = l[b + 10..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            if let (Some(g), Ok(r)) = (granted, rem_str.parse::<i64>()) {
                l = format!(
                    "{}remaining({}{}",
                    &l[..b],
                    remaining(r, g),
                    &l[b + 10 + rem_str.len()..]
                );
            }
        }
        // lease timetolive --keys: "attached keys([k2 k1])" lists keys in Go map order (random): sort them.
        if let Some(a) = l.find("attached keys([") {
            let start = a + "attached keys([".len();
            if let Some(len) = l[start..].find("])") {
                let mut keys: Vec<&str> = l[start..start + len].split(' ').collect();
                keys.sort_unstable();
                l = format!("{}{}{}", &l[..start], keys.join(" "), &l[start + len..]);
            }
        }
        let fields: Vec<&str> = l.split(", ").collect();
        // member list: "<hex id>, started, <name>, <peer urls>, <client urls>, <is learner>"
        if fields.len() >= 6 && (fields[1] == "started" || fields[1] == "unstarted") {
            if let Some(id) = self.id_hex(fields[0]) {
                let mut f: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
                f[0] = id;
                return f.join(", ");
            }
        }
        // endpoint status: "<endpoint>, <hex id>, <version>, <db size>, <leader?>, <learner?>, <term>, <index>,
        // <applied index>, <errors>"
        if fields.len() >= 9
            && (fields[4] == "true" || fields[4] == "false")
            && fields[3].ends_with('B')
        {
            let mut f: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
            if let Some(id) = self.id_hex(fields[1]) {
                f[1] = id;
            }
            f[2] = "<VERSION>".into();
            f[3] = "<SIZE>".into();
            f[6] = "<TERM>".into();
            f[7] = "<INDEX>".into();
            f[8] = "<INDEX>".into();
            return f.join(", ");
        }
        // Any other 16-digit hex word is a lease ID as etcdctl prints it (%016x).
        self.hex16_words(&l)
    }

    fn hex16_words(&mut self, l: &str) -> String {
        let bytes = l.as_bytes();
        let mut out = String::with_capacity(l.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_alphanumeric() {
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let word = &l[start..i];
                let is_id = word.len() == 16
                    && word
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                match is_id.then(|| self.id_hex(word)).flatten() {
                    Some(id) => out.push_str(&id),
                    None => out.push_str(word),
                }
            } else {
                let ch = l[i..].chars().next().expect("char");
                out.push(ch);
                i += ch.len_utf8();
            }
        }
        out
    }
}

/// `lease timetolive --keys -w fields` prints one `"Key" : ...` line per attached key, in Go map order (random):
/// sort every run of consecutive such lines.
fn sort_runs_of_key_fields(lines: &mut [String]) {
    let mut i = 0;
    while i < lines.len() {
        let mut j = i;
        while j < lines.len() && lines[j].starts_with("\"Key\" : ") {
            j += 1;
        }
        if j - i > 1 {
            lines[i..j].sort();
        }
        i = j.max(i + 1);
    }
}

/// `n` seconds remaining of a `granted`-second lease: within 3 s below the grant is "as expected".
fn expected_remaining(n: i64, granted: i64) -> Option<String> {
    (n <= granted && n >= granted - 3 && n >= 0).then(|| format!("<REMAINING~{granted}>"))
}

fn remaining(n: i64, granted: i64) -> String {
    expected_remaining(n, granted).unwrap_or_else(|| n.to_string())
}

/// `127.0.0.1:<digits>` → `127.0.0.1:<PORT>` (after the known endpoints were replaced).
fn replace_loopback_ports(s: &str) -> String {
    const P: &str = "127.0.0.1:";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(P) {
        out.push_str(&rest[..i + P.len()]);
        rest = &rest[i + P.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("<PORT>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// etcdctl's grpc target `endpoint://client-<uuid>/…` → `endpoint://client-<UUID>/…`.
fn replace_client_uuid(s: &str) -> String {
    const P: &str = "client-";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(P) {
        out.push_str(&rest[..i + P.len()]);
        rest = &rest[i + P.len()..];
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_hexdigit() || *b == b'-')
            .count();
        if n == 36 {
            out.push_str("<UUID>");
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    out
}

/// A small line diff (LCS) for failure messages: `-` lines only in `a`, `+` only in `b`.
pub fn line_diff(a: &str, b: &str, a_label: &str, b_label: &str) -> String {
    let a: Vec<&str> = a.split('\n').collect();
    let b: Vec<&str> = b.split('\n').collect();
    let mut out = format!("--- {a_label}\n+++ {b_label}\n");
    if a.len() * b.len() > 4_000_000 {
        for l in &a {
            out.push_str(&format!("-{l}\n"));
        }
        for l in &b {
            out.push_str(&format!("+{l}\n"));
        }
        return out;
    }
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push_str(&format!(" {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
        }
    }
    out
}

/// Variables captured from earlier outputs (e.g. lease IDs), substituted as `{NAME}` in later commands.
#[derive(Clone, Debug, Default)]
pub struct Vars(pub HashMap<String, String>);

impl Vars {
    pub fn subst(&self, s: &str) -> String {
        let mut out = s.to_string();
        for (k, v) in &self.0 {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        out
    }

    pub fn get(&self, k: &str) -> &str {
        self.0
            .get(k)
            .unwrap_or_else(|| panic!("variable {k} was never captured"))
    }
}

pub mod cluster;
pub mod netns;
