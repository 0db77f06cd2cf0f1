//! One pass over a CronJob: reconcile `status.active` with its Jobs, start the Job of the most recent
//! missed schedule if policy and deadline allow, trim the history, requeue for the next schedule.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use tracing::debug;

use super::schedule::Schedule;
use super::SCHEDULED_ANNOTATION;
use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};

/// Past this many missed schedules they are not walked one by one; a Warning says so.
const MANY_MISSED: u32 = 100;

async fn event(rec: &Recorder, cj: &CronJob, type_: EventType, reason: &str, note: String) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = rec.publish(&ev, &cj.object_ref(&())).await {
        debug!(error = %e, reason, "cronjob event not recorded");
    }
}

fn job_state(job: &Job) -> Option<&'static str> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            if c.type_ == "Complete" {
                "Complete"
            } else {
                "Failed"
            }
        })
}

/// The most recent scheduled time in (earliest, now], and whether more than [`MANY_MISSED`] were missed.
pub fn most_recent(
    s: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, bool) {
    let Some(t1) = s.next(earliest, tz) else {
        return (None, false);
    };
    if t1 > now {
        return (None, false);
    }
    let Some(t2) = s.next(t1, tz) else {
        return (Some(t1), false);
    };
    if t2 > now {
        return (Some(t1), false);
    }
    // Estimate from the interval rather than walking decades of minutes.
    let gap = t2.duration_since(t1).as_secs().max(1);
    let missed = now.duration_since(t1).as_secs() / gap + 1;
    let mut latest = t2;
    if missed > i64::from(MANY_MISSED) {
        // Jump near `now`, then walk the last few.
        let back = SignedDuration::from_secs(gap.saturating_mul(2));
        let from = now.checked_sub(back).unwrap_or(t2).max(t2);
        latest = s.next(from, tz).filter(|t| *t <= now).unwrap_or(t2);
    }
    while let Some(t) = s.next(latest, tz).filter(|t| *t <= now) {
        latest = t;
    }
    (Some(latest), missed > i64::from(MANY_MISSED))
}

/// Go's RFC 3339 (`Z` at offset zero) of `t` in `tz`.
pub fn rfc3339(t: Timestamp, tz: &TimeZone) -> String {
    let z = t.to_zoned(tz.clone());
    if z.offset().seconds() == 0 {
        z.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        z.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn until(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Reconciles one CronJob.
pub async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Context>, rec: Recorder) -> Result<Action> {
    let ns = cj.namespace().unwrap_or_default();
    let name = cj.name_any();
    let uid = cj.uid().unwrap_or_default();
    let Some(spec) = cj.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    let jobs_api: Api<Job> = ctx.api(&ns);
    let mut owned: Vec<Arc<Job>> = ctx
        .store::<Job>()
        .state()
        .into_iter()
        .filter(|j| {
            j.namespace().as_deref() == Some(ns.as_str())
                && j.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    let old = cj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let now = Timestamp::now();

    // status.active: finished or vanished Jobs leave, running owned ones join.
    let mut active: Vec<ObjectReference> = Vec::new();
    for r in old.active.iter().flatten() {
        let found = owned.iter().find(|j| j.uid() == r.uid);
        match found {
            Some(j) if job_state(j).is_none() => active.push(r.clone()),
            Some(j) => {
                let state = job_state(j).unwrap_or_default();
                event(
                    &rec,
                    &cj,
                    EventType::Normal,
                    "SawCompletedJob",
                    format!("Saw completed job: {}, condition: {state}", j.name_any()),
                )
                .await;
            }
            None => {
                // The cache may be behind a Job just made: ask before forgetting it.
                if let Some(n) = r.name.as_deref() {
                    if let Some(j) = jobs_api.get_opt(n).await? {
                        if j.uid() == r.uid && job_state(&j).is_none() {
                            active.push(r.clone());
                        }
                    }
                }
            }
        }
    }
    for j in &owned {
        // As upstream, a running Job of ours that status.active does not list (made by hand with
        // `kubectl create job --from`, say) is reported, not adopted: it does not block Forbid.
        if job_state(j).is_none()
            && j.metadata.deletion_timestamp.is_none()
            && !active.iter().any(|r| r.uid == j.uid())
        {
            event(
                &rec,
                &cj,
                EventType::Warning,
                "UnexpectedJob",
                format!(
                    "Saw a job that the controller did not create or forgot: {}",
                    j.name_any()
                ),
            )
            .await;
        }
        if job_state(j) == Some("Complete") {
            let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
            if let Some(done) = done {
                if status
                    .last_successful_time
                    .as_ref()
                    .is_none_or(|t| t.0 < done.0)
                {
                    status.last_successful_time = Some(done);
                }
            }
        }
    }
    status.active = (!active.is_empty()).then_some(active);

    let mut requeue: Option<Duration> = None;
    if cj.metadata.deletion_timestamp.is_none() {
        requeue = schedule(&cj, &rec, &mut status, &jobs_api, now).await?;
    }

    if status != old {
        let mut updated = (*cj).clone();
        updated.status = Some(status.clone());
        match ctx
            .api::<CronJob>(&ns)
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }

    // History: the oldest finished Jobs beyond each limit go.
    owned.retain(|j| j.metadata.deletion_timestamp.is_none());
    for (state, limit) in [
        ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
        ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let mut done: Vec<&Arc<Job>> = owned
            .iter()
            .filter(|j| job_state(j) == Some(state))
            .collect();
        done.sort_by_key(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref().map(|t| t.0))
                .or_else(|| j.creation_timestamp().map(|t| t.0))
        });
        let excess = done
            .len()
            .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
        for j in done.into_iter().take(excess) {
            delete_job(&jobs_api, &rec, &cj, j).await?;
        }
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

async fn delete_job(api: &Api<Job>, rec: &Recorder, cj: &CronJob, j: &Job) -> Result<()> {
    match api.delete(&j.name_any(), &DeleteParams::background()).await {
        Ok(_) => {
            event(
                rec,
                cj,
                EventType::Normal,
                "SuccessfulDelete",
                format!("Deleted job {}", j.name_any()),
            )
            .await;
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The scheduling half: maybe start a Job; returns when to look again.
async fn schedule(
    cj: &CronJob,
    rec: &Recorder,
    status: &mut CronJobStatus,
    jobs_api: &Api<Job>,
    now: Timestamp,
) -> Result<Option<Duration>> {
    let Some(spec) = cj.spec.as_ref() else {
        return Ok(None);
    };
    let tz = match spec.time_zone.as_deref() {
        None => TimeZone::system(),
        Some(name) => match TimeZone::get(name) {
            Ok(tz) => tz,
            Err(e) => {
                event(
                    rec,
                    cj,
                    EventType::Warning,
                    "UnknownTimeZone",
                    format!("invalid timeZone: {name:?}: {e}"),
                )
                .await;
                return Ok(None);
            }
        },
    };
    let sched = match Schedule::parse(&spec.schedule) {
        Ok(s) => s,
        Err(e) => {
            event(
                rec,
                cj,
                EventType::Warning,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {e}", spec.schedule),
            )
            .await;
            return Ok(None);
        }
    };
    if spec.suspend == Some(true) {
        return Ok(None);
    }
    let next_after_now = sched.next(now, &tz).map(|t| until(t, now));
    let created = cj.creation_timestamp().map_or(now, |t| t.0);
    let mut earliest = status.last_schedule_time.as_ref().map_or(created, |t| t.0);
    if let Some(d) = spec.starting_deadline_seconds {
        let limit = now.checked_sub(SignedDuration::from_secs(d)).unwrap_or(now);
        earliest = earliest.max(limit);
    }
    let (scheduled, many) = most_recent(&sched, &tz, earliest, now);
    let Some(scheduled) = scheduled else {
        return Ok(next_after_now);
    };
    if many {
        event(rec, cj, EventType::Warning, "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into()).await;
    }
    if let Some(d) = spec.starting_deadline_seconds {
        let late = scheduled
            .checked_add(SignedDuration::from_secs(d))
            .unwrap_or(scheduled)
            < now;
        if late {
            event(
                rec,
                cj,
                EventType::Warning,
                "MissSchedule",
                format!(
                    "Missed scheduled time to start a job: {}",
                    rfc3339(scheduled, &tz)
                ),
            )
            .await;
            return Ok(next_after_now);
        }
    }
    let minutes = scheduled.as_second().div_euclid(60);
    let job_name = format!("{}-{minutes}", cj.name_any());
    let active = status.active.clone().unwrap_or_default();
    if active
        .iter()
        .any(|r| r.name.as_deref() == Some(job_name.as_str()))
        || status
            .last_schedule_time
            .as_ref()
            .is_some_and(|t| t.0 == scheduled)
    {
        return Ok(next_after_now);
    }
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if !active.is_empty() => {
            event(rec, cj, EventType::Normal, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid".into()).await;
            return Ok(next_after_now);
        }
        Some("Replace") => {
            for r in &active {
                let Some(n) = r.name.as_deref() else { continue };
                if let Some(j) = jobs_api.get_opt(n).await? {
                    if j.uid() == r.uid {
                        delete_job(jobs_api, rec, cj, &j).await?;
                    }
                }
            }
            status.active = None;
        }
        _ => {}
    }
    let job = new_job(cj, &job_name, scheduled, &tz);
    let made = match jobs_api.create(&PostParams::default(), &job).await {
        Ok(j) => {
            event(
                rec,
                cj,
                EventType::Normal,
                "SuccessfulCreate",
                format!("Created job {job_name}"),
            )
            .await;
            j
        }
        // Made before (an earlier leader, a lost status write): adopt it only if it is ours.
        Err(e) if is_conflict(&e) => match jobs_api.get_opt(&job_name).await? {
            Some(j)
                if j.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == cj.metadata.uid.as_ref()) =>
            {
                j
            }
            _ => return Ok(next_after_now),
        },
        Err(kube::Error::Api(s)) if s.code == 403 => return Ok(next_after_now),
        Err(e) => {
            event(
                rec,
                cj,
                EventType::Warning,
                "FailedCreate",
                format!("Error creating job: {e}"),
            )
            .await;
            return Err(e.into());
        }
    };
    if job_state(&made).is_none() {
        let mut list = status.active.clone().unwrap_or_default();
        if !list.iter().any(|r| r.uid == made.uid()) {
            list.push(job_ref(&made));
        }
        status.active = Some(list);
    }
    status.last_schedule_time = Some(Time(scheduled));
    Ok(next_after_now)
}

/// The Job for `scheduled`, from the template, owned by the CronJob.
fn new_job(cj: &CronJob, name: &str, scheduled: Timestamp, tz: &TimeZone) -> Job {
    let template = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_ANNOTATION.into(), rfc3339(scheduled, tz));
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: cj.namespace(),
            labels: tm.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "CronJob".into(),
                name: cj.name_any(),
                uid: cj.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_default()),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn most_recent_missed_schedule() {
        let every = Schedule::parse("* * * * *").unwrap();
        let utc = TimeZone::UTC;
        let (t, many) = most_recent(
            &every,
            &utc,
            ts("2024-01-01T00:00:00Z"),
            ts("2024-01-01T00:00:40Z"),
        );
        assert_eq!((t, many), (None, false));
        let (t, many) = most_recent(
            &every,
            &utc,
            ts("2024-01-01T00:00:00Z"),
            ts("2024-01-01T00:03:10Z"),
        );
        assert_eq!((t, many), (Some(ts("2024-01-01T00:03:00Z")), false));
        let (t, many) = most_recent(
            &every,
            &utc,
            ts("2024-01-01T00:00:00Z"),
            ts("2024-01-02T00:00:10Z"),
        );
        assert_eq!((t, many), (Some(ts("2024-01-02T00:00:00Z")), true));
    }

    #[test]
    fn scheduled_timestamp_format() {
        assert_eq!(
            rfc3339(ts("2024-01-01T00:03:00Z"), &TimeZone::UTC),
            "2024-01-01T00:03:00Z"
        );
        let ny = TimeZone::get("America/New_York").unwrap();
        assert_eq!(
            rfc3339(ts("2024-01-01T14:00:00Z"), &ny),
            "2024-01-01T09:00:00-05:00"
        );
    }
}
