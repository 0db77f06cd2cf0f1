//! SelectVictimsOnNode: the fewest, least important pods whose removal lets the preemptor fit on one
//! node. Every lower-priority pod is taken away in thought; if the pod fits then, they are put back
//! one by one, most important first (those whose eviction would violate a PodDisruptionBudget before
//! the others), and each that still lets the pod fit is reprieved.

use std::cmp::Ordering;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::schedule::filter_with_nominated;
use crate::framework::{CycleState, Framework, Status};
use crate::pod_info::PodInfo;

/// Upstream's status for nodes without pods of lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The pods to evict on one node.
#[derive(Debug, Clone)]
pub struct Victims {
    /// Most important first.
    pub pods: Vec<PodInfo>,
    /// How many of them a PodDisruptionBudget protects.
    pub pdb_violations: usize,
}

/// When a pod started (now for a pod that has not: it has run for no time).
pub fn start_time(p: &PodInfo) -> Timestamp {
    p.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(Timestamp::now)
}

/// Upstream's MoreImportantPod: higher priority first, then the one running longer.
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_time(a).cmp(&start_time(b)))
}

/// Splits `pods` (order kept) into those whose eviction would violate a budget and the others. A
/// budget's allowance is used up by each matching pod in turn; pods the budget already lists as
/// disrupted do not count again. A budget with an empty selector matches nothing.
pub fn split_by_pdb<'a>(
    pods: &[&'a PodInfo],
    pdbs: &[&PodDisruptionBudget],
) -> (Vec<&'a PodInfo>, Vec<&'a PodInfo>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|b| b.status.as_ref().map_or(0, |s| s.disruptions_allowed))
        .collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in pods {
        let labels = p.pod.metadata.labels.as_ref();
        let mut violated = false;
        if labels.is_some_and(|l| !l.is_empty()) {
            for (i, b) in pdbs.iter().enumerate() {
                if b.metadata.namespace.as_deref() != Some(p.namespace()) {
                    continue;
                }
                let Some(sel) = b.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                    continue;
                };
                let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
                if empty || !keel_client_kit::labels::matches(sel, labels) {
                    continue;
                }
                let already = b
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(p.name()));
                if already {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(*p);
        } else {
            fine.push(*p);
        }
    }
    (violating, fine)
}

/// The victims on `node` that make room for `pod`, or the node's status when no eviction of
/// lower-priority pods would.
pub fn select_on_node(
    fw: &Framework,
    state: &CycleState,
    snap: &Snapshot,
    pod: &PodInfo,
    node: &NodeInfo,
    pdbs: &[&PodDisruptionBudget],
) -> Result<Victims, Status> {
    let mut state = state.clone();
    let mut info = node.clone();
    let mut potential: Vec<&PodInfo> = node
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    for v in &potential {
        info.remove_pod(&v.key);
        fw.run_remove_pod(&mut state, pod, v, &info);
    }
    let status = filter_with_nominated(fw, &state, snap, pod, &info);
    if !status.is_success() {
        return Err(status);
    }
    potential.sort_by(|a, b| more_important(a, b));
    let (violating, fine) = split_by_pdb(&potential, pdbs);
    let mut victims: Vec<PodInfo> = Vec::new();
    let mut pdb_violations = 0;
    for (protected, group) in [(true, &violating), (false, &fine)] {
        for p in group.iter() {
            info.add_pod((*p).clone());
            fw.run_add_pod(&mut state, pod, p, &info);
            if !filter_with_nominated(fw, &state, snap, pod, &info).is_success() {
                info.remove_pod(&p.key);
                fw.run_remove_pod(&mut state, pod, p, &info);
                victims.push((*p).clone());
                pdb_violations += usize::from(protected);
            }
        }
    }
    if !violating.is_empty() && !fine.is_empty() {
        victims.sort_by(more_important);
    }
    Ok(Victims {
        pods: victims,
        pdb_violations,
    })
}
