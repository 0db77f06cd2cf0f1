//! NodeAffinity: Filter requires every `spec.nodeSelector` label and, when given, one of the required
//! node selector terms (terms are ORed, the expressions and fields of a term ANDed; `matchFields` knows
//! `metadata.name`). Score sums the weights of the preferred terms a node matches, normalised (weight 2).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm};

use crate::cache::NodeInfo;
use crate::framework::{default_normalize, CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

/// Upstream's reason.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) if r.operator == "Gt" => v > b,
                (Ok(v), Ok(b)) => v < b,
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether `node` matches one term: every expression on its labels, every field on its fields. A term
/// with neither matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref();
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = if r.key == "metadata.name" { name } else { None };
            r.key == "metadata.name" && requirement_matches(r, value)
        })
}

/// Whether `node` satisfies the pod's nodeSelector and required node affinity.
pub fn required_matches(pod: &PodInfo, node: &Node) -> bool {
    let Some(spec) = pod.pod.spec.as_ref() else {
        return true;
    };
    if let Some(selector) = spec.node_selector.as_ref() {
        let labels = node.metadata.labels.as_ref();
        if !selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node)),
        None => true,
    }
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
