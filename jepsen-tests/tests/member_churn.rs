//! Regression test for the second anomaly the Jepsen campaign found (fault member-replace): a `member remove`
//! that completed was reported to the client as an error, because the leader's background task that finishes
//! joint configurations left by a previous leader raced with the change's own second step; etcdctl then retried
//! and got "member not found". Here members are removed and fresh ones added in a loop while a client writes;
//! every `member remove` must succeed at its first answer (the harness fails on "member not found" then).
//! The race needs the leader's 500 ms tick to fall between the two steps, so one run does not always hit it
//! without the fix; the campaign's `member-replace` phases repeat it. Real processes on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_testkit::cluster::Cluster;
use keel_testkit::Kind;

#[test]
fn member_remove_and_add_under_load_answer_success() {
    let mut c = Cluster::start(Kind::Keel, 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // A writer through every member, so the leader is busy while its configuration changes.
    let stop = Arc::new(AtomicBool::new(false));
    let endpoints: Vec<String> = (0..3).map(|i| c.endpoint(i)).collect();
    let writer = {
        let stop = stop.clone();
        rt.spawn(async move {
            let mut n = 0u64;
            let mut client = keel_testkit::cluster::connect(&endpoints).await;
            while !stop.load(Ordering::SeqCst) {
                let _ = client
                    .put(format!("/churn/{}", n % 50), n.to_string(), None)
                    .await;
                n += 1;
            }
            n
        })
    };
    let start = Instant::now();
    for round in 1..=8 {
        let leader = c.wait_leader(Duration::from_secs(30));
        let victim = c
            .live_voters()
            .into_iter()
            .find(|&i| i != leader)
            .expect("a follower");
        // Dead first, so that the harness does not wait for a removed keel member to exit.
        c.kill9(victim);
        c.remove_member(victim);
        let added = c.add_member(&format!("r{round}"), false);
        // Wait (bounded) until the new member was promoted to voter.
        let t = Instant::now();
        loop {
            let id = c.member_id(added);
            let list = c.member_list(leader).unwrap_or_default();
            if list.iter().any(|m| m.id == id && !m.is_learner) {
                break;
            }
            if t.elapsed() > Duration::from_secs(60) {
                c.fail(format!("member {added} was not promoted within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        println!(
            "round {round}: replaced member {victim} by {added} ({:?} so far)",
            start.elapsed()
        );
    }
    stop.store(true, Ordering::SeqCst);
    let writes = rt.block_on(writer).expect("writer");
    println!(
        "8 replacements in {:?} with {writes} puts attempted meanwhile",
        start.elapsed()
    );
}
