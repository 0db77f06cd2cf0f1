//! openraft type configuration: what a log entry carries and what applying it returns.

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
