//! The serviceaccount controller: a `default` ServiceAccount in every active namespace, made again if it
//! is deleted.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use crate::context::Context;
use crate::error::{is_conflict, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "serviceaccount",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let namespaces = ctx.shared::<Namespace>();
    let accounts = ctx.shared::<ServiceAccount>();
    let controller = Controller::for_shared_stream(namespaces.subscribe(), namespaces.store())
        .watches_shared_stream(accounts.subscribe(), |sa: Arc<ServiceAccount>| {
            (sa.name_any() == DEFAULT)
                .then(|| sa.namespace().map(|ns| ObjectRef::<Namespace>::new(&ns)))
                .flatten()
        });
    runner::run("serviceaccount", controller, ctx, reconcile)
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    let name = ns.name_any();
    if ns.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let cached = ctx
        .store::<ServiceAccount>()
        .get(&ObjectRef::new(DEFAULT).within(&name));
    if cached.is_some() {
        return Ok(Action::await_change());
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            namespace: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    match ctx
        .api::<ServiceAccount>(&name)
        .create(&PostParams::default(), &sa)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Already there (the cache was behind) or the namespace began terminating: nothing to do.
        Err(e) if is_conflict(&e) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Action::requeue(Duration::from_secs(30))),
        Err(e) => Err(e.into()),
    }
}
