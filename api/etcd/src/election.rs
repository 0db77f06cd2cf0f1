//! etcd's election service (`v3electionpb.Election`): candidates queue under a prefix as the
//! lock's waiters do (see `recipes.rs`); the leader is the candidate whose key was created first,
//! and its key's value is what it proclaims.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use keel_raft::node::Node;
use keel_store::mvcc::range::prefix_end;
use keel_store::pb::etcdserverpb::{
    request_op, DeleteRangeRequest, RequestOp, ResponseHeader, TxnRequest, WatchCreateRequest,
};
use keel_store::pb::mvccpb::event::EventType;
use keel_store::pb::mvccpb::KeyValue;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::recipes::{created_at, first_created, keys, put, range_at, CleanupGuard, Recipes};
use super::v3electionpb::election_server::Election;
use super::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};

/// etcd's answers (plain errors there, so gRPC's Unknown code).
fn missing_leader_key() -> Status {
    Status::unknown("\"leader\" field must be provided")
}
fn not_leader() -> Status {
    Status::unknown("election: not leader")
}
fn no_leader() -> Status {
    Status::unknown("election: no leader")
}

/// Serves the election service from a member.
pub struct ElectionService {
    recipes: Arc<Recipes>,
}

impl ElectionService {
    /// An election service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        ElectionService {
            recipes: Recipes::new(node),
        }
    }

    /// Puts `value` on the leader's key if it is still the key created at `leader.rev`.
    async fn proclaim_as(
        &self,
        md: &MetadataMap,
        leader: &LeaderKey,
        lease: i64,
        value: Bytes,
    ) -> Result<Option<ResponseHeader>, Status> {
        let t = self
            .recipes
            .txn(
                md,
                TxnRequest {
                    compare: vec![created_at(&leader.key, leader.rev)],
                    success: vec![put(&leader.key, value, lease)],
                    failure: Vec::new(),
                },
            )
            .await?;
        if !t.succeeded {
            return Err(not_leader());
        }
        Ok(t.header)
    }

    /// Deletes the leader's key if it is still the key created at `leader.rev`.
    async fn resign_as(
        &self,
        md: &MetadataMap,
        leader: &LeaderKey,
    ) -> Result<Option<ResponseHeader>, Status> {
        let delete = RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: leader.key.clone(),
                    ..Default::default()
                },
            )),
        };
        let t = self
            .recipes
            .txn(
                md,
                TxnRequest {
                    compare: vec![created_at(&leader.key, leader.rev)],
                    success: vec![delete],
                    failure: Vec::new(),
                },
            )
            .await?;
        Ok(t.header)
    }
}

type LeaderStream = Pin<Box<dyn Stream<Item = Result<LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        req: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let lease = self.recipes.session_lease(&md, r.lease).await?;
        let (prefix, key) = keys(&r.name, lease);
        let entered = self
            .recipes
            .enter(&md, &prefix, &key, lease, r.value.clone(), false)
            .await?;
        let leader = LeaderKey {
            name: r.name.clone(),
            key: key.clone(),
            rev: entered.rev,
            lease,
        };
        if !entered.txn.succeeded {
            // Campaigning again with the same lease: take the new value.
            let current = range_at(&entered.txn, 0).and_then(|g| g.kvs.first());
            if current.is_some_and(|kv| kv.value != r.value) {
                if let Err(e) = self.proclaim_as(&md, &leader, lease, r.value.clone()).await {
                    let _ = self.resign_as(&md, &leader).await;
                    return Err(e);
                }
            }
        }
        let mut guard = CleanupGuard::new(self.recipes.clone(), &md, key.clone());
        let waited = self
            .recipes
            .wait_deletes(&md, &prefix, entered.rev - 1)
            .await;
        guard.disarm();
        waited?;
        Ok(Response::new(CampaignResponse {
            header: entered.txn.header,
            leader: Some(leader),
        }))
    }

    async fn proclaim(
        &self,
        req: Request<ProclaimRequest>,
    ) -> Result<Response<ProclaimResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let leader = r.leader.ok_or_else(missing_leader_key)?;
        let lease = self.recipes.session_lease(&md, leader.lease).await?;
        let header = self.proclaim_as(&md, &leader, lease, r.value).await?;
        Ok(Response::new(ProclaimResponse { header }))
    }

    async fn leader(
        &self,
        req: Request<LeaderRequest>,
    ) -> Result<Response<LeaderResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let (prefix, _) = keys(&r.name, 0);
        let g = self.recipes.range(&md, first_created(&prefix)).await?;
        let kv = g.kvs.into_iter().next().ok_or_else(no_leader)?;
        Ok(Response::new(LeaderResponse {
            header: g.header,
            kv: Some(kv),
        }))
    }

    type ObserveStream = LeaderStream;

    async fn observe(
        &self,
        req: Request<LeaderRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let (md, _, r) = req.into_parts();
        let (prefix, _) = keys(&r.name, 0);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let recipes = self.recipes.clone();
        tokio::spawn(async move {
            // As etcd's: a failed read or watch ends the stream (with OK), it is not an error.
            if let Err(e) = observe(&recipes, &md, &prefix, &tx).await {
                tracing::debug!(%e, "election observe ended");
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn resign(
        &self,
        req: Request<ResignRequest>,
    ) -> Result<Response<ResignResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let leader = r.leader.ok_or_else(missing_leader_key)?;
        // A session is made for the call as etcd makes one (a lease of 0 gets a new lease).
        self.recipes.session_lease(&md, leader.lease).await?;
        let header = self.resign_as(&md, &leader).await?;
        Ok(Response::new(ResignResponse { header }))
    }
}

type Sink = tokio::sync::mpsc::Sender<Result<LeaderResponse, Status>>;

/// Sends every leader value of `prefix` in order: the current leader (waiting for one if there
/// is none), its later values, and on its key's deletion the next leader. Ends when the client
/// goes away (the sink closes) or a watch fails.
async fn observe(
    recipes: &Recipes,
    md: &MetadataMap,
    prefix: &Bytes,
    tx: &Sink,
) -> Result<(), Status> {
    let hdr = recipes.headers();
    loop {
        let g = recipes.range(md, first_created(prefix)).await?;
        let (kv, rev): (KeyValue, i64) = match g.kvs.into_iter().next() {
            Some(kv) => {
                let rev = g.header.as_ref().map_or(0, |h| h.revision);
                (kv, rev)
            }
            None => {
                // No leader yet: the first put under the prefix makes one.
                let from = g.header.as_ref().map_or(0, |h| h.revision);
                let mut w = recipes
                    .watch(WatchCreateRequest {
                        key: prefix.clone(),
                        range_end: Bytes::from(prefix_end(prefix)),
                        start_revision: from,
                        ..Default::default()
                    })
                    .await?;
                loop {
                    let events = tokio::select! {
                        e = w.next() => e?,
                        () = tx.closed() => return Ok(()),
                    };
                    let put = events
                        .into_iter()
                        .find(|(ev, _)| ev.r#type == EventType::Put as i32)
                        .and_then(|(ev, _)| ev.kv);
                    if let Some(kv) = put {
                        let rev = kv.mod_revision;
                        break (kv, rev);
                    }
                }
            }
        };
        let key = kv.key.clone();
        let first = LeaderResponse {
            header: Some(hdr.header(rev)),
            kv: Some(kv),
        };
        if tx.send(Ok(first)).await.is_err() {
            return Ok(());
        }
        // Follow this leader's key until it is deleted.
        let mut w = recipes
            .watch(WatchCreateRequest {
                key,
                start_revision: rev + 1,
                ..Default::default()
            })
            .await?;
        'leader: loop {
            let events = tokio::select! {
                e = w.next() => e?,
                () = tx.closed() => return Ok(()),
            };
            for (ev, at) in events {
                if ev.r#type == EventType::Delete as i32 {
                    break 'leader;
                }
                let resp = LeaderResponse {
                    header: Some(hdr.header(at)),
                    kv: ev.kv,
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}
