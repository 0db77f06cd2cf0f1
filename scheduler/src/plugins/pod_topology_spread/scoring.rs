//! PreScore, Score and NormalizeScore: the soft (`ScheduleAnyway`) constraints, or the system defaults
//! for a pod without constraints. A node's raw score is the sum over the constraints of `matching pods
//! in its domain × log(domains + 2) + (maxSkew − 1)`; normalising gives the lowest raw score 100.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::constraints::{
    default_constraints, has_all_keys, has_own_constraints, own_constraints, shape_key, Constraint,
    LABEL_HOSTNAME, SCHEDULE_ANYWAY,
};
use super::counts::{Counts, Input, Memo};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, MAX_NODE_SCORE};
use crate::pod_info::PodInfo;

/// The CycleState key.
pub(super) const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";
/// The raw score of a node that is not scored (it lacks a topology key).
const INVALID_SCORE: i64 = -1;

/// What PreScore computed.
#[derive(Clone, Default)]
pub(super) struct ScoreState {
    constraints: Arc<Vec<Constraint>>,
    counts: Counts,
    /// Per constraint, log(domains among the scored nodes + 2).
    weights: Vec<f64>,
    /// Whether nodes lacking a key are left unscored (not for the defaults).
    require_all: bool,
}

/// PreScore: the soft constraints, their weights from the scored `nodes`, and the counts over every
/// node of the snapshot.
pub(super) fn pre_score(
    memo: &Mutex<Memo>,
    state: &mut CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
    nodes: &[&NodeInfo],
) {
    // Only the pod's own constraints require every key: nodes without a zone still spread by hostname.
    let require_all = has_own_constraints(pod);
    let constraints = if require_all {
        own_constraints(pod, SCHEDULE_ANYWAY)
    } else {
        default_constraints(pod, &snap.objects)
    };
    if constraints.is_empty() || snap.nodes.is_empty() {
        state.write(PRE_SCORE_KEY, ScoreState::default());
        return;
    }
    let mut ignored = 0usize;
    let mut values: Vec<HashSet<&str>> = vec![HashSet::new(); constraints.len()];
    for n in nodes {
        let labels = n.labels();
        if require_all && !has_all_keys(labels, &constraints) {
            ignored += 1;
            continue;
        }
        for (c, seen) in constraints.iter().zip(values.iter_mut()) {
            if c.topology_key != LABEL_HOSTNAME {
                seen.insert(labels.get(&c.topology_key).map_or("", String::as_str));
            }
        }
    }
    let weights = constraints
        .iter()
        .zip(&values)
        .map(|(c, seen)| {
            let size = if c.topology_key == LABEL_HOSTNAME {
                nodes.len() - ignored
            } else {
                seen.len()
            };
            // Precision is irrelevant at cluster sizes.
            ((size + 2) as f64).ln()
        })
        .collect();
    let input = Input {
        pod,
        constraints: &constraints,
        require_all,
    };
    let key = shape_key(pod, &constraints, require_all);
    let counts = memo
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .counts(key, &input, &snap.nodes);
    state.write(
        PRE_SCORE_KEY,
        ScoreState {
            constraints: Arc::new(constraints),
            counts,
            weights,
            require_all,
        },
    );
}

/// Score: the raw score of `node` (lower is better until normalised).
pub(super) fn score(state: &CycleState, node: &NodeInfo) -> i64 {
    let Some(s) = state.read::<ScoreState>(PRE_SCORE_KEY) else {
        return 0;
    };
    if s.constraints.is_empty() {
        return 0;
    }
    let labels = node.labels();
    if s.require_all && !has_all_keys(labels, &s.constraints) {
        return INVALID_SCORE;
    }
    // Hostname domains are read from the counts too rather than recounted on the node as upstream does:
    // the same number for a scored node (it passed the filters the inclusion policies repeat) unless two
    // nodes share a hostname label.
    let mut score = 0.0;
    for (i, c) in s.constraints.iter().enumerate() {
        let Some(value) = labels.get(&c.topology_key) else {
            continue;
        };
        let count = s.counts.get(i).and_then(|dc| dc.get(value)).unwrap_or(0);
        let weight = s.weights.get(i).copied().unwrap_or(0.0);
        score += count as f64 * weight + (c.max_skew - 1) as f64;
    }
    score.round() as i64
}

/// NormalizeScore: upstream's inversion between the lowest and highest raw scores; unscored nodes 0.
pub(super) fn normalize(state: &CycleState, scores: &mut [i64]) {
    let Some(s) = state.read::<ScoreState>(PRE_SCORE_KEY) else {
        return;
    };
    if s.constraints.is_empty() {
        return;
    }
    let valid = scores.iter().copied().filter(|s| *s != INVALID_SCORE);
    let min = valid.clone().min().unwrap_or(i64::MAX);
    let max = valid.max().unwrap_or(0).max(0);
    for score in scores.iter_mut() {
        *score = if *score == INVALID_SCORE {
            0
        } else if max == 0 {
            MAX_NODE_SCORE
        } else {
            MAX_NODE_SCORE * (max + min - *score) / max
        };
    }
}
