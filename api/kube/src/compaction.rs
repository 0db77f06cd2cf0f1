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

use std::sync::Mutex;
use std::time::Duration;

use keel_store::pb::etcdserverpb::{
    compare, request_op, response_op, Compare, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use tokio::sync::watch;
use tracing::debug;

use crate::leader;
use crate::status::ApiError;
use crate::storage::Storage;

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

/// Runs the compactor while this member leads, a tick every `interval` (nothing when it is zero), until
/// `stop` fires. A new leader's first tick only reads the clock, so it never compacts what the previous
/// leader's interval has not covered yet.
pub async fn run(storage: Storage, interval: Duration, stop: watch::Receiver<bool>) {
    if interval.is_zero() {
        return;
    }
    let clock = Mutex::new(Clock::default());
    let (st, clock) = (&storage, &clock);
    leader::while_leading(st, "kube compaction", interval, stop, move || async move {
        let now = clock.lock().map(|c| *c).unwrap_or_default();
        let (next, result) = match tick(st, now).await {
            Ok(next) => (next, Ok(())),
            Err((next, e)) => (next, Err(e)),
        };
        if let Ok(mut c) = clock.lock() {
            *c = next;
        }
        result
    })
    .await
}

/// One round of upstream's `compact()`: returns the new clock, with it an error if the
/// compaction itself failed (the clock moves on anyway, as upstream's does).
pub async fn tick(storage: &Storage, clock: Clock) -> Result<Clock, (Clock, ApiError)> {
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
    // The Txn writes: it meets the space quota like any client's (and fails under NOSPACE,
    // as upstream's compactor does against etcd).
    let resp = storage.txn(txn).await.map_err(|e| (clock, e))?;
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
    match storage.compact(clock.revision).await {
        Ok(()) => {
            debug!(revision = clock.revision, "kube compaction done");
            Ok(next)
        }
        Err(e) => Err((next, e)),
    }
}
