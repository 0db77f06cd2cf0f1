//! The records keel's Raft log store writes into the WAL, and the vote file's contents.
//!
//! Plain prost messages (no .proto file): new record kinds get new oneof tags, new fields get new
//! field numbers, so old logs stay readable. Log ids and memberships use the shared encodings of
//! [`crate::codec`].

use openraft::{CommittedLeaderId, EntryPayload};
use prost::Message;

use crate::codec::{
    log_id_from_pb, log_id_to_pb, membership_from_pb, membership_to_pb, LogIdPb, MembershipPb,
};
use crate::types::{Entry, LogId, Vote};

/// One WAL record.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WalRecord {
    #[prost(oneof = "RecordKind", tags = "1, 2, 3, 4")]
    pub kind: Option<RecordKind>,
}

/// The kinds of [`WalRecord`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum RecordKind {
    /// A log entry (overwrites the entry at its index and drops everything after it).
    #[prost(message, tag = "1")]
    Entry(EntryRecord),
    /// Delete entries with index >= `from_index`.
    #[prost(message, tag = "2")]
    Truncate(TruncateRecord),
    /// Delete entries up to and including this log id.
    #[prost(message, tag = "3")]
    Purge(LogIdPb),
    /// The last known committed log id.
    #[prost(message, tag = "4")]
    Committed(CommittedRecord),
}

/// A log entry.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EntryRecord {
    #[prost(uint64, tag = "1")]
    pub term: u64,
    #[prost(uint64, tag = "2")]
    pub leader_node_id: u64,
    #[prost(uint64, tag = "3")]
    pub index: u64,
    #[prost(oneof = "EntryPayloadRecord", tags = "4, 5, 6")]
    pub payload: Option<EntryPayloadRecord>,
}

/// The payload of an [`EntryRecord`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum EntryPayloadRecord {
    /// A blank entry (a new leader's first entry).
    #[prost(message, tag = "4")]
    Blank(BlankRecord),
    /// An encoded `keel_store::Command`, kept as bytes so the store owns its own schema.
    #[prost(bytes = "vec", tag = "5")]
    Normal(Vec<u8>),
    /// A membership change.
    #[prost(message, tag = "6")]
    Membership(MembershipPb),
}

/// Marker for a blank payload.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BlankRecord {}

/// Delete entries from `from_index` on.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TruncateRecord {
    #[prost(uint64, tag = "1")]
    pub from_index: u64,
}

/// The committed log id (absent = none).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CommittedRecord {
    #[prost(message, optional, tag = "1")]
    pub log_id: Option<LogIdPb>,
}

/// Contents of the `vote` file.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct VoteRecord {
    #[prost(uint64, tag = "1")]
    pub term: u64,
    #[prost(uint64, tag = "2")]
    pub node_id: u64,
    #[prost(bool, tag = "3")]
    pub committed: bool,
}

/// A decoded WAL record in openraft's terms.
#[derive(Debug, Clone)]
pub(crate) enum Decoded {
    Entry(Entry),
    Truncate { from_index: u64 },
    Purge(LogId),
    Committed(Option<LogId>),
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("protobuf decode: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("record has no {0}")]
    Missing(&'static str),
}

fn encode(kind: RecordKind) -> Vec<u8> {
    WalRecord { kind: Some(kind) }.encode_to_vec()
}

/// Encodes a log entry record.
pub(crate) fn encode_entry(entry: &Entry) -> Vec<u8> {
    let payload = match &entry.payload {
        EntryPayload::Blank => EntryPayloadRecord::Blank(BlankRecord {}),
        EntryPayload::Normal(cmd) => EntryPayloadRecord::Normal(cmd.encode_to_vec()),
        EntryPayload::Membership(m) => EntryPayloadRecord::Membership(membership_to_pb(m)),
    };
    encode(RecordKind::Entry(EntryRecord {
        term: entry.log_id.leader_id.term,
        leader_node_id: entry.log_id.leader_id.node_id,
        index: entry.log_id.index,
        payload: Some(payload),
    }))
}

/// Encodes a truncate record.
pub(crate) fn encode_truncate(from_index: u64) -> Vec<u8> {
    encode(RecordKind::Truncate(TruncateRecord { from_index }))
}

/// Encodes a purge record.
pub(crate) fn encode_purge(log_id: &LogId) -> Vec<u8> {
    encode(RecordKind::Purge(log_id_to_pb(log_id)))
}

/// Encodes a committed record.
pub(crate) fn encode_committed(log_id: Option<&LogId>) -> Vec<u8> {
    encode(RecordKind::Committed(CommittedRecord {
        log_id: log_id.map(log_id_to_pb),
    }))
}

/// Decodes a WAL record.
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, RecordError> {
    let kind = WalRecord::decode(bytes)?
        .kind
        .ok_or(RecordError::Missing("kind"))?;
    Ok(match kind {
        RecordKind::Entry(e) => {
            let log_id = LogId::new(CommittedLeaderId::new(e.term, e.leader_node_id), e.index);
            let payload = match e.payload.ok_or(RecordError::Missing("entry payload"))? {
                EntryPayloadRecord::Blank(_) => EntryPayload::Blank,
                EntryPayloadRecord::Normal(b) => {
                    EntryPayload::Normal(keel_store::Command::decode(b.as_slice())?)
                }
                EntryPayloadRecord::Membership(m) => {
                    EntryPayload::Membership(membership_from_pb(&m))
                }
            };
            Decoded::Entry(Entry { log_id, payload })
        }
        RecordKind::Truncate(t) => Decoded::Truncate {
            from_index: t.from_index,
        },
        RecordKind::Purge(p) => Decoded::Purge(log_id_from_pb(&p)),
        RecordKind::Committed(c) => Decoded::Committed(c.log_id.as_ref().map(log_id_from_pb)),
    })
}

/// Encodes a vote for the vote file.
pub(crate) fn encode_vote(vote: &Vote) -> Vec<u8> {
    VoteRecord {
        term: vote.leader_id.term,
        node_id: vote.leader_id.node_id,
        committed: vote.committed,
    }
    .encode_to_vec()
}

/// Decodes the vote file's record.
pub(crate) fn decode_vote(bytes: &[u8]) -> Result<Vote, RecordError> {
    let r = VoteRecord::decode(bytes)?;
    let mut vote = Vote::new(r.term, r.node_id);
    vote.committed = r.committed;
    Ok(vote)
}

#[cfg(test)]
mod tests {
    use keel_store::command::CommandKind;
    use keel_store::pb::etcdserverpb::PutRequest;
    use keel_store::Command;

    use std::collections::{BTreeMap, BTreeSet};

    use openraft::Membership;

    use super::*;
    use crate::types::MemberNode;

    fn lid(term: u64, node: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    fn round_trip(entry: &Entry) -> Entry {
        match decode(&encode_entry(entry)).unwrap() {
            Decoded::Entry(e) => e,
            other => panic!("not an entry: {other:?}"),
        }
    }

    #[test]
    fn golden_blank_entry() {
        let e = Entry {
            log_id: lid(2, 1, 3),
            payload: EntryPayload::Blank,
        };
        // field 1 (entry, len 8): term=2, leader=1, index=3, blank={}.
        assert_eq!(
            encode_entry(&e),
            [0x0a, 0x08, 0x08, 0x02, 0x10, 0x01, 0x18, 0x03, 0x22, 0x00]
        );
        assert_eq!(round_trip(&e).log_id, e.log_id);
    }

    #[test]
    fn golden_normal_entry() {
        let cmd = Command::new(CommandKind::Put(PutRequest {
            key: bytes::Bytes::from_static(b"k"),
            value: bytes::Bytes::from_static(b"v"),
            ..Default::default()
        }));
        let cmd_bytes = cmd.encode_to_vec();
        // Command{put(1): PutRequest{key(1)="k", value(2)="v"}}.
        assert_eq!(cmd_bytes, [0x0a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v']);
        let e = Entry {
            log_id: lid(1, 7, 9),
            payload: EntryPayload::Normal(cmd.clone()),
        };
        let mut want = vec![0x0a, 0x10, 0x08, 0x01, 0x10, 0x07, 0x18, 0x09, 0x2a, 0x08];
        want.extend_from_slice(&cmd_bytes);
        assert_eq!(encode_entry(&e), want);
        match round_trip(&e).payload {
            EntryPayload::Normal(c) => assert_eq!(c, cmd),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn golden_membership_entry() {
        let node = MemberNode {
            name: "a".into(),
            peer_urls: vec!["p".into()],
            client_urls: vec![],
        };
        let m = Membership::new(vec![BTreeSet::from([1u64])], BTreeMap::from([(1u64, node)]));
        let e = Entry {
            log_id: lid(1, 1, 1),
            payload: EntryPayload::Membership(m.clone()),
        };
        let want = [
            0x0a, 0x17, // entry, 23 bytes
            0x08, 0x01, 0x10, 0x01, 0x18, 0x01, // term, leader, index
            0x32, 0x0f, // membership, 15 bytes
            0x0a, 0x03, 0x0a, 0x01, 0x01, // configs[0] = {ids: [1]} (packed)
            0x12, 0x08, 0x08, 0x01, 0x12, 0x01, b'a', 0x1a, 0x01, b'p', // nodes[0]
        ];
        assert_eq!(encode_entry(&e), want);
        match round_trip(&e).payload {
            EntryPayload::Membership(got) => assert_eq!(got, m),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn joint_membership_with_learner_round_trips() {
        let nodes = BTreeMap::from([
            (
                1u64,
                MemberNode {
                    name: "one".into(),
                    peer_urls: vec!["http://a:2380".into()],
                    client_urls: vec!["http://a:2379".into()],
                },
            ),
            (2, MemberNode::default()),
            (
                3,
                MemberNode {
                    name: "three".into(),
                    ..Default::default()
                },
            ),
            (
                9,
                MemberNode {
                    name: "learner".into(),
                    ..Default::default()
                },
            ),
        ]);
        let m = Membership::new(vec![BTreeSet::from([1, 2]), BTreeSet::from([2, 3])], nodes);
        let e = Entry {
            log_id: lid(4, 2, 100),
            payload: EntryPayload::Membership(m.clone()),
        };
        match round_trip(&e).payload {
            EntryPayload::Membership(got) => assert_eq!(got, m),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn golden_control_records() {
        assert_eq!(encode_truncate(5), [0x12, 0x02, 0x08, 0x05]);
        assert_eq!(
            encode_purge(&lid(1, 2, 3)),
            [0x1a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03]
        );
        assert_eq!(
            encode_committed(Some(&lid(1, 2, 3))),
            [0x22, 0x08, 0x0a, 0x06, 0x08, 0x01, 0x10, 0x02, 0x18, 0x03]
        );
        assert_eq!(encode_committed(None), [0x22, 0x00]);
        assert!(matches!(
            decode(&encode_truncate(5)).unwrap(),
            Decoded::Truncate { from_index: 5 }
        ));
        assert!(
            matches!(decode(&encode_purge(&lid(1, 2, 3))).unwrap(), Decoded::Purge(p) if p == lid(1, 2, 3))
        );
        assert!(matches!(
            decode(&encode_committed(None)).unwrap(),
            Decoded::Committed(None)
        ));
    }

    #[test]
    fn golden_vote() {
        let mut v = Vote::new(5, 3);
        v.committed = true;
        assert_eq!(encode_vote(&v), [0x08, 0x05, 0x10, 0x03, 0x18, 0x01]);
        assert_eq!(decode_vote(&encode_vote(&v)).unwrap(), v);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode(&[0x0a, 0x05, 0x01]).is_err());
        assert!(matches!(decode(&[]), Err(RecordError::Missing("kind"))));
        assert!(matches!(
            decode(&[0x0a, 0x00]),
            Err(RecordError::Missing("entry payload"))
        ));
    }
}
