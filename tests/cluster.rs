//! Multi-member behaviour with real processes: etcdctl against every member, kill -9 of the leader under write
//! load, kill -9 of everyone, quorum loss and recovery with 5 members, member remove/add with catch-up by
//! snapshot, network partitions (netns + nftables, needs root), and refused bad input.
//!
//! Runs against keel, or against real etcd 3.4 with `KEEL_DIFF_AGAINST_ETCD=1` (self-check of the harness and of
//! the expectations). Tests run one at a time ([`cluster::serial`]); measured figures are printed with
//! `eprintln!` (`-- --nocapture` shows them). A failed test keeps its cluster's directory (data dirs, logs) and
//! prints its path; `KEEL_KEEP_CLUSTER_DIRS=1` keeps them always.
//!
//! ```text
//! cargo test --test cluster -- --nocapture                            # against keel
//! KEEL_DIFF_AGAINST_ETCD=1 cargo test --test cluster -- --nocapture   # against etcd 3.4 (self-check)
//! ```
//!
//! `partition_follower_then_leader` and `netns_partition_tool` need root (network namespaces); as another user
//! they fail with a message saying so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use keel_testkit::cluster::{self, grpc_status, Cluster, Options};
use keel_testkit::{etcdctl, keel_bin, Kind, Net};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

// ---------------------------------------------------------------------------------------------------------------
// Write load with acknowledged-write bookkeeping
// ---------------------------------------------------------------------------------------------------------------

/// Concurrent writers, each bound to one endpoint, each writing fresh keys `<prefix>/<writer>/<seq>` with the
/// value `v-<writer>-<seq>`, once (no retry), recording the writes the server acknowledged.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, String)>>>,
    attempted: Arc<Mutex<HashSet<String>>>,
    errors: Arc<Mutex<BTreeMap<String, usize>>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

struct LoadResult {
    acked: Vec<(String, String)>,
    attempted: HashSet<String>,
    errors: BTreeMap<String, usize>,
}

impl Load {
    fn start(
        rt: &tokio::runtime::Runtime,
        endpoints: &[String],
        per_endpoint: usize,
        prefix: &str,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let attempted = Arc::new(Mutex::new(HashSet::new()));
        let errors = Arc::new(Mutex::new(BTreeMap::new()));
        let mut handles = Vec::new();
        let mut w = 0;
        for ep in endpoints {
            for _ in 0..per_endpoint {
                let (stop, acked, attempted, errors) = (
                    stop.clone(),
                    acked.clone(),
                    attempted.clone(),
                    errors.clone(),
                );
                let ep = ep.clone();
                let prefix = prefix.to_string();
                let writer = w;
                w += 1;
                handles.push(rt.spawn(async move {
                    let mut client = cluster::connect(&[ep]).await;
                    let mut seq = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("{prefix}/{writer:02}/{seq:06}");
                        let value = format!("v-{writer}-{seq}");
                        seq += 1;
                        attempted.lock().unwrap().insert(key.clone());
                        let res = tokio::time::timeout(
                            Duration::from_secs(2),
                            client.put(key.clone(), value.clone(), None),
                        )
                        .await;
                        match res {
                            Ok(Ok(_)) => acked.lock().unwrap().push((key, value)),
                            Ok(Err(e)) => {
                                let msg = match grpc_status(&e) {
                                    Some(s) => format!("{:?}: {}", s.code(), s.message()),
                                    None => e.to_string(),
                                };
                                // Keep the error classes readable: cut addresses and long tails.
                                let msg: String = msg.chars().take(90).collect();
                                *errors.lock().unwrap().entry(msg).or_default() += 1;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            Err(_) => {
                                *errors
                                    .lock()
                                    .unwrap()
                                    .entry("client timeout (2 s)".into())
                                    .or_default() += 1;
                            }
                        }
                    }
                }));
            }
        }
        Load {
            stop,
            acked,
            attempted,
            errors,
            handles,
        }
    }

    fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    fn finish(self, rt: &tokio::runtime::Runtime) -> LoadResult {
        self.stop.store(true, Ordering::SeqCst);
        rt.block_on(async {
            for h in self.handles {
                // A writer stuck in a request ends within its 2 s timeout.
                tokio::time::timeout(Duration::from_secs(10), h)
                    .await
                    .expect("writer did not stop within 10 s")
                    .expect("writer panicked");
            }
        });
        let r = LoadResult {
            acked: std::mem::take(&mut *self.acked.lock().unwrap()),
            attempted: std::mem::take(&mut *self.attempted.lock().unwrap()),
            errors: std::mem::take(&mut *self.errors.lock().unwrap()),
        };
        eprintln!(
            "load: {} writes acknowledged of {} attempted; errors: {:?}",
            r.acked.len(),
            r.attempted.len(),
            r.errors
        );
        r
    }
}

/// Reads `prefix` linearizably from member `i` (retrying for up to 20 s while the cluster settles) and checks
/// that every acknowledged write is there with its value and that nothing appears that was never written.
fn check_acked(c: &Cluster, rt: &tokio::runtime::Runtime, i: usize, prefix: &str, r: &LoadResult) {
    let ep = c.endpoint(i);
    let start = Instant::now();
    let kvs: BTreeMap<String, String> = loop {
        let res = rt.block_on(async {
            let mut client = cluster::connect(std::slice::from_ref(&ep)).await;
            client
                .get(format!("{prefix}/"), Some(GetOptions::new().with_prefix()))
                .await
        });
        match res {
            Ok(resp) => {
                break resp
                    .kvs()
                    .iter()
                    .map(|kv| {
                        (
                            String::from_utf8_lossy(kv.key()).into_owned(),
                            String::from_utf8_lossy(kv.value()).into_owned(),
                        )
                    })
                    .collect()
            }
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                eprintln!("read-back on member {i}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => c.fail(format!("linearizable read-back on member {i} failed: {e}")),
        }
    };
    let lost: Vec<&String> = r
        .acked
        .iter()
        .filter(|(k, v)| kvs.get(k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    if !lost.is_empty() {
        c.fail(format!(
            "member {i}: {} of {} acknowledged writes lost or wrong, e.g. {:?}",
            lost.len(),
            r.acked.len(),
            &lost[..lost.len().min(10)]
        ));
    }
    let phantom: Vec<&String> = kvs
        .iter()
        .filter(|(k, v)| {
            !r.attempted.contains(*k) || {
                // value must be v-<writer>-<seq> for key <prefix>/<writer>/<seq>
                let mut parts = k.rsplit('/');
                let seq = parts.next().and_then(|s| s.parse::<u64>().ok());
                let w = parts.next().and_then(|s| s.parse::<u64>().ok());
                Some(v.as_str()) != w.zip(seq).map(|(w, s)| format!("v-{w}-{s}")).as_deref()
            }
        })
        .map(|(k, _)| k)
        .collect();
    if !phantom.is_empty() {
        c.fail(format!(
            "member {i}: {} keys that were never written (or with a wrong value), e.g. {:?}",
            phantom.len(),
            &phantom[..phantom.len().min(10)]
        ));
    }
    eprintln!(
        "member {i}: all {} acknowledged writes present ({} keys under {prefix}/, {} unacknowledged attempts \
         landed)",
        r.acked.len(),
        kvs.len(),
        kvs.len() - r.acked.len()
    );
}

/// An etcd-client put with a deadline: Ok(revision), or the error text (gRPC code and message).
fn put_once(
    rt: &tokio::runtime::Runtime,
    endpoint: &str,
    key: &str,
    value: &str,
    timeout: Duration,
) -> Result<i64, String> {
    rt.block_on(async {
        let mut client = cluster::connect(&[endpoint.to_string()]).await;
        match tokio::time::timeout(timeout, client.put(key, value, None)).await {
            Ok(Ok(r)) => Ok(r.header().map(|h| h.revision()).unwrap_or(0)),
            Ok(Err(e)) => Err(match grpc_status(&e) {
                Some(s) => format!("{:?}: {}", s.code(), s.message()),
                None => e.to_string(),
            }),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    })
}

/// Retries [`put_once`] until it succeeds or `limit` passes; returns (revision, time taken).
fn put_eventually(
    c: &Cluster,
    rt: &tokio::runtime::Runtime,
    endpoint: &str,
    key: &str,
    value: &str,
    limit: Duration,
) -> (i64, Duration) {
    let start = Instant::now();
    loop {
        match put_once(rt, endpoint, key, value, Duration::from_secs(3)) {
            Ok(rev) => return (rev, start.elapsed()),
            Err(e) if start.elapsed() < limit => {
                eprintln!("put {key} on {endpoint}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => c.fail(format!(
                "put {key} on {endpoint} still failing after {limit:?}: {e}"
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------------------------

/// etcdctl against each member of a 3-member cluster: writes on any member are visible everywhere (linearizable
/// and serializable), `member list` shows the same 3 started members everywhere, `endpoint status` the same leader.
/// Rounds of the read-your-writes probe (`KEEL_RYW_ROUNDS`, default `default`).
fn ryw_rounds(default: usize) -> usize {
    std::env::var("KEEL_RYW_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The single-member read-your-writes probe through `member` with the `etcd-client` crate: each round puts a
/// key, then reads it back from the same member with a serializable Range and compares its `mod_revision` in a
/// Txn without operations (both served from that member's local state). Returns the stale answers seen.
fn read_your_writes_probe(
    c: &Cluster,
    rt: &tokio::runtime::Runtime,
    member: usize,
    rounds: usize,
) -> usize {
    use etcd_client::{Compare, CompareOp, Txn};
    let ep = c.endpoint(member);
    rt.block_on(async {
        let mut cl = etcd_client::Client::connect([ep.as_str()], None)
            .await
            .unwrap_or_else(|e| c.fail(format!("connect to member {member}: {e}")));
        let mut stale = 0;
        for round in 0..rounds {
            let key = format!("ryw/{}", round % 7);
            let value = format!("v{round}");
            let put = cl
                .put(key.as_str(), value.as_str(), None)
                .await
                .unwrap_or_else(|e| c.fail(format!("put {key} on member {member}: {e}")));
            let rev = put.header().map_or(0, |h| h.revision());
            let got = cl
                .get(key.as_str(), Some(GetOptions::new().with_serializable()))
                .await
                .unwrap_or_else(|e| c.fail(format!("get {key} on member {member}: {e}")));
            let fresh = got.header().is_some_and(|h| h.revision() >= rev)
                && got
                    .kvs()
                    .first()
                    .is_some_and(|kv| kv.mod_revision() == rev && kv.value() == value.as_bytes());
            if !fresh {
                stale += 1;
                eprintln!("round {round}: put {key} at {rev}, serializable get answered {got:?}");
            }
            let txn = Txn::new().when([Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)]);
            let t = cl
                .txn(txn)
                .await
                .unwrap_or_else(|e| c.fail(format!("txn on member {member}: {e}")));
            if !t.succeeded() {
                stale += 1;
                eprintln!("round {round}: put {key} at {rev}, compare-only txn failed: {t:?}");
            }
        }
        stale
    })
}

/// The probe can fail: with `--unsafe-answer-forwarded-writes-early` (the bug of issue 37 brought back) a follower
/// answers before applying, and the probe sees stale reads. Not run in CI (`-- --ignored` runs it); the members
/// (`KEEL_RYW_MEMBERS`, default 3) and rounds (`KEEL_RYW_ROUNDS`, default 500) can be chosen.
#[test]
#[ignore = "shows the probe fails on the early answer; CI catches that through jepsen-tests' unsafe_modes_are_caught"]
fn read_your_writes_probe_catches_early_answers() {
    let _serial = cluster::serial();
    let members = std::env::var("KEEL_RYW_MEMBERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut c = Options::under_test(keel_bin!(), members)
        .arg("--unsafe-answer-forwarded-writes-early")
        .start();
    let leader = c.wait_leader(Duration::from_secs(10));
    let follower = (0..members).find(|&i| i != leader).unwrap();
    let rounds = ryw_rounds(500);
    let stale = read_your_writes_probe(&c, &rt(), follower, rounds);
    eprintln!(
        "read-your-writes probe with early answers, follower {follower} of {members}: {stale} stale answers in {rounds} rounds"
    );
    assert!(stale > 0, "the probe saw no stale read with early answers");
}

#[test]
fn etcdctl_against_each_member() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).start();
    for i in 0..3 {
        let key = format!("greeting{i}");
        let out = c.ctl_ok(i, &["put", &key, &format!("hello from n{}", i + 1)]);
        assert_eq!(out, "OK\n", "put on member {i}");
    }
    for i in 0..3 {
        for j in 0..3 {
            let key = format!("greeting{j}");
            let want = format!("{key}\nhello from n{}\n", j + 1);
            // Linearizable first: afterwards member i has applied the write, so the serializable read sees it.
            let lin = c.ctl_ok(i, &["get", &key]);
            assert_eq!(lin, want, "linearizable get {key} on member {i}");
            let ser = c.ctl_ok(i, &["get", &key, "--consistency=s"]);
            assert_eq!(ser, want, "serializable get {key} on member {i}");
        }
        let all = c.ctl_ok(i, &["get", "greeting", "--prefix", "--keys-only"]);
        assert_eq!(
            all, "greeting0\n\ngreeting1\n\ngreeting2\n\n",
            "get --prefix on member {i}"
        );
    }

    // member list: JSON and table, the same on every member.
    let mut ids = Vec::new();
    for i in 0..3 {
        let list = c
            .member_list(i)
            .unwrap_or_else(|e| c.fail(format!("member list on {i}: {e}")));
        assert_eq!(list.len(), 3, "member list on member {i}: {list:?}");
        for j in 0..3 {
            let m = c.member(j);
            let l = list.iter().find(|l| l.name == m.name).unwrap_or_else(|| {
                c.fail(format!("member list on {i} lacks {}: {list:?}", m.name))
            });
            assert_eq!(
                l.peer_urls,
                vec![m.peer_url()],
                "peer URLs of {} on {i}",
                m.name
            );
            assert_eq!(
                l.client_urls,
                vec![m.client_url()],
                "client URLs of {} on {i}",
                m.name
            );
            assert!(!l.is_learner, "{} listed as learner on {i}", m.name);
            assert_ne!(l.id, 0);
        }
        let mut these: Vec<u64> = list.iter().map(|l| l.id).collect();
        these.sort_unstable();
        if i == 0 {
            ids = these;
        } else {
            assert_eq!(
                these, ids,
                "member IDs differ between member 0 and member {i}"
            );
        }
        let table = c.ctl_ok(i, &["member", "list"]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "member list on {i}:\n{table}");
        for j in 0..3 {
            let m = c.member(j);
            let want = format!(
                ", started, {}, {}, {}, false",
                m.name,
                m.peer_url(),
                m.client_url()
            );
            let line = lines
                .iter()
                .find(|l| l.ends_with(&want))
                .unwrap_or_else(|| {
                    c.fail(format!(
                        "member list on {i}: no line ending {want:?}:\n{table}"
                    ))
                });
            let hex = line.split(", ").next().unwrap();
            let id = u64::from_str_radix(hex, 16).expect("hex member ID");
            assert_eq!(
                hex,
                format!("{id:x}"),
                "member ID printed as plain lower-case hex"
            );
            assert!(ids.contains(&id), "{hex} not among the JSON IDs");
        }
    }

    // endpoint status: same leader everywhere, and it is one of the members; exactly one says IS LEADER.
    let statuses = c.statuses(&[0, 1, 2]);
    let leader_ids: HashSet<u64> = statuses
        .iter()
        .map(|(i, s)| {
            s.as_ref()
                .unwrap_or_else(|e| c.fail(format!("status of member {i}: {e}")))
                .leader
        })
        .collect();
    assert_eq!(
        leader_ids.len(),
        1,
        "members disagree on the leader: {statuses:?}"
    );
    let leader_id = *leader_ids.iter().next().unwrap();
    assert!(
        ids.contains(&leader_id),
        "leader {leader_id:x} is not a member"
    );
    let all = c.endpoints(&[0, 1, 2]);
    let out = etcdctl::ctl_endpoints(
        &all,
        &["endpoint", "status"],
        &["--command-timeout=5s", "--dial-timeout=2s"],
    );
    assert!(out.success(), "endpoint status on all: {out:?}");
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split(", ").collect())
        .collect();
    assert_eq!(rows.len(), 3, "endpoint status:\n{}", out.stdout);
    assert_eq!(
        rows.iter().filter(|r| r.get(4) == Some(&"true")).count(),
        1,
        "exactly one IS LEADER=true expected:\n{}",
        out.stdout
    );
    let leader = c.wait_leader(Duration::from_secs(5));
    assert_eq!(c.member_id(leader), leader_id);
    eprintln!("leader: member {leader} ({leader_id:016x})\n{}", out.stdout);

    // Read-your-writes through a follower: it answers a write only once it applied it itself.
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let rounds = ryw_rounds(500);
    let t0 = Instant::now();
    let stale = read_your_writes_probe(&c, &rt(), follower, rounds);
    eprintln!(
        "read-your-writes probe through follower {follower}: {stale} stale answers in {rounds} rounds ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(stale, 0, "stale reads through follower {follower}");

    // MoveLeader answers without a header, as etcd 3.4's does.
    let target = c.member_id(follower);
    let ep = c.endpoint(leader);
    let moved = rt().block_on(async {
        let mut cl = etcd_client::Client::connect([ep.as_str()], None).await?;
        cl.move_leader(target).await
    });
    let moved = moved.unwrap_or_else(|e| c.fail(format!("move leader to {follower}: {e}")));
    assert!(moved.header().is_none(), "{moved:?}");
}

/// A new leader must appear within this; the 3 s target is measured and reported, not asserted.
const FAILOVER_LIVENESS: Duration = Duration::from_secs(10);

/// kill -9 of the leader under concurrent writes on all members: a new leader (target 3 s), writes continue on the
/// survivors, and after the old leader restarts every acknowledged write is readable on every member.
#[test]
fn kill_leader_under_write_load() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).start();
    let rt = rt();
    let load = Load::start(&rt, &c.endpoints(&[0, 1, 2]), 2, "load");
    std::thread::sleep(Duration::from_millis(1500));
    let leader = c.wait_leader(Duration::from_secs(5));
    let before = load.acked_count();
    assert!(before > 0, "no write was acknowledged before the kill");
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let t0 = Instant::now();
    c.kill9(leader);
    let new_leader = c.wait_leader_among(&survivors, Duration::from_secs(15), Some(leader));
    let failover = t0.elapsed();
    eprintln!(
        "kill -9 leader member {leader}: new leader member {new_leader} after {failover:?} ({before} writes \
         acknowledged before the kill)"
    );
    let at_new_leader = load.acked_count();
    std::thread::sleep(Duration::from_secs(2));
    let after = load.acked_count();
    eprintln!(
        "{} writes acknowledged in the 2 s after the new leader",
        after - at_new_leader
    );
    let r = load.finish(&rt);
    if after <= at_new_leader {
        c.fail("no write was acknowledged in the 2 s after the new leader was elected");
    }
    let t1 = Instant::now();
    c.restart(leader);
    eprintln!(
        "old leader member {leader} restarted and ready after {:?}",
        t1.elapsed()
    );
    for i in 0..3 {
        check_acked(&c, &rt, i, "load", &r);
    }
    // The 3 s target is a performance figure (reported, measured against etcd in the notes);
    // the test asserts liveness with a bound a loaded CI machine cannot trip by accident.
    eprintln!("FIGURE failover after kill -9 of the leader: {failover:?} (target 3 s)");
    assert!(
        failover < FAILOVER_LIVENESS,
        "new leader took {failover:?} (liveness bound {FAILOVER_LIVENESS:?})"
    );
}

/// A client holds a lock through the leader, a second waits in the Lock service of a follower;
/// the leader is killed. The holder can no longer keep its lease alive, so the lease expires
/// (decided by the new leader) and the waiter gets the lock then, and not before.
#[test]
fn lock_passes_on_when_the_holders_member_is_killed() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).start();
    let rt = rt();
    let leader = c.wait_leader(Duration::from_secs(5));
    let follower = (leader + 1) % 3;
    // The holder: etcdctl's own recipe, a 2 s session kept alive through the leader only.
    let mut cmd = keel_testkit::etcdctl_command(&c.endpoint(leader), &[]);
    cmd.args(["lock", "--ttl", "2", "job"]);
    let mut holder = keel_testkit::Process::spawn(&mut cmd, None);
    holder.wait_lines(1, Duration::from_secs(15));
    let held = holder
        .stdout()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        held.starts_with("job/"),
        "etcdctl lock did not take the lock: {held:?} {}",
        holder.stderr()
    );
    // The waiter: the v3lock service of a follower, with its own lease kept alive there.
    let endpoint = c.endpoint(follower);
    let (waiter, keepalive) = rt.block_on(async {
        let mut cl = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap_or_else(|e| panic!("connect to the follower: {e}"));
        let lease = cl
            .lease_grant(30, None)
            .await
            .map(|g| g.id())
            .unwrap_or_else(|e| panic!("grant: {e}"));
        let (mut keeper, _stream) = cl
            .lease_keep_alive(lease)
            .await
            .unwrap_or_else(|e| panic!("keep-alive: {e}"));
        let keepalive = tokio::spawn(async move {
            while keeper.keep_alive().await.is_ok() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let mut w = cl.clone();
        let opts = etcd_client::LockOptions::new().with_lease(lease);
        // etcd 3.4's service may fail a waiter with "leader changed" when the leader goes; a
        // client calls again with the same lease and finds its key still queued.
        let waiter = tokio::spawn(async move {
            loop {
                match w.lock("job", Some(opts.clone())).await {
                    Err(e) if e.to_string().contains("leader changed") => {
                        eprintln!("Lock through the follower: {e}; calling again");
                    }
                    r => return r,
                }
            }
        });
        // Queued: its key is there behind the holder's.
        let prefix = Some(GetOptions::new().with_prefix().with_keys_only());
        while cl
            .get("job/", prefix.clone())
            .await
            .map_or(0, |g| g.count())
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (waiter, keepalive)
    });
    assert!(
        !waiter.is_finished(),
        "the waiter got the lock while it was held"
    );
    let t0 = Instant::now();
    c.kill9(leader);
    let got = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), waiter).await })
        .unwrap_or_else(|_| c.fail("the waiter did not get the lock within 60 s of the kill"))
        .unwrap_or_else(|e| c.fail(format!("waiter task: {e}")))
        .unwrap_or_else(|e| c.fail(format!("Lock through the follower: {e}")));
    let waited = t0.elapsed();
    let key = String::from_utf8_lossy(got.key()).into_owned();
    eprintln!(
        "FIGURE lock passed on {waited:?} after kill -9 of the holder's member (2 s session)"
    );
    assert!(
        key.starts_with("job/") && key != held,
        "waiter got {key:?}, holder had {held:?}"
    );
    let keys = c.ctl(follower, &["get", "job/", "--prefix", "--keys-only"]);
    assert_eq!(
        keys.stdout.trim(),
        key,
        "the holder's key outlived its lease"
    );
    keepalive.abort();
    drop(holder.finish());
}

/// kill -9 of every member under write load, then restart them all: every acknowledged write is there.
#[test]
fn kill_all_and_restart() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).start();
    let rt = rt();
    let load = Load::start(&rt, &c.endpoints(&[0, 1, 2]), 2, "all");
    std::thread::sleep(Duration::from_secs(2));
    let before = load.acked_count();
    for i in 0..3 {
        c.kill9(i);
    }
    let r = load.finish(&rt);
    assert!(
        before >= 20,
        "only {before} writes acknowledged in 2 s: the load did not run"
    );
    let t0 = Instant::now();
    c.restart_all(&[0, 1, 2]);
    let leader = c.wait_leader(Duration::from_secs(15));
    eprintln!(
        "all 3 members restarted, ready and agreeing on leader member {leader} after {:?}",
        t0.elapsed()
    );
    for i in 0..3 {
        check_acked(&c, &rt, i, "all", &r);
    }
    // The revision counts every acknowledged put (plus possibly unacknowledged ones that landed).
    let st = c.status(0).unwrap_or_else(|e| c.fail(e));
    assert!(
        st.revision > r.acked.len() as i64,
        "revision {} after {} acknowledged puts",
        st.revision,
        r.acked.len()
    );
}

/// A write acknowledged just before every member is killed is seen by the first linearizable read after the
/// restart. The leader's commit index for that write was never synced on its own, so a member that led before
/// the crash must not answer reads from it (jepsen-tests' kill-all fault found such stale reads).
#[test]
fn first_read_after_kill_all_sees_the_last_acknowledged_write() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).start();
    let rt = rt();
    for round in 0..10 {
        let leader = c.wait_leader(Duration::from_secs(15));
        let value = format!("round-{round}");
        let ep = c.endpoint(leader);
        put_eventually(&c, &rt, &ep, "last-write", &value, Duration::from_secs(15));
        for i in 0..3 {
            c.kill9(i);
        }
        // The old leader first, so it is up before the others and is asked before they answer it.
        c.spawn(leader);
        for i in (0..3).filter(|&i| i != leader) {
            c.spawn(i);
        }
        let start = Instant::now();
        let got = rt.block_on(async {
            loop {
                let attempt = async {
                    let mut client = cluster::connect(std::slice::from_ref(&ep)).await;
                    client.get("last-write", None).await
                };
                match tokio::time::timeout(Duration::from_secs(3), attempt).await {
                    Ok(Ok(r)) => {
                        return r
                            .kvs()
                            .first()
                            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
                    }
                    _ if start.elapsed() < Duration::from_secs(30) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => panic!("no linearizable read from member {leader} in 30 s: {other:?}"),
                }
            }
        });
        eprintln!(
            "round {round}: first read on old leader {leader} after {:?}: {got:?}",
            start.elapsed()
        );
        if got.as_deref() != Some(value.as_str()) {
            c.fail(format!(
                "round {round}: acknowledged {value:?}, first read after restarting everyone gave {got:?}"
            ));
        }
        c.wait_ready_all(&[0, 1, 2], Duration::from_secs(30));
    }
}

/// 5 members: with 2 killed (the leader among them) writes still succeed; with 3 killed a write and a linearizable
/// read on a live member fail within a bounded time with an etcd error while a serializable read answers;
/// restarting the 3 makes writes succeed again.
#[test]
fn five_members_quorum_loss_and_recovery() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 5).start();
    let rt = rt();
    let leader = c.wait_leader(Duration::from_secs(10));
    // Read-your-writes through a follower of five (see etcdctl_against_each_member).
    let probed = (0..5).find(|&i| i != leader).unwrap();
    let rounds = ryw_rounds(100);
    let t0 = Instant::now();
    let stale = read_your_writes_probe(&c, &rt, probed, rounds);
    eprintln!(
        "read-your-writes probe through follower {probed} of 5: {stale} stale answers in {rounds} rounds ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(stale, 0, "stale reads through follower {probed}");
    let (rev0, _) = put_eventually(
        &c,
        &rt,
        &c.endpoint(leader),
        "q/0",
        "five",
        Duration::from_secs(5),
    );

    // Kill the leader and one follower: 3 of 5 remain, a quorum.
    let follower = (0..5).find(|&i| i != leader).unwrap();
    let t0 = Instant::now();
    c.kill9(leader);
    c.kill9(follower);
    let live: Vec<usize> = (0..5).filter(|&i| i != leader && i != follower).collect();
    let (rev1, took) = put_eventually(
        &c,
        &rt,
        &c.endpoint(live[0]),
        "q/1",
        "three",
        Duration::from_secs(15),
    );
    assert!(rev1 > rev0);
    let l2 = c.wait_leader_among(&live, Duration::from_secs(10), None);
    eprintln!(
        "killed members {leader} (leader) and {follower}: first write acknowledged after {took:?} ({:?} since the \
         kill), new leader member {l2}",
        t0.elapsed()
    );

    // Kill the new leader too: 2 of 5 remain, no quorum.
    c.kill9(l2);
    let killed = [leader, follower, l2];
    let live: Vec<usize> = (0..5).filter(|i| !killed.contains(i)).collect();
    let ep = c.endpoint(live[0]);

    let t = Instant::now();
    let put = put_once(&rt, &ep, "q/2", "two", Duration::from_secs(20));
    let put_took = t.elapsed();
    eprintln!("put with 2 of 5 alive: {put:?} after {put_took:?}");
    let put_err = match put {
        Ok(rev) => c.fail(format!("a write succeeded without quorum (revision {rev})")),
        Err(e) => e,
    };
    assert!(
        !put_err.starts_with("no answer"),
        "the server must answer a write without quorum with an error, not hang: {put_err}"
    );

    let t = Instant::now();
    let lin = rt.block_on(async {
        let mut client = cluster::connect(std::slice::from_ref(&ep)).await;
        tokio::time::timeout(Duration::from_secs(20), client.get("q/1", None)).await
    });
    let lin_took = t.elapsed();
    let lin_err = match lin {
        Ok(Ok(r)) => c.fail(format!(
            "a linearizable read succeeded without quorum: {:?}",
            r.kvs()
        )),
        Ok(Err(e)) => match grpc_status(&e) {
            Some(s) => format!("{:?}: {}", s.code(), s.message()),
            None => e.to_string(),
        },
        Err(_) => c.fail("a linearizable read without quorum got no answer within 20 s"),
    };
    eprintln!("linearizable get with 2 of 5 alive: {lin_err} after {lin_took:?}");

    let ser = rt.block_on(async {
        let mut client = cluster::connect(std::slice::from_ref(&ep)).await;
        tokio::time::timeout(
            Duration::from_secs(5),
            client.get("q/1", Some(GetOptions::new().with_serializable())),
        )
        .await
    });
    match ser {
        Ok(Ok(r)) => {
            let vals: Vec<String> = r
                .kvs()
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                .collect();
            eprintln!("serializable get with 2 of 5 alive: {vals:?}");
            assert_eq!(vals, vec!["three".to_string()], "serializable read of q/1");
        }
        other => c.fail(format!(
            "serializable read without quorum failed: {other:?}"
        )),
    }
    // Both failures are server errors (gRPC status), Unavailable like etcd's "etcdserver: request timed out".
    for (what, err) in [("put", &put_err), ("linearizable get", &lin_err)] {
        assert!(
            err.starts_with("Unavailable: etcdserver: "),
            "{what} without quorum: expected gRPC Unavailable with an etcdserver: message, got {err}"
        );
    }
    assert!(
        put_took < Duration::from_secs(15),
        "put failed only after {put_took:?}"
    );
    assert!(
        lin_took < Duration::from_secs(15),
        "linearizable get failed only after {lin_took:?}"
    );

    // With the require-leader metadata (clientv3.WithRequireLeader, as kube-apiserver's watches use it) a member
    // that knows no leader refuses at once with "etcdserver: no leader".
    let t = Instant::now();
    loop {
        let st = c.statuses(&live);
        if st
            .iter()
            .all(|(_, s)| s.as_ref().is_ok_and(|s| s.leader == 0))
        {
            break;
        }
        if t.elapsed() > Duration::from_secs(10) {
            c.fail(format!("the 2 live members still report a leader: {st:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Instant::now();
    let rl = rt.block_on(async {
        let opts = cluster::connect_options().with_require_leader(true);
        let mut client = etcd_client::Client::connect([format!("http://{ep}")], Some(opts))
            .await
            .expect("connect");
        tokio::time::timeout(Duration::from_secs(10), client.put("q/rl", "x", None)).await
    });
    let rl_took = t.elapsed();
    let rl_err = match rl {
        Ok(Ok(_)) => c.fail("a require-leader write succeeded without quorum"),
        Ok(Err(e)) => match grpc_status(&e) {
            Some(s) => format!("{:?}: {}", s.code(), s.message()),
            None => e.to_string(),
        },
        Err(_) => c.fail("a require-leader write without quorum got no answer within 10 s"),
    };
    eprintln!("require-leader put with no leader: {rl_err} after {rl_took:?}");

    let t = Instant::now();
    c.restart_all(&killed);
    let l3 = c.wait_leader(Duration::from_secs(15));
    let (rev3, _) = put_eventually(
        &c,
        &rt,
        &c.endpoint(live[0]),
        "q/3",
        "five again",
        Duration::from_secs(15),
    );
    assert!(rev3 > rev1);
    eprintln!(
        "restarted members {killed:?}: leader member {l3}, writes succeed again after {:?}",
        t.elapsed()
    );
    for i in 0..5 {
        let out = c.ctl_ok(i, &["get", "q/", "--prefix", "--print-value-only"]);
        let vals: Vec<&str> = out.lines().collect();
        assert!(
            vals.contains(&"five") && vals.contains(&"three") && vals.contains(&"five again"),
            "member {i} after recovery: {vals:?}"
        );
    }
    // Checked last so that a failure here does not hide the recovery checks above.
    assert_eq!(
        rl_err, "Unavailable: etcdserver: no leader",
        "require-leader put without a leader"
    );
    assert!(
        rl_took < Duration::from_secs(5),
        "require-leader put without a leader answered only after {rl_took:?} (etcd: at once)"
    );
}

/// Remove a follower, add a fresh member (new name, new data dir) after enough writes with --snapshot-count 100
/// that it must catch up from a snapshot; then `endpoint hashkv --rev R` agrees on every member.
#[test]
fn remove_and_add_member_catches_up() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3)
        .snapshot_count(100)
        .start();
    let rt = rt();
    let leader = c.wait_leader(Duration::from_secs(10));
    let victim = (0..3).find(|&i| i != leader).unwrap();
    let victim_id = c.member_id(victim);
    let t = Instant::now();
    let exited = c.remove_member(victim);
    eprintln!(
        "removed member {victim} ({victim_id:016x}) in {:?}; exited on its own: {exited:?}",
        t.elapsed()
    );
    // As etcd's, a removed member stops by itself (status 0) instead of serving stale reads.
    assert!(exited.is_some(), "removed member {victim} kept running");
    let status = c.member(victim).last_exit();
    assert!(
        status.is_some_and(|s| s.success()),
        "removed member {victim} exited with {status:?}"
    );
    let remaining: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    for &i in &remaining {
        let list = c.member_list(i).unwrap_or_else(|e| c.fail(e));
        assert_eq!(list.len(), 2, "member list on {i} after remove: {list:?}");
        assert!(list.iter().all(|l| l.id != victim_id));
    }

    // Write until the leader's Raft log is long enough that it no longer reaches back to the start: etcd and
    // keel both keep 5000 entries behind their last snapshot for slow followers (keel may batch several puts
    // per entry, hence the check on the Raft index, not on a number of puts). The new member must then be sent
    // a snapshot.
    const TARGET_RAFT_INDEX: u64 = 6000;
    const BATCH: usize = 1000;
    let t = Instant::now();
    let eps = c.endpoints(&remaining);
    let mut writes = 0usize;
    let raft_index = loop {
        let st = c
            .status(leader)
            .unwrap_or_else(|e| c.fail(format!("status of the leader: {e}")));
        if st.raft_index >= TARGET_RAFT_INDEX {
            break st.raft_index;
        }
        if t.elapsed() > Duration::from_secs(120) {
            c.fail(format!(
                "raft index only {} after {writes} writes in {:?}",
                st.raft_index,
                t.elapsed()
            ));
        }
        let base = writes;
        rt.block_on(async {
            let mut tasks = Vec::new();
            for w in 0..16 {
                let eps = eps.clone();
                tasks.push(tokio::spawn(async move {
                    let mut client = cluster::connect(&eps).await;
                    for k in (base + w..base + BATCH).step_by(16) {
                        client
                            .put(format!("snap/{k:06}"), format!("value-{k}"), None)
                            .await
                            .unwrap_or_else(|e| panic!("put snap/{k:06}: {e}"));
                    }
                }));
            }
            for t in tasks {
                t.await.expect("writer");
            }
        });
        writes += BATCH;
    };
    eprintln!(
        "{writes} writes in {:?}: leader's raft index {raft_index}",
        t.elapsed()
    );

    let t = Instant::now();
    let fresh = c.add_member("n4", false);
    eprintln!(
        "member n4 (index {fresh}) added and ready after {:?}",
        t.elapsed()
    );
    let (rev, _) = put_eventually(
        &c,
        &rt,
        &c.endpoint(leader),
        "snap/last",
        "last",
        Duration::from_secs(10),
    );

    // Wait until the new member has applied revision `rev` (serializable reads are local).
    let t = Instant::now();
    loop {
        let out = c.ctl(
            fresh,
            &["get", "snap/last", "--consistency=s", "-w", "json"],
        );
        let applied = out.success()
            && serde_json::from_str::<serde_json::Value>(out.stdout.trim())
                .ok()
                .and_then(|v| v["header"]["revision"].as_i64())
                .is_some_and(|r| r >= rev);
        if applied {
            break;
        }
        if t.elapsed() > Duration::from_secs(30) {
            c.fail(format!(
                "new member did not reach revision {rev} within 30 s: {out:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "new member applied revision {rev} {:?} after the last write",
        t.elapsed()
    );

    // Linearizable count on the new member (etcdctl 3.4 has no --count-only).
    let ep = c.endpoint(fresh);
    let count = rt.block_on(async {
        let mut client = cluster::connect(&[ep]).await;
        client
            .get(
                "snap/",
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map(|r| r.count())
    });
    assert_eq!(
        count.as_ref().ok(),
        Some(&(writes as i64 + 1)),
        "keys under snap/ on the new member (linearizable): {count:?}"
    );

    let members: Vec<usize> = c.live();
    assert_eq!(members.len(), 3, "live members: {members:?}");
    let mut hashes = Vec::new();
    for &i in &members {
        let (h, compact, header_rev) = c
            .hashkv(i, rev)
            .unwrap_or_else(|e| c.fail(format!("hashkv --rev {rev} on member {i}: {e}")));
        eprintln!(
            "hashkv --rev {rev} on member {i} ({}): hash {h}, compact revision {compact}, header revision \
             {header_rev}",
            c.member(i).name
        );
        hashes.push(h);
    }
    assert!(
        hashes.iter().all(|h| *h == hashes[0]),
        "hashkv at revision {rev} differs between members {members:?}: {hashes:?}"
    );
    for &i in &members {
        let list = c.member_list(i).unwrap_or_else(|e| c.fail(e));
        let mut names: Vec<String> = list.iter().map(|l| l.name.clone()).collect();
        names.sort();
        let mut want: Vec<String> = members.iter().map(|&j| c.member(j).name.clone()).collect();
        want.sort();
        assert_eq!(names, want, "member list on member {i}");
    }
    let log = c.member(fresh).log();
    let mut snapshot_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("snapshot") && !l.starts_with("===="))
        .collect();
    // Show the receiving side first (etcd: "received and saved database snapshot"; openraft: install…).
    snapshot_lines.sort_by_key(|l| {
        let l = l.to_ascii_lowercase();
        !(l.contains("install") || l.contains("receiv") || l.contains("applied"))
    });
    eprintln!(
        "new member's log mentions \"snapshot\" on {} lines, e.g.:\n{}",
        snapshot_lines.len(),
        snapshot_lines
            .iter()
            .take(4)
            .map(|l| l.chars().take(240).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Proves the premise: the new member was sent a snapshot (log texts of etcd 3.4 and of keel's state machine).
    let marker = match c.kind() {
        Kind::Etcd => "applied incoming Raft snapshot",
        Kind::Keel => "snapshot installed",
    };
    assert!(
        log.contains(marker),
        "the new member did not catch up via snapshot: no {marker:?} in its log"
    );
}

/// Partitions with network namespaces: an isolated follower refuses linearizable reads while the majority keeps
/// writing, and catches up after healing; an isolated leader is replaced by the majority within 3 s (as after a
/// kill -9) and refuses linearizable reads and writes itself.
#[test]
fn partition_follower_then_leader() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).netns().start();
    let rt = rt();
    let leader = c.wait_leader(Duration::from_secs(10));
    let follower = (0..3).find(|&i| i != leader).unwrap();
    c.ctl_ok(leader, &["put", "p/before", "1"]);
    c.ctl_ok(follower, &["get", "p/before"]);

    // 1. Isolate a follower.
    c.net_mut().isolate(follower);
    let majority: Vec<usize> = (0..3).filter(|&i| i != follower).collect();
    let t = Instant::now();
    let out = c.ctl_with(
        follower,
        &["get", "p/before"],
        &["--command-timeout=10s", "--dial-timeout=2s"],
    );
    eprintln!(
        "linearizable get on isolated follower {follower}: exit {:?} after {:?}: {}",
        out.code,
        t.elapsed(),
        out.stderr.lines().last().unwrap_or("")
    );
    assert!(
        !out.success(),
        "isolated follower served a linearizable read: {out:?}"
    );
    let maj_eps = c.endpoints(&majority);
    for k in 0..20 {
        let (_, took) = put_eventually(
            &c,
            &rt,
            &maj_eps[k % 2],
            &format!("p/during/{k:02}"),
            "x",
            Duration::from_secs(10),
        );
        assert!(
            took < Duration::from_secs(5),
            "majority write p/during/{k:02} took {took:?}"
        );
    }
    let stale = c.ctl_ok(
        follower,
        &["get", "p/", "--prefix", "--keys-only", "--consistency=s"],
    );
    assert!(
        !stale.contains("p/during/"),
        "the isolated follower has writes it cannot have received: {stale}"
    );
    let ser_maj = c.ctl_ok(
        majority[0],
        &["get", "p/during/", "--prefix", "--keys-only"],
    );
    assert_eq!(
        ser_maj.lines().filter(|l| !l.is_empty()).count(),
        20,
        "majority: {ser_maj}"
    );

    let t = Instant::now();
    c.net_mut().heal();
    loop {
        let out = c.ctl_with(
            follower,
            &["get", "p/during/19", "--print-value-only"],
            &["--command-timeout=3s", "--dial-timeout=2s"],
        );
        if out.success() && out.stdout == "x\n" {
            break;
        }
        if t.elapsed() > Duration::from_secs(20) {
            c.fail(format!(
                "healed follower did not catch up within 20 s: {out:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "healed follower {follower} served the latest write linearizably after {:?}",
        t.elapsed()
    );
    let leader = c.wait_leader(Duration::from_secs(15));

    // 2. Isolate the leader.
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let t = Instant::now();
    c.net_mut().isolate(leader);
    let new_leader = c.wait_leader_among(&others, Duration::from_secs(15), Some(leader));
    let failover = t.elapsed();
    eprintln!("isolated leader {leader}: majority elected member {new_leader} after {failover:?}");
    for k in 0..10 {
        put_eventually(
            &c,
            &rt,
            &c.endpoint(new_leader),
            &format!("p/after/{k:02}"),
            "y",
            Duration::from_secs(10),
        );
    }
    let t = Instant::now();
    let out = c.ctl_with(
        leader,
        &["get", "p/after/00"],
        &["--command-timeout=10s", "--dial-timeout=2s"],
    );
    eprintln!(
        "linearizable get on the isolated old leader {leader}: exit {:?} after {:?}: {}",
        out.code,
        t.elapsed(),
        out.stderr.lines().last().unwrap_or("")
    );
    assert!(
        !out.success(),
        "isolated old leader served a linearizable read: {out:?}"
    );
    let t = Instant::now();
    let put = put_once(
        &rt,
        &c.endpoint(leader),
        "p/old-leader",
        "z",
        Duration::from_secs(15),
    );
    eprintln!(
        "put on the isolated old leader: {put:?} after {:?}",
        t.elapsed()
    );
    assert!(put.is_err(), "isolated old leader acknowledged a write");
    let stale = c.ctl_ok(
        leader,
        &[
            "get",
            "p/after/",
            "--prefix",
            "--keys-only",
            "--consistency=s",
        ],
    );
    assert!(
        stale.trim().is_empty(),
        "isolated old leader has the majority's new writes: {stale}"
    );

    let t = Instant::now();
    c.net_mut().heal();
    loop {
        let out = c.ctl_with(
            leader,
            &["get", "p/after/09", "--print-value-only"],
            &["--command-timeout=3s", "--dial-timeout=2s"],
        );
        if out.success() && out.stdout == "y\n" {
            break;
        }
        if t.elapsed() > Duration::from_secs(20) {
            c.fail(format!(
                "healed old leader did not catch up within 20 s: {out:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "healed old leader {leader} caught up after {:?}",
        t.elapsed()
    );
    c.wait_leader(Duration::from_secs(15));
    let out = c.ctl_ok(0, &["get", "p/old-leader"]);
    eprintln!(
        "p/old-leader after healing: {out:?} (an unacknowledged write may or may not have landed)"
    );
    eprintln!("FIGURE failover after isolating the leader: {failover:?} (target 3 s)");
    assert!(
        failover < FAILOVER_LIVENESS,
        "failover after isolating the leader took {failover:?} (liveness bound {FAILOVER_LIVENESS:?})"
    );
}

/// What a refused start must print (case-insensitive substring of the member's log/stderr).
/// Wrong `--initial-cluster-token` when joining: keel must refuse; etcd 3.4 ignores the token with
/// `--initial-cluster-state existing` (it takes the cluster from its peers) and joins.
const WRONG_TOKEN_MARKERS: &[&str] = &[
    "initial-cluster-token",
    "cluster token",
    "cluster id mismatch",
];
/// Name already used by another member: etcd 3.4 says `error validating peerURLs … member count is unequal`.
const DUPLICATE_NAME_MARKERS: &[&str] = &[
    "member count is unequal",
    "already",
    "duplicate",
    "more than once",
];

/// True if a line of the server's own output (not the harness's `==== harness:` lines, which echo the command
/// line) contains one of `markers`, case-insensitively.
fn has_marker(log: &str, markers: &[&str]) -> bool {
    log.lines()
        .filter(|l| !l.starts_with("==== harness:"))
        .map(str::to_ascii_lowercase)
        .any(|l| markers.iter().any(|m| l.contains(m)))
}

/// Waits up to 20 s for member `i` (just started with bad flags) to exit; records a failure unless it exited
/// non-zero with a message containing one of `markers`. Kills it if it still runs, then takes its `member add`
/// entry out of the cluster again.
fn expect_refused(
    c: &mut Cluster,
    i: usize,
    what: &str,
    markers: &[&str],
    failures: &mut Vec<String>,
) {
    let st = c.wait_exit(i, Duration::from_secs(20));
    let tail = c.member(i).log_tail(8);
    let log = c.member(i).log();
    match st {
        None => {
            failures.push(format!(
                "{what}: still running after 20 s; last lines:\n{tail}"
            ));
            c.kill9(i);
        }
        Some(st) if st.success() => failures.push(format!(
            "{what}: exited with {st}, must be non-zero; last lines:\n{tail}"
        )),
        Some(st) if !has_marker(&log, markers) => failures.push(format!(
            "{what}: exit {st}, but no message containing one of {markers:?}; last lines:\n{tail}"
        )),
        Some(st) => eprintln!("{what}: refused, exit {st}; last lines:\n{tail}"),
    }
    c.remove_member(i);
}

/// Bad input: `member remove` of an unknown ID, a joining member with a wrong token, a joining member with a name
/// already in use.
#[test]
fn bad_input_is_refused() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3).start();
    let kind = c.kind();

    // Unknown member ID.
    let out = c.ctl(0, &["member", "remove", "1234abcd"]);
    eprintln!(
        "member remove 1234abcd: exit {:?}, stderr:\n{}",
        out.code, out.stderr
    );
    assert_eq!(out.code, Some(1), "member remove of an unknown ID: {out:?}");
    assert!(
        out.stderr
            .lines()
            .any(|l| l == "Error: etcdserver: member not found"),
        "stderr must contain the line `Error: etcdserver: member not found`: {}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);

    // Checks of keel's refusals are collected and reported together at the end.
    let mut failures: Vec<String> = Vec::new();

    // A 4th member, added with `member add`, started with a wrong token.
    let i = c.add_member_unstarted("n4", false);
    let mut args = c.member(i).start_args.clone();
    args.token = "not-the-cluster-token".into();
    c.spawn_with(i, args);
    match kind {
        Kind::Etcd => {
            // etcd 3.4: the token only matters for --initial-cluster-state new; it joins.
            c.wait_ready(i, Duration::from_secs(30));
            eprintln!("etcd: member with a wrong token joined (the token is ignored when joining)");
            c.remove_member(i);
        }
        Kind::Keel => expect_refused(
            &mut c,
            i,
            "wrong --initial-cluster-token",
            WRONG_TOKEN_MARKERS,
            &mut failures,
        ),
    }

    // A member named like an existing one (n1): --initial-cluster then lists n1 twice, as `member add` prints it.
    let j = c.add_member_unstarted("n1", false);
    eprintln!(
        "duplicate name: --initial-cluster {}",
        c.member(j).start_args.initial_cluster
    );
    c.spawn(j);
    expect_refused(
        &mut c,
        j,
        "name n1 already in use",
        DUPLICATE_NAME_MARKERS,
        &mut failures,
    );

    // The cluster is unaffected: 3 started members, writes work.
    let list = c.member_list(0).unwrap_or_else(|e| c.fail(e));
    let names: Vec<&str> = list.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        list.len(),
        3,
        "member list after the refused joins: {names:?}"
    );
    c.ctl_ok(1, &["put", "still", "fine"]);
    assert_eq!(
        c.ctl_ok(2, &["get", "still", "--print-value-only"]),
        "fine\n"
    );
    if !failures.is_empty() {
        c.fail(failures.join("\n\n"));
    }
}

/// The partition tool itself (no server involved): TCP between node namespaces follows the rules, the root
/// namespace always reaches every node, and everything is gone after drop.
#[test]
fn netns_partition_tool() {
    let _serial = cluster::serial();
    let run_id = Net::unique_run_id();
    let mut net = Net::new(&run_id, 3);
    let port = 7070;
    let listeners: Vec<_> = (0..3).map(|i| net.listen_in(i, port)).collect();
    for l in &listeners {
        l.set_nonblocking(true).unwrap();
    }
    let addr = |net: &Net, i: usize| std::net::SocketAddr::new(net.ip(i), port);
    let reach = |net: &Net, from: usize, to: usize| {
        net.connect_from(from, addr(net, to), Duration::from_millis(700))
            .is_ok()
    };
    let matrix = |net: &Net| -> Vec<Vec<bool>> {
        (0..3)
            .map(|a| (0..3).map(|b| a == b || reach(net, a, b)).collect())
            .collect()
    };
    let root_reaches_all = |net: &Net| {
        (0..3).all(|i| {
            std::net::TcpStream::connect_timeout(&addr(net, i), Duration::from_millis(700)).is_ok()
        })
    };
    assert_eq!(matrix(&net), vec![vec![true; 3]; 3], "before any partition");
    assert!(root_reaches_all(&net));

    net.partition(&[&[0], &[1, 2]]);
    assert_eq!(
        matrix(&net),
        vec![
            vec![true, false, false],
            vec![false, true, true],
            vec![false, true, true]
        ],
        "partition {{0}} | {{1,2}}; node 1 rules:\n{}",
        net.ruleset(1)
    );
    assert!(
        root_reaches_all(&net),
        "the root namespace must reach isolated nodes"
    );

    net.heal();
    assert_eq!(matrix(&net), vec![vec![true; 3]; 3], "after heal");

    // One way: 0 -> 1 dropped at 1. A TCP connect 0 -> 1 fails (SYN dropped), and so does 1 -> 0 (SYN-ACK dropped).
    net.block(0, 1);
    assert!(!reach(&net, 0, 1));
    assert!(!reach(&net, 1, 0));
    assert!(reach(&net, 0, 2) && reach(&net, 2, 1));
    net.heal();

    // A node added later is connected to everyone.
    let k = net.add_node();
    let l3 = net.listen_in(k, port);
    assert!(reach(&net, 0, k) && reach(&net, k, 2));
    net.isolate(k);
    assert!(!reach(&net, 0, k) && !reach(&net, k, 2) && reach(&net, 0, 2));
    drop(l3);
    drop(listeners);

    let names: Vec<String> = (0..net.len()).map(|i| net.ns(i).to_string()).collect();
    drop(net);
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let left = String::from_utf8_lossy(&left.stdout);
    for n in &names {
        assert!(
            !left.contains(n.as_str()),
            "namespace {n} left behind: {left}"
        );
    }
    assert!(
        !left.contains(&format!("keel-{run_id}-hub")),
        "hub namespace left behind"
    );
}

/// The NOSPACE alarm is replicated state: raised on one member by a write over `--quota-backend-bytes`, it makes
/// every member refuse writes, reaches a member that was down through a snapshot, survives that member's restart,
/// and one `alarm disarm` clears it everywhere.
#[test]
fn nospace_alarm_is_cluster_state() {
    let _serial = cluster::serial();
    let mut c = Options::under_test(keel_bin!(), 3)
        .snapshot_count(100)
        .arg("--quota-backend-bytes")
        .arg("2000000")
        .start();
    let rt = rt();
    let leader = c.wait_leader(Duration::from_secs(10));
    let away = (0..3).find(|&i| i != leader).unwrap_or(2);
    let others: Vec<usize> = (0..3).filter(|&i| i != away).collect();
    c.stop(away);

    // Fill through the leader until the quota refuses.
    let ep = c.endpoint(leader);
    let refused = rt.block_on(async {
        let mut client = cluster::connect(&[ep]).await;
        for i in 0..200 {
            let value: Vec<u8> = (0..100_000).map(|_| rand::random::<u8>()).collect();
            if let Err(e) = client.put(format!("big/{i}"), value, None).await {
                return Some(e.to_string());
            }
        }
        None
    });
    let msg = "etcdserver: mvcc: database space exceeded";
    assert!(
        refused.as_ref().is_some_and(|s| s.contains(msg)),
        "the quota never refused a put: {refused:?}"
    );
    let alarm_of = |out: &str| out.lines().any(|l| l.contains("alarm:NOSPACE"));
    for &i in &others {
        assert!(
            alarm_of(&c.ctl_ok(i, &["alarm", "list"])),
            "alarm list on {i}"
        );
        let out = c.ctl(i, &["put", "small", "v"]);
        assert!(
            !out.success() && out.stderr.contains(msg),
            "put on member {i}: {out:?}"
        );
    }

    // Deletes still go through: push the log far enough that the member that was away gets a snapshot.
    const TARGET_RAFT_INDEX: u64 = 6000;
    let eps = c.endpoints(&others);
    let t = Instant::now();
    loop {
        let st = c.status(leader).unwrap_or_else(|e| c.fail(e));
        if st.raft_index >= TARGET_RAFT_INDEX {
            break;
        }
        if t.elapsed() > Duration::from_secs(120) {
            c.fail(format!(
                "raft index only {} after {:?}",
                st.raft_index,
                t.elapsed()
            ));
        }
        rt.block_on(async {
            let mut tasks = Vec::new();
            for w in 0..16 {
                let eps = eps.clone();
                tasks.push(tokio::spawn(async move {
                    let mut client = cluster::connect(&eps).await;
                    for k in 0..64 {
                        if let Err(e) = client.delete(format!("none/{w}/{k}"), None).await {
                            panic!("delete under NOSPACE: {e}");
                        }
                    }
                }));
            }
            for t in tasks {
                if let Err(e) = t.await {
                    panic!("deleter: {e}");
                }
            }
        });
    }
    c.restart(away);
    // Status errors come from the member's own state, so this shows the alarm arrived there.
    let errors_on = |c: &Cluster, i: usize| -> String {
        c.ctl(i, &["endpoint", "status", "-w", "table"]).stdout
    };
    let t = Instant::now();
    while !errors_on(&c, away).contains("alarm:NOSPACE") {
        if t.elapsed() > Duration::from_secs(30) {
            c.fail(format!(
                "member {away} does not show the alarm after catching up:\n{}",
                errors_on(&c, away)
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if c.kind() == Kind::Keel {
        let log = c.member(away).log();
        assert!(
            log.contains("snapshot installed"),
            "member {away} caught up without a snapshot"
        );
    }
    c.kill9(away);
    c.restart(away);
    assert!(
        errors_on(&c, away).contains("alarm:NOSPACE"),
        "member {away} lost the alarm in a restart"
    );

    // Make room, then disarm once: every member takes writes again.
    let ep = c.endpoint(leader);
    rt.block_on(async {
        let mut client = cluster::connect(&[ep]).await;
        let opts = etcd_client::DeleteOptions::new().with_prefix();
        if let Err(e) = client.delete("big/", Some(opts)).await {
            panic!("delete big/: {e}");
        }
        let rev = match client.get("nothing", None).await {
            Ok(r) => r.header().map(|h| h.revision()).unwrap_or(0),
            Err(e) => panic!("get: {e}"),
        };
        if let Err(e) = client.compact(rev, None).await {
            panic!("compact: {e}");
        }
    });
    for i in 0..3 {
        c.ctl_ok(i, &["defrag"]);
    }
    let out = c.ctl_ok(leader, &["alarm", "disarm"]);
    assert!(alarm_of(&out), "alarm disarm printed {out:?}");
    for i in 0..3 {
        let t = Instant::now();
        loop {
            let out = c.ctl(i, &["put", &format!("after/{i}"), "v"]);
            if out.success() {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                c.fail(format!("put on member {i} after disarm: {out:?}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            !errors_on(&c, i).contains("alarm:"),
            "member {i} still shows an alarm"
        );
    }
}
