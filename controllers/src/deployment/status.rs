//! The Deployment's status: counts summed over its ReplicaSets, and the Available and Progressing
//! conditions `kubectl rollout status` reads.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::replicasets::{actual, available};
use super::{rollout, Pass};
use crate::error::Result;

/// The Available condition.
pub const AVAILABLE: &str = "Available";
/// The Progressing condition.
pub const PROGRESSING: &str = "Progressing";
/// The ReplicaFailure condition (copied from a ReplicaSet).
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
/// Progressing's reason once the rollout is done.
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
/// Progressing's reason once the deadline passed.
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
/// Progressing's reason while paused.
pub const PAUSED: &str = "DeploymentPaused";
/// Progressing's reason right after a resume.
pub const RESUMED: &str = "DeploymentResumed";

/// A condition stamped now.
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) -> DeploymentCondition {
    let now = Some(Time(Timestamp::now()));
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: now.clone(),
        last_transition_time: now,
    }
}

/// The Deployment's condition `type_`.
pub fn condition(s: &Pass<'_>, type_: &str) -> Option<DeploymentCondition> {
    get(s.d.status.as_ref()?, type_).cloned()
}

fn get<'a>(st: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    st.conditions.iter().flatten().find(|c| c.type_ == type_)
}

/// Sets `c` unless the same status and reason are already there; an unchanged status keeps its
/// transition time.
pub fn set_condition(st: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = get(st, &c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(st, &c.type_);
    st.conditions.get_or_insert_with(Vec::new).push(c);
}

fn remove_condition(st: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = st.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
        if cs.is_empty() {
            st.conditions = None;
        }
    }
}

/// Whether `progressDeadlineSeconds` is set (and not "forever").
pub fn has_progress_deadline(s: &Pass<'_>) -> bool {
    s.d.spec
        .as_ref()
        .and_then(|x| x.progress_deadline_seconds)
        .is_some_and(|p| p != i32::MAX)
}

fn deadline(s: &Pass<'_>) -> Duration {
    let secs =
        s.d.spec
            .as_ref()
            .and_then(|x| x.progress_deadline_seconds)
            .unwrap_or(600);
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// The status the ReplicaSets add up to.
pub fn calculate(
    s: &Pass<'_>,
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
) -> Result<DeploymentStatus> {
    let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
    let avail: i32 = all.iter().map(|rs| available(rs)).sum();
    let total: i32 = all.iter().map(|rs| actual(rs)).sum();
    let ready: i32 = all
        .iter()
        .map(|rs| {
            rs.status
                .as_ref()
                .and_then(|x| x.ready_replicas)
                .unwrap_or(0)
        })
        .sum();
    let old_status = s.d.status.clone().unwrap_or_default();
    let mut st = DeploymentStatus {
        observed_generation: s.d.metadata.generation,
        replicas: Some(total),
        updated_replicas: Some(new.map_or(0, actual)),
        ready_replicas: Some(ready),
        available_replicas: Some(avail),
        unavailable_replicas: Some((total - avail).max(0)),
        collision_count: old_status.collision_count,
        conditions: old_status.conditions,
    };
    if avail >= s.replicas() - rollout::max_unavailable(s)? {
        set_condition(
            &mut st,
            new_condition(
                AVAILABLE,
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            ),
        );
    } else {
        set_condition(
            &mut st,
            new_condition(
                AVAILABLE,
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            ),
        );
    }
    Ok(st)
}

/// Whether the rollout reached every replica updated and available.
pub fn complete(s: &Pass<'_>, st: Option<&DeploymentStatus>) -> bool {
    let Some(st) = st else { return false };
    let n = Some(s.replicas());
    st.updated_replicas == n
        && st.replicas == n
        && st.available_replicas == n
        && st.observed_generation >= s.d.metadata.generation
}

fn progressing(s: &Pass<'_>, new: &DeploymentStatus) -> bool {
    let old = s.d.status.clone().unwrap_or_default();
    let v = |x: Option<i32>| x.unwrap_or(0);
    let old_old = v(old.replicas) - v(old.updated_replicas);
    let new_old = v(new.replicas) - v(new.updated_replicas);
    v(new.updated_replicas) > v(old.updated_replicas)
        || new_old < old_old
        || v(new.ready_replicas) > v(old.ready_replicas)
        || v(new.available_replicas) > v(old.available_replicas)
}

/// Status after a rollout step: counts, Available, and Progressing (done, progressing, or timed out).
pub async fn sync_rollout(
    s: &mut Pass<'_>,
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
) -> Result<()> {
    let mut st = calculate(s, new, old)?;
    if !has_progress_deadline(s) {
        remove_condition(&mut st, PROGRESSING);
    }
    let current = get(&st, PROGRESSING).cloned();
    let done = st.replicas == st.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
    let rs_name = new.map(ResourceExt::name_any).unwrap_or_default();
    if has_progress_deadline(s) && !done {
        if complete(s, Some(&st)) {
            set_condition(
                &mut st,
                new_condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_AVAILABLE,
                    format!("ReplicaSet {rs_name:?} has successfully progressed."),
                ),
            );
        } else if progressing(s, &st) {
            let mut c = new_condition(
                PROGRESSING,
                "True",
                "ReplicaSetUpdated",
                format!("ReplicaSet {rs_name:?} is progressing."),
            );
            if let Some(cur) = current.as_ref().filter(|c| c.status == "True") {
                c.last_transition_time = cur.last_transition_time.clone();
            }
            // Progress refreshes lastUpdateTime: the deadline counts from the last step forward.
            remove_condition(&mut st, PROGRESSING);
            set_condition(&mut st, c);
        } else if timed_out(s, current.as_ref()) {
            set_condition(
                &mut st,
                new_condition(
                    PROGRESSING,
                    "False",
                    TIMED_OUT,
                    format!("ReplicaSet {rs_name:?} has timed out progressing."),
                ),
            );
        }
    }
    let failure = old
        .iter()
        .chain(new)
        .filter_map(|rs| {
            rs.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == REPLICA_FAILURE && c.status == "True")
        })
        .next();
    match failure {
        Some(f) => {
            let mut c = new_condition(
                REPLICA_FAILURE,
                &f.status,
                f.reason.as_deref().unwrap_or(""),
                f.message.clone().unwrap_or_default(),
            );
            c.last_transition_time = f.last_transition_time.clone();
            set_condition(&mut st, c);
        }
        None => remove_condition(&mut st, REPLICA_FAILURE),
    }
    // Not done yet: look again when the deadline would pass, as nothing else may wake us.
    if has_progress_deadline(s) && !complete(s, Some(&st)) {
        if let Some(c) = get(&st, PROGRESSING) {
            if c.reason.as_deref() != Some(TIMED_OUT)
                && c.reason.as_deref() != Some(NEW_RS_AVAILABLE)
            {
                let from = c
                    .last_update_time
                    .as_ref()
                    .map_or_else(Timestamp::now, |t| t.0);
                let since = Timestamp::now().duration_since(from).unsigned_abs();
                let left = deadline(s).saturating_sub(since);
                s.requeue_within(left + Duration::from_secs(1));
            }
        }
    }
    s.write_status(st).await
}

fn timed_out(s: &Pass<'_>, current: Option<&DeploymentCondition>) -> bool {
    let Some(c) = current else { return false };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => {
            let Some(from) = c.last_update_time.as_ref() else {
                return false;
            };
            let Ok(limit) = k8s_openapi::jiff::SignedDuration::try_from(deadline(s)) else {
                return false;
            };
            from.0
                .checked_add(limit)
                .is_ok_and(|t| t < Timestamp::now())
        }
    }
}

/// Status with only the counts and Available refreshed (scaling, paused, being deleted).
pub async fn sync_status_only(
    s: &mut Pass<'_>,
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
) -> Result<()> {
    let st = calculate(s, new, old)?;
    s.write_status(st).await
}

/// Progressing says DeploymentPaused while paused and DeploymentResumed right after.
pub async fn check_paused(s: &mut Pass<'_>) -> Result<()> {
    if !has_progress_deadline(s) {
        return Ok(());
    }
    let paused = s.d.spec.as_ref().and_then(|x| x.paused).unwrap_or(false);
    let cond_paused = condition(s, PROGRESSING).and_then(|c| c.reason).as_deref() == Some(PAUSED);
    let mut st = s.d.status.clone().unwrap_or_default();
    if paused && !cond_paused {
        set_condition(
            &mut st,
            new_condition(
                PROGRESSING,
                "Unknown",
                PAUSED,
                "Deployment is paused".into(),
            ),
        );
    } else if !paused && cond_paused {
        set_condition(
            &mut st,
            new_condition(
                PROGRESSING,
                "Unknown",
                RESUMED,
                "Deployment is resumed".into(),
            ),
        );
    } else {
        return Ok(());
    }
    s.write_status(st).await
}
