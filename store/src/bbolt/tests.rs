//! Tests of the bbolt writer and reader, against the real etcd 3.4 and etcdctl where it counts.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use rand::{Rng, SeedableRng};

use super::*;
use crate::lease::LeaseRecord;
use crate::mvcc::revision::Revision;
use crate::pb::etcdserverpb::RangeResponse;
use crate::pb::mvccpb::KeyValue;

// ---------------------------------------------------------------------------------------------
// A tiny MVCC model: the key bucket entries and live keys a sequence of changes implies.

#[derive(Default)]
struct Model {
    rev: i64,
    live: BTreeMap<Vec<u8>, KeyValue>,
    /// Revision key → KeyValue, exactly etcd's `key` bucket.
    entries: BTreeMap<Vec<u8>, KeyValue>,
}

impl Model {
    fn new() -> Self {
        // A fresh etcd is at revision 1 with no keys.
        Model {
            rev: 1,
            ..Default::default()
        }
    }

    /// Starts the next main revision.
    fn next(&mut self) -> i64 {
        self.rev += 1;
        self.rev
    }

    fn put(&mut self, main: i64, sub: i64, key: &[u8], value: &[u8], lease: i64) {
        let prev = self.live.get(key);
        let kv = KeyValue {
            key: key.to_vec().into(),
            create_revision: prev.map_or(main, |p| p.create_revision),
            mod_revision: main,
            version: prev.map_or(1, |p| p.version + 1),
            value: value.to_vec().into(),
            lease,
        };
        self.entries
            .insert(Revision::new(main, sub).to_key(false), kv.clone());
        self.live.insert(key.to_vec(), kv);
    }

    fn put1(&mut self, key: &[u8], value: &[u8], lease: i64) -> i64 {
        let main = self.next();
        self.put(main, 0, key, value, lease);
        main
    }

    fn del(&mut self, main: i64, sub: i64, key: &[u8]) {
        assert!(
            self.live.remove(key).is_some(),
            "model: deleting a missing key"
        );
        let tomb = KeyValue {
            key: key.to_vec().into(),
            ..Default::default()
        };
        self.entries
            .insert(Revision::new(main, sub).to_key(true), tomb);
    }

    /// etcd's compaction: for each key keep the newest revision at or below `at` unless it is
    /// a tombstone; drop everything else at or below `at`.
    fn compact(&mut self, at: i64) {
        let mut last: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for (rk, kv) in &self.entries {
            if let Some((r, _)) = Revision::from_key(rk) {
                if r.main <= at {
                    last.insert(kv.key.to_vec(), rk.clone());
                }
            }
        }
        self.entries.retain(|rk, kv| {
            let (r, tomb) = Revision::from_key(rk).unwrap();
            r.main > at || (!tomb && last.get(kv.key.as_ref()) == Some(rk))
        });
    }

    fn kv_pairs(&self) -> Vec<Pair> {
        self.entries
            .iter()
            .map(|(k, v)| (k.clone(), v.encode_to_vec()))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Real-tool helpers.

/// Finds `name` on PATH or fails the test with an install hint.
fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "this test needs the real `{name}` (etcd 3.4) but it is not on PATH; \
         install Debian's etcd-server and etcd-client packages (apt-get install etcd-server etcd-client)"
    );
}

use keel_testkit::free_port;

/// Runs etcdctl (API v3); returns the output, whether it succeeded or not.
fn etcdctl_raw(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(tool("etcdctl"));
    cmd.env("ETCDCTL_API", "3")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().expect("spawn etcdctl");
    if let Some(input) = stdin {
        let mut s = child.stdin.take().unwrap();
        s.write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Runs etcdctl and fails the test (with its stderr) unless it succeeds; returns stdout.
fn etcdctl(args: &[&str]) -> Vec<u8> {
    etcdctl_in(args, None)
}

fn etcdctl_in(args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let out = etcdctl_raw(args, stdin);
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Pulls an unsigned number out of flat JSON (`"name":123`).
fn json_num(json: &str, name: &str) -> u64 {
    let pat = format!("\"{name}\":");
    let at = json
        .find(&pat)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        + pat.len();
    json[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("bad {name} in {json}"))
}

/// `etcdctl snapshot status FILE -w json`, as a DbSummary.
fn etcdctl_status(file: &Path) -> (DbSummary, String) {
    let out = etcdctl(&["snapshot", "status", file.to_str().unwrap(), "-w", "json"]);
    let json = String::from_utf8(out).unwrap().trim().to_string();
    let s = DbSummary {
        hash: json_num(&json, "hash") as u32,
        revision: json_num(&json, "revision") as i64,
        total_key: json_num(&json, "totalKey"),
        total_size: json_num(&json, "totalSize"),
    };
    (s, json)
}

/// A real etcd process on a data dir, killed (by its own handle) when dropped.
struct Etcd {
    child: Child,
    endpoint: String,
    log: PathBuf,
}

impl Etcd {
    fn start(data_dir: &Path, name: &str, peer_port: u16, log: PathBuf) -> Etcd {
        let client = format!("http://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(tool("etcd"))
            .args([
                "--name",
                name,
                "--data-dir",
                data_dir.to_str().unwrap(),
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--initial-cluster",
                &format!("{name}={peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn etcd");
        let etcd = Etcd {
            child,
            endpoint: client,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = etcdctl_raw(&["--endpoints", &etcd.endpoint, "endpoint", "health"], None);
            if out.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy; log:\n{}",
                std::fs::read_to_string(&etcd.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        etcd
    }

    fn ctl(&self, args: &[&str]) -> Vec<u8> {
        let mut all = vec!["--endpoints", &self.endpoint];
        all.extend_from_slice(args);
        etcdctl(&all)
    }

    fn ctl_in(&self, args: &[&str], stdin: &[u8]) -> Vec<u8> {
        let mut all = vec!["--endpoints", &self.endpoint];
        all.extend_from_slice(args);
        etcdctl_in(&all, Some(stdin))
    }

    /// `get KEY [--prefix] [--rev R] -w protobuf`.
    fn get(&self, key: &[u8], prefix: bool, rev: Option<i64>) -> RangeResponse {
        let key = std::str::from_utf8(key).unwrap();
        let rev = rev.map(|r| format!("--rev={r}"));
        let mut args = vec!["get", key, "-w", "protobuf"];
        if prefix {
            args.push("--prefix");
        }
        if let Some(r) = &rev {
            args.push(r);
        }
        RangeResponse::decode(self.ctl(&args).as_slice()).unwrap()
    }

    /// Header revision after a put/del (`-w json`).
    fn write_rev(&self, args: &[&str], stdin: Option<&[u8]>) -> i64 {
        let mut a = args.to_vec();
        a.extend_from_slice(&["-w", "json"]);
        let out = match stdin {
            Some(s) => self.ctl_in(&a, s),
            None => self.ctl(&a),
        };
        json_num(&String::from_utf8(out).unwrap(), "revision") as i64
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn vmhwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn ok_iter(v: Vec<Pair>) -> PairIter<'static> {
    Box::new(v.into_iter().map(Ok))
}

fn read_bucket(r: &BoltReader, name: &[u8]) -> Vec<Pair> {
    r.bucket(name)
        .unwrap()
        .unwrap_or_else(|| panic!("no bucket {}", String::from_utf8_lossy(name)))
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

fn lease_pair(id: i64, ttl: i64) -> Pair {
    let rec = LeaseRecord {
        id,
        ttl,
        remaining_ttl: 0,
    };
    ((id as u64).to_be_bytes().to_vec(), rec.encode_to_vec())
}

// ---------------------------------------------------------------------------------------------
// Test data for the writer.

const LEASE_A: i64 = 0x0abc;
const LEASE_B: i64 = 0x694d_77aa_1234_5678;

/// ~3000 keys with 9000-byte and ~1 MiB values, overwrites, a multi-key revision, tombstones,
/// leased keys and a compaction.
fn writer_model() -> (Model, i64) {
    let mut m = Model::new();
    for i in 0..3000u32 {
        let key = format!("/registry/test/k{i:06}");
        let value = match i {
            1000 | 2000 => vec![b'a' + (i / 1000) as u8; 1_048_576 + 7],
            _ if i % 100 == 0 => vec![b'x'; 9000],
            _ => format!("value-{i}-{}", "v".repeat((i % 37) as usize)).into_bytes(),
        };
        m.put1(key.as_bytes(), &value, 0);
    }
    // Overwrites (version 2, 3).
    for i in (0..3000u32).step_by(97) {
        let key = format!("/registry/test/k{i:06}");
        m.put1(key.as_bytes(), b"second", 0);
        if i % 2 == 0 {
            m.put1(key.as_bytes(), b"third", 0);
        }
    }
    // Deletes: single ones, then one revision deleting three keys (subs 0, 1, 2).
    for i in [5u32, 6, 7, 500] {
        let main = m.next();
        m.del(main, 0, format!("/registry/test/k{i:06}").as_bytes());
    }
    let main = m.next();
    for (sub, i) in [10u32, 11, 12].into_iter().enumerate() {
        m.del(
            main,
            sub as i64,
            format!("/registry/test/k{i:06}").as_bytes(),
        );
    }
    // A multi-put revision (a Txn) with leased keys.
    let main = m.next();
    for sub in 0..4 {
        let lease = if sub % 2 == 0 { LEASE_A } else { LEASE_B };
        m.put(main, sub, format!("/leased/k{sub}").as_bytes(), b"l", lease);
    }
    // Deleted and re-created key: two generations.
    m.put1(b"/regen", b"one", 0);
    let main = m.next();
    m.del(main, 0, b"/regen");
    m.put1(b"/regen", b"two", 0);
    let compact = m.rev - 20;
    m.compact(compact);
    // Changes after the compaction, ending on a tombstone (the revision etcd must report).
    m.put1(b"/after", b"post-compaction", LEASE_A);
    let main = m.next();
    m.del(main, 0, b"/registry/test/k000001");
    (m, compact)
}

fn writer_input(m: &Model, compact: i64) -> EtcdDbInput<'static> {
    let mut input = EtcdDbInput::new(
        ok_iter(m.kv_pairs()),
        ok_iter(vec![lease_pair(LEASE_A, 3600), lease_pair(LEASE_B, 7200)]),
    );
    input.members = vec![EtcdMember {
        id: 0x2e12_3456_789a_bcde,
        name: "old-member".into(),
        peer_urls: vec!["http://10.0.0.1:2380".into()],
        client_urls: vec!["http://10.0.0.1:2379".into()],
        is_learner: false,
    }];
    input.consistent_index = 123_456;
    input.compact_revision = Some(compact);
    input
}

// ---------------------------------------------------------------------------------------------
// Tests with the real etcdctl and etcd.

#[test]
fn writer_file_passes_etcdctl_status_restore_and_serves_in_etcd() {
    tool("etcd");
    tool("etcdctl");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keel.snapshot.db");
    let (m, compact) = writer_model();

    let written = write_etcd_snapshot_file(&file, writer_input(&m, compact)).unwrap();
    assert_eq!(
        written.file_size,
        std::fs::metadata(&file).unwrap().len(),
        "file size"
    );
    assert_eq!(written.summary.revision, m.rev);
    assert_eq!(
        total_size_hint(writer_input(&m, compact)).unwrap(),
        written.summary.total_size
    );

    // etcdctl snapshot status: integrity check passes; every figure matches ours.
    let (status, json) = etcdctl_status(&file);
    println!("etcdctl snapshot status -w json: {json}");
    assert_eq!(status, written.summary, "etcdctl status vs writer summary");
    assert_eq!(status.revision, m.rev);
    // key + lease + members + meta (3) + cluster.
    assert_eq!(status.total_key, m.entries.len() as u64 + 2 + 1 + 3 + 1);

    // Our reader agrees too.
    let r = BoltReader::open_snapshot(&file).unwrap();
    assert_eq!(r.summary().unwrap(), written.summary);
    assert_eq!(read_bucket(&r, b"key"), m.kv_pairs());

    // etcdctl snapshot restore, then a real etcd on the restored dir.
    let data = dir.path().join("restored");
    let peer_port = free_port();
    let peer = format!("http://127.0.0.1:{peer_port}");
    etcdctl(&[
        "snapshot",
        "restore",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--name",
        "n1",
        "--initial-cluster",
        &format!("n1={peer}"),
        "--initial-advertise-peer-urls",
        &peer,
    ]);
    let etcd = Etcd::start(&data, "n1", peer_port, dir.path().join("etcd.log"));
    let resp = etcd.get(b"", true, None);
    let expected: Vec<KeyValue> = m.live.values().cloned().collect();
    assert_eq!(resp.kvs.len(), expected.len(), "live key count");
    for (got, want) in resp.kvs.iter().zip(&expected) {
        assert_eq!(got, want, "key {}", String::from_utf8_lossy(&want.key));
    }
    assert_eq!(
        resp.header.as_ref().unwrap().revision,
        m.rev,
        "header revision"
    );
    assert!(expected.iter().any(|kv| kv.value.len() > 1_048_576));

    // History below the compaction is gone; at the compaction revision it is there.
    let below = etcdctl_raw(
        &[
            "--endpoints",
            &etcd.endpoint,
            "get",
            "/registry/test/k000002",
            &format!("--rev={}", compact - 1),
        ],
        None,
    );
    assert!(!below.status.success());
    assert!(String::from_utf8_lossy(&below.stderr).contains("required revision has been compacted"));
    let at = etcd.get(b"/registry/test/k000002", false, Some(compact));
    assert_eq!(at.kvs.len(), 1);

    // Leases survived.
    let leases = String::from_utf8(etcd.ctl(&["lease", "list"])).unwrap();
    assert!(leases.contains(&format!("{LEASE_A:x}")), "{leases}");
    assert!(leases.contains(&format!("{LEASE_B:x}")), "{leases}");

    // History above the compaction is served as written (a sample of revisions).
    let history: Vec<(&Vec<u8>, &KeyValue)> = m
        .entries
        .iter()
        .filter(|(rk, _)| Revision::from_key(rk).unwrap().0.main > compact)
        .collect();
    for (rk, kv) in history.iter().step_by(history.len() / 15 + 1) {
        let (r, tomb) = Revision::from_key(rk).unwrap();
        let got = etcd.get(&kv.key, false, Some(r.main));
        if tomb {
            assert!(got.kvs.is_empty(), "tombstone at {r}");
        } else {
            assert_eq!(got.kvs, vec![(*kv).clone()], "history at {r}");
        }
    }

    // And it accepts writes at the next revision, and a defrag (bbolt rewrites every page).
    let rev = etcd.write_rev(&["put", "/new", "x"], None);
    assert_eq!(rev, m.rev + 1);
    etcd.ctl(&["defrag"]);
    let after = etcd.get(b"", true, None);
    assert_eq!(after.kvs.len(), expected.len() + 1);
}

#[test]
fn writer_streams_from_keel_backend() {
    use crate::backend::{fjall_backend::FjallBackend, Backend, Space, WriteBatch};
    let dir = tempfile::tempdir().unwrap();
    let backend = FjallBackend::open(&dir.path().join("store")).unwrap();
    let mut m = Model::new();
    for i in 0..300u32 {
        m.put1(
            format!("k{i:04}").as_bytes(),
            &vec![b'v'; (i * 13) as usize],
            LEASE_A,
        );
    }
    let mut batch = WriteBatch::default();
    for (k, v) in m.kv_pairs() {
        batch.put(Space::Kv, k, v);
    }
    let (lk, lv) = lease_pair(LEASE_A, 30);
    batch.put(Space::Lease, lk, lv);
    backend.write(batch).unwrap();
    let path = dir.path().join("from-backend.db");
    let input = EtcdDbInput::new(
        backend_space(&backend, Space::Kv),
        backend_space(&backend, Space::Lease),
    );
    let written = write_etcd_snapshot_file(&path, input).unwrap();
    let r = BoltReader::open_snapshot(&path).unwrap();
    assert_eq!(read_bucket(&r, b"key"), m.kv_pairs());
    assert_eq!(read_bucket(&r, b"lease"), vec![lease_pair(LEASE_A, 30)]);
    assert_eq!(r.summary().unwrap(), written.summary);
}

#[test]
fn reader_reads_snapshot_saved_by_real_etcd() {
    tool("etcd");
    tool("etcdctl");
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(
        &dir.path().join("data"),
        "n1",
        free_port(),
        dir.path().join("etcd.log"),
    );
    let mut m = Model::new();

    fn put(etcd: &Etcd, m: &mut Model, key: &str, value: &[u8], lease: i64) {
        let lease_arg = format!("--lease={lease:x}");
        let mut args = vec!["put", key];
        if lease != 0 {
            args.push(&lease_arg);
        }
        let rev = etcd.write_rev(&args, Some(value));
        assert_eq!(rev, m.put1(key.as_bytes(), value, lease), "put {key}");
    }
    put(&etcd, &mut m, "a", b"1", 0);
    put(&etcd, &mut m, "b", b"1", 0);
    put(&etcd, &mut m, "a", b"2", 0);
    put(&etcd, &mut m, "big", &vec![b'z'; 200_000], 0);
    put(&etcd, &mut m, "p/1", b"x", 0);
    put(&etcd, &mut m, "p/2", b"y", 0);
    let grant = String::from_utf8(etcd.ctl(&["lease", "grant", "3600", "-w", "json"])).unwrap();
    let lease = json_num(&grant, "ID") as i64;
    put(&etcd, &mut m, "l/1", b"leased", lease);
    put(&etcd, &mut m, "l/2", b"leased", lease);
    // Delete one key, then a prefix (two tombstones at one revision, subs 0 and 1).
    let rev = etcd.write_rev(&["del", "b"], None);
    let main = m.next();
    assert_eq!(rev, main);
    m.del(main, 0, b"b");
    let rev = etcd.write_rev(&["del", "p/", "--prefix"], None);
    let main = m.next();
    assert_eq!(rev, main);
    m.del(main, 0, b"p/1");
    m.del(main, 1, b"p/2");
    for i in 0..30 {
        put(&etcd, &mut m, &format!("many/{i:03}"), &vec![b'm'; 500], 0);
    }
    put(&etcd, &mut m, "a", b"3", 0);
    let compact = m.rev - 5;
    etcd.ctl(&["compact", &compact.to_string(), "--physical"]);
    m.compact(compact);
    put(&etcd, &mut m, "a", b"4", 0);
    put(&etcd, &mut m, "b", b"reborn", 0);

    // The model's history agrees with what etcd serves at each revision.
    for (rk, kv) in &m.entries {
        let (r, tomb) = Revision::from_key(rk).unwrap();
        let at = r.main.max(compact);
        let got = etcd.get(&kv.key, false, Some(at));
        if tomb {
            assert!(got.kvs.is_empty(), "tombstone {r}");
        } else {
            assert_eq!(got.kvs, vec![kv.clone()], "history of {r}");
        }
    }

    let file = dir.path().join("etcd.snapshot.db");
    etcd.ctl(&["snapshot", "save", file.to_str().unwrap()]);
    let r = BoltReader::open_snapshot(&file).unwrap();
    assert!(r.has_sha256_trailer());
    let names: Vec<String> = r
        .bucket_names()
        .unwrap()
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    println!("buckets in etcd's snapshot: {names:?}, meta {:?}", r.meta());
    for b in ["key", "lease", "meta", "cluster", "members"] {
        assert!(names.iter().any(|n| n == b), "bucket {b} in {names:?}");
    }

    // The key bucket is exactly the history the model implies.
    let got = read_bucket(&r, b"key");
    let want = m.kv_pairs();
    let got_keys: Vec<String> = got
        .iter()
        .map(|(k, _)| format!("{:?}", Revision::from_key(k)))
        .collect();
    let want_keys: Vec<String> = want
        .iter()
        .map(|(k, _)| format!("{:?}", Revision::from_key(k)))
        .collect();
    assert_eq!(got_keys, want_keys, "revision keys");
    for ((gk, gv), (_, wv)) in got.iter().zip(&want) {
        assert_eq!(
            KeyValue::decode(gv.as_slice()).unwrap(),
            KeyValue::decode(wv.as_slice()).unwrap(),
            "value at {:?}",
            Revision::from_key(gk)
        );
    }
    assert_eq!(got, want, "encoded KeyValue bytes");

    // The lease, with its TTL.
    let leases = read_bucket(&r, b"lease");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].0, (lease as u64).to_be_bytes().to_vec());
    let rec = LeaseRecord::decode(leases[0].1.as_slice()).unwrap();
    assert_eq!((rec.id, rec.ttl), (lease, 3600));

    let meta = r.etcd_meta().unwrap();
    println!("etcd meta: {meta:?}");
    assert_eq!(meta.finished_compact_rev, Some(compact));
    assert_eq!(meta.scheduled_compact_rev, Some(compact));
    assert!(meta.consistent_index.unwrap_or(0) > 0);
    assert_eq!(meta.cluster_version.as_deref(), Some("3.4.0"));

    // Our summary equals etcdctl's, hash included.
    let (status, json) = etcdctl_status(&file);
    println!("etcdctl snapshot status -w json: {json}");
    assert_eq!(r.summary().unwrap(), status);
    assert_eq!(status.revision, m.rev);
}

#[test]
fn large_write_streams_and_passes_etcdctl_status() {
    tool("etcdctl");
    const N: i64 = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.db");
    // Generated lazily: nothing but the writer's own buffers is held.
    let kvs = (0..N).map(|i| {
        let main = i + 2;
        let kv = KeyValue {
            key: format!("/registry/pods/ns-{:04}/pod-{i:07}", i % 1000)
                .into_bytes()
                .into(),
            create_revision: main,
            mod_revision: main,
            version: 1,
            value: vec![b'p'; 100 + (i % 200) as usize].into(),
            lease: 0,
        };
        Ok((Revision::new(main, 0).to_key(false), kv.encode_to_vec()))
    });
    let mut input = EtcdDbInput::new(Box::new(kvs), ok_iter(vec![]));
    input.consistent_index = N as u64;
    let before = vmhwm_kib();
    let t = Instant::now();
    let written = write_etcd_snapshot_file(&file, input).unwrap();
    let took = t.elapsed();
    let after = vmhwm_kib();
    println!(
        "200k keys: wrote {} bytes (db {}) in {took:?}; VmHWM before {before} KiB, after {after} KiB",
        written.file_size, written.summary.total_size
    );
    let t = Instant::now();
    let r = BoltReader::open_snapshot(&file).unwrap();
    let mut n = 0;
    for pair in r.bucket(b"key").unwrap().unwrap() {
        pair.unwrap();
        n += 1;
    }
    assert_eq!(n, N);
    assert_eq!(r.summary().unwrap(), written.summary);
    println!(
        "200k keys: read back (sha256 + walk + summary) in {:?}; VmHWM now {} KiB",
        t.elapsed(),
        vmhwm_kib()
    );
    let (status, json) = etcdctl_status(&file);
    println!("etcdctl snapshot status -w json: {json}");
    assert_eq!(status, written.summary);
    assert_eq!(status.revision, N + 1);
}

// ---------------------------------------------------------------------------------------------
// Round trips and damage, without external tools.

/// A small but multi-level file: big values, branch pages, a few buckets.
fn sample_file(dir: &Path) -> (PathBuf, Model) {
    let mut m = Model::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..1500u32 {
        let len = if i % 300 == 0 {
            20_000
        } else {
            rng.gen_range(1..400)
        };
        let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        m.put1(format!("k/{i:05}").as_bytes(), &value, 0);
    }
    let main = m.next();
    m.del(main, 0, b"k/00003");
    let path = dir.join("sample.db");
    let mut input = EtcdDbInput::new(
        ok_iter(m.kv_pairs()),
        ok_iter(vec![lease_pair(LEASE_A, 60)]),
    );
    input.compact_revision = Some(3);
    input.term = Some(9);
    input.removed_members = vec![42];
    write_etcd_snapshot_file(&path, input).unwrap();
    (path, m)
}

#[test]
fn round_trip_writer_to_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (path, m) = sample_file(dir.path());
    let r = BoltReader::open_snapshot(&path).unwrap();
    assert_eq!(r.meta().txid, 2);
    assert_eq!(r.meta().page_size as usize, PAGE_SIZE);
    let names: Vec<&[u8]> = ETCD_BUCKETS.iter().map(|b| b.as_bytes()).collect();
    assert_eq!(r.bucket_names().unwrap(), names);
    assert_eq!(read_bucket(&r, b"key"), m.kv_pairs());
    assert_eq!(read_bucket(&r, b"lease"), vec![lease_pair(LEASE_A, 60)]);
    assert_eq!(
        read_bucket(&r, b"members_removed"),
        vec![(b"000000000000002a".to_vec(), b"removed".to_vec())]
    );
    assert_eq!(read_bucket(&r, b"alarm"), vec![]);
    assert_eq!(
        r.etcd_meta().unwrap(),
        EtcdMeta {
            consistent_index: Some(0),
            term: Some(9),
            scheduled_compact_rev: Some(3),
            finished_compact_rev: Some(3),
            cluster_version: Some("3.4.0".into()),
        }
    );
    // entries() sees every bucket and pair, in order.
    let all: Vec<Entry> = r.entries().unwrap().collect::<Result<_, _>>().unwrap();
    let buckets = all.iter().filter(|e| matches!(e, Entry::Bucket(_))).count();
    assert_eq!(buckets, ETCD_BUCKETS.len());
    assert_eq!(r.summary().unwrap().total_key as usize, all.len() - buckets);

    // The generic writer: empty buckets, a bucket big enough for three tree levels.
    let path2 = dir.path().join("generic.db");
    let f = std::fs::File::create(&path2).unwrap();
    let mut w = BoltWriter::new(f).unwrap();
    w.bucket(b"empty", std::iter::empty()).unwrap();
    let many: Vec<Pair> = (0..60_000u32)
        .map(|i| (format!("{i:08}").into_bytes(), vec![1u8; 40]))
        .collect();
    w.bucket(b"many", many.clone().into_iter().map(Ok)).unwrap();
    let (_, summary) = w.finish().unwrap();
    let r2 = BoltReader::open(&path2).unwrap();
    assert!(!r2.has_sha256_trailer());
    assert!(matches!(
        r2.verify_sha256(),
        Err(SnapshotError::MissingHashTrailer { .. })
    ));
    assert_eq!(read_bucket(&r2, b"empty"), vec![]);
    assert_eq!(read_bucket(&r2, b"many"), many);
    assert_eq!(r2.summary().unwrap(), summary);
}

#[test]
fn writer_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let unsorted = vec![
        (Revision::new(3, 0).to_key(false), vec![]),
        (Revision::new(2, 0).to_key(false), vec![]),
    ];
    let err = write_etcd_db(
        std::fs::File::create(dir.path().join("a")).unwrap(),
        EtcdDbInput::new(ok_iter(unsorted), ok_iter(vec![])),
    )
    .unwrap_err();
    assert!(matches!(err, SnapshotError::UnsortedInput { .. }), "{err}");
    println!("unsorted input: {err}");

    let err = write_etcd_db(
        std::fs::File::create(dir.path().join("b")).unwrap(),
        EtcdDbInput::new(ok_iter(vec![(b"foo".to_vec(), vec![])]), ok_iter(vec![])),
    )
    .unwrap_err();
    assert!(err.to_string().contains("not a revision key"), "{err}");

    let err = write_etcd_db(
        std::fs::File::create(dir.path().join("c")).unwrap(),
        EtcdDbInput::new(
            Box::new(std::iter::once(Err(SnapshotError::Store(
                crate::error::StoreError::Backend("disk on fire".into()),
            )))),
            ok_iter(vec![]),
        ),
    )
    .unwrap_err();
    assert!(err.to_string().contains("disk on fire"), "{err}");
}

#[test]
fn member_json_matches_etcd() {
    let m = EtcdMember {
        id: 3319814642761637952,
        name: "n1".into(),
        peer_urls: vec!["http://127.0.0.1:23800".into()],
        client_urls: vec!["http://127.0.0.1:23790".into()],
        is_learner: false,
    };
    // Observed in a real etcd 3.4 snapshot (research notes §2.5).
    assert_eq!(
        m.to_json(),
        r#"{"id":3319814642761637952,"peerURLs":["http://127.0.0.1:23800"],"name":"n1","clientURLs":["http://127.0.0.1:23790"]}"#
    );
    assert_eq!(m.key(), b"2e1259d415f2a040".to_vec());
    let l = EtcdMember {
        id: 1,
        name: "a\"<b>".into(),
        peer_urls: vec![],
        client_urls: vec![],
        is_learner: true,
    };
    assert_eq!(
        l.to_json(),
        r#"{"id":1,"peerURLs":null,"isLearner":true,"name":"a\"\u003cb\u003e"}"#
    );
}

/// Page offsets of the first page with `flags` at or after page 3.
fn find_page(bytes: &[u8], flags: u16, min_count: u16) -> usize {
    let mut p = 3;
    while (p + 1) * PAGE_SIZE <= bytes.len() {
        let off = p * PAGE_SIZE;
        let f = u16::from_le_bytes([bytes[off + 8], bytes[off + 9]]);
        let count = u16::from_le_bytes([bytes[off + 10], bytes[off + 11]]);
        let overflow = u32::from_le_bytes(bytes[off + 12..off + 16].try_into().unwrap());
        if f == flags && count >= min_count {
            return off;
        }
        p += 1 + overflow as usize;
    }
    panic!("no page with flags {flags}");
}

fn walk_all(path: &Path) -> Result<DbSummary, SnapshotError> {
    BoltReader::open(path)?.summary()
}

#[test]
fn damaged_files_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let db_len = good.len() - SHA256_LEN;
    let bad = dir.path().join("bad.db");
    let check = |bytes: &[u8], verify: bool| -> SnapshotError {
        std::fs::write(&bad, bytes).unwrap();
        let r = if verify {
            BoltReader::open_snapshot(&bad).map(|_| ())
        } else {
            walk_all(&bad).map(|_| ())
        };
        let e = r.expect_err("damaged file accepted");
        println!("  -> {e}");
        e
    };

    // Truncated in the middle (the trailer rule no longer holds, the data is cut short).
    let e = check(&good[..good.len() / 2], true);
    assert!(matches!(e, SnapshotError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("truncated"));
    // Truncated to less than a meta page.
    let e = check(&good[..40], false);
    assert!(matches!(e, SnapshotError::Truncated { .. }), "{e}");

    // Missing trailer.
    let e = check(&good[..db_len], true);
    assert!(matches!(e, SnapshotError::MissingHashTrailer { .. }), "{e}");

    // A flipped data byte: the trailer catches it.
    let mut b = good.clone();
    b[5 * PAGE_SIZE + 100] ^= 0x40;
    let e = check(&b, true);
    assert!(matches!(e, SnapshotError::Sha256Mismatch { .. }), "{e}");

    // Wrong trailer.
    let mut b = good.clone();
    let n = b.len();
    b[n - 1] ^= 1;
    let e = check(&b, true);
    assert!(e.to_string().contains("sha256 checksum mismatch"), "{e}");

    // One bad meta checksum: the other meta takes over. Both bad: a checksum error.
    let mut b = good[..db_len].to_vec();
    b[16 + 48] ^= 1; // meta 0 txid
    std::fs::write(&bad, &b).unwrap();
    let r = BoltReader::open(&bad).unwrap();
    assert_eq!(r.meta().page, 1);
    r.summary().unwrap();
    b[PAGE_SIZE + 16 + 48] ^= 1;
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::BadMetaChecksum { .. }), "{e}");

    // Not a bbolt file.
    let mut b = good[..db_len].to_vec();
    b[16] = 0;
    b[PAGE_SIZE + 16] = 0;
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::BadMagic { .. }), "{e}");

    // A branch pointing back at an earlier page: a loop.
    let mut b = good[..db_len].to_vec();
    let br = find_page(&b, BRANCH_PAGE, 2);
    let first: [u8; 8] = b[br + 16 + 8..br + 16 + 16].try_into().unwrap();
    b[br + 32 + 8..br + 32 + 16].copy_from_slice(&first);
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::PageLoop { .. }), "{e}");

    // A branch pointing past the end.
    let mut b = good[..db_len].to_vec();
    b[br + 32 + 8..br + 32 + 16].copy_from_slice(&1_000_000u64.to_le_bytes());
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::PageOutOfRange { .. }), "{e}");

    // Keys out of order inside a leaf: zero the second key.
    let mut b = good[..db_len].to_vec();
    let leaf = find_page(&b, LEAF_PAGE, 3);
    let e1 = leaf + 16 + 16;
    let pos = u32::from_le_bytes(b[e1 + 4..e1 + 8].try_into().unwrap()) as usize;
    let ksize = u32::from_le_bytes(b[e1 + 8..e1 + 12].try_into().unwrap()) as usize;
    b[e1 + pos..e1 + pos + ksize].fill(0);
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::UnsortedKeys { .. }), "{e}");

    // An element pointing outside its page.
    let mut b = good[..db_len].to_vec();
    b[e1 + 4..e1 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::CorruptPage { .. }), "{e}");

    // A leaf where a branch should be: wrong page type.
    let mut b = good[..db_len].to_vec();
    b[leaf + 8..leaf + 10].copy_from_slice(&0x10u16.to_le_bytes());
    let e = check(&b, false);
    assert!(matches!(e, SnapshotError::BadPageType { .. }), "{e}");
}

#[test]
fn random_damage_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let bad = dir.path().join("fuzz.db");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xbb01);
    let mut outcomes: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..200 {
        let mut b = good.clone();
        match rng.gen_range(0..4) {
            0 => b.truncate(rng.gen_range(0..good.len())),
            // Flips biased to the structural part (metas, early pages) half of the time.
            1 => {
                for _ in 0..rng.gen_range(1..8) {
                    let i = rng.gen_range(0..(8 * PAGE_SIZE).min(b.len()));
                    b[i] ^= 1 << rng.gen_range(0..8);
                }
            }
            _ => {
                for _ in 0..rng.gen_range(1..8) {
                    let i = rng.gen_range(0..b.len());
                    b[i] = rng.gen();
                }
            }
        }
        std::fs::write(&bad, &b).unwrap();
        // Unhashed walk (exercises the structural checks) and the hashed open.
        let walk = walk_all(&bad);
        let snap = BoltReader::open_snapshot(&bad).map(|_| ());
        let name = |r: Result<(), SnapshotError>| match r {
            Ok(()) => "Ok".to_string(),
            Err(e) => format!("{e:?}")
                .split([' ', '(', '{'])
                .next()
                .unwrap()
                .to_string(),
        };
        *outcomes
            .entry(format!("walk {}", name(walk.map(|_| ()))))
            .or_default() += 1;
        *outcomes
            .entry(format!("snapshot {}", name(snap)))
            .or_default() += 1;
    }
    println!("outcomes over 200 damaged files: {outcomes:?}");
}

#[test]
fn reader_follows_inline_buckets() {
    // bbolt inlines small buckets (etcd's alarm/auth/cluster usually are): value = 16-byte
    // header with root 0, then a leaf page image. Build such a file by hand.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inline.db");
    let mut inline = vec![0u8; 16];
    let mut page = vec![0u8; 16];
    page[8..10].copy_from_slice(&LEAF_PAGE.to_le_bytes());
    page[10..12].copy_from_slice(&2u16.to_le_bytes());
    let items: [(&[u8], &[u8]); 2] = [(b"clusterVersion", b"3.4.0"), (b"x", b"y")];
    let mut data = Vec::new();
    for (i, (k, v)) in items.iter().enumerate() {
        let elem_off = 16 + i * 16;
        let pos = 16 + items.len() * 16 + data.len() - elem_off;
        page.extend_from_slice(&0u32.to_le_bytes());
        page.extend_from_slice(&(pos as u32).to_le_bytes());
        page.extend_from_slice(&(k.len() as u32).to_le_bytes());
        page.extend_from_slice(&(v.len() as u32).to_le_bytes());
        data.extend_from_slice(k);
        data.extend_from_slice(v);
    }
    page.extend_from_slice(&data);
    inline.extend_from_slice(&page);
    // Top-level root leaf at page 3 with one bucket element whose value is `inline`.
    let mut file = vec![0u8; 4 * PAGE_SIZE];
    let root = 3 * PAGE_SIZE;
    file[root..root + 8].copy_from_slice(&3u64.to_le_bytes());
    file[root + 8..root + 10].copy_from_slice(&LEAF_PAGE.to_le_bytes());
    file[root + 10..root + 12].copy_from_slice(&1u16.to_le_bytes());
    let e = root + 16;
    file[e..e + 4].copy_from_slice(&BUCKET_LEAF_FLAG.to_le_bytes());
    file[e + 4..e + 8].copy_from_slice(&16u32.to_le_bytes());
    file[e + 8..e + 12].copy_from_slice(&7u32.to_le_bytes());
    file[e + 12..e + 16].copy_from_slice(&(inline.len() as u32).to_le_bytes());
    file[e + 16..e + 23].copy_from_slice(b"cluster");
    file[e + 23..e + 23 + inline.len()].copy_from_slice(&inline);
    for (pg, txid) in [(0u64, 2u64), (1, 1)] {
        let off = pg as usize * PAGE_SIZE;
        file[off..off + 8].copy_from_slice(&pg.to_le_bytes());
        file[off + 8..off + 10].copy_from_slice(&META_PAGE.to_le_bytes());
        let m = &mut file[off + 16..off + 16 + 64];
        m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        m[4..8].copy_from_slice(&VERSION.to_le_bytes());
        m[8..12].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        m[16..24].copy_from_slice(&3u64.to_le_bytes());
        m[32..40].copy_from_slice(&NO_FREELIST.to_le_bytes());
        m[40..48].copy_from_slice(&4u64.to_le_bytes());
        m[48..56].copy_from_slice(&txid.to_le_bytes());
        let sum = fnv1a64(&m[..56]);
        m[56..64].copy_from_slice(&sum.to_le_bytes());
    }
    std::fs::write(&path, &file).unwrap();
    let r = BoltReader::open(&path).unwrap();
    assert_eq!(r.meta().txid, 2);
    assert_eq!(
        read_bucket(&r, b"cluster"),
        vec![
            (b"clusterVersion".to_vec(), b"3.4.0".to_vec()),
            (b"x".to_vec(), b"y".to_vec())
        ]
    );
    assert_eq!(
        r.etcd_meta().unwrap().cluster_version.as_deref(),
        Some("3.4.0")
    );
    // etcdctl agrees when it is installed (this file has the freelist etcd's way: none).
    let (status, _) = etcdctl_status(&path);
    assert_eq!(status, r.summary().unwrap());
}
