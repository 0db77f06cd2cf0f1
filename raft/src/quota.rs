//! The space quota, checked where a write enters the member (etcd's `quotaKVServer` and
//! `quotaLeaseServer`): a Put, Txn or LeaseGrant whose cost would take the store to its quota
//! raises this member's NOSPACE alarm through the log and is refused with
//! `etcdserver: mvcc: database space exceeded`. Once the alarm is in force every replica
//! refuses what grows the store (see `keel_store::alarm`), whoever proposes it.

use keel_store::alarm::{txn_cost, KV_OVERHEAD, LEASE_OVERHEAD};
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::{alarm_request::AlarmAction, AlarmRequest, AlarmType};
use keel_store::{Command, Store};
use tracing::warn;

/// etcd's quota cost of a command, or `None` for commands the quota does not check
/// (DeleteRange, Compaction, LeaseRevoke, Alarm). A batch costs the sum of its items.
pub(crate) fn cost(kind: &CommandKind) -> Option<u64> {
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

/// Whether `kind` would take `store` past its space quota (never for what writes nothing: as
/// etcd, a read-only Txn passes whatever the size). Logs the first time the quota is reached.
pub(crate) fn exceeds(store: &Store, kind: &CommandKind) -> bool {
    let Some(cost) = cost(kind).filter(|c| *c > 0) else {
        return false;
    };
    let Some(quota) = store.quota_bytes() else {
        return false;
    };
    if store.fits_quota(cost, quota) {
        return false;
    }
    if !store.has_alarm(AlarmType::Nospace) {
        warn!(
            size = store.db_size(),
            quota, "the store reached its space quota; raising the NOSPACE alarm"
        );
    }
    true
}

/// The command that raises the NOSPACE alarm for `member`.
pub(crate) fn nospace_alarm(member: u64) -> Command {
    Command::new(CommandKind::Alarm(AlarmRequest {
        action: AlarmAction::Activate as i32,
        member_id: member,
        alarm: AlarmType::Nospace as i32,
    }))
}
