//! etcd's auto-compaction in revision mode, seen as an operator sees it: `etcdctl get --rev` below the
//! compaction point fails with etcd's error, at and above it still answers. (etcd checks every 5 minutes; keel's
//! hidden `--auto-compaction-revision-check-interval` shortens that for the test, so this runs against keel only.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use keel_testkit::{keel_bin, Server};

#[test]
fn revision_mode_keeps_the_last_n_revisions() {
    let s = Server::start_keel_with(
        keel_bin!(),
        &[
            "--auto-compaction-mode",
            "revision",
            "--auto-compaction-retention",
            "5",
            "--auto-compaction-revision-check-interval",
            "200ms",
        ],
    );
    for i in 0..20 {
        let out = s.ctl(&["put", "k", &format!("v{i}")], None);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    // Revision 1 is the empty store; the 20 puts make it 21. Retention 5 compacts to 16 once writes stop.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = s.ctl(&["get", "k", "--rev", "15"], None);
        if out.code != Some(0) {
            assert!(
                out.stderr
                    .contains("Error: etcdserver: mvcc: required revision has been compacted"),
                "{out:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "revision 15 still readable: no auto-compaction\n{}",
            s.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let at = s.ctl(&["get", "k", "--rev", "16", "--print-value-only"], None);
    assert_eq!((at.code, at.stdout.trim()), (Some(0), "v14"), "{at:?}");
    let latest = s.ctl(&["get", "k", "--print-value-only"], None);
    assert_eq!(latest.stdout.trim(), "v19");
}
