//! Peer transport. This build runs single-member clusters only: a member never has peers to
//! reach, so every RPC reports the peer unreachable. The tonic transport on :2380 replaces this
//! with multi-member support.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::types::{MemberNode, NodeId, TypeConfig};

/// Error for an RPC to a peer in a build without peer transport.
#[derive(Debug, thiserror::Error)]
#[error("no peer transport: keel runs single-member clusters in this build (peer {0})")]
pub struct NoTransport(NodeId);

/// Creates [`PeerClient`]s.
#[derive(Debug, Default, Clone)]
pub struct PeerNetwork;

/// A client for one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, _node: &MemberNode) -> PeerClient {
        PeerClient { target }
    }
}

impl PeerClient {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<NodeId, MemberNode, E> {
        RPCError::Unreachable(Unreachable::new(&NoTransport(self.target)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, MemberNode, RaftError<NodeId>>>
    {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, MemberNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, MemberNode, RaftError<NodeId>>> {
        Err(self.unreachable())
    }
}
