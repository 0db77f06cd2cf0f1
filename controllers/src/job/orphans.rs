//! Pods still carrying the tracking finalizer whose Job is gone: nothing else would ever release them, so
//! their finalizer is removed (upstream does this from its pod event handlers).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::pods::{owned_by, remove_finalizer, tracked};
use crate::context::Context;
use crate::error::Result;
use crate::runner;

/// Watches tracked pods and releases those whose owning Job no longer exists.
pub fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let pods = ctx.shared::<Pod>();
    let jobs = ctx.shared::<Job>();
    let store = pods.store();
    // A job's change (its deletion above all) looks at its tracked pods again.
    let controller = Controller::for_shared_stream(pods.subscribe(), pods.store())
        .watches_shared_stream(jobs.subscribe(), move |job: Arc<Job>| {
            let uid = job.uid().unwrap_or_default();
            store
                .state()
                .into_iter()
                .filter(|p| tracked(p) && owned_by(p, &uid))
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        });
    runner::run("job-orphans", controller, ctx, reconcile)
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action> {
    if !tracked(&pod) {
        return Ok(Action::await_change());
    }
    let Some(job) = super::owner(&pod) else {
        return Ok(Action::await_change());
    };
    let uid = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone());
    let current = ctx.store::<Job>().get(&job);
    let exists = current.is_some_and(|j| j.uid() == uid);
    if exists {
        return Ok(Action::await_change());
    }
    // The job cache may simply be behind: confirm with the API before releasing.
    let api = ctx.api::<Job>(job.namespace.as_deref().unwrap_or(""));
    match api.get_opt(&job.name).await? {
        Some(j) if j.uid() == uid => Ok(Action::requeue(Duration::from_secs(30))),
        _ => {
            remove_finalizer(&ctx.api::<Pod>(&pod.namespace().unwrap_or_default()), &pod).await?;
            Ok(Action::await_change())
        }
    }
}
