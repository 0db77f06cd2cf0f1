//! The ttl-after-finished controller: deletes a finished Job `spec.ttlSecondsAfterFinished` after it
//! finished (its Complete or Failed condition's time), with background propagation so the garbage
//! collector removes its pods.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::ResourceExt;
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "ttl-after-finished",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let jobs = ctx.shared::<Job>();
    let controller = Controller::for_shared_stream(jobs.subscribe(), jobs.store());
    runner::run("ttl-after-finished", controller, ctx, reconcile)
}

/// When the job finished: the time of its True Complete or Failed condition.
pub fn finished_at(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or_else(Timestamp::now, |t| t.0)
        })
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action> {
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Ok(Action::await_change());
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(finished) = finished_at(&job) else {
        return Ok(Action::await_change());
    };
    let expires = finished
        .checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .unwrap_or(finished);
    let now = Timestamp::now();
    if now < expires {
        let left = Duration::try_from(expires.duration_since(now)).unwrap_or(Duration::ZERO);
        return Ok(Action::requeue(left.max(Duration::from_millis(100))));
    }
    // The uid and resourceVersion guard against deleting a job recreated or changed meanwhile (its TTL
    // may have been raised).
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: job.uid(),
            resource_version: job.resource_version(),
        }),
        ..DeleteParams::background()
    };
    let ns = job.namespace().unwrap_or_default();
    match ctx.api::<Job>(&ns).delete(&job.name_any(), &dp).await {
        Ok(_) => {
            debug!(job = %job.name_any(), namespace = %ns, "finished job's TTL expired: deleted")
        }
        Err(e) if is_not_found(&e) || is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}
