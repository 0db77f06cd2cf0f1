//! The etcd port's `/metrics` and `/health` on a 3-member cluster, and `keel status` against it.
//!
//! Scrapes every member's client URL with a plain HTTP/1.1 GET (gRPC shares the port), parses the
//! exposition with `prometheus-parse`, and checks what must hold on a healthy cluster: one leader,
//! everyone sees it, one term, the WAL fsync histogram filled, the commit index moving with writes.
//!
//! ```text
//! cargo test --test member_metrics -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_testkit::cluster::{self, Cluster, Options};
use keel_testkit::{keel_bin, run_bounded, Kind};
use prometheus_parse::{Scrape, Value};

/// How long the cluster may take to agree after a change (a bound for polling, not a measurement).
const SETTLE: Duration = Duration::from_secs(30);

/// `GET path` on `host:port` over HTTP/1.1; the status code and the body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP header end in {text:?}"));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "expected a sized body: {head}"
    );
    (code, body.to_string())
}

fn scrape(addr: &str) -> Scrape {
    let (code, body) = http_get(addr, "/metrics");
    assert_eq!(code, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The value of the unlabelled series `name` (counters, gauges), or the `+Inf` count of a histogram.
fn value(s: &Scrape, name: &str) -> f64 {
    let sample = s
        .samples
        .iter()
        .find(|x| x.metric == name)
        .unwrap_or_else(|| panic!("no series {name}"));
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(b) => b
            .iter()
            .find(|c| c.less_than.is_infinite())
            .map(|c| c.count)
            .unwrap_or_else(|| panic!("{name} has no +Inf bucket")),
        Value::Summary(_) => panic!("{name} is a summary"),
    }
}

/// Scrapes every member until `ok` holds for all the scrapes at once (or fails after [`SETTLE`]).
fn scrape_until(c: &Cluster, what: &str, ok: impl Fn(&[Scrape]) -> bool) -> Vec<Scrape> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let all: Vec<Scrape> = (0..c.len()).map(|i| scrape(&c.endpoint(i))).collect();
        if ok(&all) {
            return all;
        }
        assert!(Instant::now() < deadline, "never true: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn put_keys(c: &Cluster, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect([c.member(0).client_url()], None)
            .await
            .unwrap();
        for i in 0..n {
            client
                .put(format!("/metrics-test/{i}"), "v", None)
                .await
                .unwrap();
        }
    });
}

/// A `grpc_*` sample as `name{labels}` (labels sorted), for comparing expositions.
fn grpc_series(s: &Scrape) -> std::collections::BTreeSet<String> {
    s.samples
        .iter()
        .filter(|x| x.metric.starts_with("grpc_server_"))
        .map(|x| {
            let mut l: Vec<String> = x.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            l.sort();
            format!("{}{{{}}}", x.metric, l.join(","))
        })
        .collect()
}

fn grpc_value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => panic!("{name} is not a counter"),
        })
        .unwrap_or_else(|| panic!("no series {name} {labels:?}"))
}

/// etcd's gRPC server series on member 0 (which served `put_keys`' 20 puts): the same series as a real
/// etcd 3.4 exposes, and counts that follow the calls.
fn grpc_series_match_etcd(c: &Cluster) {
    let ep = c.endpoint(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // An error answer (trailers-only) is handled with its code.
    rt.block_on(async {
        let mut client = etcd_client::Client::connect([ep.as_str()], None)
            .await
            .unwrap();
        let e = client
            .get(
                "k",
                Some(etcd_client::GetOptions::new().with_revision(1_000_000)),
            )
            .await;
        assert!(e.is_err());
    });
    let keel = scrape(&ep);
    let put = [
        ("grpc_method", "Put"),
        ("grpc_service", "etcdserverpb.KV"),
        ("grpc_type", "unary"),
    ];
    assert!(grpc_value(&keel, "grpc_server_started_total", &put) >= 20.0);
    assert!(grpc_value(&keel, "grpc_server_msg_received_total", &put) >= 20.0);
    assert!(grpc_value(&keel, "grpc_server_msg_sent_total", &put) >= 20.0);
    let mut ok = put.to_vec();
    ok.push(("grpc_code", "OK"));
    assert!(grpc_value(&keel, "grpc_server_handled_total", &ok) >= 20.0);
    let out_of_range = [
        ("grpc_code", "OutOfRange"),
        ("grpc_method", "Range"),
        ("grpc_service", "etcdserverpb.KV"),
        ("grpc_type", "unary"),
    ];
    assert_eq!(
        grpc_value(&keel, "grpc_server_handled_total", &out_of_range),
        1.0
    );

    // The series of the six etcd services, as a fresh etcd 3.4 has them.
    let etcd = keel_testkit::Server::start_etcd();
    // etcd answers /metrics chunked (keel's is sized, which `scrape` checks): read it with curl.
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .arg(format!("http://{}/metrics", etcd.endpoint()))
        .output()
        .unwrap();
    let body = String::from_utf8(out.stdout).unwrap();
    let theirs = grpc_series(&Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap());
    let ours: std::collections::BTreeSet<String> = grpc_series(&keel)
        .into_iter()
        .filter(|s| s.contains("grpc_service=etcdserverpb."))
        .collect();
    let theirs: std::collections::BTreeSet<String> = theirs
        .into_iter()
        .filter(|s| s.contains("grpc_service=etcdserverpb."))
        .collect();
    assert!(!theirs.is_empty(), "etcd has no grpc_server_ series");
    assert_eq!(
        ours.symmetric_difference(&theirs).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "gRPC series differ from etcd 3.4's"
    );
}

#[test]
fn metrics_health_and_status_on_three_members() {
    let _serial = cluster::serial();
    // A small snapshot count, so the writes below make every member write a Raft snapshot, and
    // scheduled snapshots every two seconds, so their series and `keel status` line have one.
    let mut c = Options::new(Kind::Keel, 3)
        .keel_bin(keel_bin!())
        .snapshot_count(10)
        .arg("--snapshot-schedule=*/2 * * * * *")
        .start();

    // One leader that every member sees, in one term.
    let before = scrape_until(&c, "one leader, seen by all, one term", |all| {
        let leaders = all
            .iter()
            .filter(|s| value(s, "etcd_server_is_leader") == 1.0)
            .count();
        let terms: Vec<f64> = all.iter().map(|s| value(s, "keel_raft_term")).collect();
        leaders == 1
            && all
                .iter()
                .all(|s| value(s, "etcd_server_has_leader") == 1.0)
            && terms.iter().all(|t| *t == terms[0])
    });
    for (i, s) in before.iter().enumerate() {
        assert!(
            value(s, "etcd_disk_wal_fsync_duration_seconds") > 0.0,
            "member {i} timed no WAL fsync"
        );
        let id = s
            .samples
            .iter()
            .find(|x| x.metric == "etcd_server_id")
            .and_then(|x| x.labels.get("server_id").map(str::to_string));
        assert!(
            id.is_some_and(|id| !id.is_empty()),
            "member {i}: no etcd_server_id"
        );
    }

    // The commit index moves with writes, on every member.
    let committed: Vec<f64> = before
        .iter()
        .map(|s| value(s, "etcd_server_proposals_committed_total"))
        .collect();
    put_keys(&c, 20);
    grpc_series_match_etcd(&c);
    let after = scrape_until(&c, "every member's commit index grew", |all| {
        all.iter()
            .zip(&committed)
            .all(|(s, b)| value(s, "etcd_server_proposals_committed_total") >= b + 20.0)
    });
    scrape_until(&c, "every member wrote a Raft snapshot", |all| {
        all.iter().all(|s| {
            s.samples
                .iter()
                .any(|x| x.metric == "keel_snapshot_last_size_bytes")
        })
    });
    scrape_until(&c, "every member took a scheduled snapshot", |all| {
        all.iter().all(|s| {
            value(s, "keel_scheduled_snapshots_taken_total") >= 1.0
                && s.samples
                    .iter()
                    .any(|x| x.metric == "keel_backup_snapshot_last_size_bytes")
        })
    });
    for s in &after {
        assert!(value(s, "etcd_disk_backend_commit_duration_seconds") > 0.0);
        assert!(value(s, "etcd_debugging_mvcc_current_revision") > 20.0);
        assert!(value(s, "etcd_mvcc_db_total_size_in_bytes") > 0.0);
        assert!(value(s, "keel_slow_fsyncs_total") >= 0.0);
    }

    // /health as etcd answers it.
    for i in 0..c.len() {
        let (code, body) = http_get(&c.endpoint(i), "/health");
        assert_eq!(code, 200, "member {i}: {body}");
        assert!(body.contains(r#""health":"true""#), "member {i}: {body}");
    }

    // keel status: every member, one leader.
    let mut cmd = Command::new(keel_bin!());
    cmd.args([
        "status",
        "--endpoints",
        &c.client_urls(&[0, 1, 2]).join(","),
        "--data-dir",
        c.member(0).data_dir.to_str().unwrap(),
    ]);
    let out = run_bounded(cmd, None, Duration::from_secs(60));
    eprintln!("{}", out.stdout);
    assert!(
        out.success(),
        "keel status failed: {}{}",
        out.stdout,
        out.stderr
    );
    for i in 0..c.len() {
        let name = &c.member(i).name;
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name} "))),
            "no row for {name}:\n{}",
            out.stdout
        );
    }
    let roles = out
        .stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some("leader"))
        .count();
    assert_eq!(roles, 1, "{}", out.stdout);
    assert!(out.stdout.contains("\nleader: "), "{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("snapshots: newest keel-snapshot-")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("raft snapshot: ") && l.contains(" ago, ")),
        "{}",
        out.stdout
    );

    // A member left alone (the leader and another member killed) has no leader: /health says so.
    let leader = (0..c.len())
        .find(|&i| value(&scrape(&c.endpoint(i)), "etcd_server_is_leader") == 1.0)
        .unwrap();
    let others: Vec<usize> = (0..c.len()).filter(|&i| i != leader).collect();
    let (gone, alone) = (others[0], others[1]);
    c.kill9(leader);
    c.kill9(gone);
    let deadline = Instant::now() + SETTLE;
    let body = loop {
        let (code, body) = http_get(&c.endpoint(alone), "/health");
        if code == 503 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "still healthy alone: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(body.contains(r#""health":"false""#), "{body}");
    // Whichever it notices first: its quorum read fails, or it stops knowing a leader.
    assert!(
        body.contains("RAFT NO LEADER") || body.contains("QGET ERROR"),
        "{body}"
    );
    // etcd's serializable health judges the member alone: it still serves local reads.
    let (code, body) = http_get(&c.endpoint(alone), "/health?serializable=true");
    assert_eq!(code, 200, "{body}");
    while value(&scrape(&c.endpoint(alone)), "etcd_server_has_leader") != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the lone member still sees a leader"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // keel status still reports, with the unreachable members' rows.
    let mut cmd = Command::new(keel_bin!());
    cmd.args(["status", "--endpoints", &c.client_urls(&[alone]).join(",")]);
    let out = run_bounded(cmd, None, Duration::from_secs(60));
    eprintln!("{}", out.stdout);
    assert!(
        out.success(),
        "keel status failed: {}{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(
        out.stdout.matches("unreachable: ").count(),
        2,
        "{}",
        out.stdout
    );
}
