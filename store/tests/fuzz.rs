//! Fuzzing of the bbolt reader and the etcd snapshot import with corrupt files: every damaged
//! file must give a `SnapshotError`/`EtcdSnapshotError`, never a panic, a hang or an allocation
//! sized by a field of the file. Seeds are files keel's own writer makes (etcd's format, checked
//! against the real etcdctl in the bbolt tests). A smoke pass by default; see docs/fuzzing.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::io::Cursor;
use std::path::Path;

use keel_fuzz::{Target, Verdict};
use keel_store::bbolt::{
    append_sha256_trailer, write_etcd_db, BoltReader, EtcdDbInput, EtcdMember, Pair, SnapshotError,
};
use keel_store::etcd_snapshot::{import_etcd, verify_etcd_file, ImportOptions};
use keel_store::lease::LeaseRecord;
use keel_store::pb::etcdserverpb::{AlarmMember, AlarmType};
use keel_store::pb::mvccpb::KeyValue;
use keel_store::Revision;
use prost::Message;

#[global_allocator]
static ALLOC: keel_fuzz::CappedAlloc = keel_fuzz::CappedAlloc;

/// A small etcd backend: `keys` puts (some overwritten, one deleted), two leases, a member, an
/// alarm; optionally with etcdctl's SHA-256 trailer.
fn etcd_file(keys: u32, value_len: usize, trailer: bool) -> Vec<u8> {
    let mut kvs: Vec<Pair> = Vec::new();
    let mut rev = 1i64;
    for i in 0..keys {
        rev += 1;
        let kv = KeyValue {
            key: format!("/registry/k{i:04}").into_bytes().into(),
            create_revision: rev,
            mod_revision: rev,
            version: 1,
            value: vec![b'v'; value_len + (i as usize % 7)].into(),
            lease: if i % 5 == 0 { 0x0abc } else { 0 },
        };
        kvs.push((Revision::new(rev, 0).to_key(false), kv.encode_to_vec()));
    }
    rev += 1;
    let tomb = KeyValue {
        key: b"/registry/k0000".to_vec().into(),
        mod_revision: rev,
        ..Default::default()
    };
    kvs.push((Revision::new(rev, 0).to_key(true), tomb.encode_to_vec()));
    let leases: Vec<Pair> = [0x0abc_i64, 0x694d_77aa_1234_5678]
        .iter()
        .map(|id| {
            let rec = LeaseRecord {
                id: *id,
                ttl: 60,
                remaining_ttl: 0,
            };
            ((*id as u64).to_be_bytes().to_vec(), rec.encode_to_vec())
        })
        .collect();
    let mut input = EtcdDbInput::new(
        Box::new(kvs.into_iter().map(Ok)),
        Box::new(leases.into_iter().map(Ok)),
    );
    input.members = vec![EtcdMember {
        id: 0x2e12_3456_789a_bcde,
        name: "m1".into(),
        peer_urls: vec!["http://10.0.0.1:2380".into()],
        client_urls: vec!["http://10.0.0.1:2379".into()],
        is_learner: false,
    }];
    input.consistent_index = 42;
    input.compact_revision = Some(3);
    let alarm = AlarmMember {
        member_id: 0x2e12_3456_789a_bcde,
        alarm: AlarmType::Nospace as i32,
    };
    input.alarms = vec![(alarm.encode_to_vec(), Vec::new())];
    let mut out = Cursor::new(Vec::new());
    write_etcd_db(&mut out, input).unwrap();
    if trailer {
        append_sha256_trailer(&mut out).unwrap();
    }
    out.into_inner()
}

/// Everything a reader of an untrusted file does: open, hash check, meta, a full structural walk,
/// every bucket read to its end, etcd's meta bucket. Err at the first refusal.
fn read_all(path: &Path) -> Result<BoltReader, SnapshotError> {
    let r = BoltReader::open(path)?;
    let _ = r.meta();
    let _ = r.db_size();
    if r.has_sha256_trailer() {
        r.verify_sha256()?;
    }
    r.summary()?;
    for name in r.bucket_names()? {
        if let Some(b) = r.bucket(&name)? {
            for pair in b {
                pair?;
            }
        }
    }
    for e in r.entries()? {
        e?;
    }
    r.etcd_meta()?;
    Ok(r)
}

fn seeds() -> Vec<Vec<u8>> {
    vec![
        etcd_file(3, 10, false),
        etcd_file(40, 100, false),
        etcd_file(8, 5000, true),  // overflow pages
        etcd_file(300, 20, false), // branch pages
    ]
}

/// The reader alone: every structural check on every page a walk reaches.
#[test]
fn fuzz_bbolt_reader() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("db");
    Target::new("bbolt_reader")
        .seeds(seeds())
        .max_len(1 << 20)
        .run(|b| {
            std::fs::write(&file, b).unwrap();
            Verdict::from(
                read_all(&file)
                    .map_err(drop)
                    .and_then(|r| verify_etcd_file(&r).map(drop).map_err(drop)),
            )
        })
        .assert_clean();
}

/// What a restore does with a file that passes the reader's checks: decode every revision key,
/// KeyValue, lease and alarm and load them into a fresh store.
#[test]
fn fuzz_etcd_snapshot_import() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("db");
    let mut imports = 0u64;
    let report = Target::new("etcd_snapshot_import")
        .seeds(seeds())
        .max_len(1 << 20)
        .run(|b| {
            std::fs::write(&file, b).unwrap();
            let Ok(r) = read_all(&file) else {
                return Verdict::Rejected;
            };
            if verify_etcd_file(&r).is_err() {
                return Verdict::Rejected;
            }
            imports += 1;
            let target = dir.path().join(format!("import-{imports}"));
            let res = import_etcd(&target, &r, &ImportOptions::default(), &|_| {});
            let _ = std::fs::remove_dir_all(&target);
            Verdict::from(res.map(drop))
        });
    eprintln!("keel-fuzz: etcd_snapshot_import: {imports} imports");
    report.assert_clean();
}
