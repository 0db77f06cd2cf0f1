//! NodeAffinity: Filter requires every `spec.nodeSelector` label and, when given, one of the required
//! node selector terms (terms are ORed, the expressions and fields of a term ANDed; `matchFields` knows
//! `metadata.name`). Score sums the weights of the preferred terms a node matches, normalised (weight 2).

use k8s_openapi::api::core::v1::Node;
use keel_client_kit::placement::{self, term_matches};

use crate::cache::NodeInfo;
use crate::framework::{default_normalize, CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

/// Upstream's reason.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// Whether `node` satisfies the pod's nodeSelector and required node affinity.
pub fn required_matches(pod: &PodInfo, node: &Node) -> bool {
    pod.pod
        .spec
        .as_ref()
        .is_none_or(|spec| placement::required_matches(spec, node))
}

/// The NodeAffinity filter and score.
pub struct NodeAffinity;

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }

    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match node.node.as_ref() {
            Some(n) if required_matches(pod, n) => Status::success(),
            _ => Status::unresolvable(ERR_REASON_POD),
        }
    }

    fn scores(&self) -> bool {
        true
    }

    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (Some(spec), Some(n)) = (pod.pod.spec.as_ref(), node.node.as_ref()) else {
            return 0;
        };
        let preferred = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .unwrap_or(&[]);
        preferred
            .iter()
            .filter(|p| p.weight != 0 && term_matches(&p.preference, n))
            .map(|p| i64::from(p.weight))
            .sum()
    }

    fn normalize(&self, _state: &CycleState, scores: &mut [i64]) {
        default_normalize(scores, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::schedule::Algorithm;
    use crate::framework::Framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;

    fn labelled(name: &str, labels: serde_json::Value) -> NodeInfo {
        node(name, "4", "8Gi", json!({"metadata": {"labels": labels}}))
    }

    fn required(terms: serde_json::Value) -> serde_json::Value {
        json!({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}})
    }

    #[test]
    fn node_selector_labels_must_all_match() {
        let p = pod(
            "p",
            None,
            None,
            json!({"spec": {"nodeSelector": {"disk": "ssd", "zone": "a"}}}),
        );
        let both = labelled("both", json!({"disk": "ssd", "zone": "a"}));
        let one = labelled("one", json!({"disk": "ssd"}));
        assert!(NodeAffinity
            .filter(&CycleState::default(), &p, &both)
            .is_success());
        assert_eq!(
            NodeAffinity.filter(&CycleState::default(), &p, &one),
            Status::unresolvable(ERR_REASON_POD)
        );
    }

    #[test]
    fn required_terms_or_expressions_and() {
        let p = pod(
            "p",
            None,
            None,
            required(json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                       {"key": "gpu", "operator": "DoesNotExist"}]},
                {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["16"]}]},
            ])),
        );
        assert!(NodeAffinity
            .filter(
                &CycleState::default(),
                &p,
                &labelled("a", json!({"zone": "a"}))
            )
            .is_success());
        assert!(!NodeAffinity
            .filter(
                &CycleState::default(),
                &p,
                &labelled("g", json!({"zone": "a", "gpu": "1"}))
            )
            .is_success());
        assert!(NodeAffinity
            .filter(
                &CycleState::default(),
                &p,
                &labelled("big", json!({"cores": "32"}))
            )
            .is_success());
        assert!(!NodeAffinity
            .filter(
                &CycleState::default(),
                &p,
                &labelled("small", json!({"cores": "8"}))
            )
            .is_success());
        assert!(!NodeAffinity
            .filter(
                &CycleState::default(),
                &p,
                &labelled("c", json!({"zone": "c"}))
            )
            .is_success());
    }

    #[test]
    fn match_fields_pick_a_node_by_name() {
        let p = pod(
            "p",
            None,
            None,
            required(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]),
            ),
        );
        let snap = snapshot(
            vec![
                labelled("n1", json!({})),
                labelled("n2", json!({})),
                labelled("n3", json!({})),
            ],
            vec![],
        );
        let fw = Framework::new(vec![(Box::new(NodeAffinity), 2)]);
        let d = Algorithm::seeded(3)
            .schedule(&fw, &mut CycleState::default(), &snap, &p)
            .unwrap();
        assert_eq!(d.node, "n2");
        let empty_term = pod("q", None, None, required(json!([{}])));
        assert!(!NodeAffinity
            .filter(
                &CycleState::default(),
                &empty_term,
                &labelled("n1", json!({}))
            )
            .is_success());
    }

    #[test]
    fn preferred_terms_weigh_in() {
        let p = pod(
            "p",
            None,
            None,
            json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
                {"weight": 50, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
            ]}}}}),
        );
        let snap = snapshot(
            vec![
                labelled("zone-a", json!({"zone": "a"})),
                labelled("ssd", json!({"disk": "ssd"})),
                labelled("none", json!({})),
            ],
            vec![],
        );
        let fw = Framework::new(vec![(Box::new(NodeAffinity), 2)]);
        let mut alg = Algorithm::seeded(7);
        for _ in 0..5 {
            assert_eq!(
                alg.schedule(&fw, &mut CycleState::default(), &snap, &p)
                    .unwrap()
                    .node,
                "ssd"
            );
        }
    }
}
