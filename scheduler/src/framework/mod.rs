//! The scheduling framework: plugins implement the extension points they take part in (PreFilter,
//! Filter, Score with NormalizeScore), the [`Framework`] runs them in upstream's order and weighs their
//! scores. [`schedule`] is one scheduling cycle over a snapshot; [`fit_error`] words a failure as
//! upstream does; [`feasible`] is percentageOfNodesToScore.

pub mod cycle_state;
pub mod feasible;
pub mod fit_error;
pub mod schedule;

use std::fmt;

pub use cycle_state::CycleState;

use crate::cache::{NodeInfo, Snapshot};
use crate::pod_info::PodInfo;

/// The highest score a plugin gives a node after normalising.
pub const MAX_NODE_SCORE: i64 = 100;

/// The outcome class of a plugin's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The node passes.
    Success,
    /// The node does not fit now; preempting pods on it might help.
    Unschedulable,
    /// The node does not fit, and preempting pods would not change that.
    UnschedulableAndUnresolvable,
    /// Something went wrong evaluating the node.
    Error,
}

/// A plugin's verdict on one pod (and one node, for Filter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The class.
    pub code: Code,
    /// Why, in upstream's words (each one counted in the FailedScheduling message).
    pub reasons: Vec<String>,
    /// The plugin that said so.
    pub plugin: &'static str,
}

impl Status {
    /// A pass.
    pub fn success() -> Status {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            plugin: "",
        }
    }

    /// A refusal of class `code` for `reasons`.
    pub fn new(code: Code, reasons: Vec<String>) -> Status {
        Status {
            code,
            reasons,
            plugin: "",
        }
    }

    /// An `Unschedulable` refusal.
    pub fn unschedulable(reason: impl Into<String>) -> Status {
        Status::new(Code::Unschedulable, vec![reason.into()])
    }

    /// An `UnschedulableAndUnresolvable` refusal.
    pub fn unresolvable(reason: impl Into<String>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, vec![reason.into()])
    }

    /// Whether the node passes.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    fn with_plugin(mut self, plugin: &'static str) -> Status {
        self.plugin = plugin;
        self
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reasons.join(", "))
    }
}

/// A scheduler plugin. Every extension point has a default that takes no part, so a plugin implements
/// only its own points. Plugins that need the whole cluster compute it in `pre_filter` / `pre_score`
/// into the [`CycleState`] and read it per node.
pub trait Plugin: Send + Sync {
    /// Upstream's plugin name.
    fn name(&self) -> &'static str;

    /// PreFilter: a refusal here rejects the pod on every node at once.
    fn pre_filter(&self, _state: &mut CycleState, _pod: &PodInfo, _snap: &Snapshot) -> Status {
        Status::success()
    }

    /// PreFilterExtensions.AddPod: `added` now counts on `node` (preemption's dry runs).
    fn add_pod(&self, _state: &mut CycleState, _pod: &PodInfo, _added: &PodInfo, _node: &NodeInfo) {
    }

    /// PreFilterExtensions.RemovePod: `removed` no longer counts on `node` (a preemption victim).
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _removed: &PodInfo,
        _node: &NodeInfo,
    ) {
    }

    /// Filter: whether `pod` may run on `node`.
    fn filter(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Status {
        Status::success()
    }

    /// Whether the plugin scores nodes.
    fn scores(&self) -> bool {
        false
    }

    /// PreScore: runs once before scoring with the feasible nodes.
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _snap: &Snapshot,
        _nodes: &[&NodeInfo],
    ) {
    }

    /// Score: the raw score of `node` for `pod`.
    fn score(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> i64 {
        0
    }

    /// NormalizeScore: scales the raw scores of every feasible node to 0..=[`MAX_NODE_SCORE`].
    fn normalize(&self, _state: &CycleState, _scores: &mut [i64]) {}
}

/// Upstream's DefaultNormalizeScore: scales to `max` by the highest score; `reverse` makes the lowest
/// raw score the best.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let highest = scores.iter().copied().max().unwrap_or(0);
    if highest == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = MAX_NODE_SCORE * *s / highest;
        *s = if reverse {
            MAX_NODE_SCORE - scaled
        } else {
            scaled
        };
    }
}

/// The plugins of one profile, in upstream's order, with their score weights.
pub struct Framework {
    plugins: Vec<(Box<dyn Plugin>, i64)>,
}

impl Framework {
    /// A framework of `plugins`, each with its score weight.
    pub fn new(plugins: Vec<(Box<dyn Plugin>, i64)>) -> Framework {
        Framework { plugins }
    }

    /// Runs every PreFilter; the first refusal stops the cycle.
    pub fn run_pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
        for (p, _) in &self.plugins {
            let s = p.pre_filter(state, pod, snap);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Tells every plugin's state that `added` now counts on `node`.
    pub fn run_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) {
        for (p, _) in &self.plugins {
            p.add_pod(state, pod, added, node);
        }
    }

    /// Tells every plugin's state that `removed` no longer counts on `node`.
    pub fn run_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) {
        for (p, _) in &self.plugins {
            p.remove_pod(state, pod, removed, node);
        }
    }

    /// Runs the filters in order on one node; the first refusal is the node's status.
    pub fn run_filters(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for (p, _) in &self.plugins {
            let s = p.filter(state, pod, node);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// PreScore, then the weighted sum of every score plugin's normalised scores, one per node of
    /// `nodes`.
    pub fn run_scores(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        nodes: &[&NodeInfo],
    ) -> Vec<i64> {
        for (p, _) in &self.plugins {
            if p.scores() {
                p.pre_score(state, pod, snap, nodes);
            }
        }
        let mut total = vec![0i64; nodes.len()];
        for (p, weight) in &self.plugins {
            if !p.scores() {
                continue;
            }
            let mut scores: Vec<i64> = nodes.iter().map(|n| p.score(state, pod, n)).collect();
            p.normalize(state, &mut scores);
            for (t, s) in total.iter_mut().zip(scores) {
                *t = t.saturating_add(s.saturating_mul(*weight));
            }
        }
        total
    }

    /// The plugins' names with their weights (for logs and docs).
    pub fn plugins(&self) -> Vec<(&'static str, i64)> {
        self.plugins.iter().map(|(p, w)| (p.name(), *w)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_scales_to_a_hundred() {
        let mut s = vec![0, 5, 10];
        default_normalize(&mut s, false);
        assert_eq!(s, vec![0, 50, 100]);
        let mut r = vec![0, 1, 2];
        default_normalize(&mut r, true);
        assert_eq!(r, vec![100, 50, 0]);
        let mut zero = vec![0, 0];
        default_normalize(&mut zero, true);
        assert_eq!(zero, vec![100, 100]);
    }
}
