//! What a new user gets from a bare `keel server`: the Kubernetes API on port 6443 of the client URL's
//! host without `--kube-listen` (and none with `--kube-listen ""`), and the `default/kubernetes` Service with
//! its Endpoints and EndpointSlice on 1- and 3-member clusters, seen through the real kubectl.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_testkit::kube::KubeCluster;
use keel_testkit::kubectl::{require_kubectl, KUBECTL_TIMEOUT};
use keel_testkit::process::{run_bounded, Capture, Process};
use keel_testkit::{free_port, keel_bin};

/// A lone `keel server` on `host` (killed and reaped on drop, as every kit process).
struct Member {
    proc: Process,
}

impl Member {
    fn start(dir: &Path, host: &str, extra: &[&str]) -> Member {
        let client = format!("http://{host}:{}", free_port());
        let peer = format!("http://{host}:{}", free_port());
        let mut cmd = Command::new(keel_bin!());
        cmd.args(["server", "--name", "d1", "--data-dir"])
            .arg(dir.join("data"))
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
            .args(["--initial-cluster", &format!("d1={peer}")])
            .args(extra)
            .args(["--log-level", "info"]);
        let proc =
            Process::start(&mut cmd, Capture::Log(dir.join("keel.log")), None).expect("spawn keel");
        Member { proc }
    }

    fn fail(&self, msg: &str) -> ! {
        let log = self.proc.stdout();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!("{msg}\n--- keel log tail ---\n{}", tail.join("\n"));
    }
}

/// A loopback address of this test run's own (127.64.x.y), so that port 6443 is free for it.
fn own_loopback() -> String {
    let n = std::process::id() as usize ^ (free_port() as usize) << 3;
    format!("127.64.{}.{}", (n >> 8) % 250 + 1, n % 250 + 1)
}

fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .env("KUBECACHEDIR", home.join("kubecache"));
    let out = run_bounded(cmd, None, KUBECTL_TIMEOUT);
    (out.success(), format!("{}{}", out.stdout, out.stderr))
}

/// Retries `check` for up to `timeout`; the last output is returned either way.
fn eventually(timeout: Duration, mut check: impl FnMut() -> (bool, String)) -> (bool, String) {
    let deadline = Instant::now() + timeout;
    loop {
        let (ok, out) = check();
        if ok || Instant::now() > deadline {
            return (ok, out);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn kubernetes_api_is_served_by_default_on_6443() {
    require_kubectl();
    let dir = tempfile::tempdir().expect("tempdir");
    let host = own_loopback();
    let m = Member::start(dir.path(), &host, &[]);
    let kubeconfig = dir.path().join("data").join("admin.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !kubeconfig.exists() {
        if Instant::now() > deadline {
            m.fail("no admin.kubeconfig within 60 s without --kube-listen");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    let want = format!("https://{host}:6443");
    if !text.contains(&want) {
        m.fail(&format!(
            "admin.kubeconfig does not point at {want}:\n{text}"
        ));
    }
    let (ok, out) = eventually(Duration::from_secs(30), || {
        kubectl(&kubeconfig, dir.path(), &["get", "--raw", "/readyz"])
    });
    if !ok || out.trim() != "ok" {
        m.fail(&format!("/readyz on {want}: {out}"));
    }

    // The in-cluster address of the API: the kubernetes Service and its endpoints, on a lone member.
    let (ok, out) = eventually(Duration::from_secs(30), || {
        let (ok, out) = kubectl(
            &kubeconfig,
            dir.path(),
            &["get", "svc", "-A", "--no-headers"],
        );
        (ok && out.contains("kubernetes"), out)
    });
    if !ok {
        m.fail(&format!(
            "kubectl get svc -A has no kubernetes Service: {out}"
        ));
    }
    let fields: Vec<&str> = out
        .lines()
        .find(|l| l.contains("kubernetes"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        fields.get(..5),
        Some(&["default", "kubernetes", "ClusterIP", "10.96.0.1", "<none>"][..]),
        "{out}"
    );
    assert_eq!(fields.get(5).copied(), Some("443/TCP"), "{out}");
    let (ok, out) = eventually(Duration::from_secs(30), || {
        let (ok, out) = kubectl(
            &kubeconfig,
            dir.path(),
            &[
                "get",
                "endpoints",
                "kubernetes",
                "-o",
                "jsonpath={.subsets[0].addresses[*].ip}:{.subsets[0].ports[0].port}",
            ],
        );
        (ok && out.trim() == format!("{host}:6443"), out)
    });
    if !ok {
        m.fail(&format!(
            "Endpoints kubernetes do not list {host}:6443: {out}"
        ));
    }
    let (ok, out) = eventually(Duration::from_secs(30), || {
        let (ok, out) = kubectl(
            &kubeconfig,
            dir.path(),
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=kubernetes",
                "-o",
                "jsonpath={.items[0].endpoints[*].addresses[0]}",
            ],
        );
        (ok && out.trim() == host, out)
    });
    if !ok {
        m.fail(&format!(
            "the kubernetes EndpointSlice does not list {host}: {out}"
        ));
    }
}

#[test]
fn empty_kube_listen_serves_no_kubernetes_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = own_loopback();
    let m = Member::start(dir.path(), &host, &["--kube-listen", ""]);
    // The etcd side serves (the member wrote its identity); the Kubernetes side never starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path().join("data").join("member").exists() {
        if Instant::now() > deadline {
            m.fail("the member did not start within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !dir.path().join("data").join("admin.kubeconfig").exists(),
        "--kube-listen \"\" still wrote admin.kubeconfig"
    );
    assert!(
        std::net::TcpStream::connect((host.as_str(), 6443)).is_err(),
        "--kube-listen \"\" still listens on {host}:6443"
    );
}

#[test]
fn three_members_publish_the_kubernetes_service() {
    let c = KubeCluster::start(keel_bin!(), 3);
    // Every member answers with the same Service, whichever one leads.
    for i in 0..3 {
        c.wait_until("the kubernetes Service", Duration::from_secs(30), || {
            let r = c.kubectl(
                i,
                &[
                    "get",
                    "svc",
                    "-n",
                    "default",
                    "kubernetes",
                    "-o",
                    "jsonpath={.spec.clusterIP} {.spec.ports[0].port}",
                ],
            );
            r.ok && r.stdout.trim() == "10.96.0.1 443"
        });
    }
    c.wait_until(
        "the kubernetes Endpoints with an address",
        Duration::from_secs(30),
        || {
            let r = c.kubectl(
                0,
                &[
                    "get",
                    "endpoints",
                    "kubernetes",
                    "-o",
                    "jsonpath={.subsets[0].addresses[*].ip}",
                ],
            );
            r.ok && r.stdout.trim().starts_with("127.0.0.1")
        },
    );
}
