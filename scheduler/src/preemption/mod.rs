//! DefaultPreemption, the PostFilter that runs when a pod fits no node: it looks for a node where
//! evicting pods of lower priority would make room, picks the best such node, and returns what to do
//! (victims to evict, the node to nominate). Otherwise it words the `preemption: …` part of the
//! FailedScheduling message, as upstream's evaluator does.
//!
//! - [`victims`]: the fewest, least important victims on one node (PodDisruptionBudgets respected as
//!   far as possible);
//! - [`pick`]: which candidate node wins.

pub mod pick;
pub mod victims;

use rand::{Rng, SeedableRng};

use crate::cache::Snapshot;
use crate::framework::fit_error::{Diagnosis, FitError};
use crate::framework::schedule::nominated_node_name;
use crate::framework::{Code, CycleState, Framework, Status};
use crate::pod_info::PodInfo;
use victims::{select_on_node, Victims};

pub use victims::NO_VICTIMS;

/// Upstream's status for nodes where preemption cannot help.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// The DisruptionTarget condition's reason on a victim.
pub const REASON_PREEMPTION: &str = "PreemptionByScheduler";
/// Candidates to find: at least this share of the nodes …
const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
/// … and at least this many (upstream's DefaultPreemptionArgs defaults).
const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

/// What PostFilter decided.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Evict `victims` on `node` and nominate the pod there.
    Preempt {
        /// The chosen node.
        node: String,
        /// The pods to evict, most important first.
        victims: Victims,
        /// Pods nominated to the node with lower priority: their nomination is cleared, since they
        /// may no longer fit there.
        lower_nominated: Vec<PodInfo>,
    },
    /// Preemption does not help; the message's `preemption: …` part.
    NotHelpful(String),
}

/// Whether `pod` may preempt at all (upstream's PodEligibleToPreemptOthers); Err carries the reason.
fn eligible(pod: &PodInfo, snap: &Snapshot, diagnosis: &Diagnosis) -> Result<(), &'static str> {
    let policy = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref());
    if policy == Some("Never") {
        return Err("not eligible due to preemptionPolicy=Never.");
    }
    // The pod's own status may lag behind the nomination this scheduler just made.
    let recorded = snap
        .nominated
        .iter()
        .find(|(_, pods)| pods.iter().any(|p| p.key == pod.key))
        .map(|(n, _)| n.as_str());
    let Some(nominated) = nominated_node_name(pod).or(recorded) else {
        return Ok(());
    };
    if diagnosis
        .node_statuses
        .get(nominated)
        .is_some_and(|s| s.code == Code::UnschedulableAndUnresolvable)
    {
        return Ok(());
    }
    if let Some(node) = snap.get(nominated) {
        // Victims of an earlier preemption still terminating: wait for them rather than evict more.
        if node
            .pods
            .iter()
            .any(|p| p.priority < pod.priority && terminating_by_preemption(p))
        {
            return Err("not eligible due to a terminating pod on the nominated node.");
        }
    }
    Ok(())
}

/// Whether `p` is being deleted because the scheduler preempted it.
fn terminating_by_preemption(p: &PodInfo) -> bool {
    p.pod.metadata.deletion_timestamp.is_some()
        && p.pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
            .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some(REASON_PREEMPTION))
}

/// How many candidates the dry run looks for among `n` potential nodes.
fn num_candidates(n: usize) -> usize {
    (n * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(n)
}

/// Runs DefaultPreemption for `pod`, which the filters put nowhere (`diagnosis` says why per node).
pub fn preempt(
    fw: &Framework,
    state: &CycleState,
    snap: &Snapshot,
    pod: &PodInfo,
    diagnosis: &Diagnosis,
    rng: &mut impl Rng,
) -> Outcome {
    if let Err(why) = eligible(pod, snap, diagnosis) {
        return Outcome::NotHelpful(format!("preemption: {why}"));
    }
    // Only nodes whose refusal eviction could cure are worth a dry run.
    let potential: Vec<_> = snap
        .nodes
        .iter()
        .filter(|n| {
            diagnosis
                .node_statuses
                .get(n.name())
                .is_some_and(|s| s.code == Code::Unschedulable)
        })
        .collect();
    let mut statuses: Diagnosis = Diagnosis::default();
    for n in &snap.nodes {
        statuses
            .node_statuses
            .insert(n.name().to_string(), Status::unresolvable(NOT_HELPFUL));
    }
    let pdbs: Vec<_> = snap.objects.pdbs.values().map(|b| b.as_ref()).collect();
    let want = num_candidates(potential.len());
    let offset = if potential.is_empty() {
        0
    } else {
        rng.gen_range(0..potential.len())
    };
    let mut fine: Vec<(String, Victims)> = Vec::new();
    let mut violating: Vec<(String, Victims)> = Vec::new();
    for i in 0..potential.len() {
        let node = potential[(offset + i) % potential.len()];
        match select_on_node(fw, state, snap, pod, node, &pdbs) {
            Ok(v) if !v.pods.is_empty() => {
                let entry = (node.name().to_string(), v);
                if entry.1.pdb_violations == 0 {
                    fine.push(entry);
                } else {
                    violating.push(entry);
                }
                if !fine.is_empty() && fine.len() + violating.len() >= want {
                    break;
                }
            }
            Ok(_) => {
                // Fits without evicting anyone: the filters said otherwise a moment ago, so this
                // node's state moved on; leave it to the next attempt.
                statuses.node_statuses.insert(
                    node.name().to_string(),
                    Status::new(
                        Code::Error,
                        vec![format!(
                            "expected at least one victim pod on node {:?}",
                            node.name()
                        )],
                    ),
                );
            }
            Err(status) => {
                statuses
                    .node_statuses
                    .insert(node.name().to_string(), status);
            }
        }
    }
    fine.append(&mut violating);
    let candidates = fine;
    let Some(chosen) = pick::pick(&candidates) else {
        let err = FitError {
            num_all_nodes: snap.nodes.len(),
            diagnosis: statuses,
        };
        return Outcome::NotHelpful(format!("preemption: {err}"));
    };
    let (node, victims) = candidates[chosen].clone();
    let lower_nominated = snap
        .nominated_on(&node)
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    Outcome::Preempt {
        node,
        victims,
        lower_nominated,
    }
}

/// The `preemption: …` part of the message for `pod`, or None when preemption would find a node
/// (a dry run: nothing is evicted).
pub fn post_filter_message(
    fw: &Framework,
    state: &CycleState,
    snap: &Snapshot,
    pod: &PodInfo,
    diagnosis: &Diagnosis,
) -> Option<String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    match preempt(fw, state, snap, pod, diagnosis, &mut rng) {
        Outcome::NotHelpful(msg) => Some(msg),
        Outcome::Preempt { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::framework::schedule::{Algorithm, Failure};
    use crate::plugins::default_framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;
    use std::sync::Arc;

    fn run(snap: &Snapshot, p: &PodInfo) -> (FitError, Outcome) {
        let fw = default_framework();
        let mut state = CycleState::default();
        match Algorithm::seeded(1).schedule(&fw, &mut state, snap, p) {
            Err(Failure::Fit(e)) => {
                let mut rng = rand::rngs::StdRng::seed_from_u64(7);
                let out = preempt(&fw, &state, snap, p, &e.diagnosis, &mut rng);
                (e, out)
            }
            other => panic!("expected a fit error, got {other:?}"),
        }
    }

    fn message(snap: &Snapshot, p: &PodInfo) -> String {
        match run(snap, p) {
            (mut e, Outcome::NotHelpful(msg)) => {
                e.diagnosis.post_filter_msg = Some(msg);
                e.to_string()
            }
            (_, other) => panic!("expected no preemption, got {other:?}"),
        }
    }

    fn placed(
        name: &str,
        cpu: &str,
        node: &str,
        priority: i32,
        extra: serde_json::Value,
    ) -> PodInfo {
        let mut spec = json!({"spec": {"nodeName": node, "priority": priority}});
        if let (Some(a), serde_json::Value::Object(b)) = (spec.as_object_mut(), extra) {
            for (k, v) in b {
                a.insert(k, v);
            }
        }
        pod(name, Some(cpu), None, spec)
    }

    fn victims_of(out: &Outcome) -> (String, Vec<String>) {
        match out {
            Outcome::Preempt { node, victims, .. } => (
                node.clone(),
                victims.pods.iter().map(|p| p.name().to_string()).collect(),
            ),
            other => panic!("expected preemption, got {other:?}"),
        }
    }

    #[test]
    fn upstream_wording_for_taints_and_cpu() {
        let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}});
        let snap = snapshot(
            vec![
                node("small", "1", "4Gi", json!({})),
                node("t1", "8", "16Gi", taint.clone()),
                node("t2", "8", "16Gi", taint),
            ],
            vec![],
        );
        assert_eq!(
            message(&snap, &pod("p", Some("2"), None, json!({}))),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: db}. \
             preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, \
             2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn lower_priority_pods_that_would_not_free_enough_keep_the_filter_reason() {
        let snap = snapshot(
            vec![node("n", "1", "4Gi", json!({}))],
            vec![placed("low", "500m", "n", 0, json!({}))],
        );
        let big = pod("big", Some("2"), None, json!({"spec": {"priority": 10}}));
        assert_eq!(
            message(&snap, &big),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Insufficient cpu."
        );
        let never = pod(
            "never",
            Some("2"),
            None,
            json!({"spec": {"preemptionPolicy": "Never", "priority": 10}}),
        );
        assert_eq!(
            message(&snap, &never),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
        );
    }

    #[test]
    fn the_node_whose_most_important_victim_matters_least_wins() {
        let snap = snapshot(
            vec![
                node("a", "2", "4Gi", json!({})),
                node("b", "2", "4Gi", json!({})),
            ],
            vec![
                placed("a1", "1", "a", 5, json!({})),
                placed("a2", "1", "a", 1, json!({})),
                placed("b1", "1", "b", 3, json!({})),
                placed("b2", "1", "b", 3, json!({})),
            ],
        );
        // One cpu is needed: on a the victim is a2 (priority 1), on b one of priority 3.
        let p = pod("p", Some("1"), None, json!({"spec": {"priority": 10}}));
        let (e, out) = run(&snap, &p);
        assert_eq!(
            e.to_string(),
            "0/2 nodes are available: 2 Insufficient cpu."
        );
        assert_eq!(victims_of(&out), ("a".into(), vec!["a2".into()]));
        // Two cpus: a loses a1 (5) and a2; b loses two of 3: b's highest victim is lower.
        let p2 = pod("p2", Some("2"), None, json!({"spec": {"priority": 10}}));
        let (node, mut v) = victims_of(&run(&snap, &p2).1);
        v.sort();
        assert_eq!(
            (node.as_str(), v),
            ("b", vec!["b1".to_string(), "b2".to_string()])
        );
    }

    #[test]
    fn only_as_many_victims_as_needed_the_least_important_first() {
        let snap = snapshot(
            vec![node("n", "3", "4Gi", json!({}))],
            vec![
                placed("keep", "1", "n", 4, json!({})),
                placed("go", "1", "n", 2, json!({})),
                placed("also", "1", "n", 3, json!({})),
            ],
        );
        let p = pod("p", Some("1"), None, json!({"spec": {"priority": 10}}));
        assert_eq!(
            victims_of(&run(&snap, &p).1),
            ("n".into(), vec!["go".into()])
        );
        // Pods of equal or higher priority are never victims.
        let p5 = pod("p5", Some("3"), None, json!({"spec": {"priority": 4}}));
        assert!(matches!(run(&snap, &p5).1, Outcome::NotHelpful(_)));
    }

    #[test]
    fn budgets_are_spared_when_another_node_will_do() {
        let mut cache = Cache::default();
        for n in ["a", "b"] {
            if let Some(node) = node(n, "1", "4Gi", json!({})).node {
                cache.set_node(node);
            }
        }
        let labelled = json!({"metadata": {"labels": {"app": "db"}}});
        cache.add_bound_pod(placed("db", "1", "a", 0, labelled));
        cache.add_bound_pod(placed("web", "1", "b", 1, json!({})));
        let pdb = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
        }))
        .unwrap();
        cache
            .objects_mut()
            .pdbs
            .insert("default/db".into(), Arc::new(pdb));
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        // Without the budget node a (victim of priority 0) would win over b (priority 1).
        let p = pod("p", Some("1"), None, json!({"spec": {"priority": 10}}));
        assert_eq!(
            victims_of(&run(&snap, &p).1),
            ("b".into(), vec!["web".into()])
        );
    }

    #[test]
    fn a_preemptor_waits_for_its_victims_to_go() {
        let mut cache = Cache::default();
        if let Some(n) = node("n", "1", "4Gi", json!({})).node {
            cache.set_node(n);
        }
        cache.add_bound_pod(placed(
            "victim",
            "1",
            "n",
            0,
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                   "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                              "reason": "PreemptionByScheduler"}]}}),
        ));
        let p = pod(
            "p",
            Some("1"),
            None,
            json!({"spec": {"priority": 10}, "status": {"nominatedNodeName": "n"}}),
        );
        cache.nominate(p.clone(), "n");
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        assert_eq!(
            message(&snap, &p),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to a terminating pod on the nominated node."
        );
        // Another pod of lower priority sees the node as taken by the nominated one.
        cache.remove_pod("default/victim");
        cache.update_snapshot(&mut snap);
        let other = pod("other", Some("1"), None, json!({"spec": {"priority": 5}}));
        let fw = default_framework();
        let r = Algorithm::seeded(1).schedule(&fw, &mut CycleState::default(), &snap, &other);
        assert!(matches!(r, Err(Failure::Fit(_))), "{r:?}");
        let d = Algorithm::seeded(1)
            .schedule(&fw, &mut CycleState::default(), &snap, &p)
            .unwrap();
        assert_eq!(d.node, "n");
    }
}
