//! Revisions: the annotations that number a Deployment's ReplicaSets (what `kubectl rollout history` and
//! `undo` read), and pruning old ReplicaSets past `revisionHistoryLimit`.

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::{DeleteParams, Preconditions};
use kube::ResourceExt;

use super::replicasets::{actual, size};
use super::Pass;
use crate::error::{is_conflict, is_not_found, Result};

/// The ReplicaSet's (and Deployment's) revision number.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a reused ReplicaSet had, comma-separated.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas plus maxSurge then.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Longest revision-history annotation kept (upstream's limit).
const MAX_HISTORY_CHARS: usize = 2000;

/// Deployment annotations never copied to its ReplicaSets.
const SKIPPED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// The ReplicaSet's revision (0 if it has none or it does not parse).
pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The highest revision among `sets`.
pub fn max_revision(sets: &[ReplicaSet]) -> i64 {
    sets.iter().map(revision).max().unwrap_or(0)
}

/// Sets the desired/max replicas annotations; returns whether they changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let a = rs.annotations_mut();
    let (d, m) = (desired.to_string(), max.to_string());
    let changed = a.get(DESIRED_REPLICAS) != Some(&d) || a.get(MAX_REPLICAS) != Some(&m);
    a.insert(DESIRED_REPLICAS.into(), d);
    a.insert(MAX_REPLICAS.into(), m);
    changed
}

/// Brings the new ReplicaSet's annotations up to date: the Deployment's own (e.g. change-cause), the
/// revision `new_revision` if it is higher (recording the one it had in revision-history), and for a new
/// ReplicaSet the replicas annotations. Returns whether anything changed.
pub fn set_new_annotations(
    s: &Pass<'_>,
    rs: &mut ReplicaSet,
    new_revision: &str,
    exists: bool,
) -> bool {
    let mut changed = false;
    let from_deploy: Vec<(String, String)> =
        s.d.annotations()
            .iter()
            .filter(|(k, _)| !SKIPPED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
    let a = rs.annotations_mut();
    for (k, v) in from_deploy {
        if a.get(&k) != Some(&v) {
            a.insert(k, v);
            changed = true;
        }
    }
    let old = a.get(REVISION).cloned().unwrap_or_default();
    let old_n: i64 = old.parse().unwrap_or(0);
    let new_n: i64 = new_revision.parse().unwrap_or(0);
    if old_n < new_n {
        a.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if !old.is_empty() {
            // A template that comes back: its ReplicaSet keeps the numbers it had.
            let mut list: Vec<String> = a
                .get(REVISION_HISTORY)
                .map(|h| {
                    h.split(',')
                        .filter(|x| !x.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            list.push(old);
            while list.len() > 1 && list.join(",").len() > MAX_HISTORY_CHARS {
                list.remove(0);
            }
            a.insert(REVISION_HISTORY.into(), list.join(","));
        }
    }
    if !exists {
        let max = s.replicas() + super::rollout::max_surge(s).unwrap_or(0);
        changed |= set_replicas_annotations(rs, s.replicas(), max);
    }
    changed
}

/// Deletes the oldest scaled-down ReplicaSets beyond `revisionHistoryLimit`.
pub async fn cleanup(s: &Pass<'_>, old: &[ReplicaSet]) -> Result<()> {
    let Some(limit) = s.d.spec.as_ref().and_then(|x| x.revision_history_limit) else {
        return Ok(());
    };
    let mut alive: Vec<&ReplicaSet> = old
        .iter()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .collect();
    let excess = alive
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(0));
    if excess == 0 {
        return Ok(());
    }
    alive.sort_by_key(|rs| {
        (
            revision(rs),
            rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        )
    });
    let api = s.ctx.api::<ReplicaSet>(&s.ns());
    for rs in alive.into_iter().take(excess) {
        let settled =
            rs.metadata.generation <= rs.status.as_ref().and_then(|x| x.observed_generation);
        if actual(rs) != 0 || size(rs) != 0 || !settled {
            continue;
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: rs.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&rs.name_any(), &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
