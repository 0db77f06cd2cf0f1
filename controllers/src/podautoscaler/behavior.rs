//! From the metrics' proposal to the replica count actually set: stabilization over recent
//! recommendations, then the scale rate and the min/max bounds, either upstream's legacy rules (no
//! `behavior`: a five-minute scale-down window, at most double or +4 per step) or the HPA's `behavior`
//! (windows and policies per direction). The history both keep lives only in the leader's memory, as
//! upstream's does.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};

/// One recommendation the metrics made, and when.
#[derive(Debug, Clone, Copy)]
struct Recommendation {
    replicas: i32,
    at: Timestamp,
}

/// One rescale in one direction: by how many replicas, and when.
#[derive(Debug, Clone, Copy)]
struct ScaleEvent {
    change: i32,
    at: Timestamp,
    outdated: bool,
}

/// What the controller remembers of one HPA between syncs.
#[derive(Debug, Clone, Default)]
pub struct History {
    recommendations: Vec<Recommendation>,
    up: Vec<ScaleEvent>,
    down: Vec<ScaleEvent>,
}

/// One sync's question: from `current`, the metrics want `desired`, within `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// The target's replicas now.
    pub current: i32,
    /// What the metrics propose.
    pub desired: i32,
    /// The HPA's minReplicas.
    pub min: i32,
    /// The HPA's maxReplicas.
    pub max: i32,
}

/// The outcome: the replicas to set and the two conditions that explain it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// Replicas to set.
    pub replicas: i32,
    /// AbleToScale's (reason, message); its status is True.
    pub able: (&'static str, &'static str),
    /// ScalingLimited's (status, reason, message).
    pub limited: (bool, &'static str, &'static str),
}

const READY: (&str, &str) = ("ReadyForNewScale", "recommended size matches current size");
const UP_STABILIZED: (&str, &str) = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
);
const DOWN_STABILIZED: (&str, &str) = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
);
const WITHIN: (&str, &str) = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);
const TOO_FEW: (&str, &str) = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);
const TOO_MANY: (&str, &str) = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const UP_LIMIT: (&str, &str) = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const DOWN_LIMIT: (&str, &str) = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);

fn before(now: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| now.checked_sub(d).ok())
        .unwrap_or(Timestamp::MIN)
}

fn secs(s: i32) -> Duration {
    Duration::from_secs(u64::from(s.max(0).unsigned_abs()))
}

fn limited(
    desired: i32,
    result: i32,
    why: (&'static str, &'static str),
) -> (bool, &'static str, &'static str) {
    (result != desired, why.0, why.1)
}

impl History {
    /// Upstream's rules for an HPA without `behavior`: the highest recommendation of the last
    /// `window` (so a drop waits it out), then at most max(2×current, 4) and within min..max.
    pub fn legacy(&mut self, ask: Ask, window: Duration, now: Timestamp) -> Normalized {
        let Ask {
            current,
            desired,
            min,
            max,
        } = ask;
        let cutoff = before(now, window);
        let mut stabilized = desired;
        let mut stale = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                stale = Some(i);
            } else if r.replicas > stabilized {
                stabilized = r.replicas;
            }
        }
        self.remember(stale, desired, now);
        let able = if stabilized != desired {
            DOWN_STABILIZED
        } else {
            READY
        };
        let up_limit = (current.saturating_mul(2)).max(4);
        let (ceiling, why_ceiling) = if max > up_limit {
            (up_limit, UP_LIMIT)
        } else {
            (max, TOO_MANY)
        };
        let (replicas, why) = if stabilized < min {
            (min, TOO_FEW)
        } else if stabilized > ceiling {
            (ceiling, why_ceiling)
        } else {
            (stabilized, WITHIN)
        };
        Normalized {
            replicas,
            able,
            limited: limited(stabilized, replicas, why),
        }
    }

    fn remember(&mut self, stale: Option<usize>, desired: i32, now: Timestamp) {
        let r = Recommendation {
            replicas: desired,
            at: now,
        };
        match stale {
            Some(i) => self.recommendations[i] = r,
            None => self.recommendations.push(r),
        }
    }

    /// The HPA's `behavior` (defaults filled in; a scale-down window left unset is `default_down_window`):
    /// the current count moved only as far as every recommendation of each direction's window agrees,
    /// then limited by the policies' rate over their periods and by min..max.
    pub fn with_behavior(
        &mut self,
        behavior: &HorizontalPodAutoscalerBehavior,
        ask: Ask,
        default_down_window: Duration,
        now: Timestamp,
    ) -> Normalized {
        let Ask {
            current,
            desired,
            min,
            max,
        } = ask;
        let up_rules = behavior.scale_up.clone().unwrap_or_default();
        let down_rules = behavior.scale_down.clone().unwrap_or_default();
        let up_window = secs(up_rules.stabilization_window_seconds.unwrap_or(0));
        let down_window = window_of(&down_rules, default_down_window);
        let (up_cut, down_cut) = (before(now, up_window), before(now, down_window));
        let (mut up, mut down) = (desired, desired);
        let mut stale = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cut {
                up = up.min(r.replicas);
            }
            if r.at > down_cut {
                down = down.max(r.replicas);
            }
            if r.at < up_cut && r.at < down_cut {
                stale = Some(i);
            }
        }
        let mut stabilized = current;
        if stabilized < up {
            stabilized = up;
        }
        if stabilized > down {
            stabilized = down;
        }
        self.remember(stale, desired, now);
        let able = if stabilized == desired {
            READY
        } else if desired >= current {
            UP_STABILIZED
        } else {
            DOWN_STABILIZED
        };

        let (replicas, why) = if stabilized > current {
            let rate = rate_limit(current, &self.up, &self.down, &up_rules, Direction::Up, now)
                .max(current);
            let (ceiling, why) = if max > rate {
                (rate, UP_LIMIT)
            } else {
                (max, TOO_MANY)
            };
            if stabilized > ceiling {
                (ceiling, why)
            } else {
                (stabilized, WITHIN)
            }
        } else if stabilized < current {
            let rate = rate_limit(
                current,
                &self.up,
                &self.down,
                &down_rules,
                Direction::Down,
                now,
            )
            .min(current);
            let (floor, why) = if min < rate {
                (rate, DOWN_LIMIT)
            } else {
                (min, TOO_FEW)
            };
            if stabilized < floor {
                (floor, why)
            } else {
                (stabilized, WITHIN)
            }
        } else {
            (stabilized, WITHIN)
        };
        Normalized {
            replicas,
            able,
            limited: limited(stabilized, replicas, why),
        }
    }

    /// Records a rescale from `from` to `to` (only HPAs with `behavior` count their rate).
    pub fn rescaled(
        &mut self,
        behavior: &HorizontalPodAutoscalerBehavior,
        from: i32,
        to: i32,
        now: Timestamp,
    ) {
        let (events, rules, change) = if to > from {
            (&mut self.up, behavior.scale_up.as_ref(), to - from)
        } else {
            (&mut self.down, behavior.scale_down.as_ref(), from - to)
        };
        let longest = rules
            .and_then(|r| r.policies.as_ref())
            .and_then(|ps| ps.iter().map(|p| p.period_seconds).max())
            .unwrap_or(0);
        let cutoff = before(now, secs(longest));
        let mut reuse = None;
        for (i, e) in events.iter_mut().enumerate() {
            if e.at < cutoff {
                e.outdated = true;
            }
            if e.outdated {
                reuse = Some(i);
            }
        }
        let e = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match reuse {
            Some(i) => events[i] = e,
            None => events.push(e),
        }
    }
}

fn window_of(rules: &HPAScalingRules, default: Duration) -> Duration {
    rules.stabilization_window_seconds.map_or(default, secs)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// The replicas changed by rescales within the last `period` seconds.
fn changed_within(events: &[ScaleEvent], period: i32, now: Timestamp) -> i32 {
    let cutoff = before(now, secs(period));
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .fold(0, i32::saturating_add)
}

/// How far the policies let one direction go from `current`, counting from each policy's period start.
fn rate_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &HPAScalingRules,
    dir: Direction,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    // Max picks the largest change: the highest count going up, the lowest going down.
    let largest_change = select != "Min";
    let mut result: Option<i32> = None;
    for p in rules.policies.iter().flatten() {
        let start = current - changed_within(up, p.period_seconds, now)
            + changed_within(down, p.period_seconds, now);
        let proposed = match (dir, p.type_.as_str()) {
            (Direction::Up, "Pods") => start.saturating_add(p.value),
            (Direction::Up, _) => {
                (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
            }
            (Direction::Down, "Pods") => start.saturating_sub(p.value),
            (Direction::Down, _) => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
        };
        let further = match dir {
            Direction::Up => largest_change,
            Direction::Down => !largest_change,
        };
        result = Some(match result {
            None => proposed,
            Some(r) if further => r.max(proposed),
            Some(r) => r.min(proposed),
        });
    }
    result.unwrap_or(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::autoscaling::v2::HPAScalingPolicy;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn policy(ty: &str, value: i32, period: i32) -> HPAScalingPolicy {
        HPAScalingPolicy {
            type_: ty.into(),
            value,
            period_seconds: period,
        }
    }

    fn ask(current: i32, desired: i32, min: i32, max: i32) -> Ask {
        Ask {
            current,
            desired,
            min,
            max,
        }
    }

    /// Upstream's defaults, with a 10 s scale-down window.
    fn behavior() -> HorizontalPodAutoscalerBehavior {
        HorizontalPodAutoscalerBehavior {
            scale_up: Some(HPAScalingRules {
                stabilization_window_seconds: Some(0),
                select_policy: Some("Max".into()),
                policies: Some(vec![policy("Pods", 4, 15), policy("Percent", 100, 15)]),
            }),
            scale_down: Some(HPAScalingRules {
                stabilization_window_seconds: Some(10),
                select_policy: Some("Max".into()),
                policies: Some(vec![policy("Percent", 100, 15)]),
            }),
        }
    }

    #[test]
    fn legacy_holds_the_highest_recent_recommendation_and_limits_the_step() {
        let mut h = History::default();
        let w = Duration::from_secs(300);
        let n = h.legacy(ask(1, 10, 1, 20), w, t(0));
        assert_eq!(n.replicas, 4);
        assert_eq!(n.limited, (true, UP_LIMIT.0, UP_LIMIT.1));
        // The drop waits for the window; the held 10 is still limited to 2×4 per step.
        let n = h.legacy(ask(4, 1, 1, 20), w, t(60));
        assert_eq!((n.replicas, n.able.0), (8, "ScaleDownStabilized"));
        let n = h.legacy(ask(4, 1, 1, 20), w, t(400));
        assert_eq!((n.replicas, n.able.0), (1, "ReadyForNewScale"));
        assert!(!n.limited.0);
    }

    #[test]
    fn behavior_scales_up_by_its_policies_and_down_after_the_window() {
        let b = behavior();
        let mut h = History::default();
        // 1 → 8 asked: Pods +4 gives 5, Percent 100 % gives 2; Max picks 5.
        let n = h.with_behavior(&b, ask(1, 8, 1, 20), Duration::from_secs(300), t(0));
        assert_eq!(n.replicas, 5);
        assert_eq!(n.limited.1, "ScaleUpLimit");
        h.rescaled(&b, 1, 5, t(0));
        // Within the same 15 s period the budget is spent from the period's start (1): still 5.
        let n = h.with_behavior(&b, ask(5, 8, 1, 20), Duration::from_secs(300), t(5));
        assert_eq!(n.replicas, 5);
        // A drop is held for the 10 s window by the higher recent recommendations.
        let n = h.with_behavior(&b, ask(5, 1, 1, 20), Duration::from_secs(300), t(8));
        assert_eq!((n.replicas, n.able.0), (5, "ScaleDownStabilized"));
        let n = h.with_behavior(&b, ask(5, 1, 1, 20), Duration::from_secs(300), t(30));
        assert_eq!((n.replicas, n.able.0), (1, "ReadyForNewScale"));
    }

    #[test]
    fn max_bounds_and_disabled_directions() {
        let mut b = behavior();
        let mut h = History::default();
        let n = h.with_behavior(&b, ask(2, 9, 1, 3), Duration::from_secs(300), t(0));
        assert_eq!((n.replicas, n.limited.1), (3, "TooManyReplicas"));
        if let Some(up) = b.scale_up.as_mut() {
            up.select_policy = Some("Disabled".into());
        }
        let mut h = History::default();
        let n = h.with_behavior(&b, ask(2, 9, 1, 30), Duration::from_secs(300), t(0));
        assert_eq!(n.replicas, 2);
    }
}
