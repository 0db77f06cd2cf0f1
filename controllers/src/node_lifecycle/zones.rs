//! Disruption per zone and the rate at which NoExecute taints may be added there (upstream's
//! ComputeZoneState, handleDisruption and the per-zone token buckets).

use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

/// Nodes per second whose pods may be evicted in a healthy zone (`--node-eviction-rate`).
pub const EVICTION_RATE: f64 = 0.1;
/// The rate in a partially disrupted large zone (`--secondary-node-eviction-rate`).
pub const SECONDARY_EVICTION_RATE: f64 = 0.01;
/// The share of not-ready nodes from which a zone is partially disrupted (`--unhealthy-zone-threshold`).
pub const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
/// Zones up to this size stop evicting when partially disrupted (`--large-cluster-size-threshold`).
pub const LARGE_CLUSTER_SIZE_THRESHOLD: usize = 50;

/// A zone's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Few nodes are not ready.
    Normal,
    /// More than two and at least [`UNHEALTHY_ZONE_THRESHOLD`] of the nodes are not ready.
    PartialDisruption,
    /// No node is ready.
    FullDisruption,
}

/// The zone key of a node: region and zone labels (empty for a node without them).
pub fn key(node: &Node) -> String {
    let l = node.labels();
    let region = l
        .get("topology.kubernetes.io/region")
        .map_or("", String::as_str);
    let zone = l
        .get("topology.kubernetes.io/zone")
        .map_or("", String::as_str);
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}:\x00:{zone}")
    }
}

/// The state of a zone with `ready` and `not_ready` nodes.
pub fn state(ready: usize, not_ready: usize) -> State {
    if ready == 0 && not_ready > 0 {
        State::FullDisruption
    } else if not_ready > 2
        && not_ready as f64 / (ready + not_ready) as f64 >= UNHEALTHY_ZONE_THRESHOLD
    {
        State::PartialDisruption
    } else {
        State::Normal
    }
}

/// The eviction rate of a zone of `size` nodes in `state` (all zones fully disrupted stop every zone).
pub fn rate(state: State, size: usize, all_fully_disrupted: bool) -> f64 {
    if all_fully_disrupted {
        return 0.0;
    }
    match state {
        State::Normal | State::FullDisruption => EVICTION_RATE,
        State::PartialDisruption if size > LARGE_CLUSTER_SIZE_THRESHOLD => SECONDARY_EVICTION_RATE,
        State::PartialDisruption => 0.0,
    }
}

/// A token bucket of burst 1 (upstream's RateLimitedTimedQueue limiter).
#[derive(Debug)]
pub struct Limiter {
    tokens: f64,
    last: Instant,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter {
            tokens: 1.0,
            last: Instant::now(),
        }
    }
}

impl Limiter {
    /// Takes a token at `rate` per second if one is there.
    pub fn try_take(&mut self, rate: f64) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * rate).min(1.0);
        self.last = now;
        if rate > 0.0 && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_states_follow_upstream_thresholds() {
        assert_eq!(state(0, 1), State::FullDisruption);
        assert_eq!(state(1, 1), State::Normal);
        assert_eq!(state(1, 2), State::Normal);
        assert_eq!(state(2, 3), State::PartialDisruption);
        assert_eq!(state(3, 3), State::Normal);
        assert_eq!(rate(State::PartialDisruption, 10, false), 0.0);
        assert_eq!(
            rate(State::PartialDisruption, 60, false),
            SECONDARY_EVICTION_RATE
        );
        assert_eq!(rate(State::FullDisruption, 1, true), 0.0);
        assert_eq!(rate(State::FullDisruption, 1, false), EVICTION_RATE);
    }

    #[test]
    fn a_limiter_has_a_burst_of_one() {
        let mut l = Limiter::default();
        assert!(l.try_take(0.1));
        assert!(!l.try_take(0.1));
        assert!(!Limiter::default().try_take(0.0));
    }
}
