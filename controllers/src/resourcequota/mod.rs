//! The resourcequota controller: keeps each ResourceQuota's `status.hard` equal to its `spec.hard` and
//! recounts `status.used` from what its namespace really holds, with the rules ResourceQuota admission
//! charges by (`keel_client_kit::quota`). It recounts when a quota changes, when a pod or service of its
//! namespace changes (upstream's replenishment: a pod finishing or going gives its share back), and every
//! [`RESYNC`] for the other kinds it counts.

mod recount;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota, Service};
use keel_client_kit::quota::list::{self, from_value};
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Error, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// Upstream's controller name.
pub const NAME: &str = "resourcequota";

/// How often every quota is recounted regardless of events (upstream's `--resource-quota-sync-period`
/// is 5 minutes; keel's is shorter because it replenishes from pods and services only).
pub const RESYNC: Duration = Duration::from_secs(60);

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let quotas = ctx.shared::<ResourceQuota>();
    let pods = ctx.shared::<Pod>();
    let services = ctx.shared::<Service>();
    let (by_pod, by_service) = (quotas.store(), quotas.store());
    let controller = Controller::for_shared_stream(quotas.subscribe(), quotas.store())
        .watches_shared_stream(pods.subscribe(), move |p: Arc<Pod>| {
            in_namespace(&by_pod, p.namespace())
        })
        .watches_shared_stream(services.subscribe(), move |s: Arc<Service>| {
            in_namespace(&by_service, s.namespace())
        });
    runner::run(NAME, controller, ctx, reconcile)
}

fn in_namespace(store: &Store<ResourceQuota>, ns: Option<String>) -> Vec<ObjectRef<ResourceQuota>> {
    store
        .state()
        .iter()
        .filter(|q| q.namespace() == ns)
        .map(|q| ObjectRef::from_obj(q.as_ref()))
        .collect()
}

async fn reconcile(quota: Arc<ResourceQuota>, ctx: Arc<Context>) -> Result<Action> {
    if quota.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = quota.namespace().unwrap_or_default();
    let value = serde_json::to_value(quota.as_ref()).map_err(|e| Error::Invalid(e.to_string()))?;
    let hard = from_value(value.pointer("/spec/hard"));
    let used = recount::usage(&ctx, &ns, &value, &hard).await?;
    let same = list::equals(&hard, &from_value(value.pointer("/status/hard")))
        && list::equals(&used, &from_value(value.pointer("/status/used")));
    if same {
        return Ok(Action::requeue(RESYNC));
    }
    let mut updated = value;
    updated["status"] = serde_json::json!({
        "hard": list::to_value(&hard),
        "used": list::to_value(&used),
    });
    let body: ResourceQuota =
        serde_json::from_value(updated).map_err(|e| Error::Invalid(e.to_string()))?;
    // A PUT over the version read: a quota charged by admission meanwhile makes this a conflict, and the
    // next pass recounts with that write visible.
    let r = ctx
        .api::<ResourceQuota>(&ns)
        .replace_status(&quota.name_any(), &PostParams::default(), &body)
        .await;
    match r {
        Ok(_) => Ok(Action::requeue(RESYNC)),
        Err(e) if is_conflict(&e) => Ok(Action::requeue(Duration::from_millis(200))),
        Err(e) if is_not_found(&e) => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}
