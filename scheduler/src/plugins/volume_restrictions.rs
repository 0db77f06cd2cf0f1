//! VolumeRestrictions: a claim with the `ReadWriteOncePod` access mode serves one pod in the whole
//! cluster; another pod using it waits (preempting the user may help, so the refusal is Unschedulable).

use std::collections::HashSet;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;
use keel_client_kit::volume as rules;

const NAME: &str = "VolumeRestrictions";
/// Upstream's (1.32) reason.
pub const RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

/// The plugin.
pub struct VolumeRestrictions;

/// The pod's ReadWriteOncePod claims, and how many scheduled pods use each.
#[derive(Clone, Default)]
struct InUse {
    claims: HashSet<String>,
    users: usize,
}

fn uses(p: &PodInfo, claims: &HashSet<String>) -> bool {
    p.namespace_claims().iter().any(|c| claims.contains(c))
}

impl PodInfo {
    /// The pod's claims as `namespace/name`.
    fn namespace_claims(&self) -> Vec<String> {
        rules::pod_claims(&self.pod)
            .into_iter()
            .map(|c| format!("{}/{c}", self.namespace()))
            .collect()
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
        let claims: HashSet<String> = pod
            .namespace_claims()
            .into_iter()
            .filter(|k| {
                snap.objects.claims.get(k).is_some_and(|c| {
                    c.spec
                        .as_ref()
                        .and_then(|s| s.access_modes.as_ref())
                        .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod"))
                })
            })
            .collect();
        let users = if claims.is_empty() {
            0
        } else {
            snap.nodes
                .iter()
                .flat_map(|n| n.pods.iter())
                .filter(|p| p.key != pod.key && uses(p, &claims))
                .count()
        };
        state.write(NAME, InUse { claims, users });
        Status::success()
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &PodInfo, _node: &NodeInfo) {
        if let Some(s) = state.read_mut::<InUse>(NAME) {
            if added.key != pod.key && uses(added, &s.claims) {
                s.users += 1;
            }
        }
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        _node: &NodeInfo,
    ) {
        if let Some(s) = state.read_mut::<InUse>(NAME) {
            if removed.key != pod.key && uses(removed, &s.claims) {
                s.users = s.users.saturating_sub(1);
            }
        }
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Status {
        match state.read::<InUse>(NAME) {
            Some(s) if s.users > 0 => Status::unschedulable(RWOP_CONFLICT),
            _ => Status::success(),
        }
    }
}
