//! etcd auth on keel's client port, with the real etcdctl 3.4 against one 3-member cluster that also serves the
//! Kubernetes API: enabling auth (and etcd's refusals when root is missing), refusals of unauthenticated and
//! unpermitted requests on every member, a read-only range role, a watch outside the range, wrong passwords,
//! kubectl unaffected, the etcd-client crate with credentials on a follower, the whole state through `kill -9` of
//! every member, `etcdctl snapshot save` (and `keel snapshot save --user`) restored by
//! `etcdctl snapshot restore` into a real etcd 3.4 and by `keel snapshot restore` into keel, and `auth disable`.
//! Output-for-output comparisons with a real etcd are in `tests/etcdctl_diff.rs` (`auth_users_roles_and_permissions`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_testkit::binaries::ETCD_BIN;
use keel_testkit::cluster::{connect_options, grpc_status, Cluster};
use keel_testkit::{
    etcdctl_with, free_ports, keel_bin, require_etcd_tools, run_bounded, CtlOutput, KubeCluster,
    Process,
};

const ROOT: &str = "--user=root:rootpw";
const RO: &str = "--user=ro:ropw";
const READY: Duration = Duration::from_secs(60);

/// The error line etcdctl ends with (the lines before it are the client's timestamped logs).
fn error_line(out: &CtlOutput) -> String {
    out.stderr
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// etcdctl against member `i`, which must fail with exactly `expect` as its last line.
fn refused(c: &Cluster, i: usize, args: &[&str], expect: &str) {
    let out = c.ctl(i, args);
    assert!(
        !out.success() && error_line(&out) == expect,
        "etcdctl {args:?} on member {i}: expected {expect:?}, got exit {:?}\nstdout: {}\nstderr: {}",
        out.code,
        out.stdout,
        out.stderr
    );
}

/// What every member must answer while auth is on with users root and ro (read on `/ro/`).
fn check_enforced(c: &Cluster) {
    for i in 0..c.len() {
        refused(
            c,
            i,
            &["get", "/ro/a"],
            "Error: etcdserver: user name is empty",
        );
        refused(
            c,
            i,
            &["put", "/ro/a", "x"],
            "Error: etcdserver: user name is empty",
        );
        // Authenticate works on followers too: each member learns the token from the log.
        assert_eq!(
            c.ctl_ok(i, &[ROOT, "get", "/x", "--print-value-only"]),
            "2\n"
        );
        assert_eq!(
            c.ctl_ok(i, &[RO, "get", "/ro/a", "--print-value-only"]),
            "1\n"
        );
        assert_eq!(
            c.ctl_ok(i, &[RO, "get", "/ro/", "--prefix", "--keys-only"]),
            "/ro/a\n\n"
        );
        refused(
            c,
            i,
            &[RO, "put", "/ro/a", "3"],
            "Error: etcdserver: permission denied",
        );
        refused(
            c,
            i,
            &[RO, "get", "/x"],
            "Error: etcdserver: permission denied",
        );
        refused(
            c,
            i,
            &[RO, "get", "/ro/", "--from-key"],
            "Error: etcdserver: permission denied",
        );
    }
    refused(
        c,
        1,
        &["--user=ro:wrong", "get", "/ro/a"],
        "Error: etcdserver: authentication failed, invalid user ID or password",
    );
    // A watch outside the range is created and cancelled at once with etcd's reason.
    let w = c.ctl(2, &[RO, "watch", "/x"]);
    assert!(
        !w.success()
            && w.stderr.contains(
                "watch was canceled (rpc error: code = PermissionDenied desc = etcdserver: permission denied)"
            ),
        "watch outside the range: {}{}",
        w.stdout,
        w.stderr
    );
    assert_eq!(c.ctl_ok(0, &[ROOT, "user", "list"]), "ro\nroot\n");
    assert_eq!(
        c.ctl_ok(1, &[ROOT, "role", "get", "ro"]),
        "Role ro\nKV Read:\n\t[/ro/, /ro0) (prefix /ro/)\nKV Write:\n"
    );
}

/// The etcd-client crate with credentials against a follower: it authenticates there, reads in range, and gets
/// etcd's status for a write outside its permissions.
async fn client_as_ro(endpoint: String) {
    let opts = connect_options().with_user("ro", "ropw");
    let mut cl = etcd_client::Client::connect([endpoint], Some(opts))
        .await
        .expect("connect as ro");
    let got = cl.get("/ro/a", None).await.expect("get in range");
    assert_eq!(got.kvs()[0].value(), b"1");
    let err = cl.put("/ro/b", "2", None).await.unwrap_err();
    let st = grpc_status(&err).expect("a gRPC status");
    assert_eq!(
        (st.code(), st.message()),
        (
            tonic::Code::PermissionDenied,
            "etcdserver: permission denied"
        )
    );
    let err = cl.get("/x", None).await.unwrap_err();
    assert_eq!(
        grpc_status(&err).map(|s| s.code()),
        Some(tonic::Code::PermissionDenied)
    );
}

/// A server started on a data directory the test prepared (a restore), killed on drop.
struct Restored {
    proc: Process,
    endpoint: String,
}

impl Restored {
    fn start(mut cmd: Command, endpoint: String) -> Restored {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD") {
                cmd.env_remove(k);
            }
        }
        let mut r = Restored {
            proc: Process::spawn(&mut cmd, None),
            endpoint,
        };
        let start = Instant::now();
        loop {
            assert!(
                r.proc.is_running(),
                "{} exited:\n{}",
                r.proc.cmdline(),
                r.proc.stderr()
            );
            // With auth on, the unauthenticated health read is refused once the member serves reads.
            let out = r.ctl(&["endpoint", "health"]);
            if out.success()
                || out
                    .stderr
                    .contains("failed to commit proposal: etcdserver: user name is empty")
            {
                return r;
            }
            assert!(
                start.elapsed() < READY,
                "{} not ready: {}",
                r.proc.cmdline(),
                out.stderr
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn ctl(&self, args: &[&str]) -> CtlOutput {
        etcdctl_with(
            &self.endpoint,
            args,
            None,
            &["--command-timeout=5s", "--dial-timeout=2s"],
        )
    }

    /// The restored member still enforces auth, with the users and roles of the file.
    fn check(&self, what: &str) {
        let unauth = self.ctl(&["get", "/ro/a"]);
        assert_eq!(
            error_line(&unauth),
            "Error: etcdserver: user name is empty",
            "{what}: {}",
            unauth.stderr
        );
        let ok = |args: &[&str]| {
            let out = self.ctl(args);
            assert!(out.success(), "{what}: etcdctl {args:?}: {}", out.stderr);
            out.stdout
        };
        assert_eq!(ok(&[ROOT, "user", "list"]), "ro\nroot\n", "{what}");
        assert_eq!(
            ok(&[RO, "get", "/ro/a", "--print-value-only"]),
            "1\n",
            "{what}"
        );
        let denied = self.ctl(&[RO, "get", "/x"]);
        assert_eq!(
            error_line(&denied),
            "Error: etcdserver: permission denied",
            "{what}"
        );
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Restores `file` with the real `etcdctl snapshot restore` and serves it with a real etcd 3.4.
fn restore_into_etcd(file: &Path, dir: &Path) -> Restored {
    let ports = free_ports(2);
    let (client, peer) = (
        format!("http://127.0.0.1:{}", ports[0]),
        format!("http://127.0.0.1:{}", ports[1]),
    );
    let data = dir.join("etcd-data");
    let cluster = format!("r1={peer}");
    let out = etcdctl_with(
        "127.0.0.1:1",
        &[
            "snapshot",
            "restore",
            path_str(file),
            "--name=r1",
            &format!("--data-dir={}", path_str(&data)),
            &format!("--initial-cluster={cluster}"),
            &format!("--initial-advertise-peer-urls={peer}"),
        ],
        None,
        &["--command-timeout=60s"],
    );
    assert!(out.success(), "etcdctl snapshot restore: {}", out.stderr);
    let mut cmd = Command::new(ETCD_BIN);
    cmd.args(["--name", "r1", "--data-dir", path_str(&data)])
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &cluster]);
    Restored::start(cmd, format!("127.0.0.1:{}", ports[0]))
}

/// Restores `file` with `keel snapshot restore` and serves it with one keel member.
fn restore_into_keel(file: &Path, dir: &Path) -> Restored {
    let keel = keel_bin!();
    let ports = free_ports(2);
    let (client, peer) = (
        format!("http://127.0.0.1:{}", ports[0]),
        format!("http://127.0.0.1:{}", ports[1]),
    );
    let data = dir.join("keel-data");
    let cluster = format!("k1={peer}");
    let mut restore = Command::new(&keel);
    restore
        .args(["snapshot", "restore", path_str(file)])
        .args(["--data-dir", path_str(&data), "--name", "k1"])
        .args(["--initial-cluster", &cluster])
        .args(["--initial-cluster-token", "auth-restored"])
        .args(["--initial-advertise-peer-urls", &peer]);
    let out = run_bounded(restore, None, Duration::from_secs(120));
    assert!(
        out.success(),
        "keel snapshot restore: {}{}",
        out.stdout,
        out.stderr
    );
    let mut cmd = Command::new(&keel);
    cmd.args(["server", "--kube-listen", "", "--name", "k1"])
        .args(["--data-dir", path_str(&data)])
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &cluster])
        .args(["--initial-cluster-token", "auth-restored"]);
    Restored::start(cmd, format!("127.0.0.1:{}", ports[0]))
}

#[test]
fn auth_on_a_three_member_cluster() {
    require_etcd_tools();
    let mut kc = KubeCluster::start(keel_bin!(), 3);

    let c = kc.cluster();
    c.ctl_ok(0, &["put", "/ro/a", "1"]);
    c.ctl_ok(1, &["put", "/x", "2"]);
    refused(
        c,
        0,
        &["auth", "enable"],
        "Error: etcdserver: root user does not exist",
    );
    c.ctl_ok(1, &["user", "add", "root:rootpw"]);
    c.ctl_ok(0, &["user", "add", "ro:ropw"]);
    c.ctl_ok(1, &["role", "add", "ro"]);
    c.ctl_ok(
        2,
        &["role", "grant-permission", "ro", "read", "/ro/", "--prefix"],
    );
    c.ctl_ok(0, &["user", "grant-role", "ro", "ro"]);
    // etcdctl answers etcd's "root user does not have root role" by adding role root and granting it.
    assert_eq!(c.ctl_ok(1, &["auth", "enable"]), "Authentication Enabled\n");
    assert_eq!(c.ctl_ok(2, &[ROOT, "role", "list"]), "ro\nroot\n");
    check_enforced(c);
    let leader = kc.cluster_mut().wait_leader(Duration::from_secs(15));
    let follower = (leader + 1) % 3;
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(client_as_ro(kc.cluster().endpoint(follower)));

    // The Kubernetes API reaches the store in process: etcd auth does not concern it.
    kc.ok(
        0,
        &["create", "configmap", "auth-probe", "--from-literal=k=v"],
    );
    assert_eq!(
        kc.ok(
            1,
            &["get", "configmap", "auth-probe", "-o", "jsonpath={.data.k}"]
        ),
        "v"
    );

    // Users, roles, permissions and the enabled flag are replicated state: they survive kill -9 of all.
    {
        let c = kc.cluster_mut();
        for i in 0..3 {
            c.kill9(i);
        }
        c.restart_all(&[0, 1, 2]);
        c.wait_leader(Duration::from_secs(30));
    }
    let c = kc.cluster();
    check_enforced(c);
    kc.wait_until("kubectl after the restart", Duration::from_secs(60), || {
        kc.kubectl(
            2,
            &["get", "configmap", "auth-probe", "-o", "jsonpath={.data.k}"],
        )
        .ok
    });
    kc.ok(2, &["delete", "configmap", "auth-probe"]);

    // Snapshots need root; the file keeps the auth buckets, and both restore paths keep enforcing them.
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("auth.db");
    let save = |creds: &str| {
        etcdctl_with(
            &c.endpoint(0),
            &[creds, "snapshot", "save", path_str(&file)],
            None,
            &["--command-timeout=60s"],
        )
    };
    let denied = save(RO);
    assert_eq!(
        error_line(&denied),
        "Error: rpc error: code = Unknown desc = auth: permission denied",
        "{}",
        denied.stderr
    );
    let saved = save(ROOT);
    assert!(saved.success(), "snapshot save as root: {}", saved.stderr);
    // `keel snapshot save` takes etcdctl's --user too.
    let keel_save = |extra: &[&str]| {
        let mut cmd = Command::new(keel_bin!());
        cmd.args([
            "snapshot",
            "save",
            path_str(&tmp.path().join("keel-save.db")),
        ])
        .args(["--endpoints", &c.client_urls(&[1])[0]])
        .args(extra);
        run_bounded(cmd, None, Duration::from_secs(120))
    };
    let refused_save = keel_save(&[]);
    assert!(
        !refused_save.success() && refused_save.stderr.contains("auth: user name is empty"),
        "keel snapshot save without a user: {}",
        refused_save.stderr
    );
    let keel_saved = keel_save(&["--user", "root:rootpw"]);
    assert!(
        keel_saved.success(),
        "keel snapshot save --user root: {}{}",
        keel_saved.stdout,
        keel_saved.stderr
    );
    restore_into_etcd(&file, tmp.path()).check("real etcd restored from keel's snapshot");
    restore_into_keel(&file, tmp.path()).check("keel restored from its snapshot");

    assert_eq!(
        c.ctl_ok(2, &[ROOT, "auth", "disable"]),
        "Authentication Disabled\n"
    );
    for i in 0..3 {
        assert_eq!(c.ctl_ok(i, &["get", "/ro/a", "--print-value-only"]), "1\n");
        c.ctl_ok(i, &["put", "/x", "2"]);
    }
}
