//! The taints the node-lifecycle controller owns and the toleration rules the taint-eviction controller
//! applies (upstream's `v1helper.TolerationsTolerateTaint`).

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint, Toleration};
use keel_client_kit::placement::tolerates;

/// The node is not ready (Ready=False).
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The node controller cannot hear from the node (Ready=Unknown).
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The node is cordoned.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// The administrator declared the node out of service (pods may be force-deleted).
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// Effect: no new pods.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// Effect: running pods are evicted.
pub const NO_EXECUTE: &str = "NoExecute";

/// Condition → the NoSchedule taint it brings (upstream's nodeConditionToTaintKeyStatusMap).
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
];

/// The node's condition of `type_`.
pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The status of the node's Ready condition (`Unknown` when it has none).
pub fn ready_status(node: &Node) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| c.status.as_str())
}

/// The node's taints.
pub fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

/// Whether the node has taint `key` with `effect`.
pub fn has(node: &Node, key: &str, effect: &str) -> bool {
    taints(node)
        .iter()
        .any(|t| t.key == key && t.effect == effect)
}

/// A taint without a value.
pub fn taint(key: &str, effect: &str, at: Option<jiff::Timestamp>) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        value: None,
        time_added: at.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
    }
}

/// The NoSchedule taints the node's conditions and `spec.unschedulable` call for, applied at once
/// (TaintNodesByCondition): the node's taints with the controller's NoSchedule ones replaced.
pub fn with_condition_taints(node: &Node, mut current: Vec<Taint>) -> Vec<Taint> {
    let owned = |t: &Taint| {
        t.effect == NO_SCHEDULE
            && (t.key == UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == t.key))
    };
    let mut want: Vec<Taint> = CONDITION_TAINTS
        .iter()
        .filter(|(ty, status, _)| {
            match condition(node, ty) {
                Some(c) => c.status == *status,
                // A node without a Ready condition has never reported: unreachable (upstream's default).
                None => false,
            }
        })
        .map(|(_, _, key)| taint(key, NO_SCHEDULE, None))
        .collect();
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        want.push(taint(UNSCHEDULABLE, NO_SCHEDULE, None));
    }
    // Keep existing entries that are still wanted as they are; drop the rest of ours; add the new.
    current.retain(|t| !owned(t) || want.iter().any(|w| w.key == t.key));
    for w in want {
        if !current
            .iter()
            .any(|t| t.key == w.key && t.effect == w.effect)
        {
            current.push(w);
        }
    }
    current
}

/// For a pod's tolerations and a node's NoExecute taints: none when some taint is not tolerated (evict
/// now), else the shortest tolerationSeconds of the tolerations used (`Some(None)`: tolerated forever).
pub fn toleration_time(tolerations: &[Toleration], no_execute: &[&Taint]) -> Option<Option<i64>> {
    let mut min: Option<i64> = None;
    for t in no_execute {
        let used: Vec<&Toleration> = tolerations.iter().filter(|tol| tolerates(tol, t)).collect();
        if used.is_empty() {
            return None;
        }
        for tol in used {
            if let Some(s) = tol.toleration_seconds {
                min = Some(min.map_or(s, |m| m.min(s)));
            }
        }
    }
    Some(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, op: &str, effect: &str, secs: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(op.into()),
            effect: Some(effect.into()),
            toleration_seconds: secs,
            value: None,
        }
    }

    #[test]
    fn tolerations_match_taints_as_upstream() {
        let t = taint(UNREACHABLE, NO_EXECUTE, None);
        assert!(tolerates(
            &tol(UNREACHABLE, "Exists", "NoExecute", None),
            &t
        ));
        assert!(tolerates(&tol(UNREACHABLE, "Exists", "", None), &t));
        assert!(!tolerates(
            &tol(UNREACHABLE, "Exists", "NoSchedule", None),
            &t
        ));
        assert!(!tolerates(&tol(NOT_READY, "Exists", "NoExecute", None), &t));
        assert!(tolerates(&tol("", "Exists", "", None), &t));
        // Upstream's rule: an empty key with Equal compares values only, and both are empty here.
        assert!(tolerates(&tol("", "Equal", "", None), &t));
    }

    #[test]
    fn the_shortest_toleration_wins_and_an_intolerant_pod_goes_now() {
        let a = taint(UNREACHABLE, NO_EXECUTE, None);
        let b = taint("custom", NO_EXECUTE, None);
        let tols = vec![
            tol(UNREACHABLE, "Exists", "NoExecute", Some(300)),
            tol("", "Exists", "", Some(5)),
        ];
        assert_eq!(toleration_time(&tols, &[&a, &b]), Some(Some(5)));
        assert_eq!(toleration_time(&tols[..1], &[&a, &b]), None);
        assert_eq!(
            toleration_time(&[tol(UNREACHABLE, "Exists", "NoExecute", None)], &[&a]),
            Some(None)
        );
        assert_eq!(toleration_time(&[], &[&a]), None);
    }
}
