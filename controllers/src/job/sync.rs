//! One pass over a job: count its finished pods, decide whether it succeeded or failed, create or delete
//! pods to match parallelism, then write the status (twice when pods were released: first recording them
//! as uncounted, then, once their finalizers are gone, in the counters).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::debug;

use super::conditions::{self as cond, FAILURE_TARGET, SUCCESS_CRITERIA_MET};
use super::failure_policy::{judge, Verdict};
use super::pods::{self, remove_finalizer, tracked};
use super::{indexes, State};
use crate::context::Context;
use crate::error::{is_not_found, Result};

/// The first replacement of a failed pod waits this long; each further failure doubles it.
const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// The longest wait before replacing a failed pod.
const BACKOFF_CAP: Duration = Duration::from_secs(360);

/// The recreate delay after `n` consecutive failures.
pub fn failure_delay(n: u32) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32
        .checked_shl(n.saturating_sub(1).min(16))
        .unwrap_or(u32::MAX);
    BACKOFF_BASE
        .checked_mul(factor)
        .map_or(BACKOFF_CAP, |d| d.min(BACKOFF_CAP))
}

fn since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or(Duration::ZERO)
}

async fn event(st: &State, job: &Job, type_: EventType, reason: &str, note: String, action: &str) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = st.recorder.publish(&ev, &job.object_ref(&())).await {
        debug!(error = %e, reason, "job event not recorded");
    }
}

/// Reconciles one job.
pub async fn reconcile(job: Arc<Job>, ctx: Arc<Context>, st: Arc<State>) -> Result<Action> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key = format!("{ns}/{name}");
    let uid = job.uid().unwrap_or_default();
    let Some(spec) = job.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    let all: Vec<Arc<Pod>> = ctx
        .store::<Pod>()
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()) && pods::owned_by(p, &uid))
        .collect();
    let refs: Vec<&Pod> = all.iter().map(AsRef::as_ref).collect();
    let (satisfied, unfinalized) = st.expectations.observe(&key, &refs);
    let pod_api: Api<Pod> = ctx.api(&ns);
    let old = job.status.clone().unwrap_or_default();

    // A finished or deleted job only lets go of its pods.
    if job.metadata.deletion_timestamp.is_some() || cond::finished(&old) {
        for p in all.iter().filter(|p| tracked(p)) {
            remove_finalizer(&pod_api, p).await?;
        }
        st.expectations.forget(&key);
        return Ok(Action::await_change());
    }

    let now = Timestamp::now();
    let mut status = old.clone();
    let suspended = spec.suspend == Some(true);
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let per_index = spec.backoff_limit_per_index.is_some();
    let unc = old.uncounted_terminated_pods.clone().unwrap_or_default();
    let mut unc_ok: BTreeSet<String> = unc
        .succeeded
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut unc_failed: BTreeSet<String> =
        unc.failed.clone().unwrap_or_default().into_iter().collect();
    let before = (unc_ok.len(), unc_failed.len());
    let mut completed = indexes::parse(old.completed_indexes.as_deref(), completions.unwrap_or(0));
    let mut failed_indexes =
        indexes::parse(old.failed_indexes.as_deref(), completions.unwrap_or(0));
    let mut finishing: Option<JobCondition> = cond::true_condition(&old, FAILURE_TARGET)
        .or_else(|| cond::true_condition(&old, SUCCESS_CRITERIA_MET))
        .cloned();
    let mut release: Vec<Arc<Pod>> = Vec::new();
    let mut new_failures = 0u32;
    let mut new_successes = 0u32;
    let mut last_failure: Option<Timestamp> = None;

    // Newly finished pods become uncounted (they keep their finalizer until the status says so).
    for p in &all {
        let puid = p.uid().unwrap_or_default();
        if pods::phase(p) == "Succeeded" {
            if let Some(i) = pods::index(p).filter(|_| indexed) {
                if completions.is_some_and(|c| i < c) {
                    completed.insert(i);
                }
            }
        }
        if !tracked(p) || unfinalized.contains(&puid) {
            continue;
        }
        if unc_ok.contains(&puid) || unc_failed.contains(&puid) {
            release.push(p.clone());
            continue;
        }
        if pods::phase(p) == "Succeeded" {
            unc_ok.insert(puid);
            new_successes += 1;
            release.push(p.clone());
        } else if pods::failed(p, &job) {
            let verdict = if pods::phase(p) == "Failed" {
                judge(spec.pod_failure_policy.as_ref(), p)
            } else {
                Verdict::Count
            };
            match verdict {
                Verdict::Ignore => {}
                Verdict::FailJob(message) => {
                    unc_failed.insert(puid);
                    if finishing.is_none() {
                        finishing =
                            Some(cond::new(FAILURE_TARGET, "PodFailurePolicy", &message, now));
                    }
                }
                Verdict::FailIndex => {
                    unc_failed.insert(puid);
                    if let Some(i) = pods::index(p).filter(|_| per_index) {
                        failed_indexes.insert(i);
                    }
                }
                Verdict::Count => {
                    // With a per-index limit, the index fails once its pods failed that many times.
                    if let (Some(limit), Some(i)) = (spec.backoff_limit_per_index, pods::index(p)) {
                        if pods::failure_count(p) >= limit {
                            failed_indexes.insert(i);
                        }
                    }
                    unc_failed.insert(puid);
                    new_failures += 1;
                    let t = pods::finish_time(p).unwrap_or(now);
                    last_failure = Some(last_failure.map_or(t, |l| l.max(t)));
                }
            }
            release.push(p.clone());
        }
    }

    // The replacement back-off: consecutive failures, reset by a success.
    let (streak, last) = {
        let mut map = st
            .failures
            .lock()
            .map_err(|_| crate::Error::Invalid("poisoned".into()))?;
        let entry = map.entry(key.clone()).or_insert((0, now));
        if new_successes > 0 {
            *entry = (0, now);
        }
        if new_failures > 0 {
            entry.0 = entry.0.saturating_add(new_failures);
            entry.1 = last_failure.unwrap_or(now);
        }
        *entry
    };

    let old_failed = old.failed.unwrap_or(0);
    let old_succeeded = old.succeeded.unwrap_or(0);
    let failed_total =
        old_failed.saturating_add(i32::try_from(unc_failed.len()).unwrap_or(i32::MAX));
    let succeeded_total = if indexed {
        i32::try_from(completed.len()).unwrap_or(i32::MAX)
    } else {
        old_succeeded.saturating_add(i32::try_from(unc_ok.len()).unwrap_or(i32::MAX))
    };
    let active: Vec<&Arc<Pod>> = all.iter().filter(|p| pods::active(p)).collect();

    // Resumed or suspended; the start time restarts on resume, as upstream.
    let was_suspended = cond::true_condition(&old, cond::SUSPENDED).is_some();
    if suspended && !was_suspended && finishing.is_none() {
        cond::set(
            &mut status,
            cond::new(cond::SUSPENDED, "JobSuspended", "Job suspended", now),
        );
        event(
            &st,
            &job,
            EventType::Normal,
            "Suspended",
            "Job suspended".into(),
            "Suspend",
        )
        .await;
    } else if !suspended && was_suspended {
        let mut c = cond::new(cond::SUSPENDED, "JobResumed", "Job resumed", now);
        c.status = "False".into();
        cond::set(&mut status, c);
        status.start_time = Some(Time(now));
        event(
            &st,
            &job,
            EventType::Normal,
            "Resumed",
            "Job resumed".into(),
            "Resume",
        )
        .await;
    }
    if !suspended && status.start_time.is_none() {
        status.start_time = Some(Time(now));
    }

    let mut requeue: Option<Duration> = None;
    if finishing.is_none() {
        let deadline = spec
            .active_deadline_seconds
            .filter(|_| !suspended)
            .zip(status.start_time.as_ref());
        let max_failed = spec.max_failed_indexes.filter(|_| per_index);
        if failed_total > backoff_limit {
            finishing = Some(cond::new(
                FAILURE_TARGET,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                now,
            ));
        } else if let Some((secs, start)) = deadline {
            let end = start
                .0
                .checked_add(SignedDuration::from_secs(secs))
                .unwrap_or(start.0);
            if now >= end {
                finishing = Some(cond::new(
                    FAILURE_TARGET,
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    now,
                ));
            } else {
                requeue = Some(since(end, now).max(Duration::from_millis(100)));
            }
        }
        if finishing.is_none()
            && max_failed
                .is_some_and(|m| i32::try_from(failed_indexes.len()).unwrap_or(i32::MAX) > m)
        {
            finishing = Some(cond::new(
                FAILURE_TARGET,
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
                now,
            ));
        }
        let all_indexes_done = indexed
            && completions.is_some_and(|c| {
                i32::try_from(completed.len() + failed_indexes.len()).unwrap_or(i32::MAX) >= c
            });
        if finishing.is_none() && per_index && !failed_indexes.is_empty() && all_indexes_done {
            finishing = Some(cond::new(
                FAILURE_TARGET,
                "FailedIndexes",
                "Job has failed indexes",
                now,
            ));
        }
        let succeeded = match completions {
            Some(c) if indexed => i32::try_from(completed.len()).unwrap_or(i32::MAX) >= c,
            Some(c) => succeeded_total >= c,
            None => succeeded_total > 0 && active.is_empty(),
        };
        if finishing.is_none() && succeeded {
            finishing = Some(cond::new(
                SUCCESS_CRITERIA_MET,
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            ));
        }
    }
    let failing = finishing
        .as_ref()
        .is_some_and(|c| c.type_ == FAILURE_TARGET);

    // Pods to delete and to create.
    let mut deleted: HashSet<String> = HashSet::new();
    let mut to_delete: Vec<&Arc<Pod>> = Vec::new();
    let mut create: Vec<Option<i32>> = Vec::new();
    if finishing.is_some() || suspended {
        to_delete.extend(active.iter().copied());
    } else if satisfied {
        if indexed {
            let c = completions.unwrap_or(0);
            let mut seen: HashSet<i32> = HashSet::new();
            let mut keep = 0;
            for p in &active {
                match pods::index(p) {
                    Some(i)
                        if i < c
                            && !completed.contains(&i)
                            && !failed_indexes.contains(&i)
                            && keep < parallelism
                            && seen.insert(i) =>
                    {
                        keep += 1
                    }
                    _ => to_delete.push(p),
                }
            }
            let free = (0..c).filter(|i| {
                !completed.contains(i) && !failed_indexes.contains(i) && !seen.contains(i)
            });
            create.extend(
                free.take(usize::try_from(parallelism - keep).unwrap_or(0))
                    .map(Some),
            );
        } else {
            // With podReplacementPolicy Failed a terminating pod is replaced only once it has failed.
            let waiting = if spec.pod_replacement_policy.as_deref() == Some("Failed") {
                all.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_some() && !pods::terminal(p))
                    .count()
            } else {
                0
            };
            let have = i32::try_from(active.len() + waiting).unwrap_or(i32::MAX);
            let want = match completions {
                Some(c) => parallelism.min(c.saturating_sub(succeeded_total)).max(0),
                None if succeeded_total > 0 => have.min(parallelism),
                None => parallelism,
            };
            if have > want {
                // Not-ready pods go first, then the newest.
                let mut order = active.clone();
                order.sort_by_key(|p| {
                    (
                        crate::pod_state::is_ready(p),
                        std::cmp::Reverse(p.creation_timestamp().map(|t| t.0)),
                    )
                });
                to_delete.extend(
                    order
                        .into_iter()
                        .take(usize::try_from(have - want).unwrap_or(0)),
                );
            } else {
                create.extend((have..want).map(|_| None));
            }
        }
        let wait = failure_delay(streak);
        let waited = since(now, last);
        if !create.is_empty() && streak > 0 && waited < wait {
            let left = wait.saturating_sub(waited);
            debug!(job = %key, ?left, "replacement of failed pods backing off");
            requeue = Some(requeue.map_or(left, |r| r.min(left)));
            create.clear();
        }
    }

    for p in &to_delete {
        let pname = p.name_any();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: p.uid(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match pod_api.delete(&pname, &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        st.expectations.deleted(&key, &p.uid().unwrap_or_default());
        deleted.insert(p.uid().unwrap_or_default());
        event(
            &st,
            &job,
            EventType::Normal,
            "SuccessfulDelete",
            format!("Deleted pod: {pname}"),
            "Delete",
        )
        .await;
    }
    let mut created = 0;
    for index in create {
        let mut pod = pods::new_pod(&job, index);
        if let (true, Some(i)) = (per_index, index) {
            // One more than the most failed earlier pod of this index.
            let count = all
                .iter()
                .filter(|p| pods::index(p) == Some(i) && pods::failed(p, &job))
                .map(|p| pods::failure_count(p).saturating_add(1))
                .max()
                .unwrap_or(0);
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(pods::INDEX_FAILURE_COUNT.into(), count.to_string());
        }
        match pod_api.create(&PostParams::default(), &pod).await {
            Ok(pod) => {
                let pname = pod.name_any();
                st.expectations.created(&key, &pname);
                created += 1;
                event(
                    &st,
                    &job,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created pod: {pname}"),
                    "Create",
                )
                .await;
            }
            // The namespace is terminating: nothing can be created there.
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            Err(e) => {
                event(
                    &st,
                    &job,
                    EventType::Warning,
                    "FailedCreate",
                    format!("Error creating: {e}"),
                    "Create",
                )
                .await;
                return Err(e.into());
            }
        }
    }

    // Once the job is finishing, every pod is released; those not yet terminal count as failed unless it
    // succeeded.
    if finishing.is_some() {
        for p in &all {
            let puid = p.uid().unwrap_or_default();
            if !tracked(p)
                || unfinalized.contains(&puid)
                || release.iter().any(|r| r.uid() == p.uid())
            {
                continue;
            }
            if failing && !pods::terminal(p) {
                unc_failed.insert(puid);
            }
            release.push(p.clone());
        }
    }

    let api: Api<Job> = ctx.api(&ns);
    let mut current = (*job).clone();
    if finishing.is_some() {
        if let Some(c) = finishing.clone() {
            cond::set(&mut status, c);
        }
    }
    status.completed_indexes = indexed.then(|| indexes::format(&completed)).flatten();
    status.failed_indexes = per_index
        .then(|| indexes::format(&failed_indexes))
        .flatten();

    // First write: the newly finished pods are recorded as uncounted before their finalizers go.
    if !release.is_empty() && (unc_ok.len(), unc_failed.len()) != before {
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
            succeeded: Some(unc_ok.iter().cloned().collect()),
            failed: Some(unc_failed.iter().cloned().collect()),
        });
        current.status = Some(status.clone());
        current = api
            .replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    let mut released: HashSet<String> = HashSet::new();
    for p in &release {
        remove_finalizer(&pod_api, p).await?;
        let puid = p.uid().unwrap_or_default();
        st.expectations.unfinalized(&key, &puid);
        released.insert(puid);
    }

    // Second write: released (or vanished) pods move from uncounted into the counters.
    let present: HashSet<String> = all
        .iter()
        .filter(|p| tracked(p))
        .filter_map(|p| p.uid())
        .collect();
    let gone = |u: &String| released.contains(u) || unfinalized.contains(u) || !present.contains(u);
    let ok_done: Vec<String> = unc_ok.iter().filter(|u| gone(u)).cloned().collect();
    let failed_done: Vec<String> = unc_failed.iter().filter(|u| gone(u)).cloned().collect();
    for u in &ok_done {
        unc_ok.remove(u);
    }
    for u in &failed_done {
        unc_failed.remove(u);
    }
    if !indexed {
        status.succeeded =
            Some(old_succeeded.saturating_add(i32::try_from(ok_done.len()).unwrap_or(i32::MAX)));
    } else {
        status.succeeded = Some(i32::try_from(completed.len()).unwrap_or(i32::MAX));
    }
    status.failed =
        Some(old_failed.saturating_add(i32::try_from(failed_done.len()).unwrap_or(i32::MAX)));
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
        succeeded: (!unc_ok.is_empty()).then(|| unc_ok.iter().cloned().collect()),
        failed: (!unc_failed.is_empty()).then(|| unc_failed.iter().cloned().collect()),
    });
    let still_active: Vec<&&Arc<Pod>> = active
        .iter()
        .filter(|p| !deleted.contains(&p.uid().unwrap_or_default()))
        .collect();
    status.active = Some(
        i32::try_from(still_active.len())
            .unwrap_or(i32::MAX)
            .saturating_add(created),
    );
    status.ready = Some(
        i32::try_from(
            still_active
                .iter()
                .filter(|p| crate::pod_state::is_ready(p))
                .count(),
        )
        .unwrap_or(i32::MAX),
    );
    let terminating = all
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && !pods::terminal(p))
        .filter(|p| !released.contains(&p.uid().unwrap_or_default()) && tracked(p))
        .count()
        + deleted.len();
    status.terminating = Some(i32::try_from(terminating).unwrap_or(i32::MAX));

    // The final condition, once no pod is left running or uncounted.
    let mut finished_now = None;
    if let Some(c) = finishing.as_ref() {
        if unc_ok.is_empty()
            && unc_failed.is_empty()
            && terminating == 0
            && status.active == Some(0)
        {
            let (type_, reason, message) = if failing {
                (
                    cond::FAILED,
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            } else {
                status.completion_time = Some(Time(now));
                (
                    cond::COMPLETE,
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            };
            cond::set(&mut status, cond::new(type_, &reason, &message, now));
            finished_now = Some((failing, reason, message));
        } else {
            requeue =
                Some(requeue.map_or(Duration::from_secs(1), |r| r.min(Duration::from_secs(1))));
        }
    }

    if current.status.as_ref() != Some(&status) {
        current.status = Some(status);
        api.replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    match finished_now {
        Some((true, reason, message)) => {
            event(&st, &job, EventType::Warning, &reason, message, "Fail").await;
            forget(&st, &key);
        }
        Some((false, _, _)) => {
            event(
                &st,
                &job,
                EventType::Normal,
                "Completed",
                "Job completed".into(),
                "Complete",
            )
            .await;
            forget(&st, &key);
        }
        None => {}
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

fn forget(st: &State, key: &str) {
    if let Ok(mut m) = st.failures.lock() {
        m.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_delay_doubles_from_ten_seconds_to_six_minutes() {
        assert_eq!(failure_delay(0), Duration::ZERO);
        assert_eq!(failure_delay(1), Duration::from_secs(10));
        assert_eq!(failure_delay(2), Duration::from_secs(20));
        assert_eq!(failure_delay(6), Duration::from_secs(320));
        assert_eq!(failure_delay(7), BACKOFF_CAP);
        assert_eq!(failure_delay(u32::MAX), BACKOFF_CAP);
    }
}
