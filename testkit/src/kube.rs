//! The Kubernetes API side of a keel cluster: [`KubeCluster`] is a [`Cluster`] started with [`Options::kube`]
//! (same members, same start, readiness and failure reports) plus the real kubectl (each run with its own fresh
//! `KUBECACHEDIR`) and `kube` clients built from the admin kubeconfig each member writes.
//!
//! Every wait is bounded; on a failure the members' log tails are printed and the directory is kept. Like every
//! cluster it needs etcdctl (readiness probes) besides kubectl.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::binaries::Kind;
use crate::cluster::{Cluster, Member, Options};
use crate::kubectl::{Run, KUBECTL_TIMEOUT};
use crate::process::{Capture, Process};

/// A keel cluster (1 or more members) serving the Kubernetes API.
pub struct KubeCluster {
    cluster: Cluster,
}

impl KubeCluster {
    /// Starts `n` keel members from `keel` (pass [`keel_bin!`](crate::keel_bin!)) on loopback and waits until
    /// every one is ready, serves `/readyz` and agrees on a leader.
    pub fn start(keel: impl Into<PathBuf>, n: usize) -> KubeCluster {
        KubeCluster::start_with(Options::new(Kind::Keel, n).keel_bin(keel))
    }

    /// Starts the cluster `opts` describes with the Kubernetes API on.
    pub fn start_with(opts: Options) -> KubeCluster {
        KubeCluster {
            cluster: opts.kube().start(),
        }
    }

    /// The cluster underneath (members, processes, etcdctl, partitions).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// Member `i` ([`Member::kube_url`], [`Member::kubeconfig`], its client port …).
    pub fn member(&self, i: usize) -> &Member {
        self.cluster.member(i)
    }

    /// The cluster's directory; free for the test's own files.
    pub fn dir(&self) -> PathBuf {
        self.cluster.dir()
    }

    /// Panics with `msg` and every member's log tail, keeping the directory.
    pub fn fail(&self, msg: impl std::fmt::Display) -> ! {
        self.cluster.fail(msg)
    }

    /// A kubectl command against member `i` (fresh cache dir, the member's kubeconfig).
    pub fn kubectl_cmd(&self, i: usize, args: &[&str]) -> std::process::Command {
        self.cluster.kubectl_cmd(i, args)
    }

    /// Runs kubectl against member `i` (bounded).
    pub fn kubectl(&self, i: usize, args: &[&str]) -> Run {
        self.kubectl_stdin(i, args, None)
    }

    /// Runs kubectl against member `i` with `stdin`; fails the test if it does not finish within
    /// [`KUBECTL_TIMEOUT`].
    pub fn kubectl_stdin(&self, i: usize, args: &[&str], stdin: Option<&str>) -> Run {
        let mut p = Process::spawn(&mut self.kubectl_cmd(i, args), stdin.map(str::as_bytes));
        if !p.wait_exit(KUBECTL_TIMEOUT) {
            drop(p);
            self.fail(format!(
                "kubectl {args:?} did not finish within {KUBECTL_TIMEOUT:?}"
            ));
        }
        Run::from(p.finish())
    }

    /// Runs kubectl and panics (with logs) unless it succeeds; returns stdout.
    pub fn ok(&self, i: usize, args: &[&str]) -> String {
        self.ok_stdin(i, args, None)
    }

    /// [`KubeCluster::ok`] with stdin.
    pub fn ok_stdin(&self, i: usize, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.kubectl_stdin(i, args, stdin);
        if !r.ok {
            self.fail(format!(
                "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
                r.stdout, r.stderr
            ));
        }
        r.stdout
    }

    /// [`KubeCluster::ok_stdin`] through a leader change: a request refused while the members elect a
    /// leader (or a member restarts) wrote nothing, so it is sent again for up to 30 s.
    pub fn ok_stdin_retrying(&self, i: usize, args: &[&str], stdin: Option<&str>) -> String {
        const TRANSIENT: [&str; 5] = [
            "no leader",
            "not leader",
            "connection refused",
            "EOF",
            "timeout",
        ];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.kubectl_stdin(i, args, stdin);
            if r.ok {
                return r.stdout;
            }
            let transient = TRANSIENT.iter().any(|t| r.stderr.contains(t));
            if !transient || Instant::now() > deadline {
                self.fail(format!("kubectl {args:?}: {}", r.stderr));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The messages of the Events with `reason` about the object `name` in `ns`, read through member `i`.
    pub fn event_messages(&self, i: usize, ns: &str, name: &str, reason: &str) -> Vec<String> {
        let text = self.ok(i, &["get", "events", "-n", ns, "-o", "json"]);
        let v: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => self.fail(format!("kubectl get events: not JSON ({e}): {text}")),
        };
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect()
    }

    /// Runs kubectl expecting failure; returns stderr.
    pub fn err(&self, i: usize, args: &[&str]) -> String {
        self.err_stdin(i, args, None)
    }

    /// [`KubeCluster::err`] with stdin.
    pub fn err_stdin(&self, i: usize, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.kubectl_stdin(i, args, stdin);
        if r.ok {
            self.fail(format!(
                "kubectl {args:?} succeeded but should have failed:\n{}",
                r.stdout
            ));
        }
        r.stderr
    }

    /// A `kube` client for member `i`, from its admin kubeconfig.
    pub async fn client(&self, i: usize) -> kube::Client {
        client(&self.member(i).kubeconfig(), true).await
    }

    /// A `kube` client for member `i` that hands 429, 503 and 504 answers to the caller; the default
    /// client retries them for minutes with back-off, hiding what the server said.
    pub async fn client_without_retry(&self, i: usize) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(self.member(i).kubeconfig())
            .unwrap_or_else(|e| panic!("kubeconfig of member {i}: {e}"));
        let mut cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap_or_else(|e| panic!("client config of member {i}: {e}"));
        cfg.default_retry = false;
        kube::Client::try_from(cfg).unwrap_or_else(|e| panic!("kube client of member {i}: {e}"))
    }

    /// A `kube` client for member `i` that trusts the CA but presents no credentials.
    pub async fn anonymous_client(&self, i: usize) -> kube::Client {
        client(&self.member(i).kubeconfig(), false).await
    }

    /// Waits until `check` holds (polling every 100 ms), failing the test with `what` after `timeout`.
    pub fn wait_until(&self, what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !check() {
            if Instant::now() > deadline {
                self.fail(format!("timed out after {timeout:?} waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A `kube` client from a kubeconfig file; without `credentials` it trusts the CA but presents none.
pub async fn client(kubeconfig: &Path, credentials: bool) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()));
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("client config from {}: {e}", kubeconfig.display()));
    if !credentials {
        cfg.auth_info = Default::default();
    }
    kube::Client::try_from(cfg)
        .unwrap_or_else(|e| panic!("kube client from {}: {e}", kubeconfig.display()))
}

/// A background kubectl (e.g. `get -w`) whose stdout and stderr go to `<cluster dir>/<name>.out`; killed when
/// dropped.
pub struct Background {
    process: Process,
}

impl Background {
    /// Starts `kubectl args` against member `i` of `c`.
    pub fn start(c: &KubeCluster, i: usize, args: &[&str], name: &str) -> Background {
        let out = c.dir().join(format!("{name}.out"));
        let process = Process::start(&mut c.kubectl_cmd(i, args), Capture::Log(out), None)
            .unwrap_or_else(|e| c.fail(format!("cannot start kubectl {args:?}: {e}")));
        Background { process }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        self.process.stdout()
    }

    /// Whether it exited, and how (`Some(true)`: exit code 0).
    pub fn exited(&mut self) -> Option<bool> {
        self.process.try_wait().map(|s| s.success())
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
    let req = b
        .body(body)
        .unwrap_or_else(|e| panic!("request {method} {path}: {e}"));
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap_or_else(|e| panic!("send {method} {path}: {e}"));
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap_or_else(|e| panic!("body of {method} {path}: {e}"))
        .to_bytes();
    (
        code,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// The one cluster a test binary shares (see [`KubeCluster::shared`]).
static SHARED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

extern "C" fn drop_shared() {
    if let Some(&ptr) = SHARED.get() {
        // SAFETY: `ptr` came from `Box::into_raw` in `shared`, and exit handlers run once, after the test
        // harness's threads are done with the `&'static` references it handed out.
        drop(unsafe { Box::from_raw(ptr as *mut KubeCluster) });
    }
}

impl KubeCluster {
    /// The cluster every test of this binary shares, started by the first caller with `make`. It is
    /// stopped, and its directory removed, when the test process exits (its members are killed by PID as any
    /// kit process). Tests that share it keep to their own namespaces; a test that kills members or
    /// partitions the network starts a cluster of its own.
    pub fn shared(make: impl FnOnce() -> KubeCluster) -> &'static KubeCluster {
        let ptr = *SHARED.get_or_init(|| {
            let c = Box::new(make());
            // SAFETY: registers a plain extern "C" function with no captured state.
            unsafe { libc::atexit(drop_shared) };
            Box::into_raw(c) as usize
        });
        // SAFETY: the box is leaked until exit; nothing takes a `&mut` to it before `drop_shared`.
        unsafe { &*(ptr as *const KubeCluster) }
    }
}
