//! PreFilter, AddPod/RemovePod and Filter: the hard (`DoNotSchedule`) constraints. A node passes when,
//! for every constraint, it has the topology key and `matching pods in its domain + (1 if the pod
//! matches its own selector) − global minimum ≤ maxSkew`; the global minimum is 0 while fewer domains
//! than `minDomains` exist.

use std::sync::{Arc, Mutex};

use super::constraints::{has_all_keys, included, own_constraints, shape_key, Constraint};
use super::counts::{Counts, Input, Memo};
use super::{ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Status};
use crate::pod_info::PodInfo;

/// The CycleState key.
pub(super) const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";

/// What PreFilter computed, adjusted by AddPod/RemovePod in preemption's copies.
#[derive(Clone, Default)]
pub(super) struct FilterState {
    constraints: Arc<Vec<Constraint>>,
    counts: Counts,
    self_match: Vec<bool>,
    /// Per constraint, the domains AddPod/RemovePod changed and by how much (few: one node's pods).
    changed: Vec<Vec<(String, i64)>>,
    /// Per constraint, the smallest count of any domain, changes included.
    min: Vec<Option<i64>>,
}

impl FilterState {
    fn base(&self, i: usize, value: &str) -> Option<i64> {
        self.counts.get(i).and_then(|dc| dc.get(value))
    }

    fn count(&self, i: usize, value: &str) -> i64 {
        let delta: i64 = self
            .changed
            .get(i)
            .into_iter()
            .flatten()
            .filter(|(d, _)| d == value)
            .map(|(_, n)| n)
            .sum();
        self.base(i, value).unwrap_or(0) + delta
    }

    fn domains(&self, i: usize) -> usize {
        let base = self.counts.get(i).map_or(0, |dc| dc.domains());
        let new = self
            .changed
            .get(i)
            .into_iter()
            .flatten()
            .filter(|(d, _)| self.base(i, d).is_none())
            .count();
        base + new
    }

    /// The global minimum for the skew, with minDomains applied.
    fn min_match(&self, i: usize, min_domains: i64) -> i64 {
        let domains = i64::try_from(self.domains(i)).unwrap_or(i64::MAX);
        if domains < min_domains {
            return 0;
        }
        // Without any domain upstream's minimum stays at MaxInt32.
        self.min
            .get(i)
            .copied()
            .flatten()
            .unwrap_or(i64::from(i32::MAX))
    }

    /// Recomputes constraint `i`'s minimum: the base counts' smallest among the unchanged domains,
    /// and the changed domains' own counts.
    fn recompute_min(&mut self, i: usize) {
        let (Some(dc), Some(changed)) = (self.counts.get(i), self.changed.get(i)) else {
            return;
        };
        let moved: Vec<i64> = changed.iter().filter_map(|(d, _)| dc.get(d)).collect();
        let mut min = None;
        for (count, n) in dc.by_count() {
            let away = moved.iter().filter(|m| **m == count).count();
            if usize::try_from(n).unwrap_or(usize::MAX) > away {
                min = Some(count);
                break;
            }
        }
        for (d, delta) in changed {
            let c = dc.get(d).unwrap_or(0) + delta;
            min = Some(min.map_or(c, |m: i64| m.min(c)));
        }
        if let Some(slot) = self.min.get_mut(i) {
            *slot = min;
        }
    }
}

/// PreFilter: the hard constraints and their counts over every node.
pub(super) fn pre_filter(
    memo: &Mutex<Memo>,
    state: &mut CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
) -> Status {
    let constraints = own_constraints(pod, super::constraints::DO_NOT_SCHEDULE);
    if constraints.is_empty() {
        state.write(PRE_FILTER_KEY, FilterState::default());
        return Status::success();
    }
    let input = Input {
        pod,
        constraints: &constraints,
        require_all: true,
    };
    let key = shape_key(pod, &constraints, true);
    let counts = memo
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .counts(key, &input, &snap.nodes);
    let labels = pod.pod.metadata.labels.as_ref();
    let self_match = constraints
        .iter()
        .map(|c| c.selector.matches(labels))
        .collect();
    let min = counts.iter().map(|dc| dc.min()).collect();
    let n = constraints.len();
    state.write(
        PRE_FILTER_KEY,
        FilterState {
            constraints: Arc::new(constraints),
            counts,
            self_match,
            changed: vec![Vec::new(); n],
            min,
        },
    );
    Status::success()
}

/// AddPod (`delta` 1) and RemovePod (`delta` −1): `other` now counts, or no longer counts, on `node`.
pub(super) fn update(
    state: &mut CycleState,
    pod: &PodInfo,
    other: &PodInfo,
    node: &NodeInfo,
    delta: i64,
) {
    let Some(s) = state.read_mut::<FilterState>(PRE_FILTER_KEY) else {
        return;
    };
    if s.constraints.is_empty() || other.namespace() != pod.namespace() || node.node.is_none() {
        return;
    }
    let labels = node.labels();
    if !has_all_keys(labels, &s.constraints) {
        return;
    }
    let other_labels = other.pod.metadata.labels.as_ref();
    let constraints = s.constraints.clone();
    for (i, c) in constraints.iter().enumerate() {
        if !c.selector.matches(other_labels) || !included(c, pod, node) {
            continue;
        }
        let value = labels.get(&c.topology_key).map_or("", String::as_str);
        let Some(changed) = s.changed.get_mut(i) else {
            continue;
        };
        match changed.iter_mut().find(|(d, _)| d == value) {
            Some((_, n)) => *n += delta,
            None => changed.push((value.to_string(), delta)),
        }
        s.recompute_min(i);
    }
}

/// Filter: every hard constraint's skew on `node`.
pub(super) fn filter(state: &CycleState, node: &NodeInfo) -> Status {
    let Some(s) = state.read::<FilterState>(PRE_FILTER_KEY) else {
        return Status::success();
    };
    let labels = node.labels();
    for (i, c) in s.constraints.iter().enumerate() {
        let Some(value) = labels.get(&c.topology_key) else {
            return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
        };
        let self_match = i64::from(s.self_match.get(i).copied().unwrap_or(false));
        let skew = s.count(i, value) + self_match - s.min_match(i, c.min_domains);
        if skew > c.max_skew {
            return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
        }
    }
    Status::success()
}
