//! The space quota, checked where a write enters the member (etcd's `quotaKVServer` and
//! `quotaLeaseServer`): a Put, Txn or LeaseGrant whose cost would take the store to its quota
//! raises this member's NOSPACE alarm through the log and is refused with
//! `etcdserver: mvcc: database space exceeded`. Once the alarm is in force every replica
//! refuses what grows the store (see `keel_store::alarm`), whoever proposes it.

use keel_store::alarm::{txn_cost, KV_OVERHEAD, LEASE_OVERHEAD};
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{alarm_request::AlarmAction, AlarmRequest, AlarmType};
use keel_store::{Command, StoreError};
use tracing::warn;

use crate::error::ProposeError;
use crate::node::Node;

/// etcd's quota cost of a command, or `None` for commands the quota does not check
/// (DeleteRange, Compaction, LeaseRevoke, Alarm). A batch costs the sum of its items.
pub fn cost(kind: &CommandKind) -> Option<u64> {
    match kind {
        CommandKind::Put(p) => Some(KV_OVERHEAD + (p.key.len() + p.value.len()) as u64),
        CommandKind::Txn(t) => Some(txn_cost(t)),
        CommandKind::LeaseGrant(_) => Some(LEASE_OVERHEAD),
        CommandKind::Batch(b) => {
            let costs: Vec<u64> = b
                .commands
                .iter()
                .filter_map(|c| c.kind.as_ref().and_then(cost))
                .collect();
            (!costs.is_empty()).then(|| costs.iter().sum())
        }
        _ => None,
    }
}

/// Lets `kind` through if the store has room for it; otherwise raises NOSPACE for this member
/// (as etcd, whether or not that proposal succeeds) and refuses it.
pub async fn admit(node: &Node, kind: &CommandKind) -> Result<(), ProposeError> {
    // As etcd: what writes nothing (a read-only Txn) passes whatever the size.
    let Some(cost) = cost(kind).filter(|c| *c > 0) else {
        return Ok(());
    };
    let store = node.store();
    let Some(quota) = store.quota_bytes() else {
        return Ok(());
    };
    if store.fits_quota(cost, quota) {
        return Ok(());
    }
    if !store.has_alarm(AlarmType::Nospace) {
        warn!(
            size = store.db_size(),
            quota, "the store reached its space quota; raising the NOSPACE alarm"
        );
    }
    let raise = Command::new(CommandKind::Alarm(AlarmRequest {
        action: AlarmAction::Activate as i32,
        member_id: node.member_id(),
        alarm: AlarmType::Nospace as i32,
    }));
    if let Err(e) = node.propose(raise).await {
        warn!(%e, "could not raise the NOSPACE alarm");
    }
    Err(ProposeError::Store(StoreError::NoSpace))
}
