//! InterPodAffinity's PreFilter, AddPod/RemovePod and Filter.

use std::collections::BTreeMap;

use super::{matches_all, resolved, AffinityTerm, TopologyCounts, NO_LABELS};
use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{Code, CycleState, Status};
use crate::pod_info::PodInfo;

/// Upstream's reason when the pod's required affinity is not met (unresolvable by preemption).
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Upstream's reason when the pod's required anti-affinity is violated.
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// Upstream's reason when an existing pod's required anti-affinity would be violated.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Where PreFilter leaves its counts in the CycleState.
pub const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";

/// What PreFilter computed for one pod.
#[derive(Debug, Clone, Default)]
pub struct PreFilterState {
    /// Nothing to check: neither the pod nor any existing pod's anti-affinity constrains it
    /// (upstream's Skip, which also skips Filter, AddPod and RemovePod).
    pub skip: bool,
    /// Per topology pair, existing pods whose required anti-affinity terms match the pod.
    pub existing_anti_affinity: TopologyCounts,
    /// Per topology pair, existing pods matching all of the pod's required affinity terms.
    pub affinity: TopologyCounts,
    /// Per topology pair, existing pods matching one of the pod's required anti-affinity terms.
    pub anti_affinity: TopologyCounts,
    /// The pod's required affinity terms, namespace selectors resolved.
    required_affinity: Vec<AffinityTerm>,
    /// The pod's required anti-affinity terms, namespace selectors resolved.
    required_anti_affinity: Vec<AffinityTerm>,
    /// The labels of the pod's namespace (existing pods' namespace selectors read them).
    namespace_labels: BTreeMap<String, String>,
    /// Whether the pod matches all its own required affinity terms (the first pod of a group).
    matches_own_affinity: bool,
}

/// PreFilter: the three counts, or a skip marker when there is nothing to check. Without required
/// terms and without existing pods' required anti-affinity this is one pass over the node counters.
pub fn pre_filter(state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
    let ns_labels = snap
        .objects
        .namespace_labels(pod.namespace())
        .unwrap_or(&NO_LABELS);
    let mut existing_anti_affinity = TopologyCounts::default();
    for node in snap
        .nodes
        .iter()
        .filter(|n| n.pods_with_required_anti_affinity > 0)
    {
        let node_labels = node.labels();
        let terms = node
            .pods
            .iter()
            .filter(|p| p.has_required_anti_affinity)
            .filter_map(|p| p.affinity_terms.as_deref());
        for t in terms.flat_map(|t| &t.required_anti_affinity) {
            if t.matches(&pod.pod, ns_labels) {
                existing_anti_affinity.add_on_node(node_labels, &t.topology_key, 1);
            }
        }
    }
    let own = pod.affinity_terms.as_deref();
    let required_affinity = own.map_or_else(Vec::new, |t| resolved(&t.required_affinity, snap));
    let required_anti_affinity =
        own.map_or_else(Vec::new, |t| resolved(&t.required_anti_affinity, snap));
    if existing_anti_affinity.is_empty()
        && required_affinity.is_empty()
        && required_anti_affinity.is_empty()
    {
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                skip: true,
                ..PreFilterState::default()
            },
        );
        return Status::success();
    }
    let mut affinity = TopologyCounts::default();
    let mut anti_affinity = TopologyCounts::default();
    if !required_affinity.is_empty() || !required_anti_affinity.is_empty() {
        for node in &snap.nodes {
            let node_labels = node.labels();
            for existing in &node.pods {
                count_incoming_terms(
                    &mut affinity,
                    &mut anti_affinity,
                    &required_affinity,
                    &required_anti_affinity,
                    existing,
                    node_labels,
                    1,
                );
            }
        }
    }
    state.write(
        PRE_FILTER_KEY,
        PreFilterState {
            skip: false,
            existing_anti_affinity,
            affinity,
            anti_affinity,
            matches_own_affinity: matches_all(&required_affinity, &pod.pod),
            required_affinity,
            required_anti_affinity,
            namespace_labels: ns_labels.clone(),
        },
    );
    Status::success()
}

/// Counts `existing` (on a node with `node_labels`) against the incoming pod's resolved terms.
fn count_incoming_terms(
    affinity: &mut TopologyCounts,
    anti_affinity: &mut TopologyCounts,
    required_affinity: &[AffinityTerm],
    required_anti_affinity: &[AffinityTerm],
    existing: &PodInfo,
    node_labels: &BTreeMap<String, String>,
    n: i64,
) {
    if matches_all(required_affinity, &existing.pod) {
        for t in required_affinity {
            affinity.add_on_node(node_labels, &t.topology_key, n);
        }
    }
    for t in required_anti_affinity {
        if t.matches(&existing.pod, &NO_LABELS) {
            anti_affinity.add_on_node(node_labels, &t.topology_key, n);
        }
    }
}

/// AddPod (`n` = 1) and RemovePod (`n` = -1): `other` comes to or leaves `node`.
pub fn update_with_pod(
    state: &mut CycleState,
    pod: &PodInfo,
    other: &PodInfo,
    node: &NodeInfo,
    n: i64,
) {
    let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) else {
        return;
    };
    if s.skip {
        return;
    }
    let node_labels = node.labels();
    if let Some(terms) = other.affinity_terms.as_deref() {
        for t in &terms.required_anti_affinity {
            if t.matches(&pod.pod, &s.namespace_labels) {
                s.existing_anti_affinity
                    .add_on_node(node_labels, &t.topology_key, n);
            }
        }
    }
    count_incoming_terms(
        &mut s.affinity,
        &mut s.anti_affinity,
        &s.required_affinity,
        &s.required_anti_affinity,
        other,
        node_labels,
        n,
    );
}

/// Filter: the pod's affinity, then its anti-affinity, then the existing pods' anti-affinity.
pub fn filter(state: &CycleState, node: &NodeInfo) -> Status {
    let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
        return Status::new(
            Code::Error,
            vec![format!("reading {PRE_FILTER_KEY:?} from cycleState")],
        );
    };
    if s.skip {
        return Status::success();
    }
    let labels = node.labels();
    if !satisfies_affinity(s, labels) {
        return Status::unresolvable(ERR_REASON_AFFINITY);
    }
    if !satisfies_anti_affinity(s, labels) {
        return Status::unschedulable(ERR_REASON_ANTI_AFFINITY);
    }
    if s.existing_anti_affinity.any_positive_on_node(labels) {
        return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY);
    }
    Status::success()
}

/// Every required affinity term needs the node to have its topology label and a matching pod in that
/// domain. When no pod anywhere matches, a pod matching its own terms may start the group.
fn satisfies_affinity(s: &PreFilterState, labels: &BTreeMap<String, String>) -> bool {
    let mut pods_exist = true;
    for t in &s.required_affinity {
        let Some(value) = labels.get(&t.topology_key) else {
            return false;
        };
        if s.affinity.get(&t.topology_key, value) <= 0 {
            pods_exist = false;
        }
    }
    pods_exist || (s.affinity.is_empty() && s.matches_own_affinity)
}

/// No required anti-affinity term may have a matching pod in the node's domain.
fn satisfies_anti_affinity(s: &PreFilterState, labels: &BTreeMap<String, String>) -> bool {
    s.anti_affinity.is_empty()
        || !s.required_anti_affinity.iter().any(|t| {
            labels
                .get(&t.topology_key)
                .is_some_and(|v| s.anti_affinity.get(&t.topology_key, v) > 0)
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use serde_json::{json, Value};

    use super::*;
    use crate::cache::Cache;
    use crate::framework::fit_error::FitError;
    use crate::framework::schedule::{Algorithm, Failure};
    use crate::framework::{Framework, Plugin};
    use crate::plugins::default_framework;
    use crate::plugins::inter_pod_affinity::InterPodAffinity;
    use crate::plugins::testing::{node, pod, snapshot, snapshot_with_namespaces};
    use crate::preemption as default_preemption;

    fn zoned(name: &str, zone: &str) -> NodeInfo {
        node(
            name,
            "4",
            "8Gi",
            json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}}),
        )
    }

    /// A pod labelled `labels` with `affinity` as its `spec.affinity`, bound to `node` unless empty.
    fn apod(name: &str, labels: Value, affinity: Value, node: &str) -> PodInfo {
        let mut spec = json!({"affinity": affinity});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        pod(
            name,
            Some("100m"),
            None,
            json!({"metadata": {"labels": labels}, "spec": spec}),
        )
    }

    fn required(kind: &str, selector: Value, key: &str) -> Value {
        json!({kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": selector}, "topologyKey": key}]}})
    }

    fn fit_error(fw: &Framework, snap: &Snapshot, p: &PodInfo) -> FitError {
        match Algorithm::seeded(1).schedule(fw, &mut CycleState::default(), snap, p) {
            Err(Failure::Fit(e)) => e,
            other => panic!("expected a fit error, got {other:?}"),
        }
    }

    fn filter_all(snap: &Snapshot, p: &PodInfo) -> Vec<(String, Status)> {
        let mut state = CycleState::default();
        assert!(InterPodAffinity
            .pre_filter(&mut state, p, snap)
            .is_success());
        snap.nodes
            .iter()
            .map(|n| (n.name().to_string(), filter(&state, n)))
            .collect()
    }

    #[test]
    fn required_anti_affinity_spreads_replicas_one_per_host() {
        let mut cache = Cache::default();
        let n = 4;
        for i in 0..n {
            let info = node(&format!("n{i}"), "8", "16Gi", json!({}));
            cache.set_node(info.node.clone().unwrap());
        }
        let fw = default_framework();
        let mut alg = Algorithm::seeded(5);
        let mut snap = Snapshot::default();
        let replica = |i: usize| {
            apod(
                &format!("web-{i}"),
                json!({"app": "web"}),
                required(
                    "podAntiAffinity",
                    json!({"app": "web"}),
                    "kubernetes.io/hostname",
                ),
                "",
            )
        };
        let mut used = std::collections::BTreeSet::new();
        for i in 0..n {
            cache.update_snapshot(&mut snap);
            let p = replica(i);
            let d = alg
                .schedule(&fw, &mut CycleState::default(), &snap, &p)
                .unwrap();
            assert!(used.insert(d.node.clone()), "{} twice", d.node);
            cache.assume(p, &d.node);
        }
        cache.update_snapshot(&mut snap);
        let extra = replica(n);
        let mut state = CycleState::default();
        let Err(Failure::Fit(mut e)) = alg.schedule(&fw, &mut state, &snap, &extra) else {
            panic!("the fifth replica must not fit");
        };
        assert_eq!(
            e.to_string(),
            "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules."
        );
        // Anti-affinity is Unschedulable, but the other replicas have the same priority: no victims.
        e.diagnosis.post_filter_msg =
            default_preemption::post_filter_message(&fw, &state, &snap, &extra, &e.diagnosis);
        assert_eq!(
            e.diagnosis.post_filter_msg.as_deref(),
            Some("preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.")
        );
    }

    #[test]
    fn required_affinity_follows_a_zone() {
        let db = apod("db", json!({"app": "db"}), json!({}), "a1");
        let snap = snapshot(
            vec![
                zoned("a1", "a"),
                zoned("a2", "a"),
                zoned("b1", "b"),
                node("nozone", "4", "8Gi", json!({})),
            ],
            vec![db],
        );
        let p = apod(
            "p",
            json!({}),
            required(
                "podAffinity",
                json!({"app": "db"}),
                "topology.kubernetes.io/zone",
            ),
            "",
        );
        let got = filter_all(&snap, &p);
        let fits: Vec<&str> = got
            .iter()
            .filter(|(_, s)| s.is_success())
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(fits, vec!["a1", "a2"]);
        assert!(got
            .iter()
            .filter(|(_, s)| !s.is_success())
            .all(|(_, s)| *s == Status::unresolvable(ERR_REASON_AFFINITY)));
        let e = fit_error(
            &default_framework(),
            &snapshot(vec![zoned("b1", "b")], vec![]),
            &apod(
                "q",
                json!({}),
                required(
                    "podAffinity",
                    json!({"app": "db"}),
                    "topology.kubernetes.io/zone",
                ),
                "",
            ),
        );
        assert_eq!(
            e.to_string(),
            "0/1 nodes are available: 1 node(s) didn't match pod affinity rules."
        );
    }

    #[test]
    fn the_first_pod_of_a_self_affine_group_may_go_anywhere_with_the_key() {
        let snap = snapshot(
            vec![
                zoned("a1", "a"),
                zoned("b1", "b"),
                node("nozone", "4", "8Gi", json!({})),
            ],
            vec![apod("other", json!({"app": "x"}), json!({}), "a1")],
        );
        let affine = required(
            "podAffinity",
            json!({"app": "cache"}),
            "topology.kubernetes.io/zone",
        );
        let first = apod("c0", json!({"app": "cache"}), affine.clone(), "");
        let ok: Vec<String> = filter_all(&snap, &first)
            .into_iter()
            .filter(|(_, s)| s.is_success())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(ok, vec!["a1", "b1"], "the node needs the topology label");
        let stranger = apod("s", json!({"app": "other"}), affine.clone(), "");
        assert!(
            filter_all(&snap, &stranger)
                .iter()
                .all(|(_, s)| !s.is_success()),
            "a pod not matching its own terms gets no exception"
        );
        let snap = snapshot(
            vec![zoned("a1", "a"), zoned("b1", "b")],
            vec![apod("c0", json!({"app": "cache"}), affine.clone(), "b1")],
        );
        let second = apod("c1", json!({"app": "cache"}), affine, "");
        let ok: Vec<String> = filter_all(&snap, &second)
            .into_iter()
            .filter(|(_, s)| s.is_success())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(ok, vec!["b1"], "once one exists, the group follows it");
    }

    #[test]
    fn existing_pods_anti_affinity_keeps_matching_pods_out_of_their_zone() {
        let loner = apod(
            "loner",
            json!({"app": "loner"}),
            required(
                "podAntiAffinity",
                json!({"app": "noisy"}),
                "topology.kubernetes.io/zone",
            ),
            "a1",
        );
        let snap = snapshot(
            vec![zoned("a1", "a"), zoned("a2", "a"), zoned("b1", "b")],
            vec![loner],
        );
        let noisy = apod("n", json!({"app": "noisy"}), json!({}), "");
        let got = filter_all(&snap, &noisy);
        assert_eq!(
            got,
            vec![
                (
                    "a1".to_string(),
                    Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
                ),
                (
                    "a2".to_string(),
                    Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
                ),
                ("b1".to_string(), Status::success()),
            ]
        );
        let quiet = apod("q", json!({"app": "quiet"}), json!({}), "");
        assert!(filter_all(&snap, &quiet)
            .iter()
            .all(|(_, s)| s.is_success()));
    }

    fn namespace(name: &str, labels: Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    #[test]
    fn namespace_selectors_pick_namespaces_by_label() {
        let in_ns = |name: &str, ns: &str, node: &str| {
            pod(
                name,
                None,
                None,
                json!({"metadata": {"namespace": ns, "labels": {"app": "db"}},
                    "spec": {"nodeName": node}}),
            )
        };
        let snap = snapshot_with_namespaces(
            vec![zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c")],
            vec![
                in_ns("db-a", "team1-prod", "a1"),
                in_ns("db-b", "team2", "b1"),
            ],
            vec![
                namespace("team1-prod", json!({"team": "team1"})),
                namespace("team2", json!({"team": "team2"})),
                namespace("default", json!({})),
            ],
        );
        let p = apod(
            "p",
            json!({}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}},
                 "namespaceSelector": {"matchLabels": {"team": "team1"}},
                 "topologyKey": "topology.kubernetes.io/zone"}]}}),
            "",
        );
        let refused: Vec<String> = filter_all(&snap, &p)
            .into_iter()
            .filter(|(_, s)| !s.is_success())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(refused, vec!["a1"], "only team1's db counts");
        let everywhere = apod(
            "e",
            json!({}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {},
                 "topologyKey": "topology.kubernetes.io/zone"}]}}),
            "",
        );
        let ok: Vec<String> = filter_all(&snap, &everywhere)
            .into_iter()
            .filter(|(_, s)| s.is_success())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(ok, vec!["c1"], "an empty namespaceSelector selects all");
        // An existing pod's selector is matched against the incoming pod's namespace labels.
        let guard = pod(
            "guard",
            None,
            None,
            json!({"metadata": {"namespace": "team2"}, "spec": {"nodeName": "c1", "affinity":
                {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {}, "namespaceSelector": {"matchLabels": {"team": "team1"}},
                     "topologyKey": "topology.kubernetes.io/zone"}]}}}}),
        );
        let snap = snapshot_with_namespaces(
            vec![zoned("c1", "c"), zoned("d1", "d")],
            vec![guard],
            vec![
                namespace("team1-prod", json!({"team": "team1"})),
                namespace("team2", json!({"team": "team2"})),
            ],
        );
        let from_team1 = pod(
            "t1",
            None,
            None,
            json!({"metadata": {"namespace": "team1-prod"}}),
        );
        let from_team2 = pod(
            "t2",
            None,
            None,
            json!({"metadata": {"namespace": "team2"}}),
        );
        assert!(!filter_all(&snap, &from_team1)[0].1.is_success());
        assert!(filter_all(&snap, &from_team2)[0].1.is_success());
    }

    #[test]
    fn add_and_remove_pod_adjust_the_counts() {
        let snap = snapshot(vec![zoned("a1", "a"), zoned("b1", "b")], vec![]);
        let p = apod(
            "p",
            json!({"app": "web"}),
            required(
                "podAntiAffinity",
                json!({"app": "web"}),
                "topology.kubernetes.io/zone",
            ),
            "",
        );
        let mut state = CycleState::default();
        assert!(InterPodAffinity
            .pre_filter(&mut state, &p, &snap)
            .is_success());
        let a1 = &snap.nodes[0];
        assert!(filter(&state, a1).is_success());
        let web = apod("w", json!({"app": "web"}), json!({}), "a1");
        InterPodAffinity.add_pod(&mut state, &p, &web, a1);
        assert_eq!(
            filter(&state, a1),
            Status::unschedulable(ERR_REASON_ANTI_AFFINITY)
        );
        assert!(filter(&state, &snap.nodes[1]).is_success());
        // A clone (preemption's per-node copy) changes on its own.
        let mut copy = state.clone();
        InterPodAffinity.remove_pod(&mut copy, &p, &web, a1);
        assert!(filter(&copy, a1).is_success());
        assert!(!filter(&state, a1).is_success());

        // An added pod with anti-affinity against the incoming pod counts for the symmetric check.
        let plain = apod("plain", json!({"app": "api"}), json!({}), "");
        let mut state = CycleState::default();
        InterPodAffinity.pre_filter(&mut state, &plain, &snap);
        let hater = apod(
            "h",
            json!({}),
            required(
                "podAntiAffinity",
                json!({"app": "api"}),
                "topology.kubernetes.io/zone",
            ),
            "b1",
        );
        // The plain pod's PreFilter skipped (nothing constrained it), as upstream's Skip does.
        InterPodAffinity.add_pod(&mut state, &plain, &hater, &snap.nodes[1]);
        assert!(filter(&state, &snap.nodes[1]).is_success());
        let snap = snapshot(
            vec![zoned("a1", "a"), zoned("b1", "b")],
            vec![hater.clone()],
        );
        let mut state = CycleState::default();
        InterPodAffinity.pre_filter(&mut state, &plain, &snap);
        assert_eq!(
            filter(&state, &snap.nodes[1]),
            Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
        );
        InterPodAffinity.remove_pod(&mut state, &plain, &hater, &snap.nodes[1]);
        assert!(filter(&state, &snap.nodes[1]).is_success());
    }

    #[test]
    fn preemption_can_cure_anti_affinity_to_lower_priority_pods() {
        let low = pod(
            "low",
            None,
            None,
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"nodeName": "n1", "priority": 0}}),
        );
        let snap = snapshot(vec![node("n1", "4", "8Gi", json!({}))], vec![low]);
        let mut spec = json!({"priority": 100});
        spec["affinity"] = required(
            "podAntiAffinity",
            json!({"app": "web"}),
            "kubernetes.io/hostname",
        );
        let high = pod("high", None, None, json!({"spec": spec}));
        let fw = default_framework();
        let mut state = CycleState::default();
        let Err(Failure::Fit(e)) = Algorithm::seeded(1).schedule(&fw, &mut state, &snap, &high)
        else {
            panic!("must not fit");
        };
        assert_eq!(
            e.to_string(),
            "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
        );
        assert_eq!(
            default_preemption::post_filter_message(&fw, &state, &snap, &high, &e.diagnosis),
            None,
            "taking the lower-priority pod away would make room"
        );
    }

    #[test]
    fn nothing_to_check_is_a_skip() {
        let snap = snapshot(
            vec![zoned("a1", "a")],
            vec![apod("x", json!({"app": "x"}), json!({}), "a1")],
        );
        let mut state = CycleState::default();
        let p = pod("p", None, None, json!({}));
        assert!(InterPodAffinity
            .pre_filter(&mut state, &p, &snap)
            .is_success());
        assert!(state
            .read::<PreFilterState>(PRE_FILTER_KEY)
            .is_some_and(|s| s.skip));
        assert_eq!(
            filter(&CycleState::default(), &snap.nodes[0]).code,
            Code::Error,
            "Filter without PreFilter is an error, as upstream"
        );
    }
}
