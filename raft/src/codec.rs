//! prost encodings of openraft's log ids and memberships, shared by the WAL and the store's
//! applied-state record, so both evolve as protobuf does.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{LogId, MemberNode, NodeId, StoredMembership};

/// A log id on disk.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LogIdPb {
    #[prost(uint64, tag = "1")]
    pub term: u64,
    #[prost(uint64, tag = "2")]
    pub node_id: u64,
    #[prost(uint64, tag = "3")]
    pub index: u64,
}

/// One member's record inside a membership.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberPb {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, repeated, tag = "3")]
    pub peer_urls: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub client_urls: Vec<String>,
}

/// One voter set of a (possibly joint) configuration.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VoterSetPb {
    #[prost(uint64, repeated, tag = "1")]
    pub ids: Vec<u64>,
}

/// A membership: voter sets (two while joint) and every node, learners included.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MembershipPb {
    #[prost(message, repeated, tag = "1")]
    pub configs: Vec<VoterSetPb>,
    #[prost(message, repeated, tag = "2")]
    pub nodes: Vec<MemberPb>,
}

/// What the state machine stores with every applied batch.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AppliedStatePb {
    #[prost(message, optional, tag = "1")]
    pub last_applied: Option<LogIdPb>,
    #[prost(message, optional, tag = "2")]
    pub membership_log_id: Option<LogIdPb>,
    #[prost(message, optional, tag = "3")]
    pub membership: Option<MembershipPb>,
}

/// Encodes a log id.
pub(crate) fn log_id_to_pb(id: &LogId) -> LogIdPb {
    LogIdPb {
        term: id.leader_id.term,
        node_id: id.leader_id.node_id,
        index: id.index,
    }
}

/// Decodes a log id.
pub fn log_id_from_pb(p: &LogIdPb) -> LogId {
    openraft::LogId::new(openraft::CommittedLeaderId::new(p.term, p.node_id), p.index)
}

/// Encodes a membership.
pub(crate) fn membership_to_pb(m: &openraft::Membership<NodeId, MemberNode>) -> MembershipPb {
    MembershipPb {
        configs: m
            .get_joint_config()
            .iter()
            .map(|s| VoterSetPb {
                ids: s.iter().copied().collect(),
            })
            .collect(),
        nodes: m
            .nodes()
            .map(|(id, n)| MemberPb {
                id: *id,
                name: n.name.clone(),
                peer_urls: n.peer_urls.clone(),
                client_urls: n.client_urls.clone(),
            })
            .collect(),
    }
}

/// Decodes a membership.
pub fn membership_from_pb(p: &MembershipPb) -> openraft::Membership<NodeId, MemberNode> {
    let configs: Vec<BTreeSet<NodeId>> = p
        .configs
        .iter()
        .map(|s| s.ids.iter().copied().collect())
        .collect();
    let nodes: BTreeMap<NodeId, MemberNode> = p
        .nodes
        .iter()
        .map(|n| {
            (
                n.id,
                MemberNode {
                    name: n.name.clone(),
                    peer_urls: n.peer_urls.clone(),
                    client_urls: n.client_urls.clone(),
                },
            )
        })
        .collect();
    openraft::Membership::new(configs, nodes)
}

/// Encodes the applied state.
pub fn applied_to_bytes(last: Option<&LogId>, m: &StoredMembership) -> Vec<u8> {
    prost::Message::encode_to_vec(&AppliedStatePb {
        last_applied: last.map(log_id_to_pb),
        membership_log_id: m.log_id().as_ref().map(log_id_to_pb),
        membership: Some(membership_to_pb(m.membership())),
    })
}

/// Decodes the applied state (`None` bytes = nothing applied yet).
pub(crate) fn applied_from_bytes(
    b: Option<&[u8]>,
) -> Result<(Option<LogId>, StoredMembership), prost::DecodeError> {
    let Some(b) = b else {
        return Ok((None, StoredMembership::default()));
    };
    let p: AppliedStatePb = prost::Message::decode(b)?;
    let m = p
        .membership
        .as_ref()
        .map(membership_from_pb)
        .unwrap_or_default();
    Ok((
        p.last_applied.as_ref().map(log_id_from_pb),
        StoredMembership::new(p.membership_log_id.as_ref().map(log_id_from_pb), m),
    ))
}
