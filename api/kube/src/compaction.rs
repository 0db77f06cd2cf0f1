//! kube-apiserver's compactor (`storage/etcd3/compact.go`, `--etcd-compaction-interval`), run by
//! the member that leads Raft.
//!
//! Every interval: a Txn `if version("compact_rev_key") == T then put("compact_rev_key", R)
//! else get("compact_rev_key")`, where T is the key's version this compactor last knew (the
//! cluster-wide compaction clock) and R the store revision it saw at its previous tick. If the
//! Txn wins, T becomes T + 1 and history is compacted to R (not on the first win, when R is 0);
//! if it loses, another compactor moved the clock, and T and R are taken from its answer. So
//! several API servers (or a new leader after a failover) never compact twice per interval,
//! and what is kept is always at least one interval of history. The key has no `/registry`
//! prefix, as upstream's.

use std::sync::Arc;
use std::time::Duration;

use keel_raft::node::{Node, ProposeError};
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{
    compare, request_op, response_op, CompactionRequest, Compare, PutRequest, RangeRequest,
    RequestOp, TxnRequest,
};
use keel_store::{Command, CommandResponse, StoreError};
use tracing::{debug, warn};

/// The key whose version is the compaction clock.
pub const COMPACT_REV_KEY: &[u8] = b"compact_rev_key";
/// Upstream's default interval (`DefaultCompactInterval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// What one compactor remembers between ticks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// The version of `compact_rev_key` last seen (upstream's "compact time").
    pub version: i64,
    /// The store revision seen at the previous tick: the next compaction's target.
    pub revision: i64,
}

/// Starts the compactor on its own task (nothing when `interval` is zero); the first tick is
/// one interval after start. Runs until the process ends.
pub fn spawn(node: Arc<Node>, interval: Duration) -> Option<tokio::task::JoinHandle<()>> {
    if interval.is_zero() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut clock = Clock::default();
        loop {
            tokio::time::sleep(interval).await;
            if !node.is_leader() {
                continue;
            }
            match tick(&node, clock).await {
                Ok(next) => clock = next,
                Err((next, e)) => {
                    clock = next;
                    warn!(%e, "kube compaction failed");
                }
            }
        }
    }))
}

/// One round of upstream's `compact()`: returns the new clock, with it an error if the
/// compaction itself failed (the clock moves on anyway, as upstream's does).
pub async fn tick(node: &Node, clock: Clock) -> Result<Clock, (Clock, ProposeError)> {
    let txn = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Version as i32,
            key: COMPACT_REV_KEY.to_vec().into(),
            target_union: Some(compare::TargetUnion::Version(clock.version)),
            ..Default::default()
        }],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: COMPACT_REV_KEY.to_vec().into(),
                value: clock.revision.to_string().into_bytes().into(),
                ..Default::default()
            })),
        }],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: COMPACT_REV_KEY.to_vec().into(),
                ..Default::default()
            })),
        }],
    };
    let kind = CommandKind::Txn(txn);
    // The Txn writes: it meets the space quota like any client's (and fails under NOSPACE,
    // as upstream's compactor does against etcd).
    keel_raft::quota::admit(node, &kind)
        .await
        .map_err(|e| (clock, e))?;
    let resp = match node.propose(Command::new(kind)).await {
        Ok(CommandResponse::Txn(r)) => r,
        Ok(other) => {
            return Err((
                clock,
                ProposeError::Store(StoreError::Corrupt(format!(
                    "unexpected answer to the compaction Txn: {other:?}"
                ))),
            ))
        }
        Err(e) => return Err((clock, e)),
    };
    let current_rev = resp.header.as_ref().map(|h| h.revision).unwrap_or(0);
    if !resp.succeeded {
        let kv = resp.responses.first().and_then(|r| match &r.response {
            Some(response_op::Response::ResponseRange(rr)) => rr.kvs.first(),
            _ => None,
        });
        let version = kv.map(|kv| kv.version).unwrap_or(clock.version);
        debug!(version, "another compactor moved the clock");
        return Ok(Clock {
            version,
            revision: current_rev,
        });
    }
    let next = Clock {
        version: clock.version + 1,
        revision: current_rev,
    };
    if clock.revision == 0 {
        // Upstream does not compact on its first win.
        return Ok(next);
    }
    let compact = Command::new(CommandKind::Compaction(CompactionRequest {
        revision: clock.revision,
        physical: false,
    }));
    match node.propose(compact).await {
        Ok(_) => {
            debug!(revision = clock.revision, "kube compaction done");
            Ok(next)
        }
        Err(e) => Err((next, e)),
    }
}
