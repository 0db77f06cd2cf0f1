//! PodTopologySpread (weight 2): spreads pods over topology domains by their
//! `topologySpreadConstraints`. `DoNotSchedule` constraints filter (skew ≤ maxSkew, with minDomains,
//! matchLabelKeys and the node inclusion policies); `ScheduleAnyway` constraints score, and a pod
//! without constraints that a Service, ReplicationController, ReplicaSet or StatefulSet selects is
//! scored by the system defaults (hostname maxSkew 3, zone maxSkew 5). Counts over every node are kept
//! per pod shape between cycles (see [`counts`]), so a cycle recounts only the nodes that changed.

mod constraints;
mod counts;
mod filtering;
mod scoring;
#[cfg(test)]
mod tests;

use std::sync::Mutex;

pub use constraints::{LABEL_HOSTNAME, LABEL_ZONE};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

/// Upstream's reason when the skew would exceed maxSkew.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Upstream's reason when the node lacks a constraint's topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// The PodTopologySpread filter and score.
#[derive(Default)]
pub struct PodTopologySpread {
    memo: Mutex<counts::Memo>,
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
        filtering::pre_filter(&self.memo, state, pod, snap)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &PodInfo, node: &NodeInfo) {
        filtering::update(state, pod, added, node, 1);
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) {
        filtering::update(state, pod, removed, node, -1);
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        filtering::filter(state, node)
    }

    fn scores(&self) -> bool {
        true
    }

    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        nodes: &[&NodeInfo],
    ) {
        scoring::pre_score(&self.memo, state, pod, snap, nodes);
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        scoring::score(state, node)
    }

    fn normalize(&self, state: &CycleState, scores: &mut [i64]) {
        scoring::normalize(state, scores);
    }
}
