//! The job controller: runs a Job's pods to completion. It creates pods up to `parallelism` until
//! `completions` succeeded (each index once for Indexed jobs), counts every finished pod exactly once
//! through the tracking finalizer and `status.uncountedTerminatedPods`, replaces failed pods after a
//! growing delay, and fails the job at `backoffLimit`, `activeDeadlineSeconds` or a `podFailurePolicy`
//! rule, first with the interim FailureTarget/SuccessCriteriaMet condition and, once no pod is left
//! running, with Failed/Complete.

pub mod conditions;
pub mod expectations;
pub mod failure_policy;
pub mod indexes;
pub mod orphans;
pub mod pods;
pub mod sync;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use crate::context::Context;
use crate::manager::ControllerDef;
use crate::runner;

/// The controller's name (upstream's).
pub const NAME: &str = "job";
/// The component its Events report.
pub const COMPONENT: &str = "job-controller";

/// What the controller remembers between reconciles.
pub struct State {
    /// Writes its cache may not show yet.
    pub expectations: expectations::Expectations,
    /// Per job key: consecutive failed pods and when the last one failed (the recreate back-off).
    pub failures: Mutex<HashMap<String, (u32, k8s_openapi::jiff::Timestamp)>>,
    /// Events, with repeats counted.
    pub recorder: Recorder,
}

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

/// The Job a pod belongs to (its controller ownerReference).
pub fn owner(pod: &Pod) -> Option<ObjectRef<Job>> {
    let ns = pod.namespace()?;
    pod.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Job" && o.api_version == "batch/v1")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let jobs = ctx.shared::<Job>();
    let pods = ctx.shared::<Pod>();
    let state = Arc::new(State {
        expectations: Default::default(),
        failures: Mutex::new(HashMap::new()),
        recorder: ctx.recorder(COMPONENT),
    });
    let controller = Controller::for_shared_stream(jobs.subscribe(), jobs.store())
        .watches_shared_stream(pods.subscribe(), |pod: Arc<Pod>| owner(&pod));
    let main = runner::run(NAME, controller, ctx, move |job, ctx| {
        sync::reconcile(job, ctx, state.clone())
    });
    let orphans = orphans::start(ctx);
    async move {
        futures::future::join(main, orphans).await;
    }
    .boxed()
}
