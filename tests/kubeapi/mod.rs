//! Harness for the Kubernetes API tests: real `keel server` processes serving the API on loopback, the real
//! kubectl (each run with its own fresh `KUBECACHEDIR`), and `kube` clients built from the admin kubeconfig
//! each member writes.
//!
//! Every wait is bounded; on a failure the members' log tails are printed and the directory is kept.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, keel_bin};

/// How long one kubectl invocation may take.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// Panics with a clear message unless kubectl is on the machine (it is never downloaded).
pub fn require_kubectl() {
    let ok = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "kubectl is not on this machine: the Kubernetes API tests drive the real kubectl (1.32)"
    );
}

/// One member of a test cluster.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub kube_port: u16,
    pub data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Member {
    /// The member's admin kubeconfig (pointing at its own API).
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.kube_port)
    }

    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// A keel cluster (1 or more members) serving the Kubernetes API.
pub struct KubeCluster {
    dir: tempfile::TempDir,
    pub members: Vec<Member>,
    cache_counter: std::sync::atomic::AtomicUsize,
}

/// What one kubectl run printed.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl KubeCluster {
    /// Starts `n` members and waits until every one has written its kubeconfig and answers `/readyz`.
    pub fn start(n: usize) -> KubeCluster {
        Self::start_with(n, &[])
    }

    /// [`KubeCluster::start`] with extra `keel server` flags for every member.
    pub(crate) fn start_with(n: usize, extra: &[&str]) -> KubeCluster {
        require_kubectl();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("k{}", i + 1),
                client_port: free_port(),
                peer_port: free_port(),
                kube_port: free_port(),
                data_dir: dir.path().join(format!("k{}", i + 1)),
                log: dir.path().join(format!("k{}.log", i + 1)),
                child: None,
            })
            .collect();
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let initial = initial.join(",");
        let token = format!("kube-test-{}-{}", std::process::id(), free_port());
        for m in &mut members {
            let log = std::fs::File::create(&m.log).expect("log file");
            let client = format!("http://127.0.0.1:{}", m.client_port);
            let peer = format!("http://127.0.0.1:{}", m.peer_port);
            let child = Command::new(keel_bin())
                .arg("server")
                .args(["--name", &m.name])
                .arg("--data-dir")
                .arg(&m.data_dir)
                .args([
                    "--listen-client-urls",
                    &client,
                    "--advertise-client-urls",
                    &client,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                ])
                .args([
                    "--initial-cluster",
                    &initial,
                    "--initial-cluster-token",
                    &token,
                ])
                .args(["--kube-listen", &m.url()])
                .args(["--log-level", "info"])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawn keel");
            m.child = Some(child);
        }
        let c = KubeCluster {
            dir,
            members,
            cache_counter: Default::default(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        for i in 0..n {
            loop {
                if c.members[i].kubeconfig().exists() {
                    let r = c.kubectl(i, &["get", "--raw", "/readyz"]);
                    if r.ok && r.stdout.trim() == "ok" {
                        break;
                    }
                }
                if Instant::now() > deadline {
                    c.fail(&format!(
                        "member {i} did not serve the Kubernetes API within 60 s"
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        c
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Panics with every member's log tail, keeping the directory.
    pub fn fail(&self, msg: &str) -> ! {
        let mut out = format!("{msg}\n");
        for m in &self.members {
            out.push_str(&format!(
                "--- {} log tail ---\n{}\n",
                m.name,
                m.log_tail(30)
            ));
        }
        panic!("{out}");
    }

    fn cache_dir(&self) -> PathBuf {
        let n = self
            .cache_counter
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.dir.path().join(format!("kubecache-{n}"))
    }

    /// A kubectl command against member `i` (fresh cache dir, the member's kubeconfig).
    pub fn kubectl_cmd(&self, i: usize, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", self.members[i].kubeconfig())
            .env("KUBECACHEDIR", self.cache_dir())
            .env("HOME", self.dir.path())
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl against member `i` (bounded).
    pub fn kubectl(&self, i: usize, args: &[&str]) -> Run {
        self.kubectl_stdin(i, args, None)
    }

    /// Runs kubectl against member `i` with `stdin` (bounded).
    pub fn kubectl_stdin(&self, i: usize, args: &[&str], stdin: Option<&str>) -> Run {
        let mut cmd = self.kubectl_cmd(i, args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kubectl");
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let _ = pipe.write_all(input.as_bytes());
        }
        let deadline = Instant::now() + KUBECTL_TIMEOUT;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                self.fail(&format!(
                    "kubectl {args:?} did not finish within {KUBECTL_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out: Output = child.wait_with_output().expect("kubectl output");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl and panics (with logs) unless it succeeds; returns stdout.
    pub fn ok(&self, i: usize, args: &[&str]) -> String {
        self.ok_stdin(i, args, None)
    }

    /// [`KubeCluster::ok`] with stdin.
    pub fn ok_stdin(&self, i: usize, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.kubectl_stdin(i, args, stdin);
        if !r.ok {
            self.fail(&format!(
                "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
                r.stdout, r.stderr
            ));
        }
        r.stdout
    }

    /// Runs kubectl expecting failure; returns stderr.
    pub fn err(&self, i: usize, args: &[&str]) -> String {
        self.err_stdin(i, args, None)
    }

    /// [`KubeCluster::err`] with stdin.
    pub fn err_stdin(&self, i: usize, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.kubectl_stdin(i, args, stdin);
        if r.ok {
            self.fail(&format!(
                "kubectl {args:?} succeeded but should have failed:\n{}",
                r.stdout
            ));
        }
        r.stderr
    }

    /// A `kube` client for member `i`, from its admin kubeconfig.
    pub async fn client(&self, i: usize) -> kube::Client {
        let kc =
            kube::config::Kubeconfig::read_from(self.members[i].kubeconfig()).expect("kubeconfig");
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("client config");
        kube::Client::try_from(cfg).expect("client")
    }

    /// A `kube` client for member `i` that trusts the CA but presents no credentials.
    pub async fn anonymous_client(&self, i: usize) -> kube::Client {
        let kc =
            kube::config::Kubeconfig::read_from(self.members[i].kubeconfig()).expect("kubeconfig");
        let mut cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("client config");
        cfg.auth_info = Default::default();
        kube::Client::try_from(cfg).expect("client")
    }

    /// Waits until `check` holds (bounded), panicking with `what` otherwise.
    pub fn wait_until(&self, what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !check() {
            if Instant::now() > deadline {
                self.fail(&format!("timed out after {timeout:?} waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if std::thread::panicking() {
            let kept =
                std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir")).keep();
            eprintln!(
                "kept the failed test's cluster directory: {}",
                kept.display()
            );
        }
    }
}

/// A background kubectl (e.g. `get -w`) whose output goes to a file.
pub struct Background {
    child: Child,
    out: PathBuf,
}

impl Background {
    /// Starts `kubectl args` against member `i` of `c`.
    pub fn start(c: &KubeCluster, i: usize, args: &[&str], name: &str) -> Background {
        let out = c.dir().join(format!("{name}.out"));
        let f = std::fs::File::create(&out).expect("out file");
        let ferr = f.try_clone().expect("clone");
        let child = c
            .kubectl_cmd(i, args)
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(ferr))
            .spawn()
            .expect("spawn kubectl");
        Background { child, out }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Whether it exited, and how.
    pub fn exited(&mut self) -> Option<bool> {
        self.child.try_wait().ok().flatten().map(|s| s.success())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends a raw request with these headers; returns the status code and the body as JSON (`Null` if it is not).
pub async fn raw_request(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, serde_json::Value) {
    let mut b = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(body).expect("request");
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("send");
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (
        code,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}
