//! `spec.activeDeadlineSeconds`, as the kubelet's active deadline handler: a pod active on the node
//! longer than its deadline (counted from `status.startTime`) is failed with upstream's reason and
//! message, its containers killed, and a Normal `DeadlineExceeded` Event posted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// The pod's `status.reason` (and the Event's reason).
pub const REASON: &str = "DeadlineExceeded";
/// The pod's `status.message` (and the Event's note).
pub const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// How long the pod has left at `now`: None without a deadline or a start time (as upstream, the
/// deadline counts only once the status has a `startTime`), zero once it is exceeded.
pub fn remaining(pod: &Pod, now: Timestamp) -> Option<Duration> {
    let secs = pod.spec.as_ref()?.active_deadline_seconds?;
    let start = pod.status.as_ref()?.start_time.as_ref()?.0;
    let allowed = i128::from(secs.max(0)) * 1_000_000_000;
    let active = now.as_nanosecond() - start.as_nanosecond();
    let left = u64::try_from((allowed - active).max(0)).unwrap_or(u64::MAX);
    Some(Duration::from_nanos(left))
}

/// Whether the pod has run past its deadline at `now` (upstream: active time >= the deadline).
pub fn exceeded(pod: &Pod, now: Timestamp) -> bool {
    remaining(pod, now).is_some_and(|d| d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(deadline: Option<i64>, start: Option<i64>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                active_deadline_seconds: deadline,
                ..Default::default()
            }),
            status: Some(PodStatus {
                start_time: start.and_then(|s| Timestamp::from_second(s).ok()).map(Time),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn counts_from_the_start_time() {
        assert_eq!(remaining(&pod(None, Some(1000)), at(5000)), None);
        assert_eq!(remaining(&pod(Some(30), None), at(5000)), None);
        assert_eq!(
            remaining(&pod(Some(30), Some(1000)), at(1010)),
            Some(Duration::from_secs(20))
        );
        assert!(!exceeded(&pod(Some(30), Some(1000)), at(1029)));
        assert!(exceeded(&pod(Some(30), Some(1000)), at(1030)));
        assert!(exceeded(&pod(Some(30), Some(1000)), at(1090)));
    }
}
