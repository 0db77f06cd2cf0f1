//! Storage object in use protection: a claim keeps `kubernetes.io/pvc-protection` while a scheduled pod
//! uses it, and a volume keeps `kubernetes.io/pv-protection` while it is Bound, so deleting either only
//! marks it until then (upstream's `pvc-protection` and `pv-protection` controllers).

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use keel_client_kit::volume::{self as rules, PVC_PROTECTION, PV_PROTECTION};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::owner::controlled_by;
use crate::runner;

/// Registration of the claim protection under upstream's name.
pub fn pvc_def() -> ControllerDef {
    ControllerDef {
        name: "persistentvolumeclaim-protection",
        start: start_pvc,
    }
}

/// Registration of the volume protection under upstream's name.
pub fn pv_def() -> ControllerDef {
    ControllerDef {
        name: "persistentvolume-protection",
        start: start_pv,
    }
}

fn start_pvc(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let claims = ctx.shared::<PersistentVolumeClaim>();
    let pods = ctx.shared::<Pod>();
    let controller = Controller::for_shared_stream(claims.subscribe(), claims.store())
        .watches_shared_stream(pods.subscribe(), |p: Arc<Pod>| {
            let ns = p.namespace().unwrap_or_default();
            rules::pod_claims(&p)
                .into_iter()
                .map(move |c| ObjectRef::new(&c).within(&ns))
                .collect::<Vec<_>>()
        });
    runner::run(
        "persistentvolumeclaim-protection",
        controller,
        ctx,
        sync_claim,
    )
}

fn start_pv(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let volumes = ctx.shared::<PersistentVolume>();
    let controller = Controller::for_shared_stream(volumes.subscribe(), volumes.store());
    runner::run("persistentvolume-protection", controller, ctx, sync_volume)
}

fn has_finalizer<K: Resource>(obj: &K, f: &str) -> bool {
    obj.meta().finalizers.iter().flatten().any(|x| x == f)
}

/// Adds or removes `finalizer`, guarded by the object's resourceVersion.
async fn set_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str, on: bool) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut list: Vec<String> = obj.meta().finalizers.clone().unwrap_or_default();
    list.retain(|f| f != finalizer);
    if on {
        list.push(finalizer.to_string());
    }
    let patch =
        json!({"metadata": {"finalizers": list, "resourceVersion": obj.meta().resource_version}});
    let name = obj.meta().name.clone().unwrap_or_default();
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Gone already, or changed since read: the next event brings the newer state.
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether `pod` keeps `claim` in use: scheduled, and naming it (an ephemeral claim only while the pod
/// owns it and is not shut down). A finished pod still counts, as upstream's does, until it is deleted.
pub fn pod_uses(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !scheduled || pod.metadata.namespace != claim.metadata.namespace {
        return false;
    }
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let shut_down = pod.metadata.deletion_timestamp.is_some()
        && pod.metadata.deletion_grace_period_seconds == Some(0);
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or("");
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .any(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => c.claim_name == name,
            (None, Some(_)) => {
                !shut_down
                    && rules::claim_name(pod, v).as_deref() == Some(name)
                    && controlled_by(&claim.metadata, pod_uid)
            }
            _ => false,
        })
}

async fn sync_claim(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<PersistentVolumeClaim> = ctx.api(&claim.namespace().unwrap_or_default());
    let protected = has_finalizer(claim.as_ref(), PVC_PROTECTION);
    if claim.metadata.deletion_timestamp.is_none() {
        if !protected {
            set_finalizer(&api, claim.as_ref(), PVC_PROTECTION, true).await?;
        }
        return Ok(Action::await_change());
    }
    if !protected {
        return Ok(Action::await_change());
    }
    let ns = claim.namespace().unwrap_or_default();
    let cached = ctx.store::<Pod>().state();
    if cached.iter().any(|p| pod_uses(p, &claim)) {
        return Ok(Action::await_change());
    }
    // The cache may be behind a pod that was just bound: ask the API before letting the claim go.
    let live = ctx.api::<Pod>(&ns).list(&ListParams::default()).await?;
    if live.items.iter().any(|p| pod_uses(p, &claim)) {
        return Ok(Action::await_change());
    }
    set_finalizer(&api, claim.as_ref(), PVC_PROTECTION, false).await?;
    Ok(Action::await_change())
}

async fn sync_volume(pv: Arc<PersistentVolume>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<PersistentVolume> = ctx.api_all();
    let protected = has_finalizer(pv.as_ref(), PV_PROTECTION);
    if pv.metadata.deletion_timestamp.is_none() {
        if !protected {
            set_finalizer(&api, pv.as_ref(), PV_PROTECTION, true).await?;
        }
        return Ok(Action::await_change());
    }
    let bound = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    if protected && !bound {
        set_finalizer(&api, pv.as_ref(), PV_PROTECTION, false).await?;
    }
    Ok(Action::await_change())
}
