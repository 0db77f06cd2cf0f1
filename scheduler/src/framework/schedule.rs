//! One scheduling cycle (upstream's schedulePod): PreFilter, then Filter over the snapshot starting
//! where the previous cycle stopped, until enough feasible nodes are found (percentageOfNodesToScore),
//! then Score, and the best node, ties broken uniformly at random.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::feasible::num_feasible_nodes_to_find;
use super::fit_error::{Diagnosis, FitError};
use super::{CycleState, Framework};
use crate::cache::{NodeInfo, Snapshot};
use crate::pod_info::PodInfo;

/// Where a pod goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The chosen node.
    pub node: String,
    /// Nodes that passed the filters.
    pub feasible: usize,
    /// Nodes the filters ran on.
    pub evaluated: usize,
}

/// Why a cycle found no node.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The cluster has no nodes.
    NoNodes,
    /// Nodes exist, none fits.
    Fit(FitError),
}

/// `status.nominatedNodeName` of `pod`, if set.
pub fn nominated_node_name(pod: &PodInfo) -> Option<&str> {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Runs the filters on `node` as upstream's RunFilterPluginsWithNominatedPods: pods nominated to the
/// node with at least `pod`'s priority count as if they were there (they will be, once their victims
/// are gone). The filters run with them and, when that passes, without them too, because some filters
/// (pod affinity) may pass only thanks to them.
pub fn filter_with_nominated(
    fw: &Framework,
    state: &CycleState,
    snap: &Snapshot,
    pod: &PodInfo,
    node: &NodeInfo,
) -> super::Status {
    let nominated: Vec<&PodInfo> = snap
        .nominated_on(node.name())
        .iter()
        .filter(|p| p.priority >= pod.priority && p.uid != pod.uid)
        .collect();
    if nominated.is_empty() {
        return fw.run_filters(state, pod, node);
    }
    let mut with = node.clone();
    let mut with_state = state.clone();
    for p in nominated {
        with.add_pod(p.clone());
        fw.run_add_pod(&mut with_state, pod, p, &with);
    }
    let status = fw.run_filters(&with_state, pod, &with);
    if !status.is_success() {
        return status;
    }
    fw.run_filters(state, pod, node)
}

/// The state kept from one cycle to the next: where the node scan resumes, the tie-break randomness.
pub struct Algorithm {
    /// `percentageOfNodesToScore` (0 = adaptive).
    pub percentage_of_nodes_to_score: i64,
    next_start: usize,
    rng: StdRng,
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm {
            percentage_of_nodes_to_score: 0,
            next_start: 0,
            rng: StdRng::from_entropy(),
        }
    }
}

impl Algorithm {
    /// A deterministic algorithm (for tests).
    pub fn seeded(seed: u64) -> Algorithm {
        Algorithm {
            percentage_of_nodes_to_score: 0,
            next_start: 0,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The tie-break randomness (preemption draws its starting node from it too).
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// Chooses a node for `pod` among `snap`'s nodes; `state` keeps what the plugins computed (for
    /// preemption after a failure).
    pub fn schedule(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        snap: &Snapshot,
        pod: &PodInfo,
    ) -> Result<Decision, Failure> {
        let all = snap.nodes.len();
        if all == 0 {
            return Err(Failure::NoNodes);
        }
        let mut diagnosis = Diagnosis::default();
        let pre = fw.run_pre_filter(state, pod, snap);
        if !pre.is_success() {
            diagnosis.pre_filter_msg = Some(pre.to_string());
            for n in &snap.nodes {
                diagnosis
                    .node_statuses
                    .insert(n.name().to_string(), pre.clone());
            }
            return Err(Failure::Fit(FitError {
                num_all_nodes: all,
                diagnosis,
            }));
        }
        // A preemptor tries the node its victims are leaving first (upstream's evaluateNominatedNode).
        if let Some(node) = nominated_node_name(pod).and_then(|n| snap.get(n)) {
            if filter_with_nominated(fw, state, snap, pod, node).is_success() {
                return Ok(Decision {
                    node: node.name().to_string(),
                    feasible: 1,
                    evaluated: 1,
                });
            }
        }
        let want = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, all);
        let mut feasible: Vec<&NodeInfo> = Vec::new();
        let mut processed = 0;
        for i in 0..all {
            if feasible.len() >= want {
                break;
            }
            let node = &snap.nodes[(self.next_start + i) % all];
            processed += 1;
            let status = filter_with_nominated(fw, state, snap, pod, node);
            if status.is_success() {
                feasible.push(node);
            } else {
                diagnosis
                    .node_statuses
                    .insert(node.name().to_string(), status);
            }
        }
        self.next_start = (self.next_start + processed) % all;
        if feasible.is_empty() {
            return Err(Failure::Fit(FitError {
                num_all_nodes: all,
                diagnosis,
            }));
        }
        let count = feasible.len();
        if count == 1 {
            return Ok(Decision {
                node: feasible[0].name().to_string(),
                feasible: 1,
                evaluated: processed,
            });
        }
        let scores = fw.run_scores(state, pod, snap, &feasible);
        Ok(Decision {
            node: self.select_host(&feasible, &scores),
            feasible: count,
            evaluated: processed,
        })
    }

    /// The highest-scoring node; among equals each is equally likely (reservoir sampling).
    fn select_host(&mut self, nodes: &[&NodeInfo], scores: &[i64]) -> String {
        let mut best = i64::MIN;
        let mut chosen = 0;
        let mut ties = 0u32;
        for (i, s) in scores.iter().enumerate() {
            if *s > best {
                best = *s;
                chosen = i;
                ties = 1;
            } else if *s == best {
                ties += 1;
                if self.rng.gen_range(0..ties) == 0 {
                    chosen = i;
                }
            }
        }
        nodes
            .get(chosen)
            .map(|n| n.name().to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::default_framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;

    #[test]
    fn large_clusters_stop_filtering_once_enough_nodes_fit_and_resume_further_on() {
        let nodes = (0..200)
            .map(|i| node(&format!("n{i:03}"), "4", "8Gi", json!({})))
            .collect();
        let snap = snapshot(nodes, vec![]);
        let fw = default_framework();
        let mut alg = Algorithm::seeded(11);
        let p = pod("p", Some("100m"), None, json!({}));
        let first = alg
            .schedule(&fw, &mut CycleState::default(), &snap, &p)
            .unwrap();
        // 200 nodes: max(50 - 200/125, 5) = 49 % = 98, at least 100.
        assert_eq!((first.feasible, first.evaluated), (100, 100));
        assert!(first.node.as_str() < "n100", "{}", first.node);
        let second = alg
            .schedule(&fw, &mut CycleState::default(), &snap, &p)
            .unwrap();
        assert!(second.node.as_str() >= "n100", "{}", second.node);
    }

    #[test]
    fn every_filter_has_its_say() {
        let snap = snapshot(
            vec![
                node(
                    "cordoned",
                    "8",
                    "16Gi",
                    json!({"spec": {"unschedulable": true}, "metadata": {"labels": {"disk": "ssd"}}}),
                ),
                node(
                    "hdd",
                    "8",
                    "16Gi",
                    json!({"metadata": {"labels": {"disk": "hdd"}}}),
                ),
                node(
                    "small",
                    "1",
                    "16Gi",
                    json!({"metadata": {"labels": {"disk": "ssd"}}}),
                ),
                node(
                    "right",
                    "8",
                    "16Gi",
                    json!({"metadata": {"labels": {"disk": "ssd"}}}),
                ),
            ],
            vec![],
        );
        let p = pod(
            "p",
            Some("2"),
            None,
            json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
        );
        let d = Algorithm::seeded(2)
            .schedule(&default_framework(), &mut CycleState::default(), &snap, &p)
            .unwrap();
        assert_eq!(d.node, "right");
        assert_eq!(d.feasible, 1);
        assert_eq!(d.evaluated, 4);
    }

    #[test]
    fn ties_are_broken_among_the_best_nodes_only() {
        let snap = snapshot(
            vec![
                node("a", "4", "8Gi", json!({})),
                node("b", "4", "8Gi", json!({})),
                node("busy", "4", "8Gi", json!({})),
            ],
            vec![pod(
                "x",
                Some("3"),
                Some("6Gi"),
                json!({"spec": {"nodeName": "busy"}}),
            )],
        );
        let fw = default_framework();
        let mut alg = Algorithm::seeded(4);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..40 {
            let d = alg
                .schedule(
                    &fw,
                    &mut CycleState::default(),
                    &snap,
                    &pod("p", Some("100m"), None, json!({})),
                )
                .unwrap();
            seen.insert(d.node);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
    }

    #[test]
    fn no_nodes_is_its_own_failure() {
        let snap = snapshot(vec![], vec![]);
        let r = Algorithm::seeded(1).schedule(
            &default_framework(),
            &mut CycleState::default(),
            &snap,
            &pod("p", None, None, json!({})),
        );
        assert!(matches!(r, Err(Failure::NoNodes)));
    }
}
