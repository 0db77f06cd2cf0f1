//! Alarms through the store's public API: NOSPACE refuses what grows the store and nothing
//! else, CORRUPT refuses the key space, and alarms survive reopen, keel snapshots and the
//! etcd-format export/import.

use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{
    alarm_request::AlarmAction, request_op, AlarmMember, AlarmRequest, AlarmType,
    CompactionRequest, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest,
};
use keel_store::{Command, CommandResponse, Store, StoreError, StoreOptions};

fn put(k: &str) -> Command {
    Command::new(CommandKind::Put(put_req(k)))
}

fn put_req(k: &str) -> PutRequest {
    PutRequest {
        key: k.as_bytes().to_vec().into(),
        value: b"v".to_vec().into(),
        ..Default::default()
    }
}

fn alarm(action: AlarmAction, member_id: u64, t: AlarmType) -> Command {
    Command::new(CommandKind::Alarm(AlarmRequest {
        action: action as i32,
        member_id,
        alarm: t as i32,
    }))
}

fn apply1(s: &Store, c: Command) -> Result<CommandResponse, StoreError> {
    let mut results = match s.apply(vec![Some(c)], b"meta".to_vec()) {
        Ok(r) => r,
        Err(e) => panic!("the backend failed: {e}"),
    };
    results.remove(0).map(|r| match r {
        Some(r) => r,
        None => panic!("a command without a response"),
    })
}

fn nospace(member_id: u64) -> AlarmMember {
    AlarmMember {
        member_id,
        alarm: AlarmType::Nospace as i32,
    }
}

#[test]
fn nospace_refuses_growth_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    apply1(&s, put("a")).unwrap();
    apply1(&s, put("b")).unwrap();
    let r = apply1(&s, alarm(AlarmAction::Activate, 42, AlarmType::Nospace)).unwrap();
    let CommandResponse::Alarm(r) = r else {
        panic!("not an alarm response: {r:?}")
    };
    assert_eq!(r.alarms, vec![nospace(42)]);
    assert!(r.header.is_none());
    assert_eq!(s.alarms(), vec![nospace(42)]);
    // Raising an alarm is no revision.
    assert_eq!(s.revision(), 3);

    assert_eq!(apply1(&s, put("c")), Err(StoreError::NoSpace));
    let grant = Command::new(CommandKind::LeaseGrant(LeaseGrantRequest {
        ttl: 60,
        id: 5,
    }));
    assert_eq!(apply1(&s, grant), Err(StoreError::NoSpace));
    let txn_put = Command::new(CommandKind::Txn(TxnRequest {
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(put_req("d"))),
        }],
        ..Default::default()
    }));
    assert_eq!(apply1(&s, txn_put), Err(StoreError::NoSpace));
    let txn_read = Command::new(CommandKind::Txn(TxnRequest {
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: b"a".to_vec().into(),
                ..Default::default()
            })),
        }],
        ..Default::default()
    }));
    apply1(&s, txn_read).unwrap();
    // Deletes and compaction go on.
    let del = Command::new(CommandKind::DeleteRange(DeleteRangeRequest {
        key: b"a".to_vec().into(),
        ..Default::default()
    }));
    apply1(&s, del).unwrap();
    let compact = Command::new(CommandKind::Compaction(CompactionRequest {
        revision: 4,
        physical: false,
    }));
    apply1(&s, compact).unwrap();
    assert_eq!(s.revision(), 4);

    // Deactivating another member's alarm changes nothing; the right one clears it.
    let CommandResponse::Alarm(r) =
        apply1(&s, alarm(AlarmAction::Deactivate, 0, AlarmType::Nospace)).unwrap()
    else {
        panic!()
    };
    assert!(r.alarms.is_empty());
    assert_eq!(apply1(&s, put("c")), Err(StoreError::NoSpace));
    apply1(&s, alarm(AlarmAction::Deactivate, 42, AlarmType::Nospace)).unwrap();
    assert!(s.alarms().is_empty());
    apply1(&s, put("c")).unwrap();
}

#[test]
fn corrupt_refuses_key_space() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    apply1(&s, alarm(AlarmAction::Activate, 0, AlarmType::Corrupt)).unwrap();
    let del = Command::new(CommandKind::DeleteRange(DeleteRangeRequest {
        key: b"a".to_vec().into(),
        ..Default::default()
    }));
    assert_eq!(apply1(&s, del), Err(StoreError::CorruptCluster));
    assert_eq!(apply1(&s, put("a")), Err(StoreError::CorruptCluster));
    // GET still answers.
    let CommandResponse::Alarm(r) =
        apply1(&s, alarm(AlarmAction::Get, 0, AlarmType::None)).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.alarms.len(), 1);
}

#[test]
fn alarms_survive_reopen_snapshots_and_etcd_export() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("a"), StoreOptions::default()).unwrap();
    apply1(&s, put("a")).unwrap();
    apply1(&s, alarm(AlarmAction::Activate, 7, AlarmType::Nospace)).unwrap();
    apply1(&s, alarm(AlarmAction::Activate, 9, AlarmType::Nospace)).unwrap();
    apply1(&s, alarm(AlarmAction::Deactivate, 9, AlarmType::Nospace)).unwrap();
    let expect = vec![nospace(7)];

    // keel snapshot into another store.
    let mut buf = Vec::new();
    s.write_snapshot(&mut buf).unwrap();
    let s2 = Store::open(&dir.path().join("b"), StoreOptions::default()).unwrap();
    s2.install_snapshot(&mut buf.as_slice(), 2).unwrap();
    assert_eq!(s2.alarms(), expect);
    assert_eq!(apply1(&s2, put("x")), Err(StoreError::NoSpace));

    // etcd-format export and import.
    let file = dir.path().join("etcd.db");
    s.export_etcd(&file, Vec::new(), 1, &|_| {}).unwrap();
    let reader = keel_store::bbolt::BoltReader::open(&file).unwrap();
    let imported = dir.path().join("c");
    keel_store::etcd_snapshot::import_etcd(&imported, &reader, &Default::default(), &|_| {})
        .unwrap();
    let s3 = Store::open(&imported, StoreOptions::default()).unwrap();
    assert_eq!(s3.alarms(), expect);

    // Reopen.
    drop(s);
    let s = Store::open(&dir.path().join("a"), StoreOptions::default()).unwrap();
    assert_eq!(s.alarms(), expect);
}

#[test]
fn defragment_gives_back_compacted_space() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let big = vec![7u8; 64 * 1024];
    for _ in 0..200 {
        let c = Command::new(CommandKind::Put(PutRequest {
            key: b"k".to_vec().into(),
            value: big.clone().into(),
            ..Default::default()
        }));
        apply1(&s, c).unwrap();
    }
    s.defragment().unwrap();
    let full = s.db_size();
    let rev = s.revision();
    let compact = Command::new(CommandKind::Compaction(CompactionRequest {
        revision: rev,
        physical: false,
    }));
    apply1(&s, compact).unwrap();
    s.defragment().unwrap();
    let after = s.db_size();
    // 200 versions of 64 KiB compacted to one: most of the space comes back.
    assert!(after * 4 < full, "before {full} after {after}");
}
