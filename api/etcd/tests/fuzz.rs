//! Fuzzing of the etcd v3 requests keel's gRPC services accept: each mutated message is decoded
//! with prost as tonic does, put through the checks the service runs before proposing (the same
//! functions: `check_recv_size`, `validate_put`, `validate_txn`, the lease and alarm checks), and
//! then handled by a real store (reads, writes applied as the state machine applies a committed
//! entry, watch creates and cancels on the store's hub). No cluster: no Raft, no network.
//! A smoke pass by default; see docs/fuzzing.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::Arc;

use keel_etcd_api::server::check_recv_size;
use keel_fuzz::{Target, Verdict};
use keel_store::command::CommandKind;
use keel_store::lease::MAX_LEASE_TTL;
use keel_store::mvcc::txn_check::{validate_put, validate_txn};
use keel_store::pb::etcdserverpb::{self as pb, watch_request::RequestUnion};
use keel_store::store::txn_is_read_only;
use keel_store::{Command, Store, StoreOptions, MAX_REQUEST_BYTES, MAX_TXN_OPS};
use prost::Message;

#[global_allocator]
static ALLOC: keel_fuzz::CappedAlloc = keel_fuzz::CappedAlloc;

/// The request messages, in the order the first input byte picks them.
const KINDS: u8 = 17;

/// A store, replaced every so many inputs so the fuzzed writes do not fill the disk.
struct Harness {
    dir: tempfile::TempDir,
    store: Arc<Store>,
    rt: tokio::runtime::Runtime,
    uses: u64,
    opened: u64,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s0"), StoreOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let h = Harness {
            dir,
            store,
            rt,
            uses: 0,
            opened: 0,
        };
        h.populate();
        h
    }

    fn renew(&mut self) {
        self.opened += 1;
        let old = self.dir.path().join(format!("s{}", self.opened - 1));
        let path = self.dir.path().join(format!("s{}", self.opened));
        self.store = Store::open(&path, StoreOptions::default()).unwrap();
        let _ = std::fs::remove_dir_all(old);
        self.uses = 0;
        self.populate();
    }

    /// Keys, a lease and a few revisions for the fuzzed requests to find.
    fn populate(&self) {
        let mut cmds = vec![Some(Command::new(CommandKind::LeaseGrant(
            pb::LeaseGrantRequest {
                ttl: 600,
                id: 0x1234,
            },
        )))];
        for i in 0..20 {
            cmds.push(Some(Command::new(CommandKind::Put(pb::PutRequest {
                key: format!("/k/{i:02}").into_bytes().into(),
                value: vec![b'v'; i].into(),
                lease: if i % 4 == 0 { 0x1234 } else { 0 },
                ..Default::default()
            }))));
        }
        self.store.apply(cmds, Vec::new()).unwrap();
    }

    /// Applies one command as the state machine applies a committed entry.
    fn apply(&self, kind: CommandKind) -> Result<(), String> {
        let cmd = Command::new(kind);
        if cmd.encoded_len() > MAX_REQUEST_BYTES {
            return Err("request too large".into());
        }
        let mut res = self
            .store
            .apply(vec![Some(cmd)], Vec::new())
            .map_err(|e| e.to_string())?;
        match res.pop() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("no result".into()),
        }
    }

    fn watch(&self, req: pb::WatchRequest) -> Result<(), String> {
        let (stream, mut rx) = self.store.hub().open_stream();
        self.rt.block_on(async {
            let r = match req.request_union {
                Some(RequestUnion::CreateRequest(c)) => stream.create(c).await.map(drop),
                Some(RequestUnion::CancelRequest(c)) => stream.cancel(c.watch_id).await,
                Some(RequestUnion::ProgressRequest(_)) => stream.request_progress().await,
                None => Ok(()),
            };
            while rx.try_recv().is_some() {}
            r.map_err(|e| format!("{e:?}"))
        })
    }

    /// Decodes request `kind` and handles it as keel's service does.
    fn handle(&mut self, kind: u8, b: &[u8]) -> Result<(), String> {
        fn d<M: Message + Default>(b: &[u8]) -> Result<M, String> {
            let m = M::decode(b).map_err(|e| e.to_string())?;
            check_recv_size(m.encoded_len()).map_err(|e| e.to_string())?;
            Ok(m)
        }
        let e = |e: keel_store::StoreError| e.to_string();
        self.uses += 1;
        if self.uses > 3000 {
            self.renew();
        }
        match kind % KINDS {
            0 => {
                let r: pb::RangeRequest = d(b)?;
                if r.key.is_empty() {
                    return Err("empty key".into());
                }
                self.store.range(&r).map_err(e)?;
            }
            1 => {
                let p: pb::PutRequest = d(b)?;
                validate_put(&p).map_err(e)?;
                self.apply(CommandKind::Put(p))?;
            }
            2 => {
                let r: pb::DeleteRangeRequest = d(b)?;
                if r.key.is_empty() {
                    return Err("empty key".into());
                }
                self.apply(CommandKind::DeleteRange(r))?;
            }
            3 => {
                let t: pb::TxnRequest = d(b)?;
                validate_txn(&t, MAX_TXN_OPS).map_err(e)?;
                if txn_is_read_only(&t) {
                    self.store.txn_read(&t).map_err(e)?;
                } else {
                    self.apply(CommandKind::Txn(t))?;
                }
            }
            4 => {
                let c: pb::CompactionRequest = d(b)?;
                self.apply(CommandKind::Compaction(c))?;
            }
            5 => {
                let w: pb::WatchRequest = d(b)?;
                self.watch(w)?;
            }
            6 => {
                let mut g: pb::LeaseGrantRequest = d(b)?;
                if g.ttl > MAX_LEASE_TTL || g.id < 0 {
                    return Err("bad lease".into());
                }
                if g.id == 0 {
                    g.id = 0x5678;
                }
                self.apply(CommandKind::LeaseGrant(g))?;
            }
            7 => {
                let r: pb::LeaseRevokeRequest = d(b)?;
                self.apply(CommandKind::LeaseRevoke(r))?;
            }
            8 => {
                let k: pb::LeaseKeepAliveRequest = d(b)?;
                let _ = self.store.lease_renew(keel_store::LeaseId(k.id));
            }
            9 => {
                let t: pb::LeaseTimeToLiveRequest = d(b)?;
                let _ = self
                    .store
                    .lease_time_to_live(keel_store::LeaseId(t.id), t.keys);
            }
            10 => {
                let a: pb::AlarmRequest = d(b)?;
                if pb::alarm_request::AlarmAction::try_from(a.action).is_err() {
                    return Err("unknown alarm action".into());
                }
                self.apply(CommandKind::Alarm(a))?;
            }
            11 => {
                let h: pb::HashKvRequest = d(b)?;
                self.store.hash_kv(h.revision).map_err(e)?;
            }
            12 => {
                // What a peer forwards and what the log replays: a whole command.
                let c = Command::decode(b).map_err(|e| e.to_string())?;
                let kind = c.kind.ok_or("no kind")?;
                self.apply(kind)?;
            }
            13 => {
                d::<pb::MemberAddRequest>(b)?;
            }
            14 => {
                d::<pb::MemberRemoveRequest>(b)?;
            }
            15 => {
                d::<pb::MemberUpdateRequest>(b)?;
            }
            _ => {
                d::<pb::MoveLeaderRequest>(b)?;
            }
        }
        Ok(())
    }
}

fn tagged(kind: u8, m: &impl Message) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend(m.encode_to_vec());
    v
}

fn seeds() -> Vec<Vec<u8>> {
    use pb::{compare, request_op, RequestOp};
    let key = |s: &str| bytes::Bytes::copy_from_slice(s.as_bytes());
    let range = pb::RangeRequest {
        key: key("/k/"),
        range_end: key("/k0"),
        limit: 5,
        revision: 0,
        sort_order: 2,
        sort_target: 3,
        keys_only: true,
        min_mod_revision: 2,
        max_create_revision: 100,
        ..Default::default()
    };
    let put = pb::PutRequest {
        key: key("/k/new"),
        value: key("value"),
        lease: 0x1234,
        prev_kv: true,
        ..Default::default()
    };
    let del = pb::DeleteRangeRequest {
        key: key("/k/0"),
        range_end: key("/k/1"),
        prev_kv: true,
    };
    let txn = pb::TxnRequest {
        compare: vec![pb::Compare {
            result: compare::CompareResult::Greater as i32,
            target: compare::CompareTarget::Mod as i32,
            key: key("/k/01"),
            range_end: key("/k/09"),
            target_union: Some(compare::TargetUnion::ModRevision(1)),
        }],
        success: vec![
            RequestOp {
                request: Some(request_op::Request::RequestPut(put.clone())),
            },
            RequestOp {
                request: Some(request_op::Request::RequestRange(range.clone())),
            },
            RequestOp {
                request: Some(request_op::Request::RequestTxn(pb::TxnRequest {
                    success: vec![RequestOp {
                        request: Some(request_op::Request::RequestDeleteRange(del.clone())),
                    }],
                    ..Default::default()
                })),
            },
        ],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(range.clone())),
        }],
    };
    let watch = pb::WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(pb::WatchCreateRequest {
            key: key("/k/"),
            range_end: key("\0"),
            start_revision: 2,
            progress_notify: true,
            filters: vec![1],
            prev_kv: true,
            watch_id: 0,
            fragment: true,
        })),
    };
    let mut s = vec![
        tagged(0, &range),
        tagged(1, &put),
        tagged(2, &del),
        tagged(3, &txn),
        tagged(
            4,
            &pb::CompactionRequest {
                revision: 5,
                physical: true,
            },
        ),
        tagged(5, &watch),
        tagged(
            5,
            &pb::WatchRequest {
                request_union: Some(RequestUnion::CancelRequest(pb::WatchCancelRequest {
                    watch_id: 1,
                })),
            },
        ),
        tagged(
            5,
            &pb::WatchRequest {
                request_union: Some(RequestUnion::ProgressRequest(pb::WatchProgressRequest {})),
            },
        ),
        tagged(6, &pb::LeaseGrantRequest { ttl: 30, id: 0 }),
        tagged(7, &pb::LeaseRevokeRequest { id: 0x1234 }),
        tagged(8, &pb::LeaseKeepAliveRequest { id: 0x1234 }),
        tagged(
            9,
            &pb::LeaseTimeToLiveRequest {
                id: 0x1234,
                keys: true,
            },
        ),
        tagged(
            10,
            &pb::AlarmRequest {
                action: 1,
                member_id: 7,
                alarm: 1,
            },
        ),
        tagged(11, &pb::HashKvRequest { revision: 3 }),
        tagged(12, &Command::new(CommandKind::Txn(txn.clone()))),
        tagged(
            13,
            &pb::MemberAddRequest {
                peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
                is_learner: true,
            },
        ),
        tagged(14, &pb::MemberRemoveRequest { id: 7 }),
        tagged(
            15,
            &pb::MemberUpdateRequest {
                id: 7,
                peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
            },
        ),
        tagged(16, &pb::MoveLeaderRequest { target_id: 7 }),
    ];
    // A batch of commands, as group commit proposes them.
    let batch = keel_store::command::CommandBatch {
        commands: vec![
            Command::new(CommandKind::Put(put)),
            Command::new(CommandKind::DeleteRange(del)),
        ],
    };
    s.push(tagged(12, &Command::new(CommandKind::Batch(batch))));
    s
}

#[test]
fn fuzz_etcd_requests() {
    let mut h = Harness::new();
    Target::new("etcd_requests")
        .seeds(seeds())
        .run(|b| {
            let Some((&kind, rest)) = b.split_first() else {
                return Verdict::Rejected;
            };
            Verdict::from(h.handle(kind, rest))
        })
        .assert_clean();
}
