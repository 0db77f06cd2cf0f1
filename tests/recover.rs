//! Quorum-loss recovery with the real etcdctl and kubectl: a 3-member cluster loses two members (kill -9,
//! one data directory destroyed), `keel recover` turns the survivor into a one-member cluster that serves
//! every acknowledged write through both APIs, a lost member that comes back with its old data is told it
//! was removed and stops, and the lost member (wiped, re-added at its old address) and a brand-new one join
//! and converge (same HashKV).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::process::Command;
use std::time::Duration;

use keel_testkit::binaries::Kind;
use keel_testkit::cluster::{Cluster, Options, REMOVED_EXIT_TIMEOUT};
use keel_testkit::{keel_bin, require_etcd_tools, run_bounded};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

fn kubectl_ok(c: &Cluster, i: usize, args: &[&str]) -> String {
    let out = run_bounded(c.kubectl_cmd(i, args), None, Duration::from_secs(60));
    assert!(
        out.success(),
        "kubectl {args:?}: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[test]
fn two_of_three_lost_recover_serves_everything_and_fresh_members_join() {
    require_etcd_tools();
    let mut c = Cluster::start_with(Options::new(Kind::Keel, 3).keel_bin(keel_bin!()).kube());
    c.wait_leader(Duration::from_secs(30));
    for i in 0..50 {
        c.ctl_ok(0, &["put", &format!("/recover/{i:02}"), &format!("v{i}")]);
    }
    kubectl_ok(
        &c,
        0,
        &["create", "configmap", "survivor", "--from-literal=k=before"],
    );
    // Every acknowledged write is on a majority; member 0 holds them once the others have gone.
    let rev_before = c.status(0).unwrap().revision;

    // The worst day: two members gone at once, one of them for good.
    c.kill9(1);
    c.kill9(2);
    std::fs::remove_dir_all(&c.member(2).data_dir).unwrap();
    let stuck = c.ctl_with(0, &["put", "/recover/lost", "x"], &["--command-timeout=2s"]);
    assert!(
        !stuck.success(),
        "a lone member of three must not accept writes"
    );
    let dir = c.member(0).data_dir.clone();
    // Refused while the member runs on it, and nothing changes.
    let mut cmd = Command::new(KEEL);
    cmd.args(["recover", "--data-dir"]).arg(&dir);
    let out = run_bounded(cmd, None, Duration::from_secs(60));
    assert!(!out.success());
    assert!(
        out.stderr
            .contains("is a member still running on it? Stop it first"),
        "{}",
        out.stderr
    );
    assert!(!dir.join("recovered.json").exists());
    c.kill9(0);

    let mut cmd = Command::new(KEEL);
    cmd.args(["recover", "--data-dir"]).arg(&dir);
    let out = run_bounded(cmd, None, Duration::from_secs(120));
    println!("{}{}", out.stdout, out.stderr);
    assert!(out.success(), "keel recover: {}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with(&format!(
            "Recovered {} as a one-member cluster",
            dir.display()
        )),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("etcdctl member add"), "{}", out.stdout);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("recovered.json")).unwrap())
            .unwrap();
    assert_eq!(record["previousMembers"].as_array().map(Vec::len), Some(3));
    let aside = std::path::PathBuf::from(record["previousDataDir"].as_str().unwrap());
    assert!(aside.join("member").exists(), "the old directory is kept");

    // The survivor, started with its usual flags, leads alone and serves every acknowledged write.
    c.member_mut(1).removed = true;
    c.member_mut(2).removed = true;
    c.restart(0);
    let members = c.member_list(0).unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    let status = c.status(0).unwrap();
    assert!(status.revision >= rev_before, "{status:?} < {rev_before}");
    for i in [0, 49] {
        let v = c.ctl_ok(
            0,
            &["get", &format!("/recover/{i:02}"), "--print-value-only"],
        );
        assert_eq!(v.trim(), format!("v{i}"));
    }
    let cm = kubectl_ok(
        &c,
        0,
        &["get", "configmap", "survivor", "-o", "jsonpath={.data.k}"],
    );
    assert_eq!(cm, "before");
    kubectl_ok(
        &c,
        0,
        &["create", "configmap", "after", "--from-literal=k=after"],
    );

    // A lost member that comes back with its old data is refused as removed and stops by itself.
    c.member_mut(1).removed = false;
    c.spawn(1);
    let exit = c.wait_exit(1, REMOVED_EXIT_TIMEOUT);
    c.member_mut(1).removed = true;
    let exit = exit.unwrap_or_else(|| c.fail("the stale member kept running"));
    assert!(
        exit.success(),
        "a removed member exits with status 0: {exit:?}"
    );
    assert_eq!(c.member_list(0).unwrap().len(), 1);
    let v = c.ctl_ok(0, &["get", "/recover/00", "--print-value-only"]);
    assert_eq!(v.trim(), "v0");

    // The documented way back: wipe the lost member's directory and add it again at its old address (same
    // member ID, no longer refused once it is a member again).
    std::fs::remove_dir_all(&c.member(1).data_dir).unwrap();
    let peer = c.member(1).peer_url();
    let name = c.member(1).name.clone();
    c.ctl_ok(0, &["member", "add", &name, &format!("--peer-urls={peer}")]);
    let initial = format!(
        "{}={},{name}={peer}",
        c.member(0).name,
        c.member(0).peer_url()
    );
    {
        let m = c.member_mut(1);
        m.removed = false;
        m.start_args.initial_cluster = initial;
        m.start_args.state = "existing".into();
    }
    c.restart(1);
    let a = 1;
    // And a brand-new machine, as in any membership change; all three converge.
    let b = c.add_member("fresh", false);
    c.ctl_ok(0, &["put", "/recover/joined", "yes"]);
    let rev = c.status(0).unwrap().revision;
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let hashes: Vec<_> = [0, a, b]
            .iter()
            .map(|&i| c.hashkv(i, rev).map(|h| h.0))
            .collect();
        if hashes.iter().all(|h| h.is_ok() && *h == hashes[0]) {
            break;
        }
        last = format!("{hashes:?}");
        if std::time::Instant::now() > deadline {
            c.fail(format!("HashKV at {rev} never agreed: {last}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = last;
    let v = c.ctl_ok(b, &["get", "/recover/joined", "--print-value-only"]);
    assert_eq!(v.trim(), "yes");
    assert_eq!(c.member_list(a).unwrap().len(), 3);
}
