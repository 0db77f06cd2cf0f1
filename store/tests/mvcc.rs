//! The store through its public API: revisions, reads from history, Txn, compaction, leases,
//! reopen and snapshot round trips.

use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{
    compare, request_op, response_op, CompactionRequest, Compare, DeleteRangeRequest,
    LeaseGrantRequest, LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use keel_store::{Command, CommandResponse, Store, StoreError, StoreOptions};

fn put(k: &str, v: &str) -> Command {
    Command::new(CommandKind::Put(PutRequest {
        key: k.as_bytes().to_vec().into(),
        value: v.as_bytes().to_vec().into(),
        ..Default::default()
    }))
}

/// (key, value, create revision, mod revision, version)
type Row = (String, String, i64, i64, i64);

fn get(s: &Store, k: &str, rev: i64) -> Result<Vec<Row>, StoreError> {
    let r = s.range(&RangeRequest {
        key: k.as_bytes().to_vec().into(),
        range_end: if k == "\0" {
            vec![0].into()
        } else {
            Default::default()
        },
        revision: rev,
        ..Default::default()
    })?;
    Ok(r.kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into(),
                String::from_utf8_lossy(&kv.value).into(),
                kv.create_revision,
                kv.mod_revision,
                kv.version,
            )
        })
        .collect())
}

fn apply(s: &Store, cmds: Vec<Command>) -> Vec<Result<Option<CommandResponse>, StoreError>> {
    match s.apply(cmds.into_iter().map(Some).collect(), b"meta".to_vec()) {
        Ok(r) => r,
        Err(e) => panic!("the backend failed: {e}"),
    }
}

#[test]
fn revisions_versions_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(s.revision(), 1);
    apply(&s, vec![put("a", "1"), put("a", "2"), put("b", "x")]);
    assert_eq!(s.revision(), 4);
    assert_eq!(
        get(&s, "a", 0).unwrap(),
        vec![("a".into(), "2".into(), 2, 3, 2)]
    );
    assert_eq!(
        get(&s, "a", 2).unwrap(),
        vec![("a".into(), "1".into(), 2, 2, 1)]
    );
    // Deleting nothing keeps the revision; deleting something takes one.
    let del = |k: &str| {
        Command::new(CommandKind::DeleteRange(DeleteRangeRequest {
            key: k.as_bytes().to_vec().into(),
            prev_kv: true,
            ..Default::default()
        }))
    };
    apply(&s, vec![del("nope")]);
    assert_eq!(s.revision(), 4);
    let r = apply(&s, vec![del("a")]);
    match &r[0] {
        Ok(Some(CommandResponse::DeleteRange(d))) => {
            assert_eq!(d.deleted, 1);
            assert_eq!(d.prev_kvs[0].value.as_ref(), b"2");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.revision(), 5);
    assert!(get(&s, "a", 0).unwrap().is_empty());
    apply(&s, vec![put("a", "new")]);
    assert_eq!(
        get(&s, "a", 0).unwrap(),
        vec![("a".into(), "new".into(), 6, 6, 1)]
    );
    assert_eq!(get(&s, "a", 7), Err(StoreError::FutureRev));
}

#[test]
fn txn_compares_reads_own_writes_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    apply(&s, vec![put("k", "v")]);
    let t = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Mod as i32,
            key: b"k".to_vec().into(),
            target_union: Some(compare::TargetUnion::ModRevision(2)),
            ..Default::default()
        }],
        success: vec![
            RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: b"k".to_vec().into(),
                    value: b"w".to_vec().into(),
                    ..Default::default()
                })),
            },
            RequestOp {
                request: Some(request_op::Request::RequestRange(RangeRequest {
                    key: b"k".to_vec().into(),
                    ..Default::default()
                })),
            },
        ],
        failure: vec![],
    };
    let r = apply(&s, vec![Command::new(CommandKind::Txn(t.clone()))]);
    let Ok(Some(CommandResponse::Txn(tr))) = &r[0] else {
        panic!("{r:?}")
    };
    assert!(tr.succeeded);
    assert_eq!(tr.header.as_ref().unwrap().revision, 3);
    let Some(response_op::Response::ResponseRange(rr)) = &tr.responses[1].response else {
        panic!()
    };
    assert_eq!(rr.kvs[0].value.as_ref(), b"w");
    // Same compare now fails: mod revision moved on; nothing changes, no new revision.
    let r = apply(&s, vec![Command::new(CommandKind::Txn(t))]);
    let Ok(Some(CommandResponse::Txn(tr))) = &r[0] else {
        panic!("{r:?}")
    };
    assert!(!tr.succeeded);
    assert_eq!(s.revision(), 3);

    let compact = |rev| {
        Command::new(CommandKind::Compaction(CompactionRequest {
            revision: rev,
            physical: true,
        }))
    };
    assert!(matches!(
        apply(&s, vec![compact(4)])[0],
        Err(StoreError::FutureRev)
    ));
    apply(&s, vec![compact(3)]);
    assert_eq!(get(&s, "k", 2), Err(StoreError::Compacted));
    assert_eq!(get(&s, "k", 3).unwrap().len(), 1);
    assert!(matches!(
        apply(&s, vec![compact(3)])[0],
        Err(StoreError::Compacted)
    ));
}

#[test]
fn lease_revoke_deletes_keys_in_one_revision_and_state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        apply(
            &s,
            vec![Command::new(CommandKind::LeaseGrant(LeaseGrantRequest {
                ttl: 1,
                id: 42,
            }))],
        );
        let attach = |k: &str| {
            Command::new(CommandKind::Put(PutRequest {
                key: k.as_bytes().to_vec().into(),
                lease: 42,
                ..Default::default()
            }))
        };
        apply(&s, vec![attach("x"), attach("y"), put("z", "free")]);
        let bad = Command::new(CommandKind::Put(PutRequest {
            key: b"q".to_vec().into(),
            lease: 7,
            ..Default::default()
        }));
        assert!(matches!(
            apply(&s, vec![bad])[0],
            Err(StoreError::LeaseNotFound)
        ));
        let (_, granted, keys) = s.lease_time_to_live(keel_store::LeaseId(42), true).unwrap();
        assert_eq!((granted, keys.len()), (2, 2), "TTL raised to the minimum");
        s.flush().unwrap();
    }
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(s.revision(), 4);
    assert_eq!(
        s.lease_time_to_live(keel_store::LeaseId(42), true)
            .unwrap()
            .2
            .len(),
        2
    );
    apply(
        &s,
        vec![Command::new(CommandKind::LeaseRevoke(LeaseRevokeRequest {
            id: 42,
        }))],
    );
    assert_eq!(s.revision(), 5);
    assert!(get(&s, "x", 0).unwrap().is_empty() && get(&s, "y", 0).unwrap().is_empty());
    assert_eq!(get(&s, "z", 0).unwrap().len(), 1);

    // A snapshot carries everything into a fresh store.
    let mut buf = Vec::new();
    s.write_snapshot(&mut buf).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let s2 = Store::open(dir2.path(), StoreOptions::default()).unwrap();
    s2.install_snapshot(&mut buf.as_slice(), 2).unwrap();
    assert_eq!(s2.revision(), 5);
    assert_eq!(get(&s2, "z", 4).unwrap(), get(&s, "z", 4).unwrap());
    assert_eq!(s2.hash_kv(0).unwrap(), s.hash_kv(0).unwrap());
    assert_eq!(s2.raft_meta(), Some(b"meta".to_vec()));
    // A damaged snapshot is refused.
    let mut bad = buf.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    let dir3 = tempfile::tempdir().unwrap();
    let s3 = Store::open(dir3.path(), StoreOptions::default()).unwrap();
    assert!(matches!(
        s3.install_snapshot(&mut bad.as_slice(), 2),
        Err(StoreError::Corrupt(_))
    ));
}

/// A writer that reports when the export starts writing and then waits to be let go.
struct Gate {
    started: Option<std::sync::mpsc::Sender<()>>,
    release: std::sync::mpsc::Receiver<()>,
    buf: Vec<u8>,
}

impl std::io::Write for Gate {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
            let _ = self.release.recv();
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn snapshot_export_is_one_point_in_time_and_does_not_hold_off_applies() {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    s.apply(
        vec![Some(put("a", "1")), Some(put("b", "1"))],
        b"m1".to_vec(),
    )
    .unwrap();
    let at = s.revision();
    let hash_at = s.hash_kv(at).unwrap();

    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let exporter = {
        let s = s.clone();
        std::thread::spawn(move || {
            let mut gate = Gate {
                started: Some(started_tx),
                release: release_rx,
                buf: Vec::new(),
            };
            s.write_snapshot(&mut gate).map(|sum| (sum, gate.buf))
        })
    };
    started.recv_timeout(Duration::from_secs(30)).unwrap();

    // The export is stalled mid-way; writes (including a compaction, which deletes history)
    // still go through, on another thread so a regression fails instead of hanging.
    let (done_tx, done) = mpsc::channel();
    {
        let s = s.clone();
        std::thread::spawn(move || {
            let del = Command::new(CommandKind::DeleteRange(DeleteRangeRequest {
                key: b"b".to_vec().into(),
                ..Default::default()
            }));
            s.apply(vec![Some(put("a", "2")), Some(del)], b"m2".to_vec())
                .unwrap();
            let compact = Command::new(CommandKind::Compaction(CompactionRequest {
                revision: s.revision(),
                ..Default::default()
            }));
            s.apply(vec![Some(compact)], b"m3".to_vec()).unwrap();
            let _ = done_tx.send(());
        });
    }
    done.recv_timeout(Duration::from_secs(30))
        .expect("applies waited for the snapshot export");
    release.send(()).unwrap();
    let (summary, buf) = exporter.join().unwrap().unwrap();
    assert_eq!(summary.revision, at);
    assert_eq!(summary.raft_meta, Some(b"m1".to_vec()));

    // The snapshot holds the state as it was when the export began, history included.
    let dir2 = tempfile::tempdir().unwrap();
    let s2 = Store::open(dir2.path(), StoreOptions::default()).unwrap();
    s2.install_snapshot(&mut buf.as_slice(), 2).unwrap();
    assert_eq!(s2.revision(), at);
    assert_eq!(s2.raft_meta(), Some(b"m1".to_vec()));
    assert_eq!(get(&s2, "a", 0).unwrap()[0].1, "1");
    assert_eq!(get(&s2, "b", 0).unwrap()[0].1, "1");
    assert_eq!(get(&s, "b", 0).unwrap(), Vec::new());
    assert_eq!(s2.hash_kv(at).unwrap(), hash_at);
}
