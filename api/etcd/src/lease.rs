//! The Lease service: grant, revoke, keep-alive, time-to-live, list.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_raft::node::Node;
use keel_store::command::CommandKind;
use keel_store::lease::MAX_LEASE_TTL;
use keel_store::pb::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseStatus,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use keel_store::{Command, CommandResponse, LeaseId, StoreError};
use rand::Rng;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::error::{propose_status, store_status};
use super::header::HeaderSource;
use super::pb::lease_server::Lease;

/// Serves the Lease service from a member.
pub struct LeaseService {
    node: Arc<Node>,
    hdr: HeaderSource,
    gate: crate::auth::AuthGate,
}

impl LeaseService {
    /// A Lease service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        LeaseService {
            hdr: HeaderSource::new(node.clone()),
            gate: crate::auth::AuthGate::new(node.clone()),
            node,
        }
    }

    /// A fresh positive lease ID not in use (etcd clears the top bit of its generated IDs).
    fn new_lease_id(&self) -> i64 {
        let mut rng = rand::thread_rng();
        loop {
            let id = rng.gen::<i64>() & i64::MAX;
            if id != 0 && !self.node.store().lease_exists(LeaseId(id)) {
                return id;
            }
        }
    }
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        req: Request<LeaseGrantRequest>,
    ) -> Result<Response<LeaseGrantResponse>, Status> {
        let (md, _, mut g) = req.into_parts();
        if g.ttl > MAX_LEASE_TTL {
            return Err(store_status(&StoreError::LeaseTtlTooLarge));
        }
        if g.id < 0 {
            return Err(Status::invalid_argument(
                "etcdserver: lease ID must be positive",
            ));
        }
        if g.id == 0 {
            g.id = self.new_lease_id();
        }
        let kind = CommandKind::LeaseGrant(g);
        self.node
            .admit(&kind)
            .await
            .map_err(|e| propose_status(&e))?;
        let kind = self.gate.wrap(&md, kind).await?;
        match self.node.propose(Command::new(kind)).await {
            Ok(CommandResponse::LeaseGrant(mut r)) => {
                r.header = self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            Ok(other) => Err(Status::internal(format!(
                "keel: unexpected apply result {other:?}"
            ))),
            Err(e) => Err(propose_status(&e)),
        }
    }

    async fn lease_revoke(
        &self,
        req: Request<LeaseRevokeRequest>,
    ) -> Result<Response<LeaseRevokeResponse>, Status> {
        let (md, _, r) = req.into_parts();
        // As etcd: revoking deletes the lease's keys, so each must be writable by the caller.
        let kind = self.gate.wrap(&md, CommandKind::LeaseRevoke(r)).await?;
        match self.node.propose(Command::new(kind)).await {
            Ok(CommandResponse::LeaseRevoke(mut r)) => {
                r.header = self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            Ok(other) => Err(Status::internal(format!(
                "keel: unexpected apply result {other:?}"
            ))),
            Err(e) => Err(propose_status(&e)),
        }
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut input = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let node = self.node.clone();
        let hdr = self.hdr.clone();
        tokio::spawn(async move {
            while let Some(msg) = input.next().await {
                let ka = match msg {
                    Ok(ka) => ka,
                    Err(_) => return,
                };
                let out = match node.lease_keepalive(LeaseId(ka.id)).await {
                    Ok(ttl) => Ok(LeaseKeepAliveResponse {
                        header: Some(hdr.header(node.store().revision())),
                        id: ka.id,
                        ttl: ttl.unwrap_or(0),
                    }),
                    Err(e) => Err(propose_status(&e)),
                };
                let fatal = out.is_err();
                if tx.send(out).await.is_err() || fatal {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        let r = req.into_inner();
        let found = self
            .node
            .lease_time_to_live(LeaseId(r.id), r.keys)
            .await
            .map_err(|e| propose_status(&e))?;
        let header = Some(self.hdr.header(self.node.store().revision()));
        let resp = match found {
            Some((ttl, granted, keys)) => LeaseTimeToLiveResponse {
                header,
                id: r.id,
                ttl,
                granted_ttl: granted,
                keys: keys.into_iter().map(Into::into).collect(),
            },
            None => LeaseTimeToLiveResponse {
                header,
                id: r.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            },
        };
        Ok(Response::new(resp))
    }

    async fn lease_leases(
        &self,
        _req: Request<LeaseLeasesRequest>,
    ) -> Result<Response<LeaseLeasesResponse>, Status> {
        let store = self.node.store();
        Ok(Response::new(LeaseLeasesResponse {
            header: Some(self.hdr.header(store.revision())),
            leases: store
                .lease_ids()
                .into_iter()
                .map(|id| LeaseStatus { id: id.0 })
                .collect(),
        }))
    }
}
