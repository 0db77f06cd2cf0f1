//! TaintToleration: Filter refuses a node with a NoSchedule or NoExecute taint the pod does not
//! tolerate (the first such taint is named in the reason); Score prefers nodes with fewer untolerated
//! PreferNoSchedule taints (reverse-normalised, weight 3).

use k8s_openapi::api::core::v1::Toleration;
use keel_client_kit::placement::tolerates;

use crate::cache::NodeInfo;
use crate::framework::{default_normalize, CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

fn tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// The TaintToleration filter and score.
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }

    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let tols = tolerations(pod);
        let untolerated = node.taints().iter().find(|taint| {
            (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                && !tols.iter().any(|t| tolerates(t, taint))
        });
        match untolerated {
            None => Status::success(),
            Some(taint) => Status::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or("")
            )),
        }
    }

    fn scores(&self) -> bool {
        true
    }

    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // Only tolerations that can match PreferNoSchedule (that effect or none) count.
        let tols: Vec<&Toleration> = tolerations(pod)
            .iter()
            .filter(|t| {
                matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .collect();
        let n = node
            .taints()
            .iter()
            .filter(|taint| taint.effect == "PreferNoSchedule")
            .filter(|taint| !tols.iter().any(|t| tolerates(t, taint)))
            .count();
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    fn normalize(&self, _state: &CycleState, scores: &mut [i64]) {
        default_normalize(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::schedule::Algorithm;
    use crate::framework::Framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;

    fn tainted(name: &str, key: &str, value: &str, effect: &str) -> NodeInfo {
        node(
            name,
            "4",
            "8Gi",
            json!({"spec": {"taints": [{"key": key, "value": value, "effect": effect}]}}),
        )
    }

    #[test]
    fn untolerated_no_schedule_taints_refuse_with_the_taint_named() {
        let n = tainted("n", "dedicated", "gpu", "NoSchedule");
        let plain = pod("p", None, None, json!({}));
        assert_eq!(
            TaintToleration.filter(&CycleState::default(), &plain, &n),
            Status::unresolvable("node(s) had untolerated taint {dedicated: gpu}")
        );
        let equal = pod(
            "e",
            None,
            None,
            json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}}),
        );
        assert!(TaintToleration
            .filter(&CycleState::default(), &equal, &n)
            .is_success());
        let wrong_value = pod(
            "w",
            None,
            None,
            json!({"spec": {"tolerations": [{"key": "dedicated", "value": "cpu"}]}}),
        );
        assert!(!TaintToleration
            .filter(&CycleState::default(), &wrong_value, &n)
            .is_success());
        let everything = pod(
            "x",
            None,
            None,
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        );
        assert!(TaintToleration
            .filter(
                &CycleState::default(),
                &everything,
                &tainted("m", "a", "b", "NoExecute")
            )
            .is_success());
        assert!(TaintToleration
            .filter(
                &CycleState::default(),
                &plain,
                &tainted("s", "a", "b", "PreferNoSchedule")
            )
            .is_success());
    }

    #[test]
    fn prefer_no_schedule_taints_push_pods_elsewhere() {
        let fw = Framework::new(vec![(Box::new(TaintToleration), 3)]);
        let snap = snapshot(
            vec![
                tainted("soft", "x", "y", "PreferNoSchedule"),
                node("clean", "4", "8Gi", json!({})),
            ],
            vec![],
        );
        let mut alg = Algorithm::seeded(1);
        for _ in 0..10 {
            let d = alg
                .schedule(
                    &fw,
                    &mut CycleState::default(),
                    &snap,
                    &pod("p", None, None, json!({})),
                )
                .unwrap();
            assert_eq!(d.node, "clean");
        }
    }
}
