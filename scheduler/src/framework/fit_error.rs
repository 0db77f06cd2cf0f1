//! Why a pod fits no node, worded as upstream's FitError: `0/N nodes are available:`, then the
//! PreFilter refusal or the sorted histogram of the nodes' reasons (`2 Insufficient cpu, 1 node(s) had
//! untolerated taint {k: v}.`), then the PostFilter (preemption) message.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::Status;

/// What each node said about the pod.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// The refusal of each node that did not fit.
    pub node_statuses: BTreeMap<String, Status>,
    /// A PreFilter refusal (then it holds for every node).
    pub pre_filter_msg: Option<String>,
    /// What PostFilter (preemption) said.
    pub post_filter_msg: Option<String>,
}

/// A pod that fits no node.
#[derive(Debug, Clone, Default)]
pub struct FitError {
    /// How many nodes there were.
    pub num_all_nodes: usize,
    /// Why each one was refused.
    pub diagnosis: Diagnosis,
}

/// Upstream's message when the cluster has no nodes at all.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// `count reason` for every reason, sorted as strings (upstream's sortReasonsHistogram).
pub fn reasons_histogram<'a>(statuses: impl Iterator<Item = &'a Status>) -> Vec<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in statuses {
        for r in &s.reasons {
            *counts.entry(r.as_str()).or_insert(0) += 1;
        }
    }
    let mut lines: Vec<String> = counts
        .into_iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    lines.sort();
    lines
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        match &self.diagnosis.pre_filter_msg {
            Some(msg) => write!(f, " {msg}.")?,
            None => {
                let lines = reasons_histogram(self.diagnosis.node_statuses.values());
                if !lines.is_empty() {
                    write!(f, " {}.", lines.join(", "))?;
                }
            }
        }
        if let Some(msg) = &self.diagnosis.post_filter_msg {
            write!(f, " {msg}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_counted_and_sorted() {
        let mut d = Diagnosis::default();
        d.node_statuses.insert(
            "a".into(),
            Status::unresolvable("node(s) had untolerated taint {k: v}"),
        );
        d.node_statuses.insert(
            "b".into(),
            Status::unresolvable("node(s) had untolerated taint {k: v}"),
        );
        d.node_statuses
            .insert("c".into(), Status::unschedulable("Insufficient cpu"));
        d.post_filter_msg = Some(
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                .into(),
        );
        let e = FitError {
            num_all_nodes: 3,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn every_reason_of_a_node_counts() {
        let mut d = Diagnosis::default();
        d.node_statuses.insert(
            "a".into(),
            Status::new(
                super::super::Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        );
        let e = FitError {
            num_all_nodes: 1,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
        );
    }
}
