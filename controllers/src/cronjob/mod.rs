//! The cronjob controller (upstream's v2): starts a CronJob's Job at each scheduled time in its time zone,
//! as its concurrency policy allows, within its starting deadline; tracks the active Jobs and the last
//! schedule and success times; trims finished Jobs to the history limits; and requeues itself for
//! exactly the next scheduled time.

pub mod schedule;
pub mod sync;

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use crate::context::Context;
use crate::manager::ControllerDef;
use crate::runner;

/// The controller's name (upstream's).
pub const NAME: &str = "cronjob";
/// The component its Events report.
pub const COMPONENT: &str = "cronjob-controller";
/// The scheduled time a Job was made for (RFC 3339 in the CronJob's time zone).
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

/// The CronJob a Job belongs to (its controller ownerReference).
pub fn owner(job: &Job) -> Option<ObjectRef<CronJob>> {
    let ns = job.namespace()?;
    job.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "CronJob" && o.api_version == "batch/v1")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let cronjobs = ctx.shared::<CronJob>();
    let jobs = ctx.shared::<Job>();
    let recorder = ctx.recorder(COMPONENT);
    let controller = Controller::for_shared_stream(cronjobs.subscribe(), cronjobs.store())
        .watches_shared_stream(jobs.subscribe(), |job: Arc<Job>| owner(&job));
    runner::run(NAME, controller, ctx, move |cj, ctx| {
        sync::reconcile(cj, ctx, recorder.clone())
    })
}
