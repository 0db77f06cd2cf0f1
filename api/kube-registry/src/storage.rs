//! Kubernetes objects in the MVCC store, reached through the member's in-process [`Node`] handle (the same
//! one the etcd front door uses): reads from the local store after a ReadIndex barrier, writes as Txns
//! proposed through Raft that compare `mod_revision` exactly as kube-apiserver's etcd3 storage does.
//!
//! Values are JSON; `metadata.resourceVersion` is never stored, it is the key's mod revision, filled in on
//! read. Values in upstream's protobuf encoding (`k8s\0` prefix) are decoded by [`super::protobuf`].

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel_raft::error::ProposeError;
use keel_raft::node::Node;
pub use keel_raft::types::Leadership;
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{
    compare, request_op, response_op, Compare, DeleteRangeRequest, PutRequest, RangeRequest,
    RequestOp, TxnRequest,
};
use keel_store::pb::mvccpb::KeyValue;
use keel_store::{Command, CommandResponse, StoreError, MAX_REQUEST_BYTES};
use serde_json::Value;

pub mod calls;
mod watch;

pub use watch::{StoreWatch, WatchBatch};

use super::object;
use super::protobuf;
use super::status::ApiError;
use calls::StoreCalls;

/// One stored object with its revisions.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The object, `metadata.resourceVersion` set.
    pub object: Value,
    /// The key's mod revision (= resourceVersion).
    pub mod_revision: i64,
}

/// The result of a conditional write.
#[derive(Debug)]
pub enum WriteOutcome {
    /// Written at this revision.
    Done(i64),
    /// The condition failed; the key's current state (None when it does not exist).
    Lost(Option<Stored>),
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    pub items: Vec<(Vec<u8>, Stored)>,
    /// Store revision the page was read at.
    pub revision: i64,
    /// More keys follow the last one.
    pub more: bool,
    /// Keys after this page (upstream's remainingItemCount).
    pub remaining: i64,
}

/// Access to Kubernetes objects in the store.
#[derive(Clone)]
pub struct Storage {
    node: Arc<Node>,
    ttl_leases: Arc<tokio::sync::Mutex<Option<TtlLease>>>,
    /// Timings of the calls below, for `/metrics` (`etcd_request_duration_seconds`).
    calls: Arc<StoreCalls>,
    /// Encryption at rest, installed once when the API server starts; every clone of this handle
    /// shares it.
    encryption: Arc<std::sync::OnceLock<crate::encryption::Encryption>>,
}

/// The lease objects written with a time to live (Events) are attached to. As kube-apiserver's lease
/// manager does, one lease serves every such write for a while (5 % of the TTL, at most 1 000 objects),
/// granted for the TTL plus that window, so a burst of Events costs one lease rather than one each.
#[derive(Debug, Clone, Copy)]
struct TtlLease {
    id: i64,
    ttl: i64,
    granted: std::time::Instant,
    attached: u32,
}

/// Objects one reused TTL lease carries at most.
const TTL_LEASE_MAX_OBJECTS: u32 = 1000;

/// Maps store and Raft errors to API errors (one place).
pub fn propose_error(e: &ProposeError) -> ApiError {
    match e {
        ProposeError::Store(StoreError::RequestTooLarge) => {
            ApiError::TooLarge("etcdserver: request is too large".to_string())
        }
        ProposeError::Store(StoreError::Compacted) => {
            ApiError::Expired("The resourceVersion for the provided list is too old.".to_string())
        }
        // kube-apiserver passes etcd's error through: 500, no reason, etcd's message.
        ProposeError::Store(StoreError::NoSpace) => {
            ApiError::Unknown(StoreError::NoSpace.to_string())
        }
        ProposeError::Store(StoreError::FutureRev) => ApiError::Timeout(
            "Too large resource version: the store has not reached it yet".to_string(),
        ),
        ProposeError::Store(s) => ApiError::Internal(s.to_string()),
        ProposeError::Timeout => ApiError::Timeout(
            "The request did not complete in time: etcdserver: request timed out".to_string(),
        ),
        ProposeError::NoLeader | ProposeError::NotLeader | ProposeError::Stopped => {
            ApiError::Unavailable(format!("the cluster is unavailable: {e}"))
        }
        ProposeError::Membership(m) => ApiError::Internal(m.to_string()),
    }
}

fn store_error(e: &StoreError) -> ApiError {
    propose_error(&ProposeError::Store(e.clone()))
}

pub use keel_store::mvcc::range::prefix_end;

/// How long a consistent read waits out an election before it answers 503.
const READ_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// Decodes a stored value (JSON, or upstream's protobuf envelope; decrypted first when it is encrypted at
/// rest) and sets its resourceVersion.
pub fn decode(
    encryption: Option<&crate::encryption::Encryption>,
    kv: &KeyValue,
) -> Result<Stored, ApiError> {
    let value = crate::encryption::open(encryption, &kv.key, &kv.value).map_err(|e| {
        ApiError::Internal(format!(
            "stored object at {} does not decrypt: {e}",
            String::from_utf8_lossy(&kv.key)
        ))
    })?;
    let mut object = if value.starts_with(protobuf::MAGIC) {
        protobuf::decode_stored(&value)?
    } else {
        serde_json::from_slice::<Value>(&value).map_err(|e| {
            ApiError::Internal(format!(
                "stored object at {} does not decode: {e}",
                String::from_utf8_lossy(&kv.key)
            ))
        })?
    };
    object::set_resource_version(&mut object, kv.mod_revision);
    Ok(Stored {
        object,
        mod_revision: kv.mod_revision,
    })
}

/// Encodes an object for storage: JSON without `metadata.resourceVersion`.
pub fn encode(object: &Value) -> Result<Vec<u8>, ApiError> {
    let mut o = object.clone();
    object::clear_resource_version(&mut o);
    let bytes = serde_json::to_vec(&o).map_err(|e| ApiError::Internal(e.to_string()))?;
    if bytes.len() > MAX_REQUEST_BYTES - 1024 {
        return Err(ApiError::TooLarge(
            "etcdserver: request is too large".to_string(),
        ));
    }
    Ok(bytes)
}

fn cmp_mod(key: &str, rev: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Mod as i32,
        key: Bytes::copy_from_slice(key.as_bytes()),
        range_end: Bytes::new(),
        target_union: Some(compare::TargetUnion::ModRevision(rev)),
    }
}

fn get_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key: Bytes::copy_from_slice(key.as_bytes()),
            ..Default::default()
        })),
    }
}

impl Storage {
    /// The member this storage writes through.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Storage over a member.
    pub fn new(node: Arc<Node>) -> Self {
        Storage {
            node,
            ttl_leases: Arc::default(),
            calls: Arc::default(),
            encryption: Arc::default(),
        }
    }

    /// Encrypts what the configuration names from now on (once, at start; a second call is ignored).
    pub fn install_encryption(&self, e: crate::encryption::Encryption) {
        let _ = self.encryption.set(e);
    }

    /// The encryption at rest in force, if any.
    pub fn encryption(&self) -> Option<&crate::encryption::Encryption> {
        self.encryption.get()
    }

    /// [`decode`] with this handle's encryption.
    pub fn decode(&self, kv: &KeyValue) -> Result<Stored, ApiError> {
        decode(self.encryption(), kv)
    }

    /// The timings of this member's API calls into the store.
    pub fn calls(&self) -> &StoreCalls {
        &self.calls
    }

    /// How many keys are under `prefix` now (a count-only range: no values are read).
    pub fn count(&self, prefix: &[u8]) -> Result<i64, ApiError> {
        let r = self
            .node
            .store()
            .range(&RangeRequest {
                key: Bytes::copy_from_slice(prefix),
                range_end: Bytes::from(prefix_end(prefix)),
                count_only: true,
                ..Default::default()
            })
            .map_err(|e| store_error(&e))?;
        Ok(r.count)
    }

    /// A lease that expires `ttl_secs` (or up to 5 % more) from now, for an object with a time to live.
    pub async fn ttl_lease(&self, ttl_secs: i64) -> Result<i64, ApiError> {
        let reuse =
            std::time::Duration::from_secs(u64::try_from(ttl_secs / 20).unwrap_or(0).max(1));
        let mut cur = self.ttl_leases.lock().await;
        if let Some(l) = cur.as_mut() {
            if l.ttl == ttl_secs
                && l.granted.elapsed() < reuse
                && l.attached < TTL_LEASE_MAX_OBJECTS
                && self.node.store().lease_exists(keel_store::LeaseId(l.id))
            {
                l.attached += 1;
                return Ok(l.id);
            }
        }
        let id = loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 && !self.node.store().lease_exists(keel_store::LeaseId(id)) {
                break id;
            }
        };
        let grant = keel_store::pb::etcdserverpb::LeaseGrantRequest {
            ttl: ttl_secs.saturating_add(i64::try_from(reuse.as_secs()).unwrap_or(0)),
            id,
        };
        let kind = CommandKind::LeaseGrant(grant);
        self.node
            .admit(&kind)
            .await
            .map_err(|e| propose_error(&e))?;
        self.propose(kind).await?;
        *cur = Some(TtlLease {
            id,
            ttl: ttl_secs,
            granted: std::time::Instant::now(),
            attached: 1,
        });
        Ok(id)
    }

    /// The store's current revision.
    pub fn revision(&self) -> i64 {
        self.node.store().revision()
    }

    /// The store's compaction revision: history before it is gone.
    pub fn compact_revision(&self) -> i64 {
        self.node.store().compact_revision()
    }

    /// This member's ID.
    pub fn member_id(&self) -> u64 {
        self.node.member_id()
    }

    /// The IDs of the cluster's current members (voters and learners).
    pub fn member_ids(&self) -> Vec<u64> {
        self.node.members().iter().map(|m| m.id).collect()
    }

    /// The host part of every peer and client URL this member knows for the cluster (its initial cluster
    /// and the current members), for the names a serving certificate must cover.
    pub fn member_urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = Vec::new();
        for m in self.node.config().initial_members() {
            urls.extend(m.peer_urls.iter().cloned());
        }
        for m in self.node.members() {
            urls.extend(m.node.client_urls.iter().cloned());
            urls.extend(m.node.peer_urls.iter().cloned());
        }
        urls
    }

    /// Whether the cluster has a leader this member knows of (it can serve writes).
    pub fn has_leader(&self) -> bool {
        self.node.status().leader.is_some()
    }

    /// True while this member is the Raft leader.
    pub fn is_leader(&self) -> bool {
        self.node.is_leader()
    }

    /// Changes when this member gains or loses Raft leadership (and when it leads again in a new term).
    pub fn leadership(&self) -> tokio::sync::watch::Receiver<Leadership> {
        self.node.leadership()
    }

    /// Waits until this member has applied everything committed before the call (ReadIndex). A read
    /// changes nothing, so while an election is under way (no leader, or the one asked just lost it) it
    /// is tried again for a few seconds, as etcd's client retries reads on `Unavailable`, before the
    /// caller gets 503.
    pub async fn barrier(&self) -> Result<(), ApiError> {
        let deadline = Instant::now() + READ_RETRY_FOR;
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            match self.node.read_barrier().await {
                Ok(()) => return Ok(()),
                Err(ProposeError::NoLeader | ProposeError::NotLeader)
                    if Instant::now() + pause < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(800));
                }
                Err(e) => return Err(propose_error(&e)),
            }
        }
    }

    /// The key-value of one key in this member's store.
    fn local(&self, key: &str) -> Result<Option<KeyValue>, ApiError> {
        let r = self
            .node
            .store()
            .range(&RangeRequest {
                key: Bytes::copy_from_slice(key.as_bytes()),
                ..Default::default()
            })
            .map_err(|e| store_error(&e))?;
        Ok(r.kvs.into_iter().next())
    }

    /// Reads one key; `consistent` waits for a ReadIndex first.
    pub async fn get(&self, key: &str, consistent: bool) -> Result<Option<Stored>, ApiError> {
        let start = Instant::now();
        let r = async {
            if consistent {
                self.barrier().await?;
            }
            self.local(key)
        }
        .await;
        self.calls.record("get", key.as_bytes(), start, r.is_ok());
        r?.map(|kv| self.decode(&kv)).transpose()
    }

    /// Reads keys in `[start, end)` at `revision` (0 = current), at most `limit` (0 = all).
    pub fn range(
        &self,
        start: &[u8],
        end: &[u8],
        revision: i64,
        limit: i64,
    ) -> Result<Page, ApiError> {
        let began = Instant::now();
        let r = self
            .node
            .store()
            .range(&RangeRequest {
                key: Bytes::copy_from_slice(start),
                range_end: Bytes::copy_from_slice(end),
                revision,
                limit,
                ..Default::default()
            })
            .map_err(|e| store_error(&e));
        self.calls.record("list", start, began, r.is_ok());
        let r = r?;
        let rev = if revision > 0 {
            revision
        } else {
            r.header.as_ref().map(|h| h.revision).unwrap_or(0)
        };
        let mut items = Vec::with_capacity(r.kvs.len());
        for kv in &r.kvs {
            items.push((kv.key.to_vec(), self.decode(kv)?));
        }
        let remaining = (r.count - items.len() as i64).max(0);
        Ok(Page {
            items,
            revision: rev,
            more: r.more,
            remaining,
        })
    }

    /// Proposes a Txn (after the space quota's check) and returns the store's answer.
    pub async fn txn(
        &self,
        t: TxnRequest,
    ) -> Result<keel_store::pb::etcdserverpb::TxnResponse, ApiError> {
        let kind = CommandKind::Txn(t);
        self.node
            .admit(&kind)
            .await
            .map_err(|e| propose_error(&e))?;
        match self.node.propose(Command::new(kind)).await {
            Ok(CommandResponse::Txn(r)) => Ok(r),
            Ok(other) => Err(ApiError::Internal(format!(
                "unexpected store answer {other:?}"
            ))),
            Err(e) => Err(propose_error(&e)),
        }
    }

    fn lost(
        &self,
        r: &keel_store::pb::etcdserverpb::TxnResponse,
    ) -> Result<WriteOutcome, ApiError> {
        let current = r.responses.first().and_then(|op| match &op.response {
            Some(response_op::Response::ResponseRange(rr)) => rr.kvs.first().cloned(),
            _ => None,
        });
        Ok(WriteOutcome::Lost(match current {
            Some(kv) => Some(self.decode(&kv)?),
            None => None,
        }))
    }

    /// Writes `object` at `key` if the key's mod revision is `expected` (0 = the key must not exist).
    pub async fn put_if(
        &self,
        key: &str,
        object: &Value,
        expected: i64,
    ) -> Result<WriteOutcome, ApiError> {
        self.put_full(key, object, expected, &[], &[], 0).await
    }

    /// Like [`Storage::put_if`], with the key attached to `lease` (0 = none), so it expires with it.
    pub async fn put_if_leased(
        &self,
        key: &str,
        object: &Value,
        expected: i64,
        lease: i64,
    ) -> Result<WriteOutcome, ApiError> {
        self.put_full(key, object, expected, &[], &[], lease).await
    }

    /// Like [`Storage::put_if`], and in the same Txn claims each of `claims` (keys that must not exist yet,
    /// written with `key` as value): how unique allocations (service IPs, node ports) stay unique.
    pub async fn put_claiming(
        &self,
        key: &str,
        object: &Value,
        expected: i64,
        claims: &[String],
    ) -> Result<WriteOutcome, ApiError> {
        self.put_full(key, object, expected, claims, &[], 0).await
    }

    /// An update that changes what the object holds: like [`Storage::put_claiming`], and the same Txn
    /// deletes the claim keys in `release`, so a failed write neither takes nor frees anything and a
    /// released value is free the moment the new object is visible. A lost claim answers
    /// `Lost(Some(current))` with the object's unchanged mod revision.
    pub async fn update_claiming(
        &self,
        key: &str,
        object: &Value,
        expected: i64,
        claims: &[String],
        release: &[String],
        lease: i64,
    ) -> Result<WriteOutcome, ApiError> {
        self.put_full(key, object, expected, claims, release, lease)
            .await
    }

    async fn put_full(
        &self,
        key: &str,
        object: &Value,
        expected: i64,
        claims: &[String],
        release: &[String],
        lease: i64,
    ) -> Result<WriteOutcome, ApiError> {
        let value = crate::encryption::seal(self.encryption(), key.as_bytes(), encode(object)?);
        let mut compares = vec![cmp_mod(key, expected)];
        let mut ops = vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: Bytes::copy_from_slice(key.as_bytes()),
                value: Bytes::from(value),
                lease,
                ..Default::default()
            })),
        }];
        for c in claims {
            compares.push(cmp_mod(c, 0));
            ops.push(RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: Bytes::copy_from_slice(c.as_bytes()),
                    value: Bytes::copy_from_slice(key.as_bytes()),
                    ..Default::default()
                })),
            });
        }
        for r in release {
            ops.push(RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key: Bytes::copy_from_slice(r.as_bytes()),
                        ..Default::default()
                    },
                )),
            });
        }
        let t = TxnRequest {
            compare: compares,
            success: ops,
            failure: vec![get_op(key)],
        };
        let start = Instant::now();
        let r = self.txn(t).await;
        let op = if expected == 0 { "create" } else { "update" };
        self.calls.record(op, key.as_bytes(), start, r.is_ok());
        let r = r?;
        if !r.succeeded {
            return self.lost(&r);
        }
        let rev = r.header.as_ref().map(|h| h.revision).unwrap_or(0);
        Ok(WriteOutcome::Done(rev))
    }

    /// Deletes `key` if its mod revision is `expected`, and with it the claim keys in `release`.
    pub async fn delete_if(
        &self,
        key: &str,
        expected: i64,
        release: &[String],
    ) -> Result<WriteOutcome, ApiError> {
        let mut ops = vec![RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: Bytes::copy_from_slice(key.as_bytes()),
                    ..Default::default()
                },
            )),
        }];
        for r in release {
            ops.push(RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key: Bytes::copy_from_slice(r.as_bytes()),
                        ..Default::default()
                    },
                )),
            });
        }
        let t = TxnRequest {
            compare: vec![cmp_mod(key, expected)],
            success: ops,
            failure: vec![get_op(key)],
        };
        let start = Instant::now();
        let r = self.txn(t).await;
        self.calls
            .record("delete", key.as_bytes(), start, r.is_ok());
        let r = r?;
        if !r.succeeded {
            return self.lost(&r);
        }
        let rev = r.header.as_ref().map(|h| h.revision).unwrap_or(0);
        Ok(WriteOutcome::Done(rev))
    }

    /// Writes a raw value at `key` only if the key does not exist; returns whether it was written.
    pub async fn create_raw(&self, key: &str, value: Vec<u8>) -> Result<bool, ApiError> {
        let t = TxnRequest {
            compare: vec![cmp_mod(key, 0)],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: Bytes::copy_from_slice(key.as_bytes()),
                    value: Bytes::from(value),
                    ..Default::default()
                })),
            }],
            failure: vec![],
        };
        let start = Instant::now();
        let r = self.txn(t).await;
        self.calls
            .record("create", key.as_bytes(), start, r.is_ok());
        Ok(r?.succeeded)
    }

    /// Compacts the store's history before `revision` (every member, through the log).
    pub async fn compact(&self, revision: i64) -> Result<(), ApiError> {
        self.propose(CommandKind::Compaction(
            keel_store::pb::etcdserverpb::CompactionRequest {
                revision,
                physical: false,
            },
        ))
        .await
    }

    /// Proposes one command whose answer carries nothing the caller needs.
    async fn propose(&self, kind: CommandKind) -> Result<(), ApiError> {
        self.node
            .propose(Command::new(kind))
            .await
            .map(|_| ())
            .map_err(|e| propose_error(&e))
    }

    /// Writes a raw (non-object) value at `key` unconditionally.
    pub async fn put_raw(&self, key: &str, value: Vec<u8>) -> Result<(), ApiError> {
        let start = Instant::now();
        let r = self
            .propose(CommandKind::Put(PutRequest {
                key: Bytes::copy_from_slice(key.as_bytes()),
                value: Bytes::from(value),
                ..Default::default()
            }))
            .await;
        self.calls
            .record("update", key.as_bytes(), start, r.is_ok());
        r
    }

    /// Deletes one raw key unconditionally.
    pub async fn delete_raw(&self, key: &[u8]) -> Result<(), ApiError> {
        let start = Instant::now();
        let r = self
            .propose(CommandKind::DeleteRange(DeleteRangeRequest {
                key: Bytes::copy_from_slice(key),
                ..Default::default()
            }))
            .await;
        self.calls.record("delete", key, start, r.is_ok());
        r
    }

    /// The raw keys and values under `prefix` in this member's store (no barrier).
    pub fn list_raw(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, ApiError> {
        let start = Instant::now();
        let r = self
            .node
            .store()
            .range(&RangeRequest {
                key: Bytes::copy_from_slice(prefix),
                range_end: Bytes::from(prefix_end(prefix)),
                ..Default::default()
            })
            .map_err(|e| store_error(&e));
        self.calls.record("list", prefix, start, r.is_ok());
        Ok(r?.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect())
    }

    /// Reads a raw value after a ReadIndex barrier.
    pub async fn get_raw(&self, key: &str) -> Result<Option<Vec<u8>>, ApiError> {
        let start = Instant::now();
        let r = async {
            self.barrier().await?;
            self.local(key)
        }
        .await;
        self.calls.record("get", key.as_bytes(), start, r.is_ok());
        Ok(r?.map(|kv| kv.value.to_vec()))
    }
}
