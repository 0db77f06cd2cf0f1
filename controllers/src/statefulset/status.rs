//! A StatefulSet's status: its pods counted by readiness and revision, written only when it changes.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::ResourceExt;

use super::identity::revision_of;
use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::pod_state::is_ready as pod_ready;

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The counts of upstream's computeReplicaStatus (terminating pods count as replicas, not as current
/// or updated ones; available = ready, as minReadySeconds is not waited for).
pub fn compute(pods: &[Arc<Pod>], current: &str, update: &str) -> StatefulSetStatus {
    let running = |p: &Pod| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && pod_ready(p)
    };
    let live: Vec<_> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let ready = count(live.iter().filter(|p| running(p)).count());
    StatefulSetStatus {
        replicas: count(pods.len()),
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        current_replicas: Some(count(
            live.iter()
                .filter(|p| revision_of(p) == Some(current))
                .count(),
        )),
        updated_replicas: Some(count(
            live.iter()
                .filter(|p| revision_of(p) == Some(update))
                .count(),
        )),
        ..Default::default()
    }
}

/// Writes `status` if it differs, conditionally on the cached resourceVersion (a conflict means a newer
/// object, which reconciles again).
pub async fn write(ctx: &Context, set: &StatefulSet, status: StatefulSetStatus) -> Result<()> {
    if set.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut next = set.clone();
    next.status = Some(status);
    let ns = set.namespace().unwrap_or_default();
    match ctx
        .api::<StatefulSet>(&ns)
        .replace_status(&set.name_any(), &PostParams::default(), &next)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
