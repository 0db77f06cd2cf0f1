//! The Maintenance service: status, alarms, hashes, leader moves, defragment.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_raft::node::Node;
use keel_store::pb::etcdserverpb::{
    alarm_request, AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse,
    HashKvRequest, HashKvResponse, HashRequest, HashResponse, MoveLeaderRequest,
    MoveLeaderResponse, SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
};
use tonic::{Request, Response, Status};

use super::error::store_status;
use super::header::HeaderSource;
use super::pb::maintenance_server::Maintenance;
use super::ETCD_VERSION;

/// Serves the Maintenance service from a member.
pub struct MaintenanceService {
    node: Arc<Node>,
    hdr: HeaderSource,
}

impl MaintenanceService {
    /// A Maintenance service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        MaintenanceService {
            hdr: HeaderSource::new(node.clone()),
            node,
        }
    }

    fn header(&self) -> Option<keel_store::pb::etcdserverpb::ResponseHeader> {
        Some(self.hdr.header(self.node.store().revision()))
    }
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, req: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        let r = req.into_inner();
        match alarm_request::AlarmAction::try_from(r.action) {
            // keel raises no alarms yet (no space quota), so the list is always empty and
            // disarming is a no-op, exactly as on an etcd member without alarms.
            Ok(alarm_request::AlarmAction::Get) | Ok(alarm_request::AlarmAction::Deactivate) => {
                // etcd answers alarm requests without a header.
                Ok(Response::new(AlarmResponse {
                    header: None,
                    alarms: Vec::new(),
                }))
            }
            Ok(alarm_request::AlarmAction::Activate) => Err(Status::unimplemented(
                "keel: raising alarms by request is not supported",
            )),
            Err(_) => Err(Status::invalid_argument("etcdserver: unknown alarm action")),
        }
    }

    async fn status(
        &self,
        _req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let st = self.node.status();
        let db = self.node.store().db_size() as i64;
        let mut errors = Vec::new();
        if st.leader.is_none() {
            errors.push("etcdserver: no leader".to_string());
        }
        Ok(Response::new(StatusResponse {
            header: self.header(),
            version: ETCD_VERSION.to_string(),
            db_size: db,
            leader: st.leader.unwrap_or(0),
            raft_index: st.last_log_index,
            raft_term: st.term,
            raft_applied_index: st.applied_index,
            errors,
            db_size_in_use: db,
            is_learner: st.is_learner,
        }))
    }

    async fn defragment(
        &self,
        _req: Request<DefragmentRequest>,
    ) -> Result<Response<DefragmentResponse>, Status> {
        // The backend reclaims space on its own; defragment writes out its buffers so that
        // operators' routine `etcdctl defrag` succeeds (see docs/etcd-compatibility.md).
        self.node.store().flush().map_err(|e| store_status(&e))?;
        Ok(Response::new(DefragmentResponse {
            header: self.header(),
        }))
    }

    async fn hash(&self, _req: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        let (hash, _, _) = self.node.store().hash_kv(0).map_err(|e| store_status(&e))?;
        Ok(Response::new(HashResponse {
            header: self.header(),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        req: Request<HashKvRequest>,
    ) -> Result<Response<HashKvResponse>, Status> {
        let r = req.into_inner();
        let (hash, compact_revision, _) = self
            .node
            .store()
            .hash_kv(r.revision)
            .map_err(|e| store_status(&e))?;
        Ok(Response::new(HashKvResponse {
            header: self.header(),
            hash,
            compact_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        _req: Request<SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        Err(Status::unimplemented(
            "keel: etcd-format snapshot streaming is not available yet (see docs/etcd-compatibility.md)",
        ))
    }

    async fn move_leader(
        &self,
        req: Request<MoveLeaderRequest>,
    ) -> Result<Response<MoveLeaderResponse>, Status> {
        let r = req.into_inner();
        let st = self.node.status();
        if !st.is_leader {
            return Err(Status::failed_precondition("etcdserver: not leader"));
        }
        if r.target_id != st.member_id {
            return Err(Status::failed_precondition(
                "etcdserver: bad leader transferee",
            ));
        }
        Ok(Response::new(MoveLeaderResponse {
            header: self.header(),
        }))
    }
}
