//! Crash safety of a single member: SIGKILL under concurrent write load, restart, and check
//! that every acknowledged write survived, nothing unacknowledged shows up as a gap, and the
//! revision never goes backwards. Plus WAL damage: a torn tail is recovered, a flipped byte in
//! the middle of the log makes the server refuse to start with a clear message.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use rand::Rng;

use keel_testkit::free_port;

struct Member {
    child: Option<Child>,
    port: u16,
    peer: u16,
    dir: PathBuf,
}

impl Member {
    fn spawn(dir: &Path, port: u16, peer: u16) -> Member {
        let url = format!("http://127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args([
                "server",
                "--kube-listen",
                "",
                "--name",
                "crash",
                "--data-dir",
            ])
            .arg(dir)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--snapshot-count", "300"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn keel");
        Member {
            child: Some(child),
            port,
            peer,
            dir: dir.to_path_buf(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.kill9();
        *self = Member::spawn(&self.dir.clone(), self.port, self.peer);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill9();
    }
}

async fn connect_ready(ep: &str, limit: Duration) -> Client {
    let start = Instant::now();
    loop {
        if let Ok(mut c) = Client::connect([ep], None).await {
            if tokio::time::timeout(Duration::from_secs(2), c.get("probe", None))
                .await
                .is_ok_and(|r| r.is_ok())
            {
                return c;
            }
        }
        assert!(
            start.elapsed() < limit,
            "keel at {ep} did not become ready within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writers put `w<i>/<seq:08>` in order; returns per writer the highest acknowledged seq and
/// the highest revision any acknowledgement carried.
async fn write_until(
    ep: String,
    writers: usize,
    stop: Arc<AtomicBool>,
    start_seq: Vec<i64>,
) -> (Vec<i64>, i64) {
    let mut tasks = Vec::new();
    for (w, first) in start_seq.into_iter().enumerate().take(writers) {
        let ep = ep.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = first - 1;
            let mut max_rev = 0;
            let Ok(mut c) = Client::connect([ep.as_str()], None).await else {
                return (acked, max_rev);
            };
            let mut seq = first;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}/{seq:08}");
                match tokio::time::timeout(
                    Duration::from_secs(3),
                    c.put(key, format!("v{seq}"), None),
                )
                .await
                {
                    Ok(Ok(r)) => {
                        acked = seq;
                        max_rev = max_rev.max(r.header().map(|h| h.revision()).unwrap_or(0));
                        seq += 1;
                    }
                    // The server died mid-request: the outcome is unknown, stop this writer.
                    _ => break,
                }
            }
            (acked, max_rev)
        }));
    }
    let mut acked = Vec::new();
    let mut max_rev = 0;
    for t in tasks {
        let (a, r) = t.await.unwrap();
        acked.push(a);
        max_rev = max_rev.max(r);
    }
    (acked, max_rev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_acknowledged_write() {
    const WRITERS: usize = 4;
    let rounds: usize = std::env::var("KEEL_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let budget = Duration::from_secs(240);
    let dir = tempfile::tempdir().unwrap();
    let mut m = Member::spawn(&dir.path().join("d"), free_port(), free_port());
    let mut next = vec![0i64; WRITERS];
    let mut acked_all = vec![-1i64; WRITERS];
    let mut last_rev = 0i64;
    let started = Instant::now();
    let mut done = 0;
    let mut rng = rand::thread_rng();
    while done < rounds && started.elapsed() < budget {
        let ep = m.endpoint();
        let _ = connect_ready(&ep, Duration::from_secs(30)).await;
        let stop = Arc::new(AtomicBool::new(false));
        let load = tokio::spawn(write_until(ep.clone(), WRITERS, stop.clone(), next.clone()));
        tokio::time::sleep(Duration::from_millis(rng.gen_range(50..400))).await;
        m.kill9();
        stop.store(true, Ordering::Relaxed);
        let (acked, max_rev) = load.await.unwrap();
        m.restart();
        let mut c = connect_ready(&m.endpoint(), Duration::from_secs(30)).await;
        let resp = c
            .get("w", Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        let rev_now = resp.header().map(|h| h.revision()).unwrap_or(0);
        assert!(
            rev_now >= max_rev,
            "round {done}: revision went back from {max_rev} to {rev_now}"
        );
        assert!(
            rev_now >= last_rev,
            "round {done}: revision went back from {last_rev} to {rev_now}"
        );
        last_rev = rev_now;
        let mut present: HashMap<usize, Vec<i64>> = HashMap::new();
        for kv in resp.kvs() {
            let k = kv.key_str().unwrap();
            let (w, seq) = k[1..].split_once('/').unwrap();
            present
                .entry(w.parse().unwrap())
                .or_default()
                .push(seq.parse().unwrap());
        }
        for w in 0..WRITERS {
            acked_all[w] = acked_all[w].max(acked[w]);
            let mut seqs = present.remove(&w).unwrap_or_default();
            seqs.sort();
            // Present writes form a prefix with no gap, and include every acknowledged one.
            for (i, s) in seqs.iter().enumerate() {
                assert_eq!(
                    *s, i as i64,
                    "round {done}: writer {w} has a gap at {i}: {seqs:?}"
                );
            }
            let top = seqs.last().copied().unwrap_or(-1);
            assert!(
                top >= acked_all[w],
                "round {done}: writer {w} lost acknowledged write {} (have up to {top})",
                acked_all[w]
            );
            next[w] = top + 1;
        }
        done += 1;
    }
    eprintln!(
        "{done} kill -9 rounds in {:?}; writes acknowledged: {acked_all:?}",
        started.elapsed()
    );
    assert!(
        done >= rounds.min(20),
        "only {done} rounds fitted in {budget:?}"
    );
}

fn wal_segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    v.sort();
    v
}

async fn put_some(ep: &str, n: usize) {
    let mut c = connect_ready(ep, Duration::from_secs(30)).await;
    for i in 0..n {
        c.put(format!("k{i:04}"), vec![b'x'; 100], None)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_wal_tail_is_truncated_and_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let mut m = Member::spawn(&data, free_port(), free_port());
    put_some(&m.endpoint(), 50).await;
    m.kill9();
    // A write cut short by the crash: half a frame and zeros at the end of the last segment.
    let last = wal_segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&last).unwrap();
    bytes.extend_from_slice(&[0x40, 0, 0, 0, 0xde, 0xad]);
    bytes.extend_from_slice(&[0u8; 300]);
    std::fs::write(&last, bytes).unwrap();
    m.restart();
    let mut c = connect_ready(&m.endpoint(), Duration::from_secs(30)).await;
    let r = c
        .get("k", Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .unwrap();
    assert_eq!(r.count(), 50);
    c.put("after", "ok", None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_byte_mid_log_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let mut m = Member::spawn(&data, free_port(), free_port());
    put_some(&m.endpoint(), 50).await;
    m.kill9();
    let first = wal_segments(&data).remove(0);
    let mut bytes = std::fs::read(&first).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&first, bytes).unwrap();
    // Also remove the store so the member cannot skip the damaged log by accident.
    std::fs::remove_dir_all(data.join("store")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["server", "--kube-listen", "", "--data-dir"])
        .arg(&data)
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{}", m.port),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || out.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "keel started on a corrupt log");
    assert!(
        err.contains("corrupt") && err.contains(".wal"),
        "unclear error: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_store_is_rebuilt_from_snapshot_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let mut m = Member::spawn(&data, free_port(), free_port());
    // --snapshot-count 300: 1000 sequential puts leave snapshots behind and a purged log.
    put_some(&m.endpoint(), 1000).await;
    let mut c = connect_ready(&m.endpoint(), Duration::from_secs(30)).await;
    let before = c
        .get("k", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    m.kill9();
    let snaps = std::fs::read_dir(data.join("snap")).unwrap().count();
    assert!(snaps >= 1, "expected a snapshot file");
    std::fs::remove_dir_all(data.join("store")).unwrap();
    m.restart();
    let mut c = connect_ready(&m.endpoint(), Duration::from_secs(30)).await;
    let after = c
        .get("k", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(before.kvs().len(), 1000);
    assert_eq!(
        after.header().unwrap().revision(),
        before.header().unwrap().revision()
    );
    let pairs = |r: &etcd_client::GetResponse| -> Vec<(Vec<u8>, i64, i64, i64)> {
        r.kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key().to_vec(),
                    kv.create_revision(),
                    kv.mod_revision(),
                    kv.version(),
                )
            })
            .collect()
    };
    assert_eq!(pairs(&after), pairs(&before));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_with_open_streams_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let mut m = Member::spawn(&data, free_port(), free_port());
    put_some(&m.endpoint(), 10).await;
    let mut c = connect_ready(&m.endpoint(), Duration::from_secs(30)).await;
    let _watch = c.watch("k", None).await.unwrap();
    let mut child = m.child.take().unwrap();
    let pid = child.id() as i32;
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "keel ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status:?}");
    m.restart();
    let mut c = connect_ready(&m.endpoint(), Duration::from_secs(30)).await;
    let r = c
        .get("k", Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .unwrap();
    assert_eq!(r.count(), 10);
}
