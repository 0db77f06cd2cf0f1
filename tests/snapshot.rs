//! etcd-format snapshots with the real binaries: `etcdctl snapshot save/status/restore` against
//! keel and a real etcd 3.4 started on the result; a real etcd's snapshot restored with `keel
//! snapshot restore` into one and three keel members (plus one added later); damaged files
//! refused without leaving anything behind; `keel snapshot save` with its progress output;
//! a client that goes away mid-stream.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use keel_testkit::{
    etcdctl, etcdctl_with, free_port, keel_bin, require_etcd_tools, run_bounded, CtlOutput, Server,
    ETCD_BIN,
};
use serde_json::Value;

const KEEL: &str = env!("CARGO_BIN_EXE_keel");
const READY: Duration = Duration::from_secs(30);

/// Runs `keel` with `args` (bounded).
fn keel(args: &[&str]) -> CtlOutput {
    let mut cmd = Command::new(KEEL);
    cmd.args(args);
    run_bounded(cmd, None, Duration::from_secs(120))
}

/// etcdctl that must succeed; returns stdout.
fn ctl(endpoint: &str, args: &[&str]) -> String {
    ctl_in(endpoint, args, None)
}

fn ctl_in(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = etcdctl(endpoint, args, stdin);
    assert!(
        out.success(),
        "etcdctl {args:?} against {endpoint} failed: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// `etcdctl snapshot ...` (no endpoint involved), with a long timeout.
fn ctl_local(args: &[&str]) -> CtlOutput {
    etcdctl_with("127.0.0.1:1", args, None, &["--command-timeout=60s"])
}

/// The same history on any etcd-compatible server: puts, overwrites, deletes, a lease with two
/// keys, a Kubernetes-protobuf value with a NUL byte, a compaction, and writes after it.
/// Returns the lease ID (hex) and the compaction revision.
fn write_history(endpoint: &str) -> (String, i64) {
    let c = |args: &[&str]| ctl(endpoint, args);
    c(&["put", "/a", "1"]); // 2
    c(&["put", "/a", "2"]); // 3
    c(&["put", "/b", "x"]); // 4
    c(&["put", "/c", "gone"]); // 5
    c(&["del", "/c"]); // 6
    let grant = c(&["lease", "grant", "600"]);
    let lease = grant
        .split_whitespace()
        .nth(1)
        .expect("lease grant output")
        .to_string();
    c(&["put", &format!("--lease={lease}"), "/l1", "leased"]); // 7
    c(&["put", &format!("--lease={lease}"), "/l2", "leased too"]); // 8
    c(&["put", "/a", "3"]); // 9
    c(&["compact", "6"]);
    // etcdctl reads the value from stdin when it is not an argument: bytes exactly.
    ctl_in(
        endpoint,
        &["put", "/registry/pods/default/p"],
        Some(b"k8s\x00\x0a\x0b\x0a\x02v1\x12\x03Pod\xff\xfe"),
    ); // 10
    c(&["put", "/b", "y"]); // 11
    c(&["del", "/a"]); // 12
    c(&["put", "/a", "reborn"]); // 13
    (lease, 6)
}

/// Revision of the history [`write_history`] writes on a fresh server.
const LAST_REV: i64 = 13;

/// What must be equal between two servers holding the same data.
fn observable(endpoint: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut get = |label: &str, args: &[&str]| {
        let v = json(&ctl(endpoint, args));
        out.push((
            format!("{label} header.revision"),
            v["header"]["revision"].clone(),
        ));
        out.push((format!("{label} kvs"), v["kvs"].clone()));
        out.push((format!("{label} count"), v["count"].clone()));
    };
    get("current", &["get", "", "--prefix", "-w", "json"]);
    for rev in ["6", "9", "11"] {
        get(
            &format!("at {rev}"),
            &["get", "", "--prefix", "-w", "json", &format!("--rev={rev}")],
        );
    }
    let below = etcdctl(endpoint, &["get", "/a", "--rev=5"], None);
    out.push((
        "below the compaction".into(),
        // The last line is the error; the lines before it are timestamped client logs.
        Value::String(format!(
            "exit {:?}: {}",
            below.code,
            below.stderr.trim().lines().last().unwrap_or_default()
        )),
    ));
    let hk = json(&ctl(endpoint, &["endpoint", "hashkv", "-w", "json"]));
    out.push(("hashkv hash".into(), hk[0]["HashKV"]["hash"].clone()));
    out.push((
        "hashkv compact_revision".into(),
        hk[0]["HashKV"]["compact_revision"].clone(),
    ));
    out
}

fn assert_same(a_label: &str, a: &[(String, Value)], b_label: &str, b: &[(String, Value)]) {
    assert_eq!(a.len(), b.len());
    let mut diffs = Vec::new();
    for ((la, va), (_, vb)) in a.iter().zip(b) {
        if va != vb {
            diffs.push(format!("{la}:\n  {a_label}: {va}\n  {b_label}: {vb}"));
        }
    }
    assert!(diffs.is_empty(), "differences:\n{}", diffs.join("\n"));
}

/// Lease IDs and attached keys, as `lease timetolive --keys` lists them (sorted).
fn lease_keys(endpoint: &str, lease: &str) -> Vec<String> {
    let out = ctl(endpoint, &["lease", "timetolive", "--keys", lease]);
    let keys = out
        .split("attached keys([")
        .nth(1)
        .and_then(|s| s.split("])").next())
        .unwrap_or_else(|| panic!("no attached keys in {out}"));
    let mut v: Vec<String> = keys.split(' ').map(String::from).collect();
    v.sort();
    v
}

/// A server process started on a data directory the test prepared (a restore).
struct Member {
    child: Option<Child>,
    what: String,
    client_port: u16,
    log: PathBuf,
}

struct MemberSpec<'a> {
    name: &'a str,
    data_dir: &'a Path,
    client_port: u16,
    peer_port: u16,
    initial_cluster: &'a str,
    token: &'a str,
    state: &'a str,
}

impl Member {
    fn start(etcd: bool, s: &MemberSpec<'_>) -> Member {
        let client = format!("http://127.0.0.1:{}", s.client_port);
        let peer = format!("http://127.0.0.1:{}", s.peer_port);
        let mut cmd = if etcd {
            let mut c = Command::new(ETCD_BIN);
            c.args(["--logger", "zap", "--log-outputs", "stderr"]);
            c
        } else {
            let mut c = Command::new(KEEL);
            c.args(["server", "--kube-listen", "", "--log-level", "info"]);
            c
        };
        cmd.arg("--name")
            .arg(s.name)
            .arg("--data-dir")
            .arg(s.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", s.initial_cluster])
            .args(["--initial-cluster-token", s.token])
            .args(["--initial-cluster-state", s.state]);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD") {
                cmd.env_remove(k);
            }
        }
        let log = s
            .data_dir
            .with_file_name(format!("{}.log", s.name))
            .to_path_buf();
        let f = File::create(&log).expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().expect("clone log"))
            .stderr(f);
        let child = cmd.spawn().expect("spawn member");
        Member {
            child: Some(child),
            what: format!("{} {}", if etcd { "etcd" } else { "keel" }, s.name),
            client_port: s.client_port,
            log,
        }
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{} exited with {st}:\n{}", self.what, self.log_tail());
            }
            let out = etcdctl_with(
                &self.endpoint(),
                &["endpoint", "health"],
                None,
                &["--command-timeout=1s", "--dial-timeout=1s"],
            );
            if out.success() {
                return;
            }
            assert!(
                start.elapsed() < READY,
                "{} not ready within {READY:?}: {}{}\n{}",
                self.what,
                out.stdout,
                out.stderr,
                self.log_tail()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until `f` holds (bounded).
fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    loop {
        match f() {
            Ok(()) => return,
            Err(e) if start.elapsed() > limit => panic!("{what}: not within {limit:?}: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The key-bucket count of the history above: /a@3, /b@4, /l1@7, /l2@8, /a@9, /registry@10,
/// /b@11, /a@12 (tombstone), /a@13 — /a@2 and /c@5,6 went with the compaction at 6.
const KEY_ENTRIES: u64 = 9;
/// Entries of the other buckets: 1 lease, meta consistent_index + 2 compaction marks,
/// cluster version, 1 member, and `auth/authRevision` (etcd writes it on a new store).
const OTHER_ENTRIES: u64 = 1 + 3 + 1 + 1 + 1;

#[test]
fn etcdctl_saves_keel_and_a_real_etcd_serves_the_restored_snapshot() {
    require_etcd_tools();
    let keel_srv = Server::start_keel(keel_bin!());
    let ep = keel_srv.endpoint();
    let (lease, _) = write_history(&ep);
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("keel.db");
    let save = etcdctl_with(
        &ep,
        &["snapshot", "save", path_str(&file)],
        None,
        &["--command-timeout=60s"],
    );
    assert!(
        save.success(),
        "etcdctl snapshot save: {}{}",
        save.stdout,
        save.stderr
    );

    let status = ctl_local(&["snapshot", "status", path_str(&file), "-w", "json"]);
    assert!(status.success(), "snapshot status: {}", status.stderr);
    let st = json(&status.stdout);
    println!("etcdctl snapshot status: {}", status.stdout.trim());
    assert_eq!(st["revision"], LAST_REV);
    assert_eq!(st["totalKey"], KEY_ENTRIES + OTHER_ENTRIES);
    assert_eq!(
        st["totalSize"].as_u64().expect("size") + 32,
        std::fs::metadata(&file).expect("file").len()
    );

    let peer = free_port();
    let cluster = format!("n1=http://127.0.0.1:{peer}");
    let data = tmp.path().join("etcd-data");
    let restore = ctl_local(&[
        "snapshot",
        "restore",
        path_str(&file),
        "--name",
        "n1",
        "--data-dir",
        path_str(&data),
        "--initial-cluster",
        &cluster,
        "--initial-advertise-peer-urls",
        &format!("http://127.0.0.1:{peer}"),
    ]);
    assert!(restore.success(), "snapshot restore: {}", restore.stderr);
    let mut etcd = Member::start(
        true,
        &MemberSpec {
            name: "n1",
            data_dir: &data,
            client_port: free_port(),
            peer_port: peer,
            initial_cluster: &cluster,
            token: "etcd-cluster",
            state: "new",
        },
    );
    etcd.wait_ready();
    let from_keel = observable(&ep);
    let from_etcd = observable(&etcd.endpoint());
    assert_same("keel", &from_keel, "etcd", &from_etcd);
    assert_eq!(lease_keys(&etcd.endpoint(), &lease), ["/l1", "/l2"]);
    // Both go on from the same revision.
    let next =
        |e: &str| json(&ctl(e, &["put", "/next", "v", "-w", "json"]))["header"]["revision"].clone();
    assert_eq!(next(&ep), next(&etcd.endpoint()));
    assert_eq!(next(&ep), LAST_REV + 2);
}

#[test]
fn a_real_etcd_snapshot_restored_into_keel_answers_identically() {
    require_etcd_tools();
    let etcd = Server::start_etcd();
    let (lease, _) = write_history(&etcd.endpoint());
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("etcd.db");
    let save = etcdctl_with(
        &etcd.endpoint(),
        &["snapshot", "save", path_str(&file)],
        None,
        &["--command-timeout=60s"],
    );
    assert!(save.success(), "etcdctl snapshot save: {}", save.stderr);

    let peer = free_port();
    let cluster = format!("n1=http://127.0.0.1:{peer}");
    let data = tmp.path().join("keel-data");
    let out = keel(&[
        "snapshot",
        "restore",
        path_str(&file),
        "--data-dir",
        path_str(&data),
        "--name",
        "n1",
        "--initial-cluster",
        &cluster,
        "--initial-cluster-token",
        "restored",
        "--initial-advertise-peer-urls",
        &format!("http://127.0.0.1:{peer}"),
    ]);
    assert!(
        out.success(),
        "keel snapshot restore: {}{}",
        out.stdout,
        out.stderr
    );
    println!("{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains(&format!("revision {LAST_REV}, compacted at 6")),
        "{}",
        out.stdout
    );
    let mut k = Member::start(
        false,
        &MemberSpec {
            name: "n1",
            data_dir: &data,
            client_port: free_port(),
            peer_port: peer,
            initial_cluster: &cluster,
            token: "restored",
            state: "new",
        },
    );
    k.wait_ready();
    let from_etcd = observable(&etcd.endpoint());
    let from_keel = observable(&k.endpoint());
    assert_same("etcd", &from_etcd, "keel", &from_keel);
    assert_eq!(lease_keys(&k.endpoint(), &lease), ["/l1", "/l2"]);
    // Revoking the restored lease deletes its keys in one revision, as on etcd.
    for e in [etcd.endpoint(), k.endpoint()] {
        ctl(&e, &["lease", "revoke", &lease]);
    }
    assert_same(
        "etcd",
        &observable(&etcd.endpoint()),
        "keel",
        &observable(&k.endpoint()),
    );
    // A restart keeps everything (the restored state is the store, not a log replay).
    drop(k);
    let mut k = Member::start(
        false,
        &MemberSpec {
            name: "n1",
            data_dir: &data,
            client_port: free_port(),
            peer_port: peer,
            initial_cluster: &cluster,
            token: "restored",
            state: "new",
        },
    );
    k.wait_ready();
    assert_same(
        "etcd",
        &observable(&etcd.endpoint()),
        "keel after restart",
        &observable(&k.endpoint()),
    );
}

#[test]
fn three_members_restore_one_file_and_a_fourth_joins_later() {
    require_etcd_tools();
    let etcd = Server::start_etcd();
    write_history(&etcd.endpoint());
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("etcd.db");
    let save = etcdctl_with(
        &etcd.endpoint(),
        &["snapshot", "save", path_str(&file)],
        None,
        &["--command-timeout=60s"],
    );
    assert!(save.success(), "etcdctl snapshot save: {}", save.stderr);
    let expected = observable(&etcd.endpoint());

    let peers: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let clients: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let url = |i: usize| format!("http://127.0.0.1:{}", peers[i]);
    let cluster3 = (0..3)
        .map(|i| format!("n{}={}", i + 1, url(i)))
        .collect::<Vec<_>>()
        .join(",");
    let token = "three";
    let mut members = Vec::new();
    for i in 0..3 {
        let name = format!("n{}", i + 1);
        let data = tmp.path().join(&name);
        let out = keel(&[
            "snapshot",
            "restore",
            path_str(&file),
            "--data-dir",
            path_str(&data),
            "--name",
            &name,
            "--initial-cluster",
            &cluster3,
            "--initial-cluster-token",
            token,
            "--initial-advertise-peer-urls",
            &url(i),
        ]);
        assert!(
            out.success(),
            "restore {name}: {}{}",
            out.stdout,
            out.stderr
        );
    }
    for i in 0..3 {
        let name = format!("n{}", i + 1);
        members.push(Member::start(
            false,
            &MemberSpec {
                name: &name,
                data_dir: &tmp.path().join(&name),
                client_port: clients[i],
                peer_port: peers[i],
                initial_cluster: &cluster3,
                token,
                state: "new",
            },
        ));
    }
    for m in &mut members {
        m.wait_ready();
    }
    for m in &members {
        assert_same("etcd", &expected, "keel member", &observable(&m.endpoint()));
    }
    // New writes replicate on top of the restored state.
    let rev = json(&ctl(
        &members[0].endpoint(),
        &["put", "/new", "1", "-w", "json"],
    ))["header"]["revision"]
        .as_i64()
        .expect("revision");
    assert_eq!(rev, LAST_REV + 1);

    // A fourth member joins with an empty data directory: it must get the restored data too.
    let add = ctl(
        &members[0].endpoint(),
        &["member", "add", "n4", &format!("--peer-urls={}", url(3))],
    );
    assert!(add.contains("n4"), "{add}");
    let cluster4 = format!("{cluster3},n4={}", url(3));
    let data4 = tmp.path().join("n4");
    let mut m4 = Member::start(
        false,
        &MemberSpec {
            name: "n4",
            data_dir: &data4,
            client_port: clients[3],
            peer_port: peers[3],
            initial_cluster: &cluster4,
            token,
            state: "existing",
        },
    );
    m4.wait_ready();
    let want = ctl(
        &members[0].endpoint(),
        &["get", "", "--prefix", "-w", "json", "--consistency=s"],
    );
    let want = json(&want)["kvs"].clone();
    eventually(
        "the added member has the restored data",
        Duration::from_secs(30),
        || {
            let got = json(&ctl(
                &m4.endpoint(),
                &["get", "", "--prefix", "-w", "json", "--consistency=s"],
            ));
            if got["kvs"] == want {
                Ok(())
            } else {
                Err(format!("{}", got["kvs"]))
            }
        },
    );
}

/// Breaks a copy of `good` with `f`, runs `keel snapshot restore` on it, and checks it fails
/// with `expect` in its message and leaves nothing behind.
fn refused(good: &Path, label: &str, extra: &[&str], f: impl FnOnce(&mut Vec<u8>), expect: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join(format!("{label}.db"));
    let mut bytes = std::fs::read(good).expect("read");
    f(&mut bytes);
    std::fs::write(&bad, &bytes).expect("write");
    let data = dir.path().join("restored");
    let mut args = vec![
        "snapshot",
        "restore",
        path_str(&bad),
        "--data-dir",
        path_str(&data),
    ];
    args.extend_from_slice(extra);
    let out = keel(&args);
    println!("{label}: exit {:?}: {}", out.code, out.stderr.trim());
    assert_eq!(out.code, Some(1), "{label}: {}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(expect),
        "{label}: expected {expect:?} in: {}",
        out.stderr
    );
    assert!(
        !data.exists(),
        "{label}: the data dir exists after a failed restore"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != &format!("{label}.db"))
        .collect();
    assert!(left.is_empty(), "{label}: left behind: {left:?}");
}

#[test]
fn damaged_snapshots_are_refused_and_nothing_is_half_restored() {
    require_etcd_tools();
    let etcd = Server::start_etcd();
    write_history(&etcd.endpoint());
    // Enough data for several pages of bucket `key`.
    for i in 0..300 {
        ctl(
            &etcd.endpoint(),
            &["put", &format!("/bulk/{i:04}"), &"v".repeat(200)],
        );
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let good = tmp.path().join("good.db");
    let save = etcdctl_with(
        &etcd.endpoint(),
        &["snapshot", "save", path_str(&good)],
        None,
        &["--command-timeout=60s"],
    );
    assert!(save.success(), "{}", save.stderr);
    let len = std::fs::metadata(&good).expect("len").len() as usize;

    refused(
        &good,
        "truncated",
        &[],
        |b| b.truncate(len / 2),
        "snapshot file is truncated",
    );
    refused(
        &good,
        "truncated-keeping-trailer-size",
        &[],
        |b| b.truncate(len - 4096),
        "snapshot file is truncated",
    );
    refused(
        &good,
        "flipped-byte",
        &[],
        |b| b[len / 2] ^= 0x40,
        "sha256 checksum mismatch",
    );
    refused(
        &good,
        "wrong-checksum",
        &[],
        |b| b[len - 1] ^= 1,
        "sha256 checksum mismatch",
    );
    refused(
        &good,
        "not-a-snapshot",
        &[],
        |b| b.iter_mut().for_each(|x| *x = 0x5a),
        "not a bbolt database",
    );
    // Without the hash check, damage inside the page structure is still caught by the walk.
    refused(
        &good,
        "flipped-page-header",
        &["--skip-hash-check"],
        |b| {
            // The root page (of the newer meta) no longer carries its own page id.
            let le64 =
                |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"));
            let (txid0, txid1) = (le64(16 + 48), le64(4096 + 16 + 48));
            let meta = if txid1 > txid0 { 4096 } else { 0 };
            let root = le64(meta + 16 + 16) as usize;
            b[root * 4096] ^= 0x01;
        },
        "corrupt page",
    );
    refused(
        &good,
        "truncated-db",
        &["--skip-hash-check"],
        |b| b.truncate(len - 32 - 8192),
        "truncated",
    );
    // An existing data dir is refused before anything is read.
    let data = tmp.path().join("exists");
    std::fs::create_dir(&data).expect("mkdir");
    let out = keel(&[
        "snapshot",
        "restore",
        path_str(&good),
        "--data-dir",
        path_str(&data),
    ]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("exists"), "{}", out.stderr);
    assert_eq!(std::fs::read_dir(&data).expect("ls").count(), 0);
}

#[test]
fn keel_snapshot_save_shows_progress_and_etcdctl_reads_the_file() {
    require_etcd_tools();
    let srv = Server::start_keel(keel_bin!());
    let ep = srv.endpoint();
    write_history(&ep);
    for i in 0..200 {
        ctl(&ep, &["put", &format!("/bulk/{i:04}"), &"v".repeat(500)]);
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("saved.db");
    let out = keel(&[
        "snapshot",
        "save",
        path_str(&file),
        "--endpoints",
        &srv.client_url(),
    ]);
    assert!(
        out.success(),
        "keel snapshot save: {}{}",
        out.stdout,
        out.stderr
    );
    println!("{}{}", out.stdout, out.stderr);
    assert!(out
        .stdout
        .starts_with(&format!("Snapshot saved at {}", file.display())));
    // Without a terminal the progress goes to stderr as a line per quarter.
    assert!(
        out.stderr.contains("keel: saving snapshot: 100% ("),
        "{}",
        out.stderr
    );
    assert!(!tmp.path().join("saved.db.part").exists());
    let status = ctl_local(&["snapshot", "status", path_str(&file), "-w", "json"]);
    assert!(status.success(), "{}", status.stderr);
    let st = json(&status.stdout);
    assert_eq!(st["revision"], LAST_REV + 200);
    assert!(
        out.stdout.contains(&format!("{} keys", st["totalKey"])),
        "{}",
        out.stdout
    );
    // The file is what etcdctl saves from the same member (nothing changed in between).
    let theirs = tmp.path().join("etcdctl.db");
    let save = etcdctl_with(
        &ep,
        &["snapshot", "save", path_str(&theirs)],
        None,
        &["--command-timeout=60s"],
    );
    assert!(save.success(), "{}", save.stderr);
    assert!(
        std::fs::read(&file).expect("ours") == std::fs::read(&theirs).expect("theirs"),
        "keel snapshot save and etcdctl snapshot save wrote different files"
    );

    // On a terminal it is an indicatif bar (`script` gives the command a pseudo-terminal).
    if Path::new("/usr/bin/script").exists() {
        let tty_file = tmp.path().join("tty.db");
        let cmdline = format!(
            "{KEEL} snapshot save {} --endpoints {}",
            tty_file.display(),
            srv.client_url()
        );
        let mut cmd = Command::new("/usr/bin/script");
        cmd.args(["-qec", &cmdline, "/dev/null"]);
        let out = run_bounded(cmd, None, Duration::from_secs(60));
        assert!(out.success(), "under script: {}{}", out.stdout, out.stderr);
        assert!(
            out.stdout.contains("saving snapshot ["),
            "no bar: {:?}",
            out.stdout
        );
        assert!(tty_file.exists());
    }

    // Errors: more than one endpoint; nobody listening.
    let out = keel(&[
        "snapshot",
        "save",
        path_str(&file),
        "--endpoints",
        "http://127.0.0.1:1,http://127.0.0.1:2",
    ]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("exactly one endpoint"),
        "{}",
        out.stderr
    );
    let gone = tmp.path().join("gone.db");
    let out = keel(&[
        "snapshot",
        "save",
        path_str(&gone),
        "--endpoints",
        &format!("http://127.0.0.1:{}", free_port()),
        "--dial-timeout",
        "1s",
    ]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(!gone.exists() && !tmp.path().join("gone.db.part").exists());
}

#[test]
fn a_client_that_goes_away_stops_the_stream_and_the_export_file_goes() {
    let srv = Server::start_keel(keel_bin!());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let snap_dir = srv.data_dir().join("snap");
    let exports = || -> Vec<String> {
        std::fs::read_dir(&snap_dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("etcd-export-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([srv.endpoint()], None)
            .await
            .expect("connect");
        // ~8 MB: far more than the stream's buffers, so the server is mid-file when we stop.
        let value = vec![b'x'; 8 * 1024];
        for i in 0..1000 {
            c.put(format!("/big/{i:05}"), value.clone(), None)
                .await
                .expect("put");
        }
        let mut stream = c.snapshot().await.expect("snapshot");
        let first = stream
            .message()
            .await
            .expect("message")
            .expect("first message");
        assert_eq!(first.blob().len(), 32 * 1024);
        assert!(
            first.remaining_bytes() > 4 * 1024 * 1024,
            "{}",
            first.remaining_bytes()
        );
        assert_eq!(exports().len(), 1, "the export file exists while streaming");
        // Cancel the stream with the connection still open (the client keeps running).
        drop(stream);
        let start = Instant::now();
        while !exports().is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the export file is still there: {:?}",
                exports()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The member still serves this client.
        c.put("/after", "1", None).await.expect("put after cancel");
    });
    // The member still serves, and a full snapshot still works.
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("after.db");
    let out = keel(&[
        "snapshot",
        "save",
        path_str(&file),
        "--endpoints",
        &srv.client_url(),
    ]);
    assert!(out.success(), "{}", out.stderr);
    assert!(exports().is_empty());
}

/// The names of the `*.db` files of `dir`, sorted.
fn db_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".db"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn scheduled_snapshots_appear_are_pruned_and_restore() {
    use keel_testkit::binaries::Kind;
    use keel_testkit::cluster::{Cluster, Options};
    require_etcd_tools();
    // Every two seconds, keeping two: the schedule's test form of k3s's "every 12 hours, keep 5".
    let c = Cluster::start_with(
        Options::new(Kind::Keel, 1)
            .keel_bin(keel_bin!())
            .arg("--snapshot-schedule=*/2 * * * * *")
            .arg("--snapshot-retention=2"),
    );
    let ep = c.endpoint(0);
    ctl(&ep, &["put", "/sched/a", "1"]);
    let dir = c.member(0).data_dir.join("snapshots");
    // Two snapshots, then a third that pushes the oldest out: the set changes and never grows past 2.
    let mut first: Vec<String> = Vec::new();
    eventually("two scheduled snapshots", Duration::from_secs(30), || {
        first = db_files(&dir);
        if first.len() == 2 {
            Ok(())
        } else {
            Err(format!("{first:?}"))
        }
    });
    ctl(&ep, &["put", "/sched/b", "2"]);
    eventually("the oldest pruned", Duration::from_secs(30), || {
        let now = db_files(&dir);
        assert!(now.len() <= 2, "retention exceeded: {now:?}");
        if now.len() == 2 && !now.contains(&first[0]) {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    });
    for name in db_files(&dir) {
        assert!(name.starts_with("keel-snapshot-"), "{name}");
    }

    // An on-demand snapshot beside them: named after the member, never pruned by the schedule.
    let out = keel(&[
        "snapshot",
        "save",
        "--dir",
        path_str(&dir),
        "--endpoints",
        &c.member(0).client_url(),
    ]);
    assert!(out.success(), "{}{}", out.stdout, out.stderr);
    let on_demand = db_files(&dir)
        .into_iter()
        .find(|n| n.starts_with("on-demand-"))
        .expect("on-demand snapshot");
    let on_demand = dir.join(on_demand);
    let meta = json(&std::fs::read_to_string(format!("{}.json", on_demand.display())).unwrap());
    assert_eq!(meta["origin"], "on-demand");
    assert_eq!(meta["member"], c.member(0).name.as_str());
    assert!(meta["revision"].as_i64().unwrap() >= 3, "{meta}");

    // The listing with every file re-hashed: all ok; a damaged file shows CORRUPT.
    let listed = keel(&["snapshot", "list", "--dir", path_str(&dir), "--check"]);
    assert!(listed.success(), "{}", listed.stderr);
    println!("{}", listed.stdout);
    assert!(listed.stdout.starts_with("NAME"), "{}", listed.stdout);
    assert!(listed.stdout.contains("on-demand"), "{}", listed.stdout);
    assert!(listed.stdout.contains("scheduled"), "{}", listed.stdout);
    assert!(!listed.stdout.contains("CORRUPT"), "{}", listed.stdout);
    // The rest works on a copy: the member keeps snapshotting and pruning, and its directory goes with it.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("snapshots");
    std::fs::create_dir_all(&copy).unwrap();
    for name in db_files(&dir) {
        // A pair the schedule prunes or is still describing meanwhile is left out.
        let json_name = format!("{name}.json");
        let copied = std::fs::copy(dir.join(&json_name), copy.join(&json_name)).is_ok()
            && std::fs::copy(dir.join(&name), copy.join(&name)).is_ok();
        if !copied {
            let _ = std::fs::remove_file(copy.join(&json_name));
            let _ = std::fs::remove_file(copy.join(&name));
        }
    }
    drop(c);
    let dir = copy;
    let on_demand = dir.join(on_demand.file_name().unwrap());
    let all = db_files(&dir);
    let newest = dir.join(
        all.iter()
            .filter(|n| n.starts_with("keel-snapshot-"))
            .max()
            .expect("a scheduled snapshot"),
    );
    let meta = json(&std::fs::read_to_string(format!("{}.json", newest.display())).unwrap());
    assert_eq!(meta["origin"], "scheduled");
    assert_eq!(meta["members"].as_array().map(Vec::len), Some(1));
    let sha = meta["sha256"].as_str().unwrap().to_string();
    let sum = Command::new("sha256sum").arg(&newest).output().unwrap();
    assert!(
        String::from_utf8_lossy(&sum.stdout).starts_with(&sha),
        "sha256sum disagrees with the metadata"
    );

    // etcdctl reads a scheduled snapshot, and it restores into a member that serves the data.
    let status = ctl_local(&["snapshot", "status", path_str(&newest), "-w", "json"]);
    assert!(status.success(), "{}", status.stderr);
    assert_eq!(json(&status.stdout)["revision"], meta["revision"]);
    let restored = tmp.path().join("r1");
    let (client_port, peer_port) = (free_port(), free_port());
    let peer = format!("http://127.0.0.1:{peer_port}");
    let out = keel(&[
        "snapshot",
        "restore",
        path_str(&newest),
        "--data-dir",
        path_str(&restored),
        "--name",
        "r1",
        "--initial-advertise-peer-urls",
        &peer,
    ]);
    assert!(out.success(), "{}{}", out.stdout, out.stderr);
    let mut m = Member::start(
        false,
        &MemberSpec {
            name: "r1",
            data_dir: &restored,
            client_port,
            peer_port,
            initial_cluster: &format!("r1={peer}"),
            token: "keel-cluster",
            state: "new",
        },
    );
    m.wait_ready();
    let got = ctl(&m.endpoint(), &["get", "/sched/a", "--print-value-only"]);
    assert_eq!(got.trim(), "1");
    drop(m);

    // A file that no longer matches its metadata is refused before anything is created.
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 40;
    bytes[last] ^= 0xff;
    std::fs::write(&newest, &bytes).unwrap();
    let listed = keel(&["snapshot", "list", "--dir", path_str(&dir), "--check"]);
    assert!(listed.stdout.contains("CORRUPT"), "{}", listed.stdout);
    let again = tmp.path().join("r2");
    let out = keel(&[
        "snapshot",
        "restore",
        path_str(&newest),
        "--data-dir",
        path_str(&again),
    ]);
    assert!(!out.success());
    assert!(
        out.stderr.contains("does not match") && out.stderr.contains(".json"),
        "{}",
        out.stderr
    );
    assert!(!again.exists());

    // Pruning by hand: the scheduled ones go down to the count, the on-demand one stays.
    let out = keel(&[
        "snapshot",
        "prune",
        "--dir",
        path_str(&dir),
        "--retention",
        "1",
    ]);
    assert!(out.success(), "{}", out.stderr);
    let left = db_files(&dir);
    assert_eq!(
        left.iter()
            .filter(|n| n.starts_with("keel-snapshot-"))
            .count(),
        1,
        "{left:?}"
    );
    assert!(on_demand.exists());
}
