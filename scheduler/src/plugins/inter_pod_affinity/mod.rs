//! InterPodAffinity (weight 2): `podAffinity` and `podAntiAffinity` between the pod and the pods
//! already placed, counted per topology pair (a node label key and its value).
//!
//! - [`filtering`]: PreFilter counts, per topology pair, the existing pods whose required anti-affinity
//!   matches the pod (the symmetric check) and the existing pods matching the pod's required affinity
//!   and anti-affinity terms; Filter checks a node's pairs against them; AddPod/RemovePod adjust the
//!   counts for preemption's dry runs.
//! - [`scoring`]: PreScore sums the preferred terms of both sides (and existing pods' required
//!   affinity at hardPodAffinityWeight 1) per topology pair; Score reads a node's pairs; the scores are
//!   normalised min-max to 0..=100.
//!
//! A term selects pods by `labelSelector` (nil selects none) with the owner's `matchLabelKeys` and
//! `mismatchLabelKeys` merged in, in `namespaces` or the namespaces `namespaceSelector` selects (neither
//! given: the owner's own namespace).

pub mod filtering;
pub mod scoring;

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use keel_client_kit::labels;

use crate::cache::{ClusterObjects, NodeInfo, Snapshot};
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

/// Upstream's plugin name.
pub const NAME: &str = "InterPodAffinity";

/// The weight an existing pod's required affinity term gives a pod it matches (upstream's default
/// hardPodAffinityWeight).
pub const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// No labels (an unknown namespace has none).
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Which namespaces a term's `namespaceSelector` selects.
#[derive(Debug, Clone, PartialEq)]
pub enum NamespaceSelector {
    /// No selector (nil): none.
    Nothing,
    /// An empty selector: every namespace.
    Everything,
    /// The namespaces whose labels match.
    Matching(LabelSelector),
}

impl NamespaceSelector {
    fn of(selector: Option<&LabelSelector>) -> NamespaceSelector {
        match selector {
            None => NamespaceSelector::Nothing,
            Some(s) if is_empty_selector(s) => NamespaceSelector::Everything,
            Some(s) => NamespaceSelector::Matching(s.clone()),
        }
    }

    fn matches(&self, ns_labels: &BTreeMap<String, String>) -> bool {
        match self {
            NamespaceSelector::Nothing => false,
            NamespaceSelector::Everything => true,
            NamespaceSelector::Matching(s) => labels::matches(s, Some(ns_labels)),
        }
    }
}

fn is_empty_selector(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

/// One pod affinity term, processed for matching.
#[derive(Debug, Clone, PartialEq)]
pub struct AffinityTerm {
    /// The namespaces named outright.
    pub namespaces: HashSet<String>,
    /// The namespaces selected by labels.
    pub namespace_selector: NamespaceSelector,
    /// The pods selected (None: a nil labelSelector, which selects none).
    pub selector: Option<LabelSelector>,
    /// The node label whose values are the topology domains.
    pub topology_key: String,
}

impl AffinityTerm {
    /// The term `t` of pod `owner`.
    pub fn new(owner: &Pod, t: &PodAffinityTerm) -> AffinityTerm {
        let names = t.namespaces.as_deref().unwrap_or(&[]);
        let namespaces = if names.is_empty() && t.namespace_selector.is_none() {
            HashSet::from([owner.metadata.namespace.clone().unwrap_or_default()])
        } else {
            names.iter().cloned().collect()
        };
        // What the API server's MatchLabelKeysInPodAffinity does at creation; keel's API server does
        // not, so the scheduler merges (merging twice adds equivalent requirements only).
        let selector = t.label_selector.clone().map(|mut s| {
            let own = owner.metadata.labels.as_ref();
            let mut merge = |keys: Option<&Vec<String>>, operator: &str| {
                for key in keys.into_iter().flatten() {
                    if let Some(value) = own.and_then(|l| l.get(key)) {
                        s.match_expressions.get_or_insert_with(Vec::new).push(
                            LabelSelectorRequirement {
                                key: key.clone(),
                                operator: operator.into(),
                                values: Some(vec![value.clone()]),
                            },
                        );
                    }
                }
            };
            merge(t.match_label_keys.as_ref(), "In");
            merge(t.mismatch_label_keys.as_ref(), "NotIn");
            s
        });
        AffinityTerm {
            namespaces,
            namespace_selector: NamespaceSelector::of(t.namespace_selector.as_ref()),
            selector,
            topology_key: t.topology_key.clone(),
        }
    }

    /// Whether the term selects `pod`, whose namespace has `ns_labels`.
    pub fn matches(&self, pod: &Pod, ns_labels: &BTreeMap<String, String>) -> bool {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        (self.namespaces.contains(ns) || self.namespace_selector.matches(ns_labels))
            && self
                .selector
                .as_ref()
                .is_some_and(|s| labels::matches(s, pod.metadata.labels.as_ref()))
    }

    /// Folds the namespaces a label selector picks into `namespaces` (upstream's
    /// mergeAffinityTermNamespacesIfNotEmpty), so the incoming pod's terms match existing pods without
    /// looking their namespaces up. An empty selector stays: it selects every namespace, known or not.
    pub fn resolve_namespaces(&mut self, objects: &ClusterObjects) {
        if let NamespaceSelector::Matching(s) = &self.namespace_selector {
            for (name, ns) in &objects.namespaces {
                if labels::matches(s, ns.metadata.labels.as_ref()) {
                    self.namespaces.insert(name.clone());
                }
            }
            self.namespace_selector = NamespaceSelector::Nothing;
        }
    }
}

/// A preferred term with its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedTerm {
    /// The term.
    pub term: AffinityTerm,
    /// Its weight (1..=100).
    pub weight: i64,
}

/// A pod's four kinds of pod (anti-)affinity terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodAffinityTerms {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_affinity: Vec<AffinityTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_affinity: Vec<WeightedTerm>,
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_anti_affinity: Vec<WeightedTerm>,
}

impl PodAffinityTerms {
    /// The terms of `pod`, None when it declares neither pod affinity nor anti-affinity.
    pub fn of(pod: &Pod) -> Option<PodAffinityTerms> {
        let affinity = pod.spec.as_ref()?.affinity.as_ref()?;
        if affinity.pod_affinity.is_none() && affinity.pod_anti_affinity.is_none() {
            return None;
        }
        let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| AffinityTerm::new(pod, t))
                .collect()
        };
        let preferred = |terms: Option<&Vec<WeightedPodAffinityTerm>>| -> Vec<WeightedTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| WeightedTerm {
                    term: AffinityTerm::new(pod, &t.pod_affinity_term),
                    weight: i64::from(t.weight),
                })
                .collect()
        };
        let pa = affinity.pod_affinity.as_ref();
        let anti = affinity.pod_anti_affinity.as_ref();
        Some(PodAffinityTerms {
            required_affinity: required(pa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            required_anti_affinity: required(anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: preferred(pa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: preferred(anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
        })
    }
}

/// Whether `pod` matches every term of a non-empty list (an affinity requirement is met by one pod
/// matching all of them). The terms' namespace selectors must have been resolved.
pub fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &NO_LABELS))
}

/// The incoming pod's terms with their namespace selectors resolved against `snap`.
fn resolved(terms: &[AffinityTerm], snap: &Snapshot) -> Vec<AffinityTerm> {
    terms
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.resolve_namespaces(&snap.objects);
            t
        })
        .collect()
}

/// Counts per topology pair: key, then value. Entries that come back to zero are dropped, so
/// [`TopologyCounts::is_empty`] means "no pair counts".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    /// Adds `n` to the pair (`key`, `value`).
    pub fn add(&mut self, key: &str, value: &str, n: i64) {
        if n == 0 {
            return;
        }
        let values = match self.0.get_mut(key) {
            Some(v) => v,
            None => self.0.entry(key.to_string()).or_default(),
        };
        let now = match values.get_mut(value) {
            Some(c) => {
                *c += n;
                *c
            }
            None => {
                values.insert(value.to_string(), n);
                n
            }
        };
        if now == 0 {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// Adds `n` to the pair of `key` and the node's value for it, if the node has the label.
    pub fn add_on_node(&mut self, node_labels: &BTreeMap<String, String>, key: &str, n: i64) {
        if let Some(value) = node_labels.get(key) {
            self.add(key, value, n);
        }
    }

    /// The count of (`key`, `value`).
    pub fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|v| v.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// Whether no pair has a count.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The sum of the counts of the node's pairs.
    pub fn sum_on_node(&self, node_labels: &BTreeMap<String, String>) -> i64 {
        self.0
            .iter()
            .filter_map(|(k, values)| node_labels.get(k).and_then(|v| values.get(v)))
            .sum()
    }

    /// Whether any of the node's pairs has a positive count.
    pub fn any_positive_on_node(&self, node_labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().any(|(k, values)| {
            node_labels
                .get(k)
                .and_then(|v| values.get(v))
                .is_some_and(|c| *c > 0)
        })
    }
}

/// The InterPodAffinity plugin.
pub struct InterPodAffinity;

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
        filtering::pre_filter(state, pod, snap)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &PodInfo, node: &NodeInfo) {
        filtering::update_with_pod(state, pod, added, node, 1);
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) {
        filtering::update_with_pod(state, pod, removed, node, -1);
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        filtering::filter(state, node)
    }

    fn scores(&self) -> bool {
        true
    }

    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        _nodes: &[&NodeInfo],
    ) {
        scoring::pre_score(state, pod, snap);
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        scoring::score(state, node)
    }

    fn normalize(&self, state: &CycleState, scores: &mut [i64]) {
        scoring::normalize(state, scores);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::pod;
    use serde_json::json;

    #[test]
    fn terms_default_to_the_owner_namespace_and_merge_label_keys() {
        let p = pod(
            "p",
            None,
            None,
            json!({"metadata": {"namespace": "ns1", "labels": {"app": "web", "rev": "7"}},
            "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone",
                 "matchLabelKeys": ["rev"], "mismatchLabelKeys": ["missing"]},
                {"topologyKey": "zone", "namespaces": ["a"]},
                {"labelSelector": {}, "topologyKey": "zone", "namespaceSelector": {}},
            ]}}}}),
        );
        let terms = p.affinity_terms.as_deref().unwrap();
        let [same_rev, nil_selector, everywhere] = terms.required_anti_affinity.as_slice() else {
            panic!("three terms");
        };
        assert_eq!(same_rev.namespaces, HashSet::from(["ns1".to_string()]));
        let exprs = same_rev
            .selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref();
        assert_eq!(exprs.map(Vec::len), Some(1), "only keys the pod has merge");
        let other = |ns: &str, rev: &str| {
            pod(
                "o",
                None,
                None,
                json!({"metadata": {"namespace": ns, "labels": {"app": "web", "rev": rev}}}),
            )
        };
        assert!(same_rev.matches(&other("ns1", "7").pod, &NO_LABELS));
        assert!(!same_rev.matches(&other("ns1", "6").pod, &NO_LABELS));
        assert!(!same_rev.matches(&other("ns2", "7").pod, &NO_LABELS));
        assert!(
            !nil_selector.matches(&other("a", "7").pod, &NO_LABELS),
            "a nil labelSelector selects nothing"
        );
        assert_eq!(everywhere.namespace_selector, NamespaceSelector::Everything);
        assert!(everywhere.matches(&other("zz", "1").pod, &NO_LABELS));
        assert!(PodAffinityTerms::of(&pod("plain", None, None, json!({})).pod).is_none());
    }

    #[test]
    fn counts_drop_pairs_that_come_back_to_zero() {
        let mut c = TopologyCounts::default();
        c.add("zone", "a", 2);
        c.add("zone", "a", -1);
        assert_eq!(c.get("zone", "a"), 1);
        c.add("zone", "a", -1);
        assert!(c.is_empty());
        let labels = BTreeMap::from([("zone".to_string(), "b".to_string())]);
        c.add_on_node(&labels, "zone", 3);
        c.add_on_node(&labels, "rack", 3);
        assert_eq!(c.sum_on_node(&labels), 3);
        assert!(c.any_positive_on_node(&labels));
    }
}
