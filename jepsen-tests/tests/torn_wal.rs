//! Regression test for the first anomaly the Jepsen campaign found: a follower restarted after its newest WAL
//! segment lost its tail (so its log is shorter than what it had acknowledged) made the leader's Raft core
//! panic ("follower log reversion is not allowed"), leaving the leader's process up with Raft dead. The leader
//! must instead re-replicate the lost entries. Real processes on loopback; needs the `keel` binary built.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use jepsen_tests::nemesis::wal::last_segment;
use keel_testkit::cluster::{Cluster, Options};
use keel_testkit::Kind;

/// Bytes cut off the newest segment: enough to reach into the last acknowledged entries (the last record is
/// often only a commit marker, whose loss reverts nothing), still far less than the 300 entries written.
const CUT: u64 = 4096;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn follower_with_torn_wal_tail_catches_up_and_leader_survives() {
    let c = Cluster::start(Kind::Keel, 3);
    tear_a_follower(c, 300);
}

/// The second anomaly of the same fault: with snapshots, the follower's store had applied entries its torn log
/// no longer held, beyond its latest snapshot; openraft took the store's applied index as a purge point past the
/// snapshot and refused to start ("purge_upto <= snapshot_last_log_id"). The member must reload its snapshot,
/// replay its log and get the rest from the leader.
#[test]
fn follower_whose_store_is_ahead_of_its_torn_log_restarts() {
    let c = Options::new(Kind::Keel, 3).snapshot_count(100).start();
    let (c, follower) = tear_a_follower(c, 350);
    let log = c.member(follower).log();
    assert!(
        log.contains("store is ahead of the log"),
        "the scenario was not produced (no snapshot below the store's applied index?):\n{}",
        c.member(follower).log_tail(30)
    );
}

/// Writes `writes` keys, SIGKILLs a follower, cuts [`CUT`] bytes off its newest WAL segment, restarts it, writes
/// more, and checks that every member converges and stays healthy. Returns the cluster and the follower.
fn tear_a_follower(mut c: Cluster, writes: usize) -> (Cluster, usize) {
    let rt = rt();
    let leader = c.wait_leader(Duration::from_secs(15));
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    let put = |c: &Cluster, range: std::ops::Range<usize>| {
        rt.block_on(async {
            let mut cl = c.client(leader).await;
            for i in range {
                cl.put(format!("/torn/{i}"), format!("v{i}"), None)
                    .await
                    .expect("put through the leader");
            }
        })
    };
    put(&c, 0..writes);
    c.kill9(follower);
    let seg = last_segment(Kind::Keel, &c.member(follower).data_dir).expect("a WAL segment");
    let len = std::fs::metadata(&seg).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment")
        .set_len(len.saturating_sub(CUT).max(8))
        .expect("truncate");
    println!("cut {CUT} bytes off {} ({len} bytes)", seg.display());
    c.restart(follower);
    put(&c, writes..writes + 100);
    // Every member must reach the leader's revision (bounded), and the leader must still be the leader.
    let start = Instant::now();
    loop {
        let st = c.statuses(&[0, 1, 2]);
        let revs: Vec<i64> = st
            .iter()
            .map(|(_, s)| s.as_ref().map(|s| s.revision).unwrap_or(-1))
            .collect();
        if revs.iter().all(|&r| r == revs[0] && r > 0) {
            println!(
                "all members at revision {} after {:?}",
                revs[0],
                start.elapsed()
            );
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            c.fail(format!("members did not converge: revisions {revs:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in 0..3 {
        c.probe_ready(i)
            .unwrap_or_else(|e| c.fail(format!("member {i} not healthy after the torn tail: {e}")));
    }
    let log = c.member(leader).log();
    assert!(
        !log.contains("panicked"),
        "the leader's log shows a panic:\n{}",
        c.member(leader).log_tail(40)
    );
    put(&c, writes + 100..writes + 110);
    drop(rt);
    (c, follower)
}
