//! The Cluster service: member listing (membership changes need the peer transport).

use std::sync::Arc;

use keel_raft::node::Node;
use keel_raft::types::{MemberChange, MemberInfo};
use keel_store::pb::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse,
};
use tonic::{Request, Response, Status};

use super::error::propose_status;
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
        self.node.members().into_iter().map(to_pb).collect()
    }
}

fn to_pb(m: MemberInfo) -> Member {
    Member {
        id: m.id,
        name: m.node.name,
        peer_ur_ls: m.node.peer_urls,
        client_ur_ls: m.node.client_urls,
        is_learner: m.is_learner,
    }
}

impl ClusterService {
    async fn change(&self, change: MemberChange) -> Result<(Option<Member>, Vec<Member>), Status> {
        let r = self
            .node
            .member_change(change)
            .await
            .map_err(|e| propose_status(&e))?;
        Ok((
            r.member.map(to_pb),
            r.members.into_iter().map(to_pb).collect(),
        ))
    }

    fn header(&self) -> Option<keel_store::pb::etcdserverpb::ResponseHeader> {
        // etcd's Cluster service leaves the header revision unset.
        Some(self.hdr.header(0))
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        req: Request<MemberAddRequest>,
    ) -> Result<Response<MemberAddResponse>, Status> {
        let r = req.into_inner();
        let (member, members) = self
            .change(MemberChange::Add {
                peer_urls: r.peer_ur_ls,
                learner: r.is_learner,
            })
            .await?;
        Ok(Response::new(MemberAddResponse {
            header: self.header(),
            member,
            members,
        }))
    }

    async fn member_remove(
        &self,
        req: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        let r = req.into_inner();
        let (_, members) = self.change(MemberChange::Remove { id: r.id }).await?;
        Ok(Response::new(MemberRemoveResponse {
            header: self.header(),
            members,
        }))
    }

    async fn member_update(
        &self,
        req: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        let r = req.into_inner();
        let (_, members) = self
            .change(MemberChange::Update {
                id: r.id,
                peer_urls: r.peer_ur_ls,
            })
            .await?;
        Ok(Response::new(MemberUpdateResponse {
            header: self.header(),
            members,
        }))
    }

    async fn member_list(
        &self,
        _req: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        Ok(Response::new(MemberListResponse {
            header: self.header(),
            members: self.members(),
        }))
    }

    async fn member_promote(
        &self,
        req: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        let r = req.into_inner();
        let (_, members) = self.change(MemberChange::Promote { id: r.id }).await?;
        Ok(Response::new(MemberPromoteResponse {
            header: self.header(),
            members,
        }))
    }
}
