//! The lock and election recipes of etcd's `clientv3/concurrency`, run inside the member as
//! etcd's `v3lock` and `v3election` services run them: every step is a KV call through this
//! member's own KV service (so auth, quotas and errors are the KV API's), and waiting is a watch
//! on this member's hub.
//!
//! A waiter's key is `<name>/<lease ID in hex>` under its lease; the holder is the key of the
//! prefix with the lowest create revision, and a waiter waits until every key created before
//! its own is deleted (by unlock, resign or lease expiry).

use std::sync::Arc;

use bytes::Bytes;
use keel_raft::node::Node;
use keel_store::mvcc::range::prefix_end;
use keel_store::pb::etcdserverpb::{
    compare, range_request, request_op, response_op, Compare, DeleteRangeRequest,
    DeleteRangeResponse, LeaseGrantRequest, PutRequest, RangeRequest, RangeResponse, RequestOp,
    ResponseHeader, TxnRequest, TxnResponse, WatchCreateRequest,
};
use keel_store::pb::mvccpb::{event::EventType, KeyValue};
use keel_store::StoreError;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

use super::error::store_status;
use super::header::HeaderSource;
use super::kv::KvService;
use super::lease::LeaseService;
use super::pb::kv_server::Kv;
use super::pb::lease_server::Lease;

/// TTL of the lease a request without one gets (the concurrency package's default session).
const DEFAULT_SESSION_TTL: i64 = 60;

/// The KV, lease and watch calls the recipes are made of.
pub struct Recipes {
    kv: KvService,
    lease: LeaseService,
    node: Arc<Node>,
    hdr: HeaderSource,
}

/// Where a waiter stands after entering the queue of a prefix.
pub struct Entered {
    /// Its key.
    pub key: Bytes,
    /// Its key's create revision.
    pub rev: i64,
    /// The answer to the entering transaction.
    pub txn: TxnResponse,
}

fn request<T>(md: &MetadataMap, msg: T) -> Request<T> {
    Request::from_parts(md.clone(), Default::default(), msg)
}

fn op(r: request_op::Request) -> RequestOp {
    RequestOp { request: Some(r) }
}

/// `key`'s create revision equals `rev` (0: the key does not exist).
pub fn created_at(key: &Bytes, rev: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key: key.clone(),
        target_union: Some(compare::TargetUnion::CreateRevision(rev)),
        range_end: Bytes::new(),
    }
}

/// A put of `key` under `lease`.
pub fn put(key: &Bytes, value: Bytes, lease: i64) -> RequestOp {
    op(request_op::Request::RequestPut(PutRequest {
        key: key.clone(),
        value,
        lease,
        ..Default::default()
    }))
}

fn get(key: &Bytes) -> RequestOp {
    op(request_op::Request::RequestRange(RangeRequest {
        key: key.clone(),
        ..Default::default()
    }))
}

/// The key of `prefix` created first (`WithFirstCreate`).
pub fn first_created(prefix: &Bytes) -> RangeRequest {
    RangeRequest {
        key: prefix.clone(),
        range_end: Bytes::from(prefix_end(prefix)),
        limit: 1,
        sort_order: range_request::SortOrder::Ascend as i32,
        sort_target: range_request::SortTarget::Create as i32,
        ..Default::default()
    }
}

/// The `i`th response of a transaction as a Range answer.
pub fn range_at(t: &TxnResponse, i: usize) -> Option<&RangeResponse> {
    match t.responses.get(i)?.response.as_ref()? {
        response_op::Response::ResponseRange(r) => Some(r),
        _ => None,
    }
}

/// `name/` as a prefix and `name/<lease hex>` as this session's key.
pub fn keys(name: &[u8], lease: i64) -> (Bytes, Bytes) {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    let mut key = prefix.clone();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    (Bytes::from(prefix), Bytes::from(key))
}

/// An error of a KV call made by a recipe as etcd's services return it: etcd runs them on an in-process client
/// whose errors reach the service as plain errors, so gRPC sends them with code Unknown and the same message
/// (observed against etcd 3.4: `Unknown "etcdserver: requested lease not found"`).
fn plain(s: Status) -> Status {
    Status::unknown(s.message())
}

fn broken(what: &str) -> Status {
    Status::internal(format!("keel: {what}"))
}

impl Recipes {
    /// Recipes running on `node`.
    pub fn new(node: Arc<Node>) -> Arc<Self> {
        Arc::new(Recipes {
            kv: KvService::new(node.clone()),
            lease: LeaseService::new(node.clone()),
            hdr: HeaderSource::new(node.clone()),
            node,
        })
    }

    /// Headers for answers from this member.
    pub fn headers(&self) -> &HeaderSource {
        &self.hdr
    }

    /// The lease a session uses: `lease`, or a new one of 60 s when it is 0 (as a session
    /// created without a lease grants one).
    pub async fn session_lease(&self, md: &MetadataMap, lease: i64) -> Result<i64, Status> {
        if lease != 0 {
            return Ok(lease);
        }
        let g = LeaseGrantRequest {
            ttl: DEFAULT_SESSION_TTL,
            id: 0,
        };
        let r = self
            .lease
            .lease_grant(request(md, g))
            .await
            .map_err(plain)?;
        Ok(r.into_inner().id)
    }

    /// A transaction through this member's KV service.
    pub async fn txn(&self, md: &MetadataMap, t: TxnRequest) -> Result<TxnResponse, Status> {
        Ok(self
            .kv
            .txn(request(md, t))
            .await
            .map_err(plain)?
            .into_inner())
    }

    /// A (linearizable) range through this member's KV service.
    pub async fn range(&self, md: &MetadataMap, r: RangeRequest) -> Result<RangeResponse, Status> {
        Ok(self
            .kv
            .range(request(md, r))
            .await
            .map_err(plain)?
            .into_inner())
    }

    /// Deletes `key` through this member's KV service.
    pub async fn delete(
        &self,
        md: &MetadataMap,
        key: Bytes,
    ) -> Result<DeleteRangeResponse, Status> {
        let d = DeleteRangeRequest {
            key,
            ..Default::default()
        };
        Ok(self
            .kv
            .delete_range(request(md, d))
            .await
            .map_err(plain)?
            .into_inner())
    }

    /// Enters the queue of `prefix` with `key` under `lease` (or finds the key this session
    /// already has there), and reads the current holder in the same transaction. A new key gets
    /// `value`.
    pub async fn enter(
        &self,
        md: &MetadataMap,
        prefix: &Bytes,
        key: &Bytes,
        lease: i64,
        value: Bytes,
        with_owner: bool,
    ) -> Result<Entered, Status> {
        let owner = || op(request_op::Request::RequestRange(first_created(prefix)));
        let mut success = vec![put(key, value, lease)];
        let mut failure = vec![get(key)];
        if with_owner {
            success.push(owner());
            failure.push(owner());
        }
        let txn = self
            .txn(
                md,
                TxnRequest {
                    compare: vec![created_at(key, 0)],
                    success,
                    failure,
                },
            )
            .await?;
        let rev = if txn.succeeded {
            txn.header.as_ref().map_or(0, |h| h.revision)
        } else {
            range_at(&txn, 0)
                .and_then(|r| r.kvs.first())
                .map(|kv| kv.create_revision)
                .ok_or_else(|| broken("the session's key vanished inside its transaction"))?
        };
        Ok(Entered {
            key: key.clone(),
            rev,
            txn,
        })
    }

    /// Waits until no key of `prefix` created at or before `max_create_rev` is left; returns the
    /// header of the read that found none.
    pub async fn wait_deletes(
        &self,
        md: &MetadataMap,
        prefix: &Bytes,
        max_create_rev: i64,
    ) -> Result<ResponseHeader, Status> {
        loop {
            // The newest key created before ours (`WithLastCreate`, `WithMaxCreateRev`).
            let r = self
                .range(
                    md,
                    RangeRequest {
                        key: prefix.clone(),
                        range_end: Bytes::from(prefix_end(prefix)),
                        limit: 1,
                        sort_order: range_request::SortOrder::Descend as i32,
                        sort_target: range_request::SortTarget::Create as i32,
                        max_create_revision: max_create_rev,
                        ..Default::default()
                    },
                )
                .await?;
            let header = r.header.unwrap_or_default();
            let Some(last) = r.kvs.first() else {
                return Ok(header);
            };
            self.wait_delete(last.key.clone(), header.revision).await?;
        }
    }

    /// Waits for `key` to be deleted at or after revision `rev`.
    pub async fn wait_delete(&self, key: Bytes, rev: i64) -> Result<(), Status> {
        let mut watch = self
            .watch(WatchCreateRequest {
                key,
                start_revision: rev,
                ..Default::default()
            })
            .await?;
        loop {
            let events = watch.next().await?;
            if events
                .iter()
                .any(|(ev, _)| ev.r#type == EventType::Delete as i32)
            {
                return Ok(());
            }
        }
    }

    /// Opens a watch on this member's hub.
    pub async fn watch(&self, create: WatchCreateRequest) -> Result<Watch, Status> {
        let (stream, rx) = self.node.store().hub().open_stream();
        stream.create(create).await.map_err(|_| lost_watcher())?;
        Ok(Watch {
            _stream: stream,
            rx,
        })
    }
}

/// etcd's error when a watch ends without the awaited event.
fn lost_watcher() -> Status {
    Status::unknown("lost watcher waiting for delete")
}

/// One watch of a recipe; its events come with the revision of the response that carried them.
pub struct Watch {
    _stream: keel_store::watch::hub::WatchStream,
    rx: keel_store::watch::hub::WatchReceiver,
}

/// One watch event and the header revision of its response.
pub type Event = (keel_store::pb::mvccpb::Event, i64);

impl Watch {
    /// The events of the next response that has any; an error if the watch was cancelled
    /// (compacted: etcd's compaction error).
    pub async fn next(&mut self) -> Result<Vec<Event>, Status> {
        loop {
            let Some(msg) = self.rx.recv().await else {
                return Err(lost_watcher());
            };
            let r = msg.response;
            if r.canceled {
                if r.compact_revision > 0 {
                    return Err(plain(store_status(&StoreError::Compacted)));
                }
                return Err(lost_watcher());
            }
            if !r.events.is_empty() {
                return Ok(r.events.into_iter().map(|e| (e, msg.revision)).collect());
            }
        }
    }
}

/// The first key of a range answer (`None` if it has none).
pub fn first_kv(r: &RangeResponse) -> Option<KeyValue> {
    r.kvs.first().cloned()
}

/// Deletes a waiter's key if the call waiting for it goes away first (the client cancelled it):
/// etcd's recipes clean up after a cancelled wait the same way.
pub struct CleanupGuard {
    recipes: Arc<Recipes>,
    md: MetadataMap,
    key: Option<Bytes>,
}

impl CleanupGuard {
    /// Guards `key` until [`CleanupGuard::disarm`].
    pub fn new(recipes: Arc<Recipes>, md: &MetadataMap, key: Bytes) -> Self {
        CleanupGuard {
            recipes,
            md: md.clone(),
            key: Some(key),
        }
    }

    /// The wait ended (either way) while the call was still there.
    pub fn disarm(&mut self) {
        self.key = None;
    }
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let recipes = self.recipes.clone();
            let md = std::mem::take(&mut self.md);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    if let Err(e) = recipes.delete(&md, key).await {
                        tracing::debug!(%e, "could not remove a cancelled waiter's key");
                    }
                });
            }
        }
    }
}
