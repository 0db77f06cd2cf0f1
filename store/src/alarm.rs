//! Alarms: member health flags that every replica holds, as etcd's alarm store does.
//!
//! An alarm is a (member ID, alarm type) pair raised by an `Alarm` command through the log
//! and kept until a matching deactivation; replicas apply the same commands, so they agree.
//! While NOSPACE is raised (by any member), commands that grow the store are refused with
//! [`StoreError::NoSpace`]; while CORRUPT is raised, every key-space command is refused with
//! [`StoreError::CorruptCluster`]. Nothing else changes: reads, deletes, compaction and the
//! alarm commands themselves go on.
//!
//! Persistence: one Meta entry per alarm, `alarm/` followed by the alarm's etcd bucket key
//! (the encoded `AlarmMember`), so alarms survive a restart and travel in keel's snapshots;
//! the etcd-format export writes them to bucket `alarm` exactly as etcd keys it.
//!
//! Member ID 0 is an ID like any other, as in etcd: the server does not expand it to every
//! member (etcd's client library does that when disarming, from the list it reads first).

use std::collections::BTreeSet;

use prost::Message;

use crate::backend::{Space, WriteBatch};
use crate::error::StoreError;
use crate::pb::etcdserverpb::{
    alarm_request::AlarmAction, request_op, AlarmMember, AlarmRequest, AlarmResponse, AlarmType,
    TxnRequest,
};

/// Prefix of alarm entries in the Meta space.
pub(crate) const META_ALARM_PREFIX: &[u8] = b"alarm/";

/// The alarms in force, ordered by (member, type).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Alarms {
    set: BTreeSet<(u64, i32)>,
}

impl Alarms {
    /// Restores one persisted entry (a Meta key under [`META_ALARM_PREFIX`] minus the prefix).
    pub(crate) fn restore(&mut self, bucket_key: &[u8]) -> Result<(), StoreError> {
        let m = AlarmMember::decode(bucket_key)?;
        self.set.insert((m.member_id, m.alarm));
        Ok(())
    }

    /// Every alarm of type `t` (all of them for NONE), as etcd's `Get` lists them.
    pub fn get(&self, t: AlarmType) -> Vec<AlarmMember> {
        self.set
            .iter()
            .filter(|(_, a)| t == AlarmType::None || *a == t as i32)
            .map(|&(member_id, alarm)| AlarmMember { member_id, alarm })
            .collect()
    }

    /// True if an alarm of type `t` is raised by any member.
    pub fn has(&self, t: AlarmType) -> bool {
        self.set.iter().any(|(_, a)| *a == t as i32)
    }

    /// True if no alarm is raised.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Applies an alarm command, queueing its persistence in `batch`. As etcd: activating an
    /// alarm already raised answers with it again and changes nothing; deactivating one that is
    /// not raised answers with an empty list; GET lists the alarms of the requested type.
    pub(crate) fn apply(
        &mut self,
        r: &AlarmRequest,
        batch: &mut WriteBatch,
    ) -> Result<AlarmResponse, StoreError> {
        let member = AlarmMember {
            member_id: r.member_id,
            alarm: r.alarm,
        };
        let key = (r.member_id, r.alarm);
        let alarms = match AlarmAction::try_from(r.action) {
            Ok(AlarmAction::Get) => self.get(AlarmType::try_from(r.alarm).unwrap_or_default()),
            Ok(AlarmAction::Activate) => {
                if self.set.insert(key) {
                    batch.put(Space::Meta, meta_key(&member), Vec::new());
                }
                vec![member]
            }
            Ok(AlarmAction::Deactivate) => {
                if self.set.remove(&key) {
                    batch.delete(Space::Meta, meta_key(&member));
                    vec![member]
                } else {
                    Vec::new()
                }
            }
            // etcd's applier answers an unknown action with nothing.
            Err(_) => Vec::new(),
        };
        // etcd answers alarm requests without a header.
        Ok(AlarmResponse {
            header: None,
            alarms,
        })
    }
}

/// etcd's bucket `alarm` key for one alarm: the encoded `AlarmMember` (the value is empty).
pub fn bucket_key(m: &AlarmMember) -> Vec<u8> {
    m.encode_to_vec()
}

fn meta_key(m: &AlarmMember) -> Vec<u8> {
    let mut k = META_ALARM_PREFIX.to_vec();
    k.extend_from_slice(&bucket_key(m));
    k
}

/// True if the Txn (at any depth, either branch) contains a Put: what NOSPACE refuses.
/// etcd 3.4 looks at the top level only; a nested put is refused here too, since it grows the
/// store just the same.
pub fn txn_has_put(t: &TxnRequest) -> bool {
    t.success
        .iter()
        .chain(t.failure.iter())
        .any(|op| match &op.request {
            Some(request_op::Request::RequestPut(_)) => true,
            Some(request_op::Request::RequestTxn(nt)) => txn_has_put(nt),
            _ => false,
        })
}

/// etcd's quota cost of a Put (`etcdserver/quota.go`): key + value + 256 bytes of overhead.
pub const KV_OVERHEAD: u64 = 256;
/// etcd's quota cost of a LeaseGrant.
pub const LEASE_OVERHEAD: u64 = 64;

/// Quota cost of a Txn: the larger branch's puts (nested Txns included), as etcd's `costTxn`.
pub fn txn_cost(t: &TxnRequest) -> u64 {
    fn branch(ops: &[crate::pb::etcdserverpb::RequestOp]) -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(request_op::Request::RequestPut(p)) => {
                    KV_OVERHEAD + (p.key.len() + p.value.len()) as u64
                }
                Some(request_op::Request::RequestTxn(nt)) => txn_cost(nt),
                _ => 0,
            })
            .sum()
    }
    branch(&t.success).max(branch(&t.failure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::etcdserverpb::{PutRequest, RangeRequest, RequestOp};

    fn req(action: AlarmAction, member_id: u64, alarm: AlarmType) -> AlarmRequest {
        AlarmRequest {
            action: action as i32,
            member_id,
            alarm: alarm as i32,
        }
    }

    #[test]
    fn activate_get_deactivate() {
        let mut a = Alarms::default();
        let mut b = WriteBatch::default();
        let r = a
            .apply(&req(AlarmAction::Activate, 7, AlarmType::Nospace), &mut b)
            .unwrap();
        assert_eq!(r.alarms.len(), 1);
        assert_eq!(b.ops.len(), 1);
        // Raising it again changes nothing but still answers with it.
        let r = a
            .apply(&req(AlarmAction::Activate, 7, AlarmType::Nospace), &mut b)
            .unwrap();
        assert_eq!(r.alarms.len(), 1);
        assert_eq!(b.ops.len(), 1);
        a.apply(&req(AlarmAction::Activate, 0, AlarmType::Corrupt), &mut b)
            .unwrap();
        assert!(a.has(AlarmType::Nospace) && a.has(AlarmType::Corrupt));
        let all = a
            .apply(&req(AlarmAction::Get, 0, AlarmType::None), &mut b)
            .unwrap();
        assert_eq!(all.alarms.len(), 2);
        let nospace = a.get(AlarmType::Nospace);
        assert_eq!(
            nospace,
            vec![AlarmMember {
                member_id: 7,
                alarm: AlarmType::Nospace as i32
            }]
        );
        // Deactivating for another member leaves it raised.
        let r = a
            .apply(&req(AlarmAction::Deactivate, 8, AlarmType::Nospace), &mut b)
            .unwrap();
        assert!(r.alarms.is_empty());
        assert!(a.has(AlarmType::Nospace));
        a.apply(&req(AlarmAction::Deactivate, 7, AlarmType::Nospace), &mut b)
            .unwrap();
        assert!(!a.has(AlarmType::Nospace));
        // Restoring from the persisted keys gives the same set.
        let mut restored = Alarms::default();
        let mut live = std::collections::BTreeSet::new();
        for op in &b.ops {
            match op {
                crate::backend::BatchOp::Put(_, k, _) => {
                    live.insert(k.clone());
                }
                crate::backend::BatchOp::Delete(_, k) => {
                    live.remove(k);
                }
            }
        }
        for k in live {
            restored.restore(&k[META_ALARM_PREFIX.len()..]).unwrap();
        }
        assert_eq!(restored, a);
    }

    #[test]
    fn txn_costs() {
        let put = |k: &str, v: usize| RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: k.as_bytes().to_vec().into(),
                value: vec![0u8; v].into(),
                ..Default::default()
            })),
        };
        let get = RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest::default())),
        };
        let t = TxnRequest {
            success: vec![put("a", 10), get.clone()],
            failure: vec![put("b", 100)],
            ..Default::default()
        };
        assert_eq!(txn_cost(&t), 256 + 101);
        assert!(txn_has_put(&t));
        let nested = TxnRequest {
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestTxn(t)),
            }],
            ..Default::default()
        };
        assert!(txn_has_put(&nested));
        let read_only = TxnRequest {
            success: vec![get],
            ..Default::default()
        };
        assert!(!txn_has_put(&read_only));
        assert_eq!(txn_cost(&read_only), 0);
    }
}
