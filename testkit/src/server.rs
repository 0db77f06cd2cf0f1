//! [`Server`]: one member — a real etcd 3.4 or a `keel server` — on free loopback ports, in its own temp dir
//! (`data/`, `server.log` with stdout and stderr), ready when `etcdctl endpoint health` succeeds, stopped
//! (SIGTERM, then SIGKILL) on drop.
//!
//! Set `KEEL_DIFF_AGAINST_ETCD=1` to make [`Server::start_keel`] start a second real etcd instead of keel (a
//! self-check of the kit and of the normalization: both sides must then agree).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use crate::binaries::{against_etcd, require_etcd_tools, Kind, AGAINST_ETCD_ENV, ETCD_BIN};
use crate::etcdctl::{etcdctl, etcdctl_with};
use crate::normalize::Normalizer;
use crate::process::{describe, Capture, CtlOutput, Process};

/// The member name both sides get, so that `member list` outputs compare equal.
pub const MEMBER_NAME: &str = "node1";

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

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
    process: Process,
    log_path: PathBuf,
    data_dir: PathBuf,
    // Dropped last (after the process, which Drop::drop stops).
    dir: tempfile::TempDir,
}

impl Server {
    /// A real etcd 3.4, single member named [`MEMBER_NAME`].
    pub fn start_etcd() -> Server {
        Self::start(Kind::Etcd, Kind::Etcd, None, &[])
    }

    /// [`Server::start_etcd`] with extra flags.
    pub fn start_etcd_with(extra: &[&str]) -> Server {
        Self::start(Kind::Etcd, Kind::Etcd, None, extra)
    }

    /// [`Server::start_keel`] with extra flags (given to etcd too when it stands in for keel).
    pub fn start_keel_with(keel: impl AsRef<Path>, extra: &[&str]) -> Server {
        if against_etcd() {
            Self::start(Kind::Keel, Kind::Etcd, None, extra)
        } else {
            Self::start(Kind::Keel, Kind::Keel, Some(keel.as_ref()), extra)
        }
    }

    /// `keel server` from `keel` (pass [`keel_bin!`](crate::keel_bin!)), or a second real etcd when
    /// `KEEL_DIFF_AGAINST_ETCD=1`.
    pub fn start_keel(keel: impl AsRef<Path>) -> Server {
        Self::start_keel_with(keel, &[])
    }

    fn start(role: Kind, kind: Kind, keel: Option<&Path>, extra: &[&str]) -> Server {
        require_etcd_tools();
        let mut last_err = String::new();
        // Free ports can be taken by someone else between probe and bind: retry a few times.
        for _attempt in 0..3 {
            match Self::try_start(role, kind, keel, extra) {
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

    fn try_start(
        role: Kind,
        kind: Kind,
        keel: Option<&Path>,
        extra: &[&str],
    ) -> Result<Server, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("keel-test-{}-", kind.label()))
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        let data_dir = dir.path().join("data");
        let log_path = dir.path().join("server.log");
        let ports = crate::free_ports(2);
        let (client_port, peer_port) = (ports[0], ports[1]);
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let name = MEMBER_NAME.to_string();

        let mut cmd = match (kind, keel) {
            (Kind::Keel, Some(keel)) => {
                let mut c = Command::new(keel);
                // etcd-only tests: no Kubernetes API (it would take port 6443 of the client host).
                c.arg("server")
                    .args(["--kube-listen", ""])
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
            _ => {
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
        };
        cmd.args(extra);
        // etcd refuses ETCD_* variables that shadow a flag; keep the caller's environment out.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD") {
                cmd.env_remove(k);
            }
        }
        let cmdline = describe(&cmd);
        let process = Process::start(&mut cmd, Capture::Log(log_path.clone()), None)
            .map_err(|e| format!("cannot start {cmdline}: {e}"))?;
        let mut server = Server {
            role,
            kind,
            cmdline,
            name,
            client_port,
            peer_port,
            process,
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
        let sock = addr
            .parse()
            .map_err(|e| format!("socket address {addr}: {e}"))?;
        let mut last = String::from("no TCP connection yet");
        loop {
            if let Some(status) = self.process.try_wait() {
                return Err(format!(
                    "{} exited with {status} before becoming ready on {addr}\ncommand: {}\nlast log lines:\n{}",
                    self.describe(),
                    self.cmdline,
                    self.log_tail(40)
                ));
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "{} did not become ready on {addr} within {READY_TIMEOUT:?} (last probe: {last})\n\
                     command: {}\nlast log lines:\n{}",
                    self.describe(),
                    self.cmdline,
                    self.log_tail(40)
                ));
            }
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

    /// The server's temp dir (`data/`, `server.log`); free for the test's own files too.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
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

    /// SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status and whether SIGKILL was needed; `None`
    /// once it has been stopped.
    pub fn stop(&mut self) -> Option<(ExitStatus, bool)> {
        self.process.stop(STOP_TIMEOUT)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some((_, true)) = self.stop() {
            eprintln!(
                "warning: {} on {} ignored SIGTERM for {STOP_TIMEOUT:?} and was killed",
                self.describe(),
                self.endpoint()
            );
        }
    }
}
