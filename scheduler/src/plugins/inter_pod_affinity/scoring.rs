//! InterPodAffinity's PreScore, Score and NormalizeScore.

use super::{TopologyCounts, WeightedTerm, HARD_POD_AFFINITY_WEIGHT, NO_LABELS};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, MAX_NODE_SCORE};
use crate::pod_info::PodInfo;

/// Where PreScore leaves the per-topology scores in the CycleState.
pub const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// The summed weights per topology pair.
#[derive(Debug, Clone, Default)]
pub struct PreScoreState {
    /// Weight per topology pair: positive for affinity, negative for anti-affinity.
    pub topology_score: TopologyCounts,
}

fn resolved_weighted(terms: &[WeightedTerm], snap: &Snapshot) -> Vec<WeightedTerm> {
    terms
        .iter()
        .map(|w| {
            let mut w = w.clone();
            w.term.resolve_namespaces(&snap.objects);
            w
        })
        .collect()
}

/// PreScore over every node of the snapshot (not only the feasible ones, as upstream). Unless the pod
/// has preferred terms, only pods that declare affinity can weigh in, so only nodes counting such pods
/// are looked at.
pub fn pre_score(state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) {
    let own = pod.affinity_terms.as_deref();
    let preferred = own.map_or_else(Vec::new, |t| resolved_weighted(&t.preferred_affinity, snap));
    let preferred_anti = own.map_or_else(Vec::new, |t| {
        resolved_weighted(&t.preferred_anti_affinity, snap)
    });
    let has_constraints = !preferred.is_empty() || !preferred_anti.is_empty();
    let ns_labels = snap
        .objects
        .namespace_labels(pod.namespace())
        .unwrap_or(&NO_LABELS);
    let mut score = TopologyCounts::default();
    for node in &snap.nodes {
        if !has_constraints && node.pods_with_affinity == 0 {
            continue;
        }
        let labels = node.labels();
        if labels.is_empty() {
            continue;
        }
        let mut add = |key: &str, n: i64| score.add_on_node(labels, key, n);
        for existing in node
            .pods
            .iter()
            .filter(|p| has_constraints || p.has_affinity)
        {
            for w in &preferred {
                if w.term.matches(&existing.pod, &NO_LABELS) {
                    add(&w.term.topology_key, w.weight);
                }
            }
            for w in &preferred_anti {
                if w.term.matches(&existing.pod, &NO_LABELS) {
                    add(&w.term.topology_key, -w.weight);
                }
            }
            let Some(theirs) = existing.affinity_terms.as_deref() else {
                continue;
            };
            for t in &theirs.required_affinity {
                if t.matches(&pod.pod, ns_labels) {
                    add(&t.topology_key, HARD_POD_AFFINITY_WEIGHT);
                }
            }
            for w in &theirs.preferred_affinity {
                if w.term.matches(&pod.pod, ns_labels) {
                    add(&w.term.topology_key, w.weight);
                }
            }
            for w in &theirs.preferred_anti_affinity {
                if w.term.matches(&pod.pod, ns_labels) {
                    add(&w.term.topology_key, -w.weight);
                }
            }
        }
    }
    state.write(
        PRE_SCORE_KEY,
        PreScoreState {
            topology_score: score,
        },
    );
}

/// Score: the weights of the node's topology pairs.
pub fn score(state: &CycleState, node: &NodeInfo) -> i64 {
    state
        .read::<PreScoreState>(PRE_SCORE_KEY)
        .map_or(0, |s| s.topology_score.sum_on_node(node.labels()))
}

/// NormalizeScore: min-max to 0..=[`MAX_NODE_SCORE`]; all equal gives 0 everywhere.
pub fn normalize(state: &CycleState, scores: &mut [i64]) {
    if state
        .read::<PreScoreState>(PRE_SCORE_KEY)
        .is_none_or(|s| s.topology_score.is_empty())
    {
        return;
    }
    let (Some(min), Some(max)) = (scores.iter().copied().min(), scores.iter().copied().max())
    else {
        return;
    };
    let diff = max - min;
    for s in scores.iter_mut() {
        *s = if diff > 0 {
            (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::framework::schedule::Algorithm;
    use crate::framework::{Framework, Plugin};
    use crate::plugins::inter_pod_affinity::InterPodAffinity;
    use crate::plugins::testing::{node, pod, snapshot};

    fn zoned(name: &str, zone: &str) -> NodeInfo {
        node(
            name,
            "4",
            "8Gi",
            json!({"metadata": {"labels": {"zone": zone}}}),
        )
    }

    fn placed(name: &str, labels: Value, node: &str, affinity: Value) -> PodInfo {
        pod(
            name,
            None,
            None,
            json!({"metadata": {"labels": labels}, "spec": {"nodeName": node, "affinity": affinity}}),
        )
    }

    fn preferred(kind: &str, terms: Value) -> Value {
        json!({kind: {"preferredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    fn weighted(weight: i32, app: &str, key: &str) -> Value {
        json!({"weight": weight, "podAffinityTerm":
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}})
    }

    /// Raw and normalised scores of every node of `snap` for `p`.
    fn scores(snap: &Snapshot, p: &PodInfo) -> (Vec<i64>, Vec<i64>) {
        let mut state = CycleState::default();
        let nodes: Vec<&NodeInfo> = snap.nodes.iter().map(|n| &**n).collect();
        InterPodAffinity.pre_score(&mut state, p, snap, &nodes);
        let raw: Vec<i64> = nodes
            .iter()
            .map(|n| InterPodAffinity.score(&state, p, n))
            .collect();
        let mut norm = raw.clone();
        InterPodAffinity.normalize(&state, &mut norm);
        (raw, norm)
    }

    #[test]
    fn preferred_terms_of_the_pod_weigh_affinity_up_and_anti_affinity_down() {
        let snap = snapshot(
            vec![zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c")],
            vec![
                placed("cache", json!({"app": "cache"}), "a1", json!({})),
                placed("batch", json!({"app": "batch"}), "b1", json!({})),
            ],
        );
        let mut affinity = preferred("podAffinity", json!([weighted(80, "cache", "zone")]));
        affinity["podAntiAffinity"] =
            preferred("podAntiAffinity", json!([weighted(40, "batch", "zone")]))["podAntiAffinity"]
                .clone();
        let p = pod("p", None, None, json!({"spec": {"affinity": affinity}}));
        let (raw, norm) = scores(&snap, &p);
        assert_eq!(raw, vec![80, -40, 0]);
        // min-max: (80 - -40) is the whole range.
        assert_eq!(norm, vec![100, 0, 33]);
        let fw = Framework::new(vec![(Box::new(InterPodAffinity), 2)]);
        let d = Algorithm::seeded(3)
            .schedule(&fw, &mut CycleState::default(), &snap, &p)
            .unwrap();
        assert_eq!(d.node, "a1");
    }

    #[test]
    fn existing_pods_terms_weigh_in_for_the_pod_they_match() {
        let snap = snapshot(
            vec![zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c")],
            vec![
                // Requires pods labelled web near it: hardPodAffinityWeight 1 for a web pod.
                placed(
                    "wants-web",
                    json!({}),
                    "a1",
                    json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]}}),
                ),
                placed(
                    "likes-web",
                    json!({}),
                    "b1",
                    preferred("podAffinity", json!([weighted(5, "web", "zone")])),
                ),
                placed(
                    "hates-web",
                    json!({}),
                    "c1",
                    preferred("podAntiAffinity", json!([weighted(3, "web", "zone")])),
                ),
            ],
        );
        let web = pod(
            "w",
            None,
            None,
            json!({"metadata": {"labels": {"app": "web"}}}),
        );
        let (raw, norm) = scores(&snap, &web);
        assert_eq!(raw, vec![1, 5, -3]);
        assert_eq!(norm, vec![50, 100, 0]);
        let other = pod(
            "o",
            None,
            None,
            json!({"metadata": {"labels": {"app": "db"}}}),
        );
        let (raw, norm) = scores(&snap, &other);
        assert_eq!(raw, vec![0, 0, 0]);
        assert_eq!(norm, vec![0, 0, 0]);
    }

    #[test]
    fn no_affinity_anywhere_scores_zero() {
        let snap = snapshot(
            vec![zoned("a1", "a"), zoned("b1", "b")],
            vec![placed("x", json!({"app": "x"}), "a1", json!({}))],
        );
        let (raw, norm) = scores(&snap, &pod("p", None, None, json!({})));
        assert_eq!((raw, norm), (vec![0, 0], vec![0, 0]));
    }
}
