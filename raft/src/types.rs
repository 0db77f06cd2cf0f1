//! The types every part of the Raft layer shares: openraft's type configuration (what a log entry
//! carries and what applying it returns), and what a member knows about members and itself.

use std::io::Cursor;

use keel_store::{Command, CommandResponse, StoreError};

/// Member identity in Raft (etcd's member ID).
pub type NodeId = u64;

/// What Raft knows about a member: its name and URLs (etcd's `Member` without the ID).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberNode {
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
}

/// One member of the cluster as the Cluster API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: NodeId,
    pub node: MemberNode,
    pub is_learner: bool,
}

/// A snapshot of this member's Raft status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub member_id: NodeId,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: u64,
    pub applied_index: u64,
    pub is_learner: bool,
    pub is_leader: bool,
}

/// A membership change requested through the etcd Cluster API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// Add a member with these peer URLs (as a learner if `learner`).
    Add {
        peer_urls: Vec<String>,
        learner: bool,
    },
    /// Remove a member.
    Remove { id: NodeId },
    /// Replace a member's peer URLs.
    Update { id: NodeId, peer_urls: Vec<String> },
    /// Promote a learner to voter.
    Promote { id: NodeId },
    /// A member publishes its name and client URLs after it starts (etcd's attribute update).
    Publish {
        id: NodeId,
        name: String,
        client_urls: Vec<String>,
    },
}

/// The result of a membership change: the member it concerned (for Add) and the new list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberChangeResult {
    pub member: Option<MemberInfo>,
    pub members: Vec<MemberInfo>,
}

/// Whether a member leads, as `Node::leadership` publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// The member is the Raft leader of `term`. A change of term is a new leadership: the member
    /// lost it and won it again in between (another member may have led meanwhile).
    Leader { term: u64 },
    /// The member does not lead: it follows, stands for election, is a learner, or has stopped.
    NotLeader,
}

impl Leadership {
    /// True for [`Leadership::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }

    /// The term this member leads in, if it leads.
    pub fn term(&self) -> Option<u64> {
        match self {
            Leadership::Leader { term } => Some(*term),
            Leadership::NotLeader => None,
        }
    }
}

/// The result of applying a log entry: blank and membership entries yield `Ok(None)`.
pub type ApplyResult = Result<Option<CommandResponse>, StoreError>;

/// Wrapper so the apply result can be an openraft response type.
#[derive(Debug, Clone)]
pub struct Applied(pub ApplyResult);

openraft::declare_raft_types!(
    /// keel's Raft type configuration.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = NodeId,
        Node = MemberNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

/// A log entry of keel's Raft log.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// Membership as stored with an applied index.
pub type StoredMembership = openraft::StoredMembership<NodeId, MemberNode>;
/// Storage error type.
pub type StorageError = openraft::StorageError<NodeId>;
