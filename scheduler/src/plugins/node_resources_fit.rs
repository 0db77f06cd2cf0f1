//! NodeResourcesFit: Filter checks the pod's effective requests against what the node's allocatable
//! leaves (cpu, memory, ephemeral-storage, extended resources) and its pod count; every shortfall is
//! a reason. Score is LeastAllocated over cpu and memory (weight 1 each), counting containers without
//! requests at the scoring defaults.

use crate::cache::NodeInfo;
use crate::framework::{Code, CycleState, Plugin, Status, MAX_NODE_SCORE};
use crate::pod_info::PodInfo;

/// Every resource the pod lacks on `node`, in upstream's words and order.
pub fn insufficient(pod: &PodInfo, node: &NodeInfo) -> Vec<String> {
    let mut out = Vec::new();
    let alloc = &node.allocatable;
    let used = &node.requested;
    let req = &pod.requests;
    let pods_on_node = i64::try_from(node.pods.len()).unwrap_or(i64::MAX);
    if pods_on_node.saturating_add(1) > alloc.pods {
        out.push("Too many pods".to_string());
    }
    if req.is_zero() {
        return out;
    }
    if req.milli_cpu > 0 && req.milli_cpu > alloc.milli_cpu - used.milli_cpu {
        out.push("Insufficient cpu".to_string());
    }
    if req.memory > 0 && req.memory > alloc.memory - used.memory {
        out.push("Insufficient memory".to_string());
    }
    if req.ephemeral_storage > 0
        && req.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage
    {
        out.push("Insufficient ephemeral-storage".to_string());
    }
    for (name, want) in &req.scalar {
        if *want == 0 {
            continue;
        }
        let have = alloc.scalar.get(name).copied().unwrap_or(0)
            - used.scalar.get(name).copied().unwrap_or(0);
        if *want > have {
            out.push(format!("Insufficient {name}"));
        }
    }
    out
}

/// Upstream's leastRequestedScore: the free share of `capacity` after `requested`, 0..=100.
pub fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// The NodeResourcesFit filter and LeastAllocated score.
pub struct NodeResourcesFit;

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }

    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let reasons = insufficient(pod, node);
        if reasons.is_empty() {
            Status::success()
        } else {
            Status::new(Code::Unschedulable, reasons)
        }
    }

    fn scores(&self) -> bool {
        true
    }

    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let pairs = [
            (
                node.non_zero_requested.milli_cpu + pod.non_zero.milli_cpu,
                node.allocatable.milli_cpu,
            ),
            (
                node.non_zero_requested.memory + pod.non_zero.memory,
                node.allocatable.memory,
            ),
        ];
        let (mut sum, mut weights) = (0, 0);
        for (requested, capacity) in pairs {
            if capacity == 0 {
                continue;
            }
            sum += least_requested(requested, capacity);
            weights += 1;
        }
        if weights == 0 {
            0
        } else {
            sum / weights
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::schedule::Algorithm;
    use crate::framework::Framework;
    use crate::plugins::testing::{node, pod, snapshot};
    use serde_json::json;

    #[test]
    fn requests_must_fit_what_is_left() {
        let mut n = node("n", "2", "4Gi", json!({}));
        n.add_pod(pod("a", Some("1500m"), Some("1Gi"), json!({})));
        assert_eq!(
            NodeResourcesFit.filter(
                &CycleState::default(),
                &pod("b", Some("1"), Some("1Gi"), json!({})),
                &n
            ),
            Status::unschedulable("Insufficient cpu")
        );
        assert_eq!(
            NodeResourcesFit
                .filter(
                    &CycleState::default(),
                    &pod("c", Some("1"), Some("8Gi"), json!({})),
                    &n
                )
                .reasons,
            vec!["Insufficient cpu", "Insufficient memory"]
        );
        assert!(NodeResourcesFit
            .filter(
                &CycleState::default(),
                &pod("d", Some("500m"), Some("3Gi"), json!({})),
                &n
            )
            .is_success());
    }

    #[test]
    fn init_containers_and_overhead_count() {
        let n = node("n", "1", "4Gi", json!({}));
        let init = pod(
            "i",
            Some("100m"),
            None,
            json!({"spec": {"initContainers": [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "2"}}}]}}),
        );
        assert_eq!(
            NodeResourcesFit.filter(&CycleState::default(), &init, &n),
            Status::unschedulable("Insufficient cpu")
        );
        let overhead = pod(
            "o",
            Some("900m"),
            None,
            json!({"spec": {"overhead": {"cpu": "200m"}}}),
        );
        assert!(!NodeResourcesFit
            .filter(&CycleState::default(), &overhead, &n)
            .is_success());
    }

    #[test]
    fn pod_count_and_extended_resources() {
        let mut n = node(
            "n",
            "4",
            "8Gi",
            json!({"status": {"allocatable": {"pods": "1", "example.com/gpu": "1"}}}),
        );
        let gpu = pod(
            "g",
            None,
            None,
            json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"example.com/gpu": "2"}}}]}}),
        );
        assert_eq!(
            NodeResourcesFit.filter(&CycleState::default(), &gpu, &n),
            Status::unschedulable("Insufficient example.com/gpu")
        );
        n.add_pod(pod("a", None, None, json!({})));
        assert_eq!(
            NodeResourcesFit.filter(&CycleState::default(), &pod("b", None, None, json!({})), &n),
            Status::unschedulable("Too many pods")
        );
    }

    #[test]
    fn least_allocated_prefers_the_emptier_node() {
        let busy = pod(
            "busy",
            Some("3"),
            Some("6Gi"),
            json!({"spec": {"nodeName": "full"}}),
        );
        let snap = snapshot(
            vec![
                node("full", "4", "8Gi", json!({})),
                node("empty", "4", "8Gi", json!({})),
            ],
            vec![busy],
        );
        let fw = Framework::new(vec![(Box::new(NodeResourcesFit), 1)]);
        let mut alg = Algorithm::seeded(5);
        for _ in 0..5 {
            let d = alg
                .schedule(
                    &fw,
                    &mut CycleState::default(),
                    &snap,
                    &pod("p", Some("500m"), Some("1Gi"), json!({})),
                )
                .unwrap();
            assert_eq!(d.node, "empty");
        }
        // (4000-100-0)*100/4000 = 97 for cpu at the 100m default; memory 200Mi of 8Gi = 97.
        let n = node("n", "4", "8Gi", json!({}));
        assert_eq!(
            NodeResourcesFit.score(&CycleState::default(), &pod("q", None, None, json!({})), &n),
            97
        );
    }
}
