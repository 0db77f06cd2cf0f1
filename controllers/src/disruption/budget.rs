//! The budget arithmetic of upstream's disruption controller: how many pods are expected, how many must
//! stay healthy, which evictions still count as in flight.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// How long an eviction the controller has not seen completed keeps its pod out of the healthy count
/// (upstream's DeletionTimeout).
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// `value` of `total`: an int as is, a percentage rounded up (upstream's GetScaledValueFromIntOrPercent
/// with roundUp).
pub fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let v = (pct * i64::from(total) + 99) / 100;
            i32::try_from(v).map_err(|_| format!("value {s:?} of {total} is out of range"))
        }
    }
}

/// Whether a budget bound needs the controllers' scale (upstream: maxUnavailable, or a percentage).
pub fn needs_scale(
    min_available: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
) -> bool {
    max_unavailable.is_some() || matches!(min_available, Some(IntOrString::String(_)))
}

/// `(expectedPods, desiredHealthy)` from the bounds, the matching pods and (when needed) the sum of
/// their controllers' replicas.
pub fn expected_and_desired(
    min_available: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    pods: i32,
    scale: i32,
) -> Result<(i32, i32), String> {
    if let Some(max) = max_unavailable {
        let unavailable = scaled(max, scale)?;
        return Ok((scale, (scale - unavailable).max(0)));
    }
    match min_available {
        Some(IntOrString::Int(i)) => Ok((pods, *i)),
        Some(pct @ IntOrString::String(_)) => Ok((scale, scaled(pct, scale)?)),
        None => Ok((0, 0)),
    }
}

/// The disruptions allowed now.
pub fn allowed(current_healthy: i32, desired_healthy: i32, expected: i32) -> i32 {
    let d = current_healthy - desired_healthy;
    if expected <= 0 || d <= 0 {
        0
    } else {
        d
    }
}

/// The evictions still in flight: those of pods that exist, are not yet deleting and were evicted less
/// than [`DELETION_TIMEOUT`] ago; and when the earliest of them expires.
pub fn in_flight(
    disrupted: &BTreeMap<String, Time>,
    live: impl Fn(&str) -> bool,
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Timestamp>) {
    let mut keep = BTreeMap::new();
    let mut next: Option<Timestamp> = None;
    for (name, at) in disrupted {
        if !live(name) {
            continue;
        }
        let Ok(expiry) = at.0.checked_add(DELETION_TIMEOUT) else {
            continue;
        };
        if expiry <= now {
            continue;
        }
        next = Some(next.map_or(expiry, |n| n.min(expiry)));
        keep.insert(name.clone(), at.clone());
    }
    (keep, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&s("50%"), 3), Ok(2));
        assert_eq!(scaled(&s("10%"), 10), Ok(1));
        assert_eq!(scaled(&IntOrString::Int(2), 10), Ok(2));
        assert!(scaled(&s("x"), 3).is_err());
    }

    #[test]
    fn bounds() {
        // minAvailable int: expected is the pods found.
        assert_eq!(
            expected_and_desired(Some(&IntOrString::Int(2)), None, 3, 0),
            Ok((3, 2))
        );
        // maxUnavailable: expected from scale.
        assert_eq!(
            expected_and_desired(None, Some(&IntOrString::Int(1)), 2, 3),
            Ok((3, 2))
        );
        assert_eq!(
            expected_and_desired(None, Some(&s("34%")), 3, 3),
            Ok((3, 1))
        );
        assert_eq!(
            expected_and_desired(Some(&s("50%")), None, 1, 4),
            Ok((4, 2))
        );
        assert_eq!(allowed(3, 2, 3), 1);
        assert_eq!(allowed(1, 2, 3), 0);
        assert_eq!(allowed(3, 0, 0), 0);
    }

    #[test]
    fn old_and_gone_evictions_drop_out() {
        let now = Timestamp::now();
        let recent = Time(now - SignedDuration::from_secs(10));
        let old = Time(now - SignedDuration::from_secs(600));
        let m = BTreeMap::from([
            ("a".to_string(), recent.clone()),
            ("b".to_string(), old),
            ("c".to_string(), recent),
        ]);
        let (keep, next) = in_flight(&m, |n| n != "c", now);
        assert_eq!(keep.keys().collect::<Vec<_>>(), vec!["a"]);
        assert!(next.is_some());
    }
}
