//! The statefulset controller: pods with stable identities `<set>-<ordinal>`, made in order (each after
//! the previous is Running and Ready) or in parallel, removed highest ordinal first, updated highest
//! ordinal first down to the partition; template history in ControllerRevisions.

pub mod claims;
pub mod identity;
pub mod status;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::history;
use crate::manager::ControllerDef;
use crate::pod_state::is_ready as pod_ready;
use crate::runner;
use identity::{new_pod, ordinal, revision_of};

/// The Events' reporting controller.
const REPORTER: &str = "statefulset-controller";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "statefulset",
        start,
    }
}

fn owner_of<K: Resource>(obj: &K) -> Option<ObjectRef<StatefulSet>> {
    let ns = obj.meta().namespace.clone()?;
    obj.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| {
            r.controller == Some(true) && r.kind == "StatefulSet" && r.api_version == "apps/v1"
        })
        .map(|r| ObjectRef::new(&r.name).within(&ns))
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let sets = ctx.shared::<StatefulSet>();
    let pods = ctx.shared::<Pod>();
    let revisions = ctx.shared::<ControllerRevision>();
    // The claims of `volumeClaimTemplates` are read from this cache.
    let _ = ctx.shared::<PersistentVolumeClaim>();
    let controller = Controller::for_shared_stream(sets.subscribe(), sets.store())
        .watches_shared_stream(pods.subscribe(), |p: Arc<Pod>| owner_of(p.as_ref()))
        .watches_shared_stream(revisions.subscribe(), |r: Arc<ControllerRevision>| {
            owner_of(r.as_ref())
        });
    runner::run("statefulset", controller, ctx, reconcile)
}

/// Running and Ready, and not going away.
fn healthy(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod_ready(p)
}

fn finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

async fn event(ctx: &Context, set: &StatefulSet, kind: EventType, reason: &str, note: String) {
    ctx.publish(REPORTER, set, kind, reason, note, false).await
}

async fn delete_pod(ctx: &Context, pod: &Pod) -> Result<()> {
    let dp = DeleteParams {
        // The uid keeps a stale cache from deleting a newer pod of the same identity.
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    let ns = pod.namespace().unwrap_or_default();
    match ctx.api::<Pod>(&ns).delete(&pod.name_any(), &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn create_pod(ctx: &Context, set: &StatefulSet, pod: &Pod) -> Result<Option<Pod>> {
    let ns = set.namespace().unwrap_or_default();
    match ctx
        .api::<Pod>(&ns)
        .create(&PostParams::default(), pod)
        .await
    {
        Ok(made) => {
            event(
                ctx,
                set,
                EventType::Normal,
                "SuccessfulCreate",
                format!(
                    "create Pod {} in StatefulSet {} successful",
                    pod.name_any(),
                    set.name_any()
                ),
            )
            .await;
            Ok(Some(made))
        }
        // The identity exists already (the cache is behind): one pod per identity, so nothing to do.
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => {
            event(
                ctx,
                set,
                EventType::Warning,
                "FailedCreate",
                format!(
                    "create Pod {} in StatefulSet {} failed error: {e}",
                    pod.name_any(),
                    set.name_any()
                ),
            )
            .await;
            Err(e.into())
        }
    }
}

/// What one pass over the pods decided.
struct Plan<'a> {
    /// Pods with an ordinal in range, by ordinal.
    replicas: BTreeMap<i32, Arc<Pod>>,
    /// Pods outside the range, highest first.
    condemned: Vec<Arc<Pod>>,
    /// The current revision's template and name.
    current: (&'a PodTemplateSpec, &'a str),
    /// The update revision's template and name.
    update: (&'a PodTemplateSpec, &'a str),
}

async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = set.namespace().unwrap_or_default();
    let uid = set.uid().unwrap_or_default();
    let name = set.name_any();
    let spec = set.spec.clone().unwrap_or_default();
    let old = set.status.clone().unwrap_or_default();

    // History: the update revision records the template; the current one is what the status says.
    let revisions = history::owned(&ctx, &ns, &uid);
    let Some(owner) = set.controller_owner_ref(&()) else {
        return Ok(Action::await_change());
    };
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let (update_rev, collision) = history::ensure(
        &ctx,
        &ns,
        &owner,
        &labels,
        history::template_patch(&spec.template),
        &revisions,
        old.collision_count.unwrap_or(0),
    )
    .await?;
    let update_name = update_rev.name_any();
    let current_rev = old
        .current_revision
        .as_deref()
        .and_then(|c| revisions.iter().find(|r| r.name_any() == c))
        .map(|r| r.as_ref().clone())
        .unwrap_or_else(|| update_rev.clone());
    let current_name = current_rev.name_any();
    let current_template = history::data_of(&current_rev)
        .and_then(history::template_of)
        .unwrap_or_else(|| spec.template.clone());

    let pods: Vec<Arc<Pod>> = ctx
        .store::<Pod>()
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    let replicas = spec.replicas.unwrap_or(1);
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    let mut plan = Plan {
        replicas: BTreeMap::new(),
        condemned: Vec::new(),
        current: (&current_template, &current_name),
        update: (&spec.template, &update_name),
    };
    for p in &pods {
        match ordinal(&name, &p.name_any()) {
            Some(o) if o >= start && o < start + replicas => {
                plan.replicas.insert(o, p.clone());
            }
            Some(_) => plan.condemned.push(p.clone()),
            None => {}
        }
    }
    plan.condemned
        .sort_by_key(|p| std::cmp::Reverse(ordinal(&name, &p.name_any()).unwrap_or(0)));

    let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let partition = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);

    let settled = sync_pods(
        &ctx, &set, &plan, start, replicas, ordered, rolling, partition,
    )
    .await?;

    let mut st = status::compute(&pods, &current_name, &update_name);
    st.observed_generation = set.metadata.generation;
    st.collision_count = Some(collision);
    st.current_revision = Some(current_name.clone());
    st.update_revision = Some(update_name.clone());
    st.conditions = old
        .conditions
        .clone()
        .map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ != "ReplicaFailure")
                .collect::<Vec<_>>()
        })
        .filter(|cs| !cs.is_empty());
    // A finished rollout makes the update revision current.
    if rolling
        && st.updated_replicas == Some(st.replicas)
        && st.ready_replicas == Some(st.replicas)
        && settled
    {
        st.current_revision = Some(update_name.clone());
        st.current_replicas = Some(st.updated_replicas.unwrap_or(0));
    }
    status::write(&ctx, &set, st.clone()).await?;

    let mut live: HashSet<String> = pods
        .iter()
        .filter_map(|p| revision_of(p).map(str::to_string))
        .collect();
    live.insert(update_name);
    if let Some(c) = &st.current_revision {
        live.insert(c.clone());
    }
    let revisions = history::owned(&ctx, &ns, &uid);
    history::truncate(
        &ctx,
        &ns,
        &revisions,
        &live,
        spec.revision_history_limit.unwrap_or(10),
    )
    .await?;
    Ok(Action::await_change())
}

/// Creates, deletes and updates pods one step as the policies allow; true when nothing is left to do.
#[allow(clippy::too_many_arguments)]
async fn sync_pods(
    ctx: &Context,
    set: &StatefulSet,
    plan: &Plan<'_>,
    start: i32,
    replicas: i32,
    ordered: bool,
    rolling: bool,
    partition: i32,
) -> Result<bool> {
    // Replicas in order: make the missing, replace the finished; OrderedReady stops at the first one
    // that is not yet Running and Ready.
    let mut all_healthy = true;
    for o in start..start + replicas {
        match plan.replicas.get(&o) {
            None => {
                let (template, rev) = if o - start < partition && rolling {
                    plan.current
                } else {
                    plan.update
                };
                let pod = new_pod(set, template, o, rev);
                // The claims come first: a pod is never made without the claims it mounts.
                claims::ensure(ctx, set, &pod.name_any(), o).await?;
                if let Some(made) = create_pod(ctx, set, &pod).await? {
                    claims::apply_policy(ctx, set, &made, o, false).await?;
                }
                all_healthy = false;
                if ordered {
                    return Ok(false);
                }
            }
            Some(p) => {
                if crate::pod_state::phase(p) == "Pending" {
                    // A pending pod's claim may have been deleted under it: made again.
                    claims::ensure(ctx, set, &p.name_any(), o).await?;
                }
                claims::apply_policy(ctx, set, p, o, false).await?;
            }
        }
        match plan.replicas.get(&o) {
            None => {}
            Some(p) if finished(p) && p.metadata.deletion_timestamp.is_none() => {
                // A failed or completed pod is replaced under the same identity once it is gone.
                delete_pod(ctx, p).await?;
                all_healthy = false;
                if ordered {
                    return Ok(false);
                }
            }
            Some(p) if !healthy(p) => {
                all_healthy = false;
                if ordered {
                    debug!(set = %set.name_any(), pod = %p.name_any(), "waiting for pod to be Running and Ready");
                    return Ok(false);
                }
            }
            Some(_) => {}
        }
    }
    // Scale down, highest ordinal first; OrderedReady one at a time, only with every replica healthy.
    for p in &plan.condemned {
        if ordered && !all_healthy {
            return Ok(false);
        }
        if p.metadata.deletion_timestamp.is_none() {
            if let Some(o) = ordinal(&set.name_any(), &p.name_any()) {
                // A claim whose policy deletes it on scale-down is handed to the pod before it goes.
                claims::apply_policy(ctx, set, p, o, true).await?;
            }
            delete_pod(ctx, p).await?;
        }
        if ordered {
            return Ok(false);
        }
    }
    if !plan.condemned.is_empty() || !all_healthy {
        return Ok(false);
    }
    if !rolling {
        return Ok(true);
    }
    // Rolling update: the highest ordinal not yet on the update revision goes first, one at a time,
    // down to the partition; a pod being replaced (gone or unhealthy) stops it.
    for o in (start + partition.max(0)..start + replicas).rev() {
        let Some(p) = plan.replicas.get(&o) else {
            return Ok(false);
        };
        if revision_of(p) != Some(plan.update.1) {
            if p.metadata.deletion_timestamp.is_none() {
                debug!(set = %set.name_any(), pod = %p.name_any(), "terminating pod for update");
                delete_pod(ctx, p).await?;
            }
            return Ok(false);
        }
        if !healthy(p) {
            return Ok(false);
        }
    }
    Ok(true)
}
