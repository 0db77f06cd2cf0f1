//! One pass over a job: count its finished pods, decide whether it succeeded or failed, create or delete
//! pods to match parallelism, then write the status (twice when pods were released: first recording them
//! as uncounted, then, once their finalizers are gone, in the counters).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus, UncountedTerminatedPods};
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

/// What this pass learned from the job's pods: the finished ones not yet counted, the completed and
/// failed indexes, the pods whose finalizers may go, and the condition the job is finishing with.
struct Tally {
    /// Succeeded pods recorded in `uncountedTerminatedPods` (by uid).
    unc_ok: BTreeSet<String>,
    /// Failed pods recorded there.
    unc_failed: BTreeSet<String>,
    completed: BTreeSet<i32>,
    failed_indexes: BTreeSet<i32>,
    /// `FailureTarget` or `SuccessCriteriaMet`, once decided.
    finishing: Option<JobCondition>,
    /// Pods whose tracking finalizer goes in this pass.
    release: Vec<Arc<Pod>>,
    new_failures: u32,
    new_successes: u32,
    last_failure: Option<Timestamp>,
}

/// The parts of the spec a pass decides with.
struct Shape {
    suspended: bool,
    indexed: bool,
    completions: Option<i32>,
    parallelism: i32,
    backoff_limit: i32,
    per_index: bool,
}

impl Shape {
    fn of(spec: &JobSpec) -> Shape {
        Shape {
            suspended: spec.suspend == Some(true),
            indexed: spec.completion_mode.as_deref() == Some("Indexed"),
            completions: spec.completions,
            parallelism: spec.parallelism.unwrap_or(1).max(0),
            backoff_limit: spec.backoff_limit.unwrap_or(6),
            per_index: spec.backoff_limit_per_index.is_some(),
        }
    }
}

/// Reconciles one job: its pods counted, its end decided, pods deleted and created to match, the status
/// written.
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
    let shape = Shape::of(spec);
    let mut status = old.clone();
    let Counted {
        mut tally,
        before: before_len,
    } = count_finished_pods(&job, spec, &shape, &old, &all, &unfinalized, now);
    let (streak, last) = failure_streak(&st, &key, &tally, now)?;
    let old_failed = old.failed.unwrap_or(0);
    let old_succeeded = old.succeeded.unwrap_or(0);
    let failed_total =
        old_failed.saturating_add(i32::try_from(tally.unc_failed.len()).unwrap_or(i32::MAX));
    let succeeded_total = if shape.indexed {
        i32::try_from(tally.completed.len()).unwrap_or(i32::MAX)
    } else {
        old_succeeded.saturating_add(i32::try_from(tally.unc_ok.len()).unwrap_or(i32::MAX))
    };
    let active: Vec<&Arc<Pod>> = all.iter().filter(|p| pods::active(p)).collect();

    suspend_or_resume(
        &st,
        &job,
        &shape,
        &old,
        tally.finishing.is_some(),
        &mut status,
        now,
    )
    .await;
    let mut requeue: Option<Duration> = None;
    if tally.finishing.is_none() {
        let (finishing, wait) = finish_verdict(
            spec,
            &shape,
            &tally,
            &status,
            (failed_total, succeeded_total),
            active.is_empty(),
            now,
        );
        tally.finishing = finishing;
        requeue = wait;
    }
    let failing = tally
        .finishing
        .as_ref()
        .is_some_and(|c| c.type_ == FAILURE_TARGET);

    let (to_delete, create) = if tally.finishing.is_some() || shape.suspended {
        (active.clone(), Vec::new())
    } else if satisfied {
        let (to_delete, mut create) =
            plan_pods(spec, &shape, &tally, &all, &active, succeeded_total);
        let wait = failure_delay(streak);
        let waited = since(now, last);
        if !create.is_empty() && streak > 0 && waited < wait {
            let left = wait.saturating_sub(waited);
            debug!(job = %key, ?left, "replacement of failed pods backing off");
            requeue = Some(requeue.map_or(left, |r| r.min(left)));
            create.clear();
        }
        (to_delete, create)
    } else {
        (Vec::new(), Vec::new())
    };
    let deleted = delete_pods(&st, &job, &key, &pod_api, &to_delete).await?;
    let created = create_pods(&st, &job, &key, &pod_api, &shape, &all, create).await?;

    // Once the job is finishing, every pod is released; those not yet terminal count as failed unless it
    // succeeded.
    if tally.finishing.is_some() {
        for p in &all {
            let puid = p.uid().unwrap_or_default();
            if !tracked(p)
                || unfinalized.contains(&puid)
                || tally.release.iter().any(|r| r.uid() == p.uid())
            {
                continue;
            }
            if failing && !pods::terminal(p) {
                tally.unc_failed.insert(puid);
            }
            tally.release.push(p.clone());
        }
    }

    let api: Api<Job> = ctx.api(&ns);
    let mut current = (*job).clone();
    if let Some(c) = tally.finishing.clone() {
        cond::set(&mut status, c);
    }
    status.completed_indexes = shape
        .indexed
        .then(|| indexes::format(&tally.completed))
        .flatten();
    status.failed_indexes = shape
        .per_index
        .then(|| indexes::format(&tally.failed_indexes))
        .flatten();

    // First write: the newly finished pods are recorded as uncounted before their finalizers go.
    if !tally.release.is_empty() && (tally.unc_ok.len(), tally.unc_failed.len()) != before_len {
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
            succeeded: Some(tally.unc_ok.iter().cloned().collect()),
            failed: Some(tally.unc_failed.iter().cloned().collect()),
        });
        current.status = Some(status.clone());
        current = api
            .replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    let mut released: HashSet<String> = HashSet::new();
    for p in &tally.release {
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
    let ok_done: Vec<String> = tally.unc_ok.iter().filter(|u| gone(u)).cloned().collect();
    let failed_done: Vec<String> = tally
        .unc_failed
        .iter()
        .filter(|u| gone(u))
        .cloned()
        .collect();
    for u in &ok_done {
        tally.unc_ok.remove(u);
    }
    for u in &failed_done {
        tally.unc_failed.remove(u);
    }
    if !shape.indexed {
        status.succeeded =
            Some(old_succeeded.saturating_add(i32::try_from(ok_done.len()).unwrap_or(i32::MAX)));
    } else {
        status.succeeded = Some(i32::try_from(tally.completed.len()).unwrap_or(i32::MAX));
    }
    status.failed =
        Some(old_failed.saturating_add(i32::try_from(failed_done.len()).unwrap_or(i32::MAX)));
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
        succeeded: (!tally.unc_ok.is_empty()).then(|| tally.unc_ok.iter().cloned().collect()),
        failed: (!tally.unc_failed.is_empty()).then(|| tally.unc_failed.iter().cloned().collect()),
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
    if let Some(c) = tally.finishing.as_ref() {
        if tally.unc_ok.is_empty()
            && tally.unc_failed.is_empty()
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

/// A [`Tally`] and how many pods were uncounted before this pass (succeeded, failed).
struct Counted {
    tally: Tally,
    before: (usize, usize),
}

/// Newly finished pods become uncounted (they keep their finalizer until the status says so); failed
/// ones are judged by the pod failure policy and per-index limits.
fn count_finished_pods(
    job: &Job,
    spec: &JobSpec,
    shape: &Shape,
    old: &JobStatus,
    all: &[Arc<Pod>],
    unfinalized: &HashSet<String>,
    now: Timestamp,
) -> Counted {
    let completions = shape.completions;
    let unc = old.uncounted_terminated_pods.clone().unwrap_or_default();
    let mut t = Tally {
        unc_ok: unc.succeeded.unwrap_or_default().into_iter().collect(),
        unc_failed: unc.failed.unwrap_or_default().into_iter().collect(),
        completed: indexes::parse(old.completed_indexes.as_deref(), completions.unwrap_or(0)),
        failed_indexes: indexes::parse(old.failed_indexes.as_deref(), completions.unwrap_or(0)),
        finishing: cond::true_condition(old, FAILURE_TARGET)
            .or_else(|| cond::true_condition(old, SUCCESS_CRITERIA_MET))
            .cloned(),
        release: Vec::new(),
        new_failures: 0,
        new_successes: 0,
        last_failure: None,
    };
    let before = (t.unc_ok.len(), t.unc_failed.len());
    for p in all {
        let puid = p.uid().unwrap_or_default();
        if pods::phase(p) == "Succeeded" {
            if let Some(i) = pods::index(p).filter(|_| shape.indexed) {
                if completions.is_some_and(|c| i < c) {
                    t.completed.insert(i);
                }
            }
        }
        if !tracked(p) || unfinalized.contains(&puid) {
            continue;
        }
        if t.unc_ok.contains(&puid) || t.unc_failed.contains(&puid) {
            t.release.push(p.clone());
            continue;
        }
        if pods::phase(p) == "Succeeded" {
            t.unc_ok.insert(puid);
            t.new_successes += 1;
            t.release.push(p.clone());
        } else if pods::failed(p, job) {
            let verdict = if pods::phase(p) == "Failed" {
                judge(spec.pod_failure_policy.as_ref(), p)
            } else {
                Verdict::Count
            };
            match verdict {
                Verdict::Ignore => {}
                Verdict::FailJob(message) => {
                    t.unc_failed.insert(puid);
                    if t.finishing.is_none() {
                        t.finishing =
                            Some(cond::new(FAILURE_TARGET, "PodFailurePolicy", &message, now));
                    }
                }
                Verdict::FailIndex => {
                    t.unc_failed.insert(puid);
                    if let Some(i) = pods::index(p).filter(|_| shape.per_index) {
                        t.failed_indexes.insert(i);
                    }
                }
                Verdict::Count => {
                    // With a per-index limit, the index fails once its pods failed that many times.
                    if let (Some(limit), Some(i)) = (spec.backoff_limit_per_index, pods::index(p)) {
                        if pods::failure_count(p) >= limit {
                            t.failed_indexes.insert(i);
                        }
                    }
                    t.unc_failed.insert(puid);
                    t.new_failures += 1;
                    let at = pods::finish_time(p).unwrap_or(now);
                    t.last_failure = Some(t.last_failure.map_or(at, |l| l.max(at)));
                }
            }
            t.release.push(p.clone());
        }
    }
    Counted { tally: t, before }
}

/// The replacement back-off: consecutive failures and when the last was, reset by a success.
fn failure_streak(st: &State, key: &str, t: &Tally, now: Timestamp) -> Result<(u32, Timestamp)> {
    let mut map = st
        .failures
        .lock()
        .map_err(|_| crate::Error::Invalid("poisoned".into()))?;
    let entry = map.entry(key.to_string()).or_insert((0, now));
    if t.new_successes > 0 {
        *entry = (0, now);
    }
    if t.new_failures > 0 {
        entry.0 = entry.0.saturating_add(t.new_failures);
        entry.1 = t.last_failure.unwrap_or(now);
    }
    Ok(*entry)
}

/// Suspended or resumed: the condition and an event; the start time restarts on resume, as upstream.
async fn suspend_or_resume(
    st: &State,
    job: &Job,
    shape: &Shape,
    old: &JobStatus,
    finishing: bool,
    status: &mut JobStatus,
    now: Timestamp,
) {
    let was_suspended = cond::true_condition(old, cond::SUSPENDED).is_some();
    if shape.suspended && !was_suspended && !finishing {
        cond::set(
            status,
            cond::new(cond::SUSPENDED, "JobSuspended", "Job suspended", now),
        );
        event(
            st,
            job,
            EventType::Normal,
            "Suspended",
            "Job suspended".into(),
            "Suspend",
        )
        .await;
    } else if !shape.suspended && was_suspended {
        let mut c = cond::new(cond::SUSPENDED, "JobResumed", "Job resumed", now);
        c.status = "False".into();
        cond::set(status, c);
        status.start_time = Some(Time(now));
        event(
            st,
            job,
            EventType::Normal,
            "Resumed",
            "Job resumed".into(),
            "Resume",
        )
        .await;
    }
    if !shape.suspended && status.start_time.is_none() {
        status.start_time = Some(Time(now));
    }
}

/// Whether the job now fails (back-off limit, deadline, failed indexes) or succeeds, in upstream's order;
/// and, while a deadline is ahead, when to look again.
fn finish_verdict(
    spec: &JobSpec,
    shape: &Shape,
    t: &Tally,
    status: &JobStatus,
    (failed_total, succeeded_total): (i32, i32),
    none_active: bool,
    now: Timestamp,
) -> (Option<JobCondition>, Option<Duration>) {
    let fail = |reason: &str, message: &str| Some(cond::new(FAILURE_TARGET, reason, message, now));
    let mut requeue = None;
    let deadline = spec
        .active_deadline_seconds
        .filter(|_| !shape.suspended)
        .zip(status.start_time.as_ref());
    let mut finishing = None;
    if failed_total > shape.backoff_limit {
        finishing = fail(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
    } else if let Some((secs, start)) = deadline {
        let end = start
            .0
            .checked_add(SignedDuration::from_secs(secs))
            .unwrap_or(start.0);
        if now >= end {
            finishing = fail(
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            );
        } else {
            requeue = Some(since(end, now).max(Duration::from_millis(100)));
        }
    }
    let max_failed = spec.max_failed_indexes.filter(|_| shape.per_index);
    if finishing.is_none()
        && max_failed.is_some_and(|m| i32::try_from(t.failed_indexes.len()).unwrap_or(i32::MAX) > m)
    {
        finishing = fail(
            "MaxFailedIndexesExceeded",
            "Job has exceeded the specified maximal number of failed indexes",
        );
    }
    let all_indexes_done = shape.indexed
        && shape.completions.is_some_and(|c| {
            i32::try_from(t.completed.len() + t.failed_indexes.len()).unwrap_or(i32::MAX) >= c
        });
    if finishing.is_none() && shape.per_index && !t.failed_indexes.is_empty() && all_indexes_done {
        finishing = fail("FailedIndexes", "Job has failed indexes");
    }
    let succeeded = match shape.completions {
        Some(c) if shape.indexed => i32::try_from(t.completed.len()).unwrap_or(i32::MAX) >= c,
        Some(c) => succeeded_total >= c,
        None => succeeded_total > 0 && none_active,
    };
    if finishing.is_none() && succeeded {
        finishing = Some(cond::new(
            SUCCESS_CRITERIA_MET,
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        ));
    }
    (finishing, requeue)
}

/// Which active pods to delete and which to create (by completion index when Indexed) to match
/// parallelism and the completions left.
fn plan_pods<'a>(
    spec: &JobSpec,
    shape: &Shape,
    t: &Tally,
    all: &[Arc<Pod>],
    active: &[&'a Arc<Pod>],
    succeeded_total: i32,
) -> (Vec<&'a Arc<Pod>>, Vec<Option<i32>>) {
    let mut to_delete = Vec::new();
    let mut create = Vec::new();
    let parallelism = shape.parallelism;
    if shape.indexed {
        let c = shape.completions.unwrap_or(0);
        let mut seen: HashSet<i32> = HashSet::new();
        let mut keep = 0;
        for p in active {
            match pods::index(p) {
                Some(i)
                    if i < c
                        && !t.completed.contains(&i)
                        && !t.failed_indexes.contains(&i)
                        && keep < parallelism
                        && seen.insert(i) =>
                {
                    keep += 1
                }
                _ => to_delete.push(*p),
            }
        }
        let free = (0..c).filter(|i| {
            !t.completed.contains(i) && !t.failed_indexes.contains(i) && !seen.contains(i)
        });
        create.extend(
            free.take(usize::try_from(parallelism - keep).unwrap_or(0))
                .map(Some),
        );
        return (to_delete, create);
    }
    // With podReplacementPolicy Failed a terminating pod is replaced only once it has failed.
    let waiting = if spec.pod_replacement_policy.as_deref() == Some("Failed") {
        all.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some() && !pods::terminal(p))
            .count()
    } else {
        0
    };
    let have = i32::try_from(active.len() + waiting).unwrap_or(i32::MAX);
    let want = match shape.completions {
        Some(c) => parallelism.min(c.saturating_sub(succeeded_total)).max(0),
        None if succeeded_total > 0 => have.min(parallelism),
        None => parallelism,
    };
    if have > want {
        // Not-ready pods go first, then the newest.
        let mut order = active.to_vec();
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
    (to_delete, create)
}

/// Deletes the pods (by uid, so a namesake is never hit); returns the uids deleted.
async fn delete_pods(
    st: &State,
    job: &Job,
    key: &str,
    pod_api: &Api<Pod>,
    to_delete: &[&Arc<Pod>],
) -> Result<HashSet<String>> {
    let mut deleted = HashSet::new();
    for p in to_delete {
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
        st.expectations.deleted(key, &p.uid().unwrap_or_default());
        deleted.insert(p.uid().unwrap_or_default());
        event(
            st,
            job,
            EventType::Normal,
            "SuccessfulDelete",
            format!("Deleted pod: {pname}"),
            "Delete",
        )
        .await;
    }
    Ok(deleted)
}

/// Creates a pod for each entry (its completion index when Indexed); returns how many were made.
async fn create_pods(
    st: &State,
    job: &Job,
    key: &str,
    pod_api: &Api<Pod>,
    shape: &Shape,
    all: &[Arc<Pod>],
    create: Vec<Option<i32>>,
) -> Result<i32> {
    let mut created = 0;
    for index in create {
        let mut pod = pods::new_pod(job, index);
        if let (true, Some(i)) = (shape.per_index, index) {
            // One more than the most failed earlier pod of this index.
            let count = all
                .iter()
                .filter(|p| pods::index(p) == Some(i) && pods::failed(p, job))
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
                st.expectations.created(key, &pname);
                created += 1;
                event(
                    st,
                    job,
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
                    st,
                    job,
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
    Ok(created)
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
