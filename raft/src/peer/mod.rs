//! Peer transport on the peer URL (:2380): Raft RPCs between members, plus the application
//! calls a follower makes to the leader (forwarded writes, ReadIndex, lease renewals,
//! membership changes).
//!
//! The Raft side plugs into openraft as a `RaftNetworkFactory`; the application side calls an
//! [`AppHandler`], which the member (`crate::node::Node`) implements.

pub mod codec;
pub mod server;

pub use server::{
    peer_service, serve_peer, serve_peer_on, serve_service_on, PeerError, PeerService,
};

use keel_store::{Command, CommandResponse};

use crate::node::{MemberInfo, ProposeError};
use crate::types::NodeId;

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

/// What the leader does for calls forwarded by followers.
#[tonic::async_trait]
pub trait AppHandler: Send + Sync + 'static {
    /// Proposes a command on this member (the leader) and returns its result.
    async fn forward_propose(&self, cmd: Command) -> Result<CommandResponse, ProposeError>;
    /// Confirms leadership with a quorum and returns the index a linearizable read must wait for.
    async fn read_index(&self) -> Result<u64, ProposeError>;
    /// Renews a lease; `Ok(None)` if it does not exist.
    async fn lease_keepalive(&self, id: i64) -> Result<Option<i64>, ProposeError>;
    /// Remaining TTL, granted TTL and attached keys of a lease; `Ok(None)` if it does not exist.
    async fn lease_time_to_live(
        &self,
        id: i64,
        keys: bool,
    ) -> Result<Option<(i64, i64, Vec<Vec<u8>>)>, ProposeError>;
    /// Performs a membership change.
    async fn member_change(&self, change: MemberChange)
        -> Result<MemberChangeResult, ProposeError>;
    /// Hands leadership to `target` (etcd's MoveLeader).
    async fn move_leader(&self, target: NodeId) -> Result<(), ProposeError>;
    /// A member of this cluster applied a membership without this member: stop serving.
    fn removed_from_cluster(&self) {}
    /// Whether `id` was removed from the cluster while this member ran (its Raft calls are refused).
    fn is_removed(&self, _id: NodeId) -> bool {
        false
    }
}
