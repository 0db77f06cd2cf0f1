//! Recreate: every old pod goes before any new one is made.

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::ResourceExt;

use super::replicasets::{actual, new_and_old, scale_to, size};
use super::{history, status, Pass};
use crate::error::Result;
use crate::{owner, pod_state};

/// One Recreate pass.
pub async fn rollout(s: &mut Pass<'_>, sets: Vec<ReplicaSet>) -> Result<()> {
    let (new, mut old) = new_and_old(s, sets, false).await?;
    let mut scaled = false;
    for rs in old.iter_mut().filter(|rs| size(rs) > 0) {
        scaled |= scale_to(s, rs, 0).await?;
    }
    if scaled {
        return status::sync_rollout(s, new.as_ref(), &old).await;
    }
    if old_pods_running(s, &old) {
        return status::sync_rollout(s, new.as_ref(), &old).await;
    }
    let mut new = match new {
        Some(n) => n,
        None => {
            let all: Vec<ReplicaSet> = old.to_vec();
            let (n, o) = new_and_old(s, all, true).await?;
            old = o;
            match n {
                Some(n) => n,
                None => return Ok(()),
            }
        }
    };
    if size(&new) != s.replicas() {
        scale_to(s, &mut new, s.replicas()).await?;
    }
    if status::complete(s, s.d.status.as_ref()) {
        history::cleanup(s, &old).await?;
    }
    status::sync_rollout(s, Some(&new), &old).await
}

/// Whether an old ReplicaSet still has pods that have not finished.
fn old_pods_running(s: &Pass<'_>, old: &[ReplicaSet]) -> bool {
    if old.iter().any(|rs| actual(rs) > 0) {
        return true;
    }
    let ns = s.ns();
    let uids: Vec<String> = old.iter().filter_map(|rs| rs.uid()).collect();
    s.state.pods.state().iter().any(|p| {
        p.metadata.namespace.as_deref() == Some(ns.as_str())
            && owner::controller_of(&p.metadata).is_some_and(|r| uids.contains(&r.uid))
            && !matches!(pod_state::phase(p), "Succeeded" | "Failed")
    })
}
