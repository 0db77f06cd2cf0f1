use std::sync::Arc;

use serde_json::{json, Value};

use super::scoring::normalize;
use super::*;
use crate::cache::{Cache, ClusterObjects};
use crate::framework::fit_error::FitError;
use crate::framework::schedule::{Algorithm, Failure};
use crate::framework::{Code, Framework};
use crate::plugins::default_framework;
use crate::plugins::testing::{node, pod, snapshot};
use crate::preemption::post_filter_message;

/// A node in `zone`, with `extra` merged into it (nested objects merge).
fn zoned(name: &str, zone: &str, extra: Value) -> NodeInfo {
    let mut n = json!({"metadata": {"labels": {LABEL_ZONE: zone}}});
    merge(&mut n, extra);
    node(name, "8", "16Gi", n)
}

fn merge(into: &mut Value, extra: Value) {
    match (into, extra) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn placed(name: &str, on: &str, labels: Value) -> PodInfo {
    pod(
        name,
        None,
        None,
        json!({"metadata": {"labels": labels}, "spec": {"nodeName": on}}),
    )
}

fn web(name: &str, on: &str) -> PodInfo {
    placed(name, on, json!({"app": "web"}))
}

/// A pod labelled app=web spreading by `constraints`, with `extra` merged into its spec.
fn spreading(constraints: Value, extra: Value) -> PodInfo {
    let mut spec = json!({"topologySpreadConstraints": constraints});
    if let (Value::Object(a), Value::Object(b)) = (&mut spec, extra) {
        a.extend(b);
    }
    pod(
        "incoming",
        None,
        None,
        json!({"metadata": {"labels": {"app": "web"}}, "spec": spec}),
    )
}

fn zone_rule(when: &str, max_skew: i32, extra: Value) -> Value {
    let mut c = json!({"maxSkew": max_skew, "topologyKey": LABEL_ZONE, "whenUnsatisfiable": when,
                       "labelSelector": {"matchLabels": {"app": "web"}}});
    if let (Value::Object(a), Value::Object(b)) = (&mut c, extra) {
        a.extend(b);
    }
    c
}

/// The nodes PreFilter and Filter let through, by name.
fn passing(pl: &PodTopologySpread, snap: &Snapshot, p: &PodInfo) -> Vec<String> {
    let mut state = CycleState::default();
    assert!(pl.pre_filter(&mut state, p, snap).is_success());
    snap.nodes
        .iter()
        .filter(|n| pl.filter(&state, p, n).is_success())
        .map(|n| n.name().to_string())
        .collect()
}

fn only_spread() -> Framework {
    Framework::new(vec![(Box::new(PodTopologySpread::default()), 2)])
}

fn chosen(fw: &Framework, snap: &Snapshot, p: &PodInfo, seed: u64) -> String {
    Algorithm::seeded(seed)
        .schedule(fw, &mut CycleState::default(), snap, p)
        .map(|d| d.node)
        .unwrap_or_else(|e| panic!("no node: {e:?}"))
}

#[test]
fn hard_zone_spread_with_max_skew_one_picks_the_emptier_zone() {
    let snap = snapshot(
        vec![
            zoned("a1", "a", json!({})),
            zoned("a2", "a", json!({})),
            zoned("b1", "b", json!({})),
        ],
        vec![
            web("w1", "a1"),
            web("w2", "a2"),
            web("w3", "b1"),
            // Neither another app, another namespace nor a terminating pod counts.
            placed("db", "b1", json!({"app": "db"})),
            pod(
                "other-ns",
                None,
                None,
                json!({"metadata": {"namespace": "x", "labels": {"app": "web"}}, "spec": {"nodeName": "b1"}}),
            ),
            pod(
                "leaving",
                None,
                None,
                json!({"metadata": {"labels": {"app": "web"}, "deletionTimestamp": "2024-01-01T00:00:00Z"},
                       "spec": {"nodeName": "b1"}}),
            ),
        ],
    );
    let p = spreading(json!([zone_rule("DoNotSchedule", 1, json!({}))]), json!({}));
    assert_eq!(
        passing(&PodTopologySpread::default(), &snap, &p),
        vec!["b1"]
    );
    for seed in 0..5 {
        assert_eq!(chosen(&default_framework(), &snap, &p, seed), "b1");
    }
}

#[test]
fn soft_zone_spread_prefers_the_emptier_zone() {
    let snap = snapshot(
        vec![
            zoned("a1", "a", json!({})),
            zoned("a2", "a", json!({})),
            zoned("b1", "b", json!({})),
        ],
        vec![web("w1", "a1"), web("w2", "a2"), web("w3", "b1")],
    );
    let p = spreading(
        json!([zone_rule("ScheduleAnyway", 1, json!({}))]),
        json!({}),
    );
    assert_eq!(passing(&PodTopologySpread::default(), &snap, &p).len(), 3);
    for seed in 0..5 {
        assert_eq!(chosen(&only_spread(), &snap, &p, seed), "b1");
    }
}

#[test]
fn refusals_carry_upstream_reasons_in_the_fit_error() {
    let snap = snapshot(
        vec![
            zoned("a1", "a", json!({})),
            zoned("b1", "b", json!({})),
            node("bare", "8", "16Gi", json!({})),
        ],
        vec![web("w1", "a1"), web("w2", "b1")],
    );
    // Two domains where three are wanted: the minimum is 0, so 1 + 1 − 0 > 1 everywhere.
    let p = spreading(
        json!([zone_rule("DoNotSchedule", 1, json!({"minDomains": 3}))]),
        json!({}),
    );
    let fw = default_framework();
    let mut state = CycleState::default();
    let err: FitError = match Algorithm::seeded(1).schedule(&fw, &mut state, &snap, &p) {
        Err(Failure::Fit(e)) => e,
        other => panic!("expected a fit error, got {other:?}"),
    };
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label), \
         2 node(s) didn't match pod topology spread constraints."
    );
    let codes: Vec<Code> = err
        .diagnosis
        .node_statuses
        .values()
        .map(|s| s.code)
        .collect();
    assert_eq!(
        codes,
        vec![
            Code::Unschedulable,
            Code::Unschedulable,
            Code::UnschedulableAndUnresolvable
        ]
    );
    assert!(err
        .diagnosis
        .node_statuses
        .values()
        .all(|s| s.plugin == "PodTopologySpread"));
}

#[test]
fn min_domains_holds_the_minimum_at_zero_until_enough_domains_exist() {
    let snap = snapshot(vec![zoned("a1", "a", json!({}))], vec![web("w1", "a1")]);
    let pl = PodTopologySpread::default();
    let plain = spreading(json!([zone_rule("DoNotSchedule", 1, json!({}))]), json!({}));
    assert_eq!(passing(&pl, &snap, &plain), vec!["a1"]);
    let wants_two = spreading(
        json!([zone_rule("DoNotSchedule", 1, json!({"minDomains": 2}))]),
        json!({}),
    );
    assert!(passing(&pl, &snap, &wants_two).is_empty());
    let snap = snapshot(
        vec![zoned("a1", "a", json!({})), zoned("b1", "b", json!({}))],
        vec![web("w1", "a1"), web("w2", "b1")],
    );
    assert_eq!(passing(&pl, &snap, &wants_two), vec!["a1", "b1"]);
}

#[test]
fn match_label_keys_count_only_the_incoming_pods_revision() {
    let snap = snapshot(
        vec![zoned("a1", "a", json!({})), zoned("b1", "b", json!({}))],
        vec![
            placed("old1", "a1", json!({"app": "web", "rev": "1"})),
            placed("old2", "a1", json!({"app": "web", "rev": "1"})),
        ],
    );
    let pl = PodTopologySpread::default();
    let rule = |keys: Value| {
        json!([zone_rule(
            "DoNotSchedule",
            1,
            json!({"matchLabelKeys": keys})
        )])
    };
    let revision = |rev: &str, keys: Value| {
        pod(
            "incoming",
            None,
            None,
            json!({"metadata": {"labels": {"app": "web", "rev": rev}},
                   "spec": {"topologySpreadConstraints": rule(keys)}}),
        )
    };
    assert_eq!(
        passing(&pl, &snap, &revision("2", json!(["rev"]))),
        vec!["a1", "b1"]
    );
    assert_eq!(
        passing(&pl, &snap, &revision("1", json!(["rev"]))),
        vec!["b1"]
    );
    assert_eq!(passing(&pl, &snap, &revision("2", json!([]))), vec!["b1"]);
}

#[test]
fn node_inclusion_policies_choose_the_domains_that_count() {
    let snap = snapshot(
        vec![
            zoned("a1", "a", json!({"metadata": {"labels": {"pool": "x"}}})),
            zoned("b1", "b", json!({"metadata": {"labels": {"pool": "x"}}})),
            zoned(
                "c1",
                "c",
                json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}),
            ),
        ],
        vec![web("w1", "a1"), web("w2", "b1"), web("w3", "b1")],
    );
    let pl = PodTopologySpread::default();
    let selected = |policy: Value| {
        spreading(
            json!([zone_rule("DoNotSchedule", 1, policy)]),
            json!({"nodeSelector": {"pool": "x"}}),
        )
    };
    // Honor (the default): zone c is not the pod's, the minimum is a's 1.
    let honor = selected(json!({}));
    assert!(passing(&pl, &snap, &honor).contains(&"a1".to_string()));
    assert!(!passing(&pl, &snap, &honor).contains(&"b1".to_string()));
    // Ignore: zone c's 0 is the minimum.
    let ignore = selected(json!({"nodeAffinityPolicy": "Ignore"}));
    assert!(!passing(&pl, &snap, &ignore).contains(&"a1".to_string()));
    // Taints are ignored unless nodeTaintsPolicy is Honor.
    let tainted = spreading(json!([zone_rule("DoNotSchedule", 1, json!({}))]), json!({}));
    assert_eq!(passing(&pl, &snap, &tainted), vec!["c1"]);
    let honor_taints = spreading(
        json!([zone_rule(
            "DoNotSchedule",
            1,
            json!({"nodeTaintsPolicy": "Honor"})
        )]),
        json!({}),
    );
    assert_eq!(passing(&pl, &snap, &honor_taints), vec!["a1", "c1"]);
}

fn replica_set_objects() -> ClusterObjects {
    let rs = serde_json::from_value(json!({
        "metadata": {"name": "web-rs", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
    }))
    .unwrap();
    let mut objects = ClusterObjects::default();
    objects
        .replica_sets
        .insert("default/web-rs".into(), Arc::new(rs));
    objects
}

fn owned(name: &str, on: &str) -> PodInfo {
    pod(
        name,
        None,
        None,
        json!({"metadata": {"labels": {"app": "web"}, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "u", "controller": true}]},
               "spec": {"nodeName": on}}),
    )
}

#[test]
fn system_defaults_spread_replica_set_pods_over_hostnames() {
    let mut cache = Cache::default();
    for n in ["n1", "n2", "n3"] {
        if let Some(node) = node(n, "8", "16Gi", json!({})).node {
            cache.set_node(node);
        }
    }
    *cache.objects_mut() = replica_set_objects();
    cache.add_bound_pod(owned("w0", "n1"));
    let fw = only_spread();
    let mut alg = Algorithm::seeded(3);
    let mut snap = Snapshot::default();
    for i in 1..9 {
        cache.update_snapshot(&mut snap);
        let p = owned(&format!("w{i}"), "");
        let d = alg
            .schedule(&fw, &mut CycleState::default(), &snap, &p)
            .unwrap_or_else(|e| panic!("{e:?}"));
        cache.assume(p, &d.node);
    }
    cache.update_snapshot(&mut snap);
    let per_node: Vec<usize> = snap.nodes.iter().map(|n| n.pods.len()).collect();
    assert_eq!(per_node, vec![3, 3, 3]);
}

#[test]
fn the_default_selector_comes_from_services_and_controllers() {
    let mut objects = replica_set_objects();
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"selector": {"tier": "db"}},
    }))
    .unwrap();
    objects.services.insert("default/db".into(), Arc::new(svc));
    let headless = serde_json::from_value(
        json!({"metadata": {"name": "none", "namespace": "default"}, "spec": {}}),
    )
    .unwrap();
    objects
        .services
        .insert("default/none".into(), Arc::new(headless));
    let loose = pod(
        "p",
        None,
        None,
        json!({"metadata": {"labels": {"app": "web"}}}),
    );
    assert!(constraints::default_selector(&loose, &objects).is_none());
    let db = pod(
        "p",
        None,
        None,
        json!({"metadata": {"labels": {"tier": "db"}}}),
    );
    let sel = constraints::default_selector(&db, &objects).unwrap();
    assert_eq!(
        sel.match_labels.unwrap().get("tier").map(String::as_str),
        Some("db")
    );
    let from_rs = constraints::default_selector(&owned("p", ""), &objects).unwrap();
    assert_eq!(from_rs.match_expressions.unwrap()[0].key, "app");
    // A pod without constraints and without a selector is left alone: every node scores alike.
    let snap = snapshot(
        vec![
            node("n1", "8", "16Gi", json!({})),
            node("n2", "8", "16Gi", json!({})),
        ],
        vec![placed("x", "n1", json!({"app": "web"}))],
    );
    let pl = PodTopologySpread::default();
    let mut state = CycleState::default();
    let nodes: Vec<&NodeInfo> = snap.nodes.iter().map(|n| &**n).collect();
    pl.pre_score(&mut state, &loose, &snap, &nodes);
    let mut scores: Vec<i64> = nodes.iter().map(|n| pl.score(&state, &loose, n)).collect();
    pl.normalize(&state, &mut scores);
    assert_eq!(scores, vec![0, 0]);
}

#[test]
fn add_pod_and_remove_pod_change_the_filter_outcome() {
    let snap = snapshot(
        vec![zoned("a1", "a", json!({})), zoned("b1", "b", json!({}))],
        vec![web("x1", "a1"), web("x2", "a1"), web("y1", "b1")],
    );
    let pl = PodTopologySpread::default();
    let p = spreading(json!([zone_rule("DoNotSchedule", 1, json!({}))]), json!({}));
    let mut state = CycleState::default();
    assert!(pl.pre_filter(&mut state, &p, &snap).is_success());
    let (a1, b1) = (&snap.nodes[0], &snap.nodes[1]);
    assert_eq!(
        pl.filter(&state, &p, a1),
        Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
    );
    let mut without = state.clone();
    pl.remove_pod(&mut without, &p, &a1.pods[0], a1);
    assert!(pl.filter(&without, &p, a1).is_success());
    pl.add_pod(&mut without, &p, &a1.pods[0], a1);
    assert!(!pl.filter(&without, &p, a1).is_success());
    // Emptying zone b lowers the minimum to 0: zone a is further out of reach, b still fits.
    let mut emptied = state.clone();
    pl.remove_pod(&mut emptied, &p, &b1.pods[0], b1);
    assert!(pl.filter(&emptied, &p, b1).is_success());
    pl.remove_pod(&mut emptied, &p, &a1.pods[0], a1);
    assert!(!pl.filter(&emptied, &p, a1).is_success());
    // The original state is untouched.
    assert!(pl.filter(&state, &p, b1).is_success());
    assert!(!pl.filter(&state, &p, a1).is_success());
}

#[test]
fn preemption_sees_that_evicting_a_lower_priority_pod_restores_the_spread() {
    let low = |name: &str, on: &str| {
        pod(
            name,
            None,
            None,
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"nodeName": on, "priority": 0}}),
        )
    };
    let snap = snapshot(
        vec![zoned("a1", "a", json!({})), zoned("b1", "b", json!({}))],
        vec![low("x1", "a1"), low("x2", "a1"), low("y1", "b1")],
    );
    let mut p = spreading(
        json!([zone_rule("DoNotSchedule", 1, json!({"minDomains": 3}))]),
        json!({}),
    );
    p.priority = 10;
    let fw = default_framework();
    let mut state = CycleState::default();
    let Err(Failure::Fit(err)) = Algorithm::seeded(1).schedule(&fw, &mut state, &snap, &p) else {
        panic!("expected a fit error");
    };
    // Without y1 zone b is empty: 0 + 1 − 0 ≤ 1.
    assert_eq!(
        post_filter_message(&fw, &state, &snap, &p, &err.diagnosis),
        None
    );
}

#[test]
fn counts_follow_the_cache_between_cycles() {
    let pl = PodTopologySpread::default();
    let p = spreading(json!([zone_rule("DoNotSchedule", 1, json!({}))]), json!({}));
    let mut cache = Cache::default();
    for (n, z) in [("a1", "a"), ("b1", "b"), ("c1", "c")] {
        if let Some(node) = zoned(n, z, json!({})).node {
            cache.set_node(node);
        }
    }
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["a1", "b1", "c1"]);
    cache.add_bound_pod(web("w1", "a1"));
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["b1", "c1"]);
    cache.add_bound_pod(web("w2", "b1"));
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["c1"]);
    // Zone c's node goes with its empty domain: the minimum is 1 now.
    cache.remove_node("c1");
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["a1", "b1"]);
    cache.add_bound_pod(web("w3", "b1"));
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["a1"]);
    cache.remove_pod("default/w1");
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["a1"]);
    cache.remove_pod("default/w2");
    cache.remove_pod("default/w3");
    cache.update_snapshot(&mut snap);
    assert_eq!(passing(&pl, &snap, &p), vec!["a1", "b1"]);
}

#[test]
fn normalising_gives_the_lowest_raw_score_a_hundred_and_unscored_nodes_zero() {
    let mut state = CycleState::default();
    let snap = snapshot(
        vec![
            zoned("a1", "a", json!({})),
            node("bare", "8", "16Gi", json!({})),
        ],
        vec![],
    );
    let p = spreading(
        json!([zone_rule("ScheduleAnyway", 1, json!({}))]),
        json!({}),
    );
    let nodes: Vec<&NodeInfo> = snap.nodes.iter().map(|n| &**n).collect();
    PodTopologySpread::default().pre_score(&mut state, &p, &snap, &nodes);
    let mut scores = vec![3, 1, -1];
    normalize(&state, &mut scores);
    assert_eq!(scores, vec![33, 100, 0]);
    let mut zeros = vec![0, 0];
    normalize(&state, &mut zeros);
    assert_eq!(zeros, vec![100, 100]);
}

/// Filter verdicts and normalised scores of `p` on every node.
fn verdicts(pl: &PodTopologySpread, snap: &Snapshot, p: &PodInfo) -> (Vec<bool>, Vec<i64>) {
    let mut state = CycleState::default();
    assert!(pl.pre_filter(&mut state, p, snap).is_success());
    let fits = snap
        .nodes
        .iter()
        .map(|n| pl.filter(&state, p, n).is_success())
        .collect();
    let nodes: Vec<&NodeInfo> = snap.nodes.iter().map(|n| &**n).collect();
    pl.pre_score(&mut state, p, snap, &nodes);
    let mut scores: Vec<i64> = nodes.iter().map(|n| pl.score(&state, p, n)).collect();
    pl.normalize(&state, &mut scores);
    (fits, scores)
}

#[test]
fn remembered_counts_equal_counts_taken_afresh() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(5);
    let mut cache = Cache::default();
    *cache.objects_mut() = replica_set_objects();
    let zones = ["a", "b", "c"];
    for i in 0..12 {
        if let Some(n) = zoned(&format!("n{i:02}"), zones[i % 3], json!({})).node {
            cache.set_node(n);
        }
    }
    let hard = spreading(
        json!([zone_rule("DoNotSchedule", 2, json!({})),
               {"maxSkew": 1, "topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}},
               zone_rule("ScheduleAnyway", 1, json!({}))]),
        json!({}),
    );
    let defaulted = owned("incoming", "");
    let kept = PodTopologySpread::default();
    let mut snap = Snapshot::default();
    let mut placed_pods: Vec<String> = Vec::new();
    for step in 0..200 {
        match rng.gen_range(0..10) {
            0..=5 => {
                let name = format!("p{step}");
                let on = format!("n{:02}", rng.gen_range(0..12));
                let p = if rng.gen_bool(0.5) {
                    owned(&name, &on)
                } else {
                    placed(&name, &on, json!({"app": "other"}))
                };
                cache.add_bound_pod(p);
                placed_pods.push(name);
            }
            6..=7 if !placed_pods.is_empty() => {
                let name = placed_pods.swap_remove(rng.gen_range(0..placed_pods.len()));
                cache.remove_pod(&format!("default/{name}"));
            }
            8 => {
                let i = rng.gen_range(0..14);
                let name = format!("n{i:02}");
                if rng.gen_bool(0.3) {
                    cache.remove_node(&name);
                } else if let Some(n) = zoned(&name, zones[rng.gen_range(0..3)], json!({})).node {
                    cache.set_node(n);
                }
            }
            _ => {}
        }
        cache.update_snapshot(&mut snap);
        for p in [&hard, &defaulted] {
            assert_eq!(
                verdicts(&kept, &snap, p),
                verdicts(&PodTopologySpread::default(), &snap, p),
                "step {step}"
            );
        }
    }
}

/// Times cycles of ReplicaSet pods (system defaults) on 5 000 nodes holding 30 000 pods:
/// `cargo test -p keel-scheduler --release --lib -- --ignored --nocapture cycles_at_scale`.
#[test]
#[ignore = "a timing measurement (prints per-cycle time), not a check; run it with --release"]
fn cycles_at_scale() {
    let mut cache = Cache::default();
    *cache.objects_mut() = replica_set_objects();
    for i in 0..5000 {
        if let Some(n) = zoned(&format!("n{i:04}"), ["a", "b", "c"][i % 3], json!({})).node {
            cache.set_node(n);
        }
    }
    for i in 0..30000 {
        cache.add_bound_pod(owned(&format!("w{i}"), &format!("n{:04}", i % 5000)));
    }
    let fw = default_framework();
    let mut alg = Algorithm::default();
    let mut snap = Snapshot::default();
    for (label, spread_pod) in [
        ("defaults", true),
        ("defaults", true),
        ("no selector", false),
    ] {
        let start = std::time::Instant::now();
        for i in 0..300 {
            cache.update_snapshot(&mut snap);
            let name = format!("x{label}{i}");
            let p = if spread_pod {
                owned(&name, "")
            } else {
                pod(&name, None, None, json!({}))
            };
            let d = alg
                .schedule(&fw, &mut CycleState::default(), &snap, &p)
                .unwrap_or_else(|e| panic!("{e:?}"));
            cache.assume(p, &d.node);
        }
        println!("{label}: {:?} per cycle", start.elapsed() / 300);
    }
}
