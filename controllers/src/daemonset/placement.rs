//! Which nodes a DaemonSet's pod belongs on (node selector, required node affinity, taints against the
//! tolerations, the automatic ones included) and the pod made for one node: pinned to it by a required
//! node affinity on `metadata.name`, as upstream leaves the binding to the scheduler.

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Toleration,
};
use keel_client_kit::placement::{required_matches, tolerates};

/// The tolerations every daemon pod gets: `(key, effect)`, all with operator Exists and no seconds.
const AUTOMATIC: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];
/// Only host-network pods tolerate a node without a pod network.
const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

fn exists(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    }
}

/// The spec's tolerations with the automatic ones added (each once).
pub fn with_tolerations(spec: &PodSpec) -> Vec<Toleration> {
    let mut out = spec.tolerations.clone().unwrap_or_default();
    let mut add = |key: &str, effect: &str| {
        let t = exists(key, effect);
        if !out.iter().any(|o| o.key == t.key && o.effect == t.effect) {
            out.push(t);
        }
    };
    for (k, e) in AUTOMATIC {
        add(k, e);
    }
    if spec.host_network == Some(true) {
        add(NETWORK_UNAVAILABLE, "NoSchedule");
    }
    out
}

/// Whether the daemon pod of `spec` belongs on `node`.
pub fn should_run(spec: &PodSpec, node: &Node) -> bool {
    if !required_matches(spec, node) {
        return false;
    }
    let tolerations = with_tolerations(spec);
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

/// The required node affinity that pins a pod to `node` (replacing the template's required terms).
pub fn pinned_affinity(affinity: Option<Affinity>, node: &str) -> Affinity {
    let mut a = affinity.unwrap_or_default();
    let mut na: NodeAffinity = a.node_affinity.take().unwrap_or_default();
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.into()]),
            }]),
            match_expressions: None,
        }],
    });
    a.node_affinity = Some(na);
    a
}

/// The node a daemon pod is for: where it is bound, else where its affinity pins it.
pub fn node_of(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.as_ref()?.iter().find_map(|r| {
            (r.key == "metadata.name" && r.operator == "In")
                .then(|| r.values.as_ref().and_then(|v| v.first().cloned()))
                .flatten()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::api::core::v1::Taint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn node(labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    #[test]
    fn selectors_and_taints_decide() {
        let mut spec = PodSpec::default();
        assert!(should_run(&spec, &node(&[], vec![])));
        spec.node_selector = Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())]));
        assert!(!should_run(&spec, &node(&[], vec![])));
        assert!(should_run(&spec, &node(&[("disk", "ssd")], vec![])));
        let n = node(&[("disk", "ssd")], vec![taint("dedicated", "NoSchedule")]);
        assert!(!should_run(&spec, &n));
        // PreferNoSchedule does not keep a daemon pod away; the automatic tolerations cover cordons.
        assert!(should_run(
            &spec,
            &node(&[("disk", "ssd")], vec![taint("x", "PreferNoSchedule")])
        ));
        assert!(should_run(
            &spec,
            &node(
                &[("disk", "ssd")],
                vec![taint("node.kubernetes.io/unschedulable", "NoSchedule")]
            )
        ));
        spec.tolerations = Some(vec![exists("dedicated", "NoSchedule")]);
        assert!(should_run(&spec, &n));
        assert!(!should_run(
            &spec,
            &node(
                &[("disk", "ssd")],
                vec![taint(NETWORK_UNAVAILABLE, "NoSchedule")]
            )
        ));
        spec.host_network = Some(true);
        assert!(should_run(
            &spec,
            &node(
                &[("disk", "ssd")],
                vec![taint(NETWORK_UNAVAILABLE, "NoSchedule")]
            )
        ));
    }

    #[test]
    fn pinned_pods_name_their_node() {
        let pod = Pod {
            spec: Some(PodSpec {
                affinity: Some(pinned_affinity(None, "n7")),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(node_of(&pod).as_deref(), Some("n7"));
    }
}
