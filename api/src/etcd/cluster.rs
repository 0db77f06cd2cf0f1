//! The Cluster service: member listing (membership changes need the peer transport).

use std::sync::Arc;

use keel_raft::node::Node;
use keel_store::pb::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse,
};
use tonic::{Request, Response, Status};

use super::header::HeaderSource;
use super::pb::cluster_server::Cluster;

/// Serves the Cluster service from a member.
pub struct ClusterService {
    node: Arc<Node>,
    hdr: HeaderSource,
}

impl ClusterService {
    /// A Cluster service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        ClusterService {
            hdr: HeaderSource::new(node.clone()),
            node,
        }
    }

    fn members(&self) -> Vec<Member> {
        let mut v: Vec<Member> = self
            .node
            .members()
            .into_iter()
            .map(|m| Member {
                id: m.id,
                name: m.node.name,
                peer_ur_ls: m.node.peer_urls,
                client_ur_ls: m.node.client_urls,
                is_learner: m.is_learner,
            })
            .collect();
        v.sort_by_key(|m| m.id);
        v
    }
}

const NO_MEMBERSHIP: &str =
    "keel: membership changes need the peer transport, which this build does not have";

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        _req: Request<MemberAddRequest>,
    ) -> Result<Response<MemberAddResponse>, Status> {
        Err(Status::unimplemented(NO_MEMBERSHIP))
    }

    async fn member_remove(
        &self,
        _req: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        Err(Status::unimplemented(NO_MEMBERSHIP))
    }

    async fn member_update(
        &self,
        _req: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        Err(Status::unimplemented(NO_MEMBERSHIP))
    }

    async fn member_list(
        &self,
        _req: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        Ok(Response::new(MemberListResponse {
            // etcd's Cluster service leaves the header revision unset.
            header: Some(self.hdr.header(0)),
            members: self.members(),
        }))
    }

    async fn member_promote(
        &self,
        _req: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        Err(Status::unimplemented(NO_MEMBERSHIP))
    }
}
