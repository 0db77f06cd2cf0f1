//! NodeResourcesBalancedAllocation: prefers nodes whose cpu and memory would be used in equal shares
//! once the pod is on them: score = (1 - standard deviation of the shares) * 100 (weight 1).

use crate::cache::NodeInfo;
use crate::framework::{CycleState, Plugin, MAX_NODE_SCORE};
use crate::pod_info::PodInfo;

/// Upstream's balancedResourceScorer over (requested, allocatable) pairs.
pub fn balanced_score(pairs: &[(i64, i64)]) -> i64 {
    let fractions: Vec<f64> = pairs
        .iter()
        .filter(|(_, alloc)| *alloc != 0)
        .map(|(req, alloc)| (*req as f64 / *alloc as f64).min(1.0))
        .collect();
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            let var = fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64;
            var.sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// The NodeResourcesBalancedAllocation score.
pub struct BalancedAllocation;

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        "NodeResourcesBalancedAllocation"
    }

    fn scores(&self) -> bool {
        true
    }

    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // Actual requests, not the scoring defaults (upstream's useRequested).
        balanced_score(&[
            (
                node.requested.milli_cpu + pod.requests.milli_cpu,
                node.allocatable.milli_cpu,
            ),
            (
                node.requested.memory + pod.requests.memory,
                node.allocatable.memory,
            ),
        ])
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
    fn equal_shares_score_highest() {
        assert_eq!(balanced_score(&[(500, 1000), (500, 1000)]), 100);
        assert_eq!(balanced_score(&[(1000, 1000), (0, 1000)]), 50);
        assert_eq!(balanced_score(&[(3000, 1000), (0, 1000)]), 50);
        assert_eq!(balanced_score(&[(1, 0), (0, 1000)]), 100);
    }

    #[test]
    fn a_cpu_heavy_pod_goes_where_memory_is_used() {
        let mem_user = pod(
            "m",
            Some("0"),
            Some("4Gi"),
            json!({"spec": {"nodeName": "memory-used"}}),
        );
        let snap = snapshot(
            vec![
                node("memory-used", "4", "8Gi", json!({})),
                node("idle", "4", "8Gi", json!({})),
            ],
            vec![mem_user],
        );
        let fw = Framework::new(vec![(Box::new(BalancedAllocation), 1)]);
        let d = Algorithm::seeded(9)
            .schedule(
                &fw,
                &mut CycleState::default(),
                &snap,
                &pod("p", Some("2"), None, json!({})),
            )
            .unwrap();
        assert_eq!(d.node, "memory-used");
    }
}
