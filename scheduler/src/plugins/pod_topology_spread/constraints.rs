//! The constraints a pod spreads by: its own `topologySpreadConstraints` of one kind, or, for a pod
//! without any, the system defaults with a selector built from the Services and the controller that
//! select it; and which nodes a constraint counts.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use keel_client_kit::labels;

use crate::cache::{ClusterObjects, NodeInfo};
use crate::plugins::node_affinity::required_matches;
use crate::pod_info::PodInfo;
use keel_client_kit::placement::tolerates;

/// `whenUnsatisfiable` of the constraints Filter enforces.
pub(super) const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
/// `whenUnsatisfiable` of the constraints Score prefers.
pub(super) const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
/// The well-known hostname label (one domain per node).
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The well-known zone label.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// The system default constraints: topology key and maxSkew, both ScheduleAnyway.
const SYSTEM_DEFAULTS: [(&str, i64); 2] = [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)];

/// What a constraint's selector selects.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Selector {
    /// No `labelSelector`: selects no pod (upstream's labels.Nothing).
    Nothing,
    /// A label selector.
    Labels(LabelSelector),
}

impl Selector {
    /// Whether a pod with `labels` matches.
    pub(super) fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Labels(s) => labels::matches(s, labels),
        }
    }

    /// Whether a pod with `labels` is counted: a selector without requirements selects every pod but
    /// counts none (upstream's countPodsMatchSelector returns 0 for an empty selector).
    pub(super) fn counts(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Labels(s) => !is_empty(s) && labels::matches(s, labels),
        }
    }

    fn fingerprint(&self, out: &mut String) {
        match self {
            Selector::Nothing => out.push('-'),
            Selector::Labels(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
        }
    }
}

fn is_empty(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

/// One constraint as the plugin uses it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Constraint {
    /// `maxSkew`.
    pub(super) max_skew: i64,
    /// `topologyKey`.
    pub(super) topology_key: String,
    /// `labelSelector` with the `matchLabelKeys` values of the incoming pod added.
    pub(super) selector: Selector,
    /// `minDomains` (1 when unset).
    pub(super) min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node affinity count.
    pub(super) honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (not the default): only nodes whose taints the pod tolerates count.
    pub(super) honor_node_taints: bool,
}

fn in_requirement(key: &str, value: &str) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: "In".into(),
        values: Some(vec![value.to_string()]),
    }
}

/// The selector's requirements, matchLabels as `In` (so that merging never overwrites a value: two
/// requirements on one key are both kept, as upstream's selectors keep them).
fn requirements(s: &LabelSelector) -> Vec<LabelSelectorRequirement> {
    let mut out: Vec<LabelSelectorRequirement> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| in_requirement(k, v))
        .collect();
    out.extend(s.match_expressions.iter().flatten().cloned());
    out
}

/// Whether the pod declares any topologySpreadConstraints (then the defaults never apply).
pub(super) fn has_own_constraints(pod: &PodInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// The pod's own constraints whose `whenUnsatisfiable` is `action`.
pub(super) fn own_constraints(pod: &PodInfo, action: &str) -> Vec<Constraint> {
    let pod_labels = pod.pod.metadata.labels.as_ref();
    let declared = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or(&[]);
    declared
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| {
            let selector = match &c.label_selector {
                None => Selector::Nothing,
                Some(s) => {
                    let mut s = s.clone();
                    let extra: Vec<LabelSelectorRequirement> = c
                        .match_label_keys
                        .iter()
                        .flatten()
                        .filter_map(|k| {
                            pod_labels
                                .and_then(|l| l.get(k))
                                .map(|v| in_requirement(k, v))
                        })
                        .collect();
                    if !extra.is_empty() {
                        s.match_expressions
                            .get_or_insert_with(Vec::new)
                            .extend(extra);
                    }
                    Selector::Labels(s)
                }
            };
            Constraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                selector,
                min_domains: c.min_domains.map_or(1, i64::from),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

/// The system default constraints for a pod without its own, or none when no Service, RC, RS or STS
/// selects it.
pub(super) fn default_constraints(pod: &PodInfo, objects: &ClusterObjects) -> Vec<Constraint> {
    let Some(selector) = default_selector(pod, objects) else {
        return Vec::new();
    };
    SYSTEM_DEFAULTS
        .iter()
        .map(|(key, max_skew)| Constraint {
            max_skew: *max_skew,
            topology_key: (*key).to_string(),
            selector: Selector::Labels(selector.clone()),
            min_domains: 1,
            honor_node_affinity: true,
            honor_node_taints: false,
        })
        .collect()
}

/// Upstream's DefaultSelector: the selectors of the pod's namespace's Services that select it, ANDed
/// with the selector of its controller when that is a ReplicationController, ReplicaSet or
/// StatefulSet the scheduler knows; None when that leaves no requirement.
pub(super) fn default_selector(pod: &PodInfo, objects: &ClusterObjects) -> Option<LabelSelector> {
    let ns = pod.namespace();
    let pod_labels = pod.pod.metadata.labels.as_ref();
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    let prefix = format!("{ns}/");
    let services = objects
        .services
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix));
    for (_, svc) in services {
        // A Service without a selector selects nothing (not everything).
        let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        if sel
            .iter()
            .all(|(k, v)| pod_labels.and_then(|l| l.get(k)) == Some(v))
        {
            set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut exprs = Vec::new();
    let owner = pod
        .pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(owner) = owner {
        let key = format!("{ns}/{}", owner.name);
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                let sel = objects
                    .replication_controllers
                    .get(&key)
                    .and_then(|rc| rc.spec.as_ref())
                    .and_then(|s| s.selector.as_ref());
                if let Some(sel) = sel {
                    set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            ("apps/v1", "ReplicaSet") => {
                if let Some(spec) = objects.replica_sets.get(&key).and_then(|r| r.spec.as_ref()) {
                    exprs.extend(requirements(&spec.selector));
                }
            }
            ("apps/v1", "StatefulSet") => {
                if let Some(spec) = objects
                    .stateful_sets
                    .get(&key)
                    .and_then(|s| s.spec.as_ref())
                {
                    exprs.extend(requirements(&spec.selector));
                }
            }
            _ => {}
        }
    }
    if set.is_empty() && exprs.is_empty() {
        return None;
    }
    Some(LabelSelector {
        match_labels: Some(set),
        match_expressions: Some(exprs),
    })
}

/// Whether the node has every constraint's topology key.
pub(super) fn has_all_keys(labels: &BTreeMap<String, String>, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// Whether `node` counts for constraint `c` of `pod` under its node inclusion policies.
pub(super) fn included(c: &Constraint, pod: &PodInfo, node: &NodeInfo) -> bool {
    let Some(n) = node.node.as_ref() else {
        return false;
    };
    if c.honor_node_affinity && !required_matches(pod, n) {
        return false;
    }
    if c.honor_node_taints {
        let tolerations = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[]);
        let untolerated = node.taints().iter().any(|taint| {
            (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                && !tolerations.iter().any(|t| tolerates(t, taint))
        });
        if untolerated {
            return false;
        }
    }
    true
}

/// Everything a node's contribution to the counts depends on besides the node itself: the namespace,
/// whether nodes must carry every key, the constraints' keys, selectors and policies, and the pod's
/// node affinity and tolerations where a policy consults them.
pub(super) fn shape_key(pod: &PodInfo, constraints: &[Constraint], require_all: bool) -> String {
    let mut key = String::new();
    let _ = write!(key, "{}|{require_all}", pod.namespace());
    for c in constraints {
        let _ = write!(
            key,
            "|{};{};{};",
            c.topology_key, c.honor_node_affinity, c.honor_node_taints
        );
        c.selector.fingerprint(&mut key);
    }
    let spec = pod.pod.spec.as_ref();
    if constraints.iter().any(|c| c.honor_node_affinity) {
        let selector = spec.and_then(|s| s.node_selector.as_ref());
        let required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        let _ = write!(
            key,
            "|{}|{}",
            serde_json::to_string(&selector).unwrap_or_default(),
            serde_json::to_string(&required).unwrap_or_default()
        );
    }
    if constraints.iter().any(|c| c.honor_node_taints) {
        let tolerations = spec.and_then(|s| s.tolerations.as_ref());
        let _ = write!(
            key,
            "|{}",
            serde_json::to_string(&tolerations).unwrap_or_default()
        );
    }
    key
}
