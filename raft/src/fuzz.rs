//! Fuzzing of what a peer or a disk hands this crate: every peer RPC request and reply through
//! prost and the codec into openraft's and keel's types, and the WAL directory (segments and
//! the vote file) through the log store's replay. A smoke pass by default; see docs/fuzzing.md.

use keel_fuzz::{Target, Verdict};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{SnapshotMeta, StoredMembership};
use prost::Message;

use crate::error::ProposeError;
use crate::log_store::LogStore;
use crate::peer::codec::tests::{
    all_command_responses, all_propose_errors, entries, joint_membership, lid, put,
};
use crate::peer::codec::{self as c, pb};
use crate::types::{MemberInfo, MemberNode, Vote};
use crate::wal::record;
use crate::wal::segment::{encode_frame, MAGIC};
use crate::wal::WalOptions;

#[global_allocator]
static ALLOC: keel_fuzz::CappedAlloc = keel_fuzz::CappedAlloc;

/// The peer messages, in the order the first input byte picks them.
const KINDS: usize = 19;

/// Decodes `b` as peer message `kind` and converts it as the receiver does.
fn decode_peer(kind: u8, b: &[u8]) -> Result<(), String> {
    fn d<M: Message + Default>(b: &[u8]) -> Result<M, String> {
        M::decode(b).map_err(|e| e.to_string())
    }
    let e = |e: c::CodecError| e.to_string();
    match usize::from(kind) % KINDS {
        // Requests a member serves.
        0 => {
            let _ = c::append_request_from_pb(d(b)?).map_err(e)?;
        }
        1 => {
            let _ = c::vote_request_from_pb(d(b)?).map_err(e)?;
        }
        2 => {
            let _ = c::snapshot_request_from_pb(d(b)?).map_err(e)?;
        }
        3 => {
            let f: pb::ForwardRequest = d(b)?;
            keel_store::Command::decode(f.command.as_slice()).map_err(|e| e.to_string())?;
        }
        4 => {
            let _ = c::member_change_from_pb(d(b)?).map_err(e)?;
        }
        5 => {
            d::<pb::LeaseKeepAliveRequest>(b)?;
        }
        6 => {
            d::<pb::LeaseTimeToLiveRequest>(b)?;
        }
        7 => {
            d::<pb::MoveLeaderRequest>(b)?;
        }
        8 => {
            d::<pb::RemovedNotice>(b)?;
        }
        9 => {
            d::<pb::ReadIndexRequest>(b)?;
        }
        // Replies a member reads from the peers it called.
        10 => {
            let _ = c::append_reply_from_pb(d(b)?).map_err(e)?;
        }
        11 => {
            let _ = c::vote_reply_from_pb(d(b)?).map_err(e)?;
        }
        12 => {
            let _ = c::snapshot_reply_from_pb(d(b)?).map_err(e)?;
        }
        13 => {
            let _ = c::forward_reply_from_pb(d(b)?).map_err(e)?;
        }
        14 => {
            let _ = c::read_index_reply_from_pb(d(b)?).map_err(e)?;
        }
        15 => {
            let _ = c::lease_keepalive_reply_from_pb(d(b)?).map_err(e)?;
        }
        16 => {
            let _ = c::lease_ttl_reply_from_pb(d(b)?).map_err(e)?;
        }
        17 => {
            let _ = c::member_change_reply_from_pb(d(b)?).map_err(e)?;
        }
        _ => {
            let _ = c::move_leader_reply_from_pb(d(b)?).map_err(e)?;
        }
    }
    Ok(())
}

fn tagged(kind: u8, m: &impl Message) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend(m.encode_to_vec());
    v
}

fn member_info(id: u64, learner: bool) -> MemberInfo {
    MemberInfo {
        id,
        node: MemberNode {
            name: format!("m{id}"),
            peer_urls: vec![format!("http://127.0.0.1:{}", 2380 + id)],
            client_urls: vec![format!("http://127.0.0.1:{}", 3380 + id)],
        },
        is_learner: learner,
    }
}

/// Valid messages of every kind, made by the senders' own encoders.
fn peer_seeds() -> Vec<Vec<u8>> {
    let mut s = Vec::new();
    let mut vote = Vote::new(4, 2);
    vote.committed = true;
    let append = AppendEntriesRequest {
        vote,
        prev_log_id: Some(lid(3, 1, 9)),
        entries: entries(),
        leader_commit: Some(lid(3, 1, 11)),
    };
    s.push(tagged(0, &c::append_request_to_pb(&append)));
    let vr = VoteRequest {
        vote: Vote::new(5, 3),
        last_log_id: Some(lid(4, 2, 13)),
    };
    s.push(tagged(1, &c::vote_request_to_pb(&vr)));
    let meta = SnapshotMeta {
        last_log_id: Some(lid(4, 2, 13)),
        last_membership: StoredMembership::new(Some(lid(4, 2, 13)), joint_membership()),
        snapshot_id: "4-2-13-7".into(),
    };
    let snap = openraft::raft::InstallSnapshotRequest {
        vote,
        meta,
        offset: 0,
        data: b"chunk".to_vec(),
        done: true,
    };
    s.push(tagged(2, &c::snapshot_request_to_pb(&snap)));
    for cmd in [put("k"), put("")] {
        s.push(tagged(
            3,
            &pb::ForwardRequest {
                command: cmd.encode_to_vec(),
            },
        ));
    }
    let changes = [
        pb::member_change_request::Change::Add(pb::MemberAdd {
            peer_urls: vec!["http://127.0.0.1:2390".into()],
            learner: true,
        }),
        pb::member_change_request::Change::Remove(pb::MemberRemove { id: 7 }),
        pb::member_change_request::Change::Update(pb::MemberUpdate {
            id: 7,
            peer_urls: vec!["http://127.0.0.1:2391".into()],
        }),
        pb::member_change_request::Change::Promote(pb::MemberPromote { id: 7 }),
        pb::member_change_request::Change::Publish(pb::MemberPublish {
            id: 7,
            name: "n".into(),
            client_urls: vec!["http://127.0.0.1:2379".into()],
        }),
    ];
    for ch in changes {
        s.push(tagged(4, &pb::MemberChangeRequest { change: Some(ch) }));
    }
    s.push(tagged(5, &pb::LeaseKeepAliveRequest { id: 99 }));
    s.push(tagged(
        6,
        &pb::LeaseTimeToLiveRequest { id: 99, keys: true },
    ));
    s.push(tagged(7, &pb::MoveLeaderRequest { target: 2 }));
    s.push(tagged(8, &pb::RemovedNotice { member: 2 }));
    s.push(vec![9]);
    for r in [
        AppendEntriesResponse::Success,
        AppendEntriesResponse::PartialSuccess(Some(lid(3, 1, 10))),
        AppendEntriesResponse::Conflict,
        AppendEntriesResponse::HigherVote(vote),
    ] {
        s.push(tagged(10, &c::append_reply_to_pb(&Ok(r))));
    }
    s.push(tagged(
        10,
        &c::append_reply_to_pb(&Err(openraft::error::RaftError::Fatal(
            openraft::error::Fatal::Stopped,
        ))),
    ));
    let vresp = VoteResponse {
        vote,
        vote_granted: true,
        last_log_id: Some(lid(4, 2, 13)),
    };
    s.push(tagged(11, &c::vote_reply_to_pb(&Ok(vresp))));
    s.push(tagged(
        12,
        &c::snapshot_reply_to_pb(&Ok(InstallSnapshotResponse { vote })),
    ));
    for r in all_command_responses() {
        let index = Some(7);
        s.push(tagged(
            13,
            &c::forward_reply_to_pb(&crate::proposer::Answer {
                result: Ok(r),
                index,
            }),
        ));
    }
    let errors = all_propose_errors();
    for e in &errors {
        s.push(tagged(
            13,
            &c::forward_reply_to_pb(&crate::proposer::Answer::err(e.clone())),
        ));
    }
    s.push(tagged(14, &c::read_index_reply_to_pb(&Ok(42))));
    s.push(tagged(
        14,
        &c::read_index_reply_to_pb(&Err(ProposeError::NotLeader)),
    ));
    s.push(tagged(15, &c::lease_keepalive_reply_to_pb(&Ok(Some(30)))));
    s.push(tagged(15, &c::lease_keepalive_reply_to_pb(&Ok(None))));
    s.push(tagged(
        16,
        &c::lease_ttl_reply_to_pb(&Ok(Some((5, 10, vec![b"a".to_vec()])))),
    ));
    let result = crate::types::MemberChangeResult {
        member: Some(member_info(7, true)),
        members: vec![member_info(1, false), member_info(7, true)],
    };
    s.push(tagged(17, &c::member_change_reply_to_pb(&Ok(result))));
    s.push(tagged(18, &c::move_leader_reply_to_pb(&Ok(()))));
    for e in errors.iter().take(6) {
        s.push(tagged(18, &c::move_leader_reply_to_pb(&Err(e.clone()))));
    }
    s
}

#[test]
fn fuzz_raft_peer_messages() {
    Target::new("raft_peer_messages")
        .seeds(peer_seeds())
        .run(|b| {
            let Some((&kind, rest)) = b.split_first() else {
                return Verdict::Rejected;
            };
            Verdict::from(decode_peer(kind, rest))
        })
        .assert_clean();
}

// ---------------------------------------------------------------------------------------------
// The WAL directory.

/// A segment with every record kind, as the log store writes them.
fn segment(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for r in records {
        encode_frame(&mut out, r);
    }
    out
}

fn wal_seeds() -> Vec<Vec<u8>> {
    let es = entries();
    let mut all: Vec<Vec<u8>> = es.iter().map(record::encode_entry).collect();
    all.push(record::encode_committed(Some(&lid(3, 1, 11))));
    all.push(record::encode_truncate(13));
    all.push(record::encode_purge(&lid(3, 1, 9)));
    all.push(record::encode_entry(&crate::types::Entry {
        log_id: lid(5, 1, 13),
        payload: openraft::EntryPayload::Blank,
    }));
    all.push(record::encode_committed(None));
    vec![
        segment(&all),
        segment(&all[..2]),
        segment(&[]),
        segment(&[
            record::encode_purge(&lid(3, 1, 9)),
            record::encode_entry(&es[0]),
        ]),
    ]
}

/// The vote file: one frame holding the vote record.
fn vote_file(v: &Vote) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&mut out, &record::encode_vote(v));
    out
}

#[test]
fn fuzz_raft_wal_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0u64;
    // Input: one byte saying how many of the following bytes are the vote file (0 = none), the
    // vote file, then one or two segments split at a 2-byte offset.
    let mut seeds = Vec::new();
    let mut vote = Vote::new(5, 1);
    vote.committed = true;
    let vf = vote_file(&vote);
    for seg in wal_seeds() {
        let mut s = vec![vf.len() as u8];
        s.extend(&vf);
        s.extend([0, 0]);
        s.extend(&seg);
        seeds.push(s);
        // Two segments: the second repeats the first's tail records.
        let mut s = vec![0u8];
        let split = seg.len() as u16;
        s.extend(split.to_be_bytes());
        s.extend(&seg);
        s.extend(segment(&[record::encode_truncate(12)]));
        seeds.push(s);
    }
    Target::new("raft_wal_replay")
        .seeds(seeds)
        .max_len(256 << 10)
        .run(|b| {
            let Some((&vlen, rest)) = b.split_first() else {
                return Verdict::Rejected;
            };
            let (vote_bytes, rest) = rest.split_at(usize::from(vlen).min(rest.len()));
            let (split, segs) = match rest {
                [x, y, tail @ ..] => (usize::from(u16::from_be_bytes([*x, *y])), tail),
                _ => (0, rest),
            };
            n += 1;
            let d = dir.path().join(format!("wal-{n}"));
            std::fs::create_dir_all(&d).unwrap();
            if vlen > 0 {
                std::fs::write(d.join("vote"), vote_bytes).unwrap();
            }
            if split > 0 && split < segs.len() {
                std::fs::write(d.join(crate::wal::segment::segment_name(0)), &segs[..split])
                    .unwrap();
                std::fs::write(d.join(crate::wal::segment::segment_name(1)), &segs[split..])
                    .unwrap();
            } else {
                std::fs::write(d.join(crate::wal::segment::segment_name(0)), segs).unwrap();
            }
            let res = LogStore::open_with_options(&d, WalOptions::default()).map(drop);
            let _ = std::fs::remove_dir_all(&d);
            Verdict::from(res)
        })
        .assert_clean();
}

/// The same record decoders, without the file system around them (much faster).
#[test]
fn fuzz_raft_wal_records() {
    let mut seeds: Vec<Vec<u8>> = wal_seeds();
    seeds.extend(entries().iter().map(record::encode_entry));
    seeds.push(record::encode_vote(&Vote::new(3, 2)));
    Target::new("raft_wal_records")
        .seeds(seeds)
        .run(|b| {
            let scan = crate::wal::segment::scan(b);
            for (_, range) in &scan.frames {
                if let Some(p) = b.get(range.clone()) {
                    let _ = record::decode(p);
                }
            }
            let _ = record::decode_vote(b);
            Verdict::from(record::decode(b).map(drop))
        })
        .assert_clean();
}
