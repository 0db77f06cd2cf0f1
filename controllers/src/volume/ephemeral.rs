//! Generic ephemeral volumes: each pod volume with a `volumeClaimTemplate` gets the claim
//! `<pod>-<volume>`, controlled by the pod, so the garbage collector removes it with the pod (upstream's
//! `ephemeral-volume` controller).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::event;
use crate::context::Context;
use crate::error::{is_conflict, Result};
use crate::manager::ControllerDef;
use crate::owner::{controlled_by, controller_ref};
use crate::runner;

const NAME: &str = "ephemeral-volume";
const REPORTER: &str = "ephemeral_volume";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

fn has_ephemeral(p: &Pod) -> bool {
    keel_client_kit::volume::pod_volumes(p).any(|v| v.ephemeral.is_some())
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let pods = ctx.shared::<Pod>();
    let claims = ctx.shared::<PersistentVolumeClaim>();
    // Only pods with ephemeral volumes are this loop's business; the rest never reach it.
    let relevant = pods
        .subscribe()
        .filter(|p| futures::future::ready(has_ephemeral(p)));
    let controller = Controller::for_shared_stream(relevant, pods.store()).watches_shared_stream(
        claims.subscribe(),
        |c: Arc<PersistentVolumeClaim>| {
            let ns = c.namespace()?;
            let owner = crate::owner::controller_of(&c.metadata)?;
            (owner.kind == "Pod").then(|| ObjectRef::new(&owner.name).within(&ns))
        },
    );
    runner::run(NAME, controller, ctx, reconcile)
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action> {
    if pod.metadata.deletion_timestamp.is_some() || !has_ephemeral(&pod) {
        return Ok(Action::await_change());
    }
    let ns = pod.namespace().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let store = ctx.store::<PersistentVolumeClaim>();
    let failed = |note: String| {
        let ctx = ctx.clone();
        let pod = pod.clone();
        async move {
            event(
                &ctx,
                REPORTER,
                pod.as_ref(),
                EventType::Warning,
                "FailedBinding",
                note,
            )
            .await
        }
    };
    for v in keel_client_kit::volume::pod_volumes(&pod) {
        let Some(e) = &v.ephemeral else { continue };
        let name = format!("{}-{}", pod.name_any(), v.name);
        if let Some(existing) = store.get(&ObjectRef::new(&name).within(&ns)) {
            if !controlled_by(&existing.metadata, &uid) {
                failed(format!(
                    "ephemeral volume {}: PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                    v.name,
                    pod.name_any()
                ))
                .await;
            }
            continue;
        }
        let Some(template) = &e.volume_claim_template else {
            continue;
        };
        let mut meta = template.metadata.clone().unwrap_or_default();
        meta.name = Some(name.clone());
        meta.namespace = Some(ns.clone());
        meta.generate_name = None;
        meta.owner_references = Some(vec![controller_ref(&pod.metadata, "v1", "Pod")]);
        let claim = PersistentVolumeClaim {
            metadata: meta,
            spec: Some(template.spec.clone()),
            status: None,
        };
        match ctx
            .api::<PersistentVolumeClaim>(&ns)
            .create(&PostParams::default(), &claim)
            .await
        {
            Ok(_) => {}
            // Made meanwhile (the cache is behind): the claim's event brings it back here to check.
            Err(e) if is_conflict(&e) => {}
            Err(e) => {
                failed(format!(
                    "ephemeral volume {}: create PVC {name}: {e}",
                    v.name
                ))
                .await;
                return Err(e.into());
            }
        }
    }
    Ok(Action::await_change())
}
