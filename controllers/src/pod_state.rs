//! What a controller reads from a pod's status: active, ready, available, ready since when.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// Whether the pod still counts toward its owner's replicas: not finished and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    let phase = phase(pod);
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's phase (`Pending` when it reports none yet).
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// When the pod's Ready condition last became True, if it is True.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (c.status == "True").then(|| c.last_transition_time.as_ref().map(|t| t.0))
}

/// Whether the pod is Ready.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Whether the pod has been Ready for `min_ready_seconds` at `now`; if it is Ready but not for long enough,
/// how long until it is (`Err`).
pub fn available(
    pod: &Pod,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Result<bool, std::time::Duration> {
    let Some(since) = ready_since(pod) else {
        return Ok(false);
    };
    if min_ready_seconds <= 0 {
        return Ok(true);
    }
    let Some(since) = since else {
        // Ready without a transition time: nothing to wait from.
        return Ok(true);
    };
    let need = std::time::Duration::from_secs(min_ready_seconds.unsigned_abs().into());
    // A transition time in the future (clock skew) counts as just now.
    let had = if now > since {
        now.duration_since(since).unsigned_abs()
    } else {
        std::time::Duration::ZERO
    };
    if had >= need {
        Ok(true)
    } else {
        Err(need - had)
    }
}

/// Sum of the pod's container restarts.
pub fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}
