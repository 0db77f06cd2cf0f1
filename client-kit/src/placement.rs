//! Where a pod may run, by upstream's rules: taints against tolerations (`ToleratesTaint`) and a pod's
//! node selector and required node affinity against a node's labels and fields. The scheduler, the
//! DaemonSet controller and taint-based eviction all decide with these.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

/// Whether toleration `t` tolerates `taint`: an empty effect matches every effect, an empty key every
/// key; `Equal` (or no operator) compares values, `Exists` does not, any other operator tolerates nothing.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// Whether one node selector requirement holds for `value` (the label's or field's, None when absent).
/// `Gt` and `Lt` take exactly one integer bound and need an integer value.
pub fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
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

/// Whether `node` matches one term: every expression on its labels, every field on its fields (only
/// `metadata.name` is a field). A term with neither matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.as_ref();
    let name = node.metadata.name.as_deref();
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.and_then(|l| l.get(&r.key)).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, name))
}

/// Whether every `nodeSelector` label is on the node with that value.
pub fn selector_matches(selector: &BTreeMap<String, String>, node: &Node) -> bool {
    let labels = node.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// Whether `node` satisfies the pod's `nodeSelector` and, when given, one of its required node
/// affinity terms.
pub fn required_matches(spec: &PodSpec, node: &Node) -> bool {
    if let Some(selector) = spec.node_selector.as_ref() {
        if !selector_matches(selector, node) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(op.into()),
            value: Some(value.into()),
            effect: Some(effect.into()),
            toleration_seconds: None,
        }
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn tolerations_follow_tolerates_taint() {
        let t = taint("dedicated", "db", "NoSchedule");
        assert!(tolerates(
            &tol("dedicated", "Equal", "db", "NoSchedule"),
            &t
        ));
        assert!(tolerates(&tol("dedicated", "", "db", ""), &t));
        assert!(!tolerates(
            &tol("dedicated", "Equal", "web", "NoSchedule"),
            &t
        ));
        assert!(!tolerates(
            &tol("dedicated", "Equal", "db", "NoExecute"),
            &t
        ));
        assert!(tolerates(&tol("dedicated", "Exists", "", ""), &t));
        assert!(tolerates(&tol("", "Exists", "", ""), &t));
        assert!(!tolerates(&tol("dedicated", "Unknown", "db", ""), &t));
        // Upstream's edge: an empty key with Equal matches any key whose value is the same.
        assert!(tolerates(&tol("", "Equal", "db", ""), &t));
        assert!(!tolerates(&tol("", "Equal", "", ""), &t));
        assert!(tolerates(
            &tol("", "Equal", "", ""),
            &taint("k", "", "NoExecute")
        ));
    }

    fn req(op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: "cores".into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn gt_and_lt_need_one_integer_bound() {
        assert!(requirement_matches(&req("Gt", &["16"]), Some("32")));
        assert!(!requirement_matches(&req("Gt", &["16"]), Some("16")));
        assert!(requirement_matches(&req("Lt", &["16"]), Some("8")));
        assert!(!requirement_matches(&req("Gt", &["16", "1"]), Some("32")));
        assert!(!requirement_matches(&req("Gt", &["x"]), Some("32")));
        assert!(!requirement_matches(&req("Gt", &["16"]), Some("many")));
        assert!(!requirement_matches(&req("Gt", &["16"]), None));
        assert!(requirement_matches(&req("NotIn", &["a"]), None));
    }

    #[test]
    fn fields_know_only_the_name() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some([("zone".to_string(), "a".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let field = |key: &str| NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: key.into(),
                operator: "In".into(),
                values: Some(vec!["n1".into()]),
            }]),
            match_expressions: None,
        };
        assert!(term_matches(&field("metadata.name"), &node));
        assert!(!term_matches(&field("metadata.uid"), &node));
        assert!(!term_matches(&NodeSelectorTerm::default(), &node));
        assert!(selector_matches(
            &[("zone".to_string(), "a".to_string())].into(),
            &node
        ));
        assert!(!selector_matches(
            &[("zone".to_string(), "b".to_string())].into(),
            &node
        ));
    }
}
