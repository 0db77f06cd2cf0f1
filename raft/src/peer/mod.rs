//! Peer transport on the peer URL (:2380), server side and wire format: Raft RPCs between
//! members, plus the application calls a follower makes to the leader (forwarded writes,
//! ReadIndex, lease renewals, membership changes).
//!
//! The server hands Raft RPCs to openraft and application calls to an [`AppHandler`], which the
//! member (`crate::node::Node`) implements. The client side is `crate::network`; both ends
//! share `codec` (protobuf <-> openraft and keel types) and `wire` (limits, headers, keep-alive).

pub(crate) mod codec;
pub(crate) mod server;
pub(crate) mod wire;

use keel_store::Command;

use crate::error::ProposeError;
use crate::types::{MemberChange, MemberChangeResult, NodeId};

/// What the leader does for calls forwarded by followers.
#[tonic::async_trait]
pub(crate) trait AppHandler: Send + Sync + 'static {
    /// Proposes a command on this member (the leader) and returns its result and entry index.
    async fn forward_propose(&self, cmd: Command) -> crate::proposer::Answer;
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
    /// Whether `id` is one of the members a quorum-loss recovery of this member left out.
    fn left_out_by_recovery(&self, _id: NodeId) -> bool {
        false
    }
}
