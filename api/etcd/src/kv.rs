//! The KV service: Range, Put, DeleteRange, Txn, Compact.

use std::sync::Arc;

use keel_raft::node::Node;
use keel_store::command::CommandKind;
use keel_store::mvcc::txn_check::{validate_put, validate_txn};
use keel_store::pb::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use keel_store::store::{txn_is_read_only, txn_is_serializable};
use keel_store::{Command, CommandResponse, StoreError, MAX_REQUEST_BYTES, MAX_TXN_OPS};
use prost::Message;
use tonic::{Request, Response, Status};

use super::auth::AuthGate;
use super::error::{propose_status, store_status};
use super::header::HeaderSource;
use super::pb::kv_server::Kv;
use super::server::check_recv_size;

/// Serves the KV service from a member.
pub struct KvService {
    node: Arc<Node>,
    hdr: HeaderSource,
    gate: AuthGate,
}

impl KvService {
    /// A KV service answering from `node`.
    pub fn new(node: Arc<Node>) -> Self {
        KvService {
            hdr: HeaderSource::new(node.clone()),
            gate: AuthGate::new(node.clone()),
            node,
        }
    }

    /// Proposes a command after the size check etcd applies to proposals.
    async fn propose(&self, kind: CommandKind) -> Result<CommandResponse, Status> {
        let cmd = Command::new(kind);
        if cmd.encoded_len() > MAX_REQUEST_BYTES {
            return Err(store_status(&StoreError::RequestTooLarge));
        }
        self.node.propose(cmd).await.map_err(|e| propose_status(&e))
    }

    /// The space quota (etcd's quota interceptor runs before the request is looked at).
    async fn admit(&self, kind: &CommandKind) -> Result<(), Status> {
        self.node.admit(kind).await.map_err(|e| propose_status(&e))
    }

    /// etcd's `hasleader` metadata (clientv3.WithRequireLeader): fail at once without a leader.
    fn require_leader<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let wants = req
            .metadata()
            .get("hasleader")
            .is_some_and(|v| v.as_bytes() == b"true");
        if wants && self.node.status().leader.is_none() {
            return Err(propose_status(&keel_raft::error::ProposeError::NoLeader));
        }
        Ok(())
    }

    async fn barrier(&self, serializable: bool) -> Result<(), Status> {
        if serializable {
            return Ok(());
        }
        self.node
            .read_barrier()
            .await
            .map_err(|e| propose_status(&e))
    }
}

fn unexpected_kind(k: &CommandKind) -> Status {
    Status::internal(format!("keel: unexpected command {k:?}"))
}

fn unexpected(r: CommandResponse) -> Status {
    Status::internal(format!("keel: unexpected apply result {r:?}"))
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, req: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        self.require_leader(&req)?;
        let (md, _, r) = req.into_parts();
        check_recv_size(r.encoded_len())?;
        if r.key.is_empty() {
            return Err(store_status(&StoreError::EmptyKey));
        }
        self.barrier(r.serializable).await?;
        let ai = self
            .gate
            .check_read(&md, |a, ai| a.range_permitted(ai, &r.key, &r.range_end))
            .await?;
        let mut resp = self.node.store().range(&r).map_err(|e| store_status(&e))?;
        self.gate.recheck(ai)?;
        resp.header = self.hdr.fill(resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        self.require_leader(&req)?;
        let (md, _, p) = req.into_parts();
        check_recv_size(p.encoded_len())?;
        let kind = CommandKind::Put(p);
        self.admit(&kind).await?;
        if let CommandKind::Put(p) = &kind {
            validate_put(p).map_err(|e| store_status(&e))?;
        }
        let kind = self.gate.wrap(&md, kind).await?;
        match self.propose(kind).await? {
            CommandResponse::Put(mut r) => {
                r.header = self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn delete_range(
        &self,
        req: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        self.require_leader(&req)?;
        let (md, _, d) = req.into_parts();
        check_recv_size(d.encoded_len())?;
        if d.key.is_empty() {
            return Err(store_status(&StoreError::EmptyKey));
        }
        let kind = self.gate.wrap(&md, CommandKind::DeleteRange(d)).await?;
        match self.propose(kind).await? {
            CommandResponse::DeleteRange(mut r) => {
                r.header = self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn txn(&self, req: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        self.require_leader(&req)?;
        let (md, _, t) = req.into_parts();
        check_recv_size(t.encoded_len())?;
        let t = {
            let kind = CommandKind::Txn(t);
            self.admit(&kind).await?;
            match kind {
                CommandKind::Txn(t) => t,
                other => return Err(unexpected_kind(&other)),
            }
        };
        validate_txn(&t, MAX_TXN_OPS).map_err(|e| store_status(&e))?;
        if txn_is_read_only(&t) {
            self.barrier(txn_is_serializable(&t)).await?;
            let ai = self
                .gate
                .check_read(&md, |a, ai| a.txn_permitted(ai, &t))
                .await?;
            let mut r = self
                .node
                .store()
                .txn_read(&t)
                .map_err(|e| store_status(&e))?;
            self.gate.recheck(ai)?;
            r.header = self.hdr.fill(r.header);
            return Ok(Response::new(r));
        }
        let kind = self.gate.wrap(&md, CommandKind::Txn(t)).await?;
        match self.propose(kind).await? {
            CommandResponse::Txn(mut r) => {
                r.header = self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn compact(
        &self,
        req: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        self.require_leader(&req)?;
        let (md, _, c) = req.into_parts();
        // etcd 3.4 checks no permission for compaction, but still refuses a bad token.
        let kind = self.gate.wrap(&md, CommandKind::Compaction(c)).await?;
        match self.propose(kind).await? {
            CommandResponse::Compaction(mut r) => {
                r.header = self.hdr.fill(r.header);
                Ok(Response::new(r))
            }
            other => Err(unexpected(other)),
        }
    }
}
