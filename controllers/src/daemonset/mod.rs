//! The daemonset controller: one pod per eligible node, pinned to it by node affinity (the scheduler
//! binds it), removed from nodes it no longer belongs on; RollingUpdate (maxUnavailable, no surge) or
//! OnDelete; template history in ControllerRevisions.

pub mod expectations;
pub mod placement;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::debug;

use crate::context::Context;
use crate::disruption::budget::scaled;
use crate::error::{is_conflict, is_not_found, Result};
use crate::history;
use crate::manager::ControllerDef;
use crate::pod_state::is_ready as pod_ready;
use crate::runner;

/// The revision hash label of daemon pods.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// The (deprecated, still set upstream) template generation label.
pub const GENERATION_LABEL: &str = "pod-template-generation";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "daemonset",
        start,
    }
}

fn owner_of<K: Resource>(obj: &K) -> Option<ObjectRef<DaemonSet>> {
    let ns = obj.meta().namespace.clone()?;
    obj.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == "DaemonSet" && r.api_version == "apps/v1")
        .map(|r| ObjectRef::new(&r.name).within(&ns))
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let sets = ctx.shared::<DaemonSet>();
    let pods = ctx.shared::<Pod>();
    let nodes = ctx.shared::<Node>();
    let revisions = ctx.shared::<ControllerRevision>();
    let all = sets.store();
    let controller = Controller::for_shared_stream(sets.subscribe(), sets.store())
        .watches_shared_stream(pods.subscribe(), |p: Arc<Pod>| owner_of(p.as_ref()))
        .watches_shared_stream(revisions.subscribe(), |r: Arc<ControllerRevision>| {
            owner_of(r.as_ref())
        })
        // Any node change may change where every DaemonSet runs.
        .watches_shared_stream(nodes.subscribe(), move |_n: Arc<Node>| {
            all.state()
                .iter()
                .map(|d| ObjectRef::from_obj(d.as_ref()))
                .collect::<Vec<_>>()
        });
    // Owned by this run of the controller: a new term as leader starts with nothing awaited.
    let expectations = Arc::new(expectations::Expectations::default());
    runner::run("daemonset", controller, ctx, move |ds, ctx| {
        reconcile(ds, ctx, expectations.clone())
    })
}

fn available(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && pod_ready(p)
}

fn failed(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
}

async fn delete_pod(ctx: &Context, pod: &Pod) -> Result<()> {
    let dp = DeleteParams {
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

fn new_pod(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let spec = ds.spec.clone().unwrap_or_default();
    let template = spec.template;
    let mut meta: ObjectMeta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.take().unwrap_or_default();
    labels.insert(REVISION_LABEL.into(), hash.into());
    if let Some(g) = ds.metadata.generation {
        labels.insert(GENERATION_LABEL.into(), g.to_string());
    }
    meta.labels = Some(labels);
    meta.name = None;
    meta.generate_name = Some(format!("{}-", ds.name_any()));
    meta.namespace = ds.namespace();
    meta.owner_references = ds.controller_owner_ref(&()).map(|r| vec![r]);
    let mut pod_spec = template.spec.unwrap_or_default();
    pod_spec.tolerations = Some(placement::with_tolerations(&pod_spec));
    pod_spec.affinity = Some(placement::pinned_affinity(pod_spec.affinity.take(), node));
    Pod {
        metadata: meta,
        spec: Some(pod_spec),
        status: None,
    }
}

async fn reconcile(
    ds: Arc<DaemonSet>,
    ctx: Arc<Context>,
    expectations: Arc<expectations::Expectations>,
) -> Result<Action> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ds.namespace().unwrap_or_default();
    let uid = ds.uid().unwrap_or_default();
    let spec = ds.spec.clone().unwrap_or_default();
    let old = ds.status.clone().unwrap_or_default();
    let Some(owner) = ds.controller_owner_ref(&()) else {
        return Ok(Action::await_change());
    };

    let revisions = history::owned(&ctx, &ns, &uid);
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let (current, collision) = history::ensure(
        &ctx,
        &ns,
        &owner,
        &labels,
        history::template_patch(&spec.template),
        &revisions,
        old.collision_count.unwrap_or(0),
    )
    .await?;
    let hash = current
        .labels()
        .get(history::HASH_LABEL)
        .cloned()
        .unwrap_or_default();

    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let nodes = ctx.store::<Node>().state();
    let node_names: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    let mut strays = Vec::new();
    for p in ctx.store::<Pod>().state() {
        if p.namespace().as_deref() != Some(ns.as_str())
            || !p
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        {
            continue;
        }
        match placement::node_of(&p) {
            Some(n) if node_names.contains(&n) => by_node.entry(n).or_default().push(p),
            _ => strays.push(p),
        }
    }

    let mut status = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        collision_count: Some(collision),
        ..Default::default()
    };
    let mut to_create = Vec::new();
    let mut to_delete: Vec<Arc<Pod>> = strays;
    // Per node: (pod kept, whether it is on the current revision).
    let mut kept: Vec<Arc<Pod>> = Vec::new();
    for node in &nodes {
        let name = node.name_any();
        let run = placement::should_run(&pod_spec, node);
        let mut pods: Vec<Arc<Pod>> = by_node
            .remove(&name)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if !pods.is_empty() {
            expectations.observed(&uid, &name);
        }
        if !run {
            if !pods.is_empty() {
                status.number_misscheduled += 1;
            }
            to_delete.extend(pods);
            continue;
        }
        status.desired_number_scheduled += 1;
        // A failed daemon pod is replaced; extra pods go, the oldest stays.
        let (bad, good): (Vec<_>, Vec<_>) = pods.drain(..).partition(|p| failed(p));
        to_delete.extend(bad);
        let mut good = good;
        good.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        let mut it = good.into_iter();
        match it.next() {
            Some(p) => {
                status.current_number_scheduled += 1;
                if available(&p) {
                    status.number_ready += 1;
                    status.number_available = Some(status.number_available.unwrap_or(0) + 1);
                }
                if p.labels().get(REVISION_LABEL) == Some(&hash) {
                    status.updated_number_scheduled =
                        Some(status.updated_number_scheduled.unwrap_or(0) + 1);
                }
                kept.push(p);
            }
            None if expectations.pending(&uid, &name) => {}
            None => to_create.push(name.clone()),
        }
        to_delete.extend(it);
    }
    let unavailable = status.desired_number_scheduled - status.number_available.unwrap_or(0);
    status.number_unavailable = Some(unavailable).filter(|u| *u > 0);

    for node in &to_create {
        expectations.expect(&uid, node);
        let pod = new_pod(&ds, node, &hash);
        if let Err(e) = ctx
            .api::<Pod>(&ns)
            .create(&PostParams::default(), &pod)
            .await
        {
            expectations.observed(&uid, node);
            return Err(e.into());
        }
        debug!(daemonset = %ds.name_any(), node, "created daemon pod");
    }
    for p in &to_delete {
        delete_pod(&ctx, p).await?;
    }

    // RollingUpdate: old pods that are unavailable go at once; available ones as maxUnavailable allows.
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if rolling {
        let max = spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.as_ref())
            .map(|m| scaled(m, status.desired_number_scheduled))
            .transpose()
            .map_err(crate::Error::Invalid)?
            .unwrap_or(1)
            .max(1);
        let mut budget = max - unavailable - i32::try_from(to_create.len()).unwrap_or(0);
        for p in kept
            .iter()
            .filter(|p| p.labels().get(REVISION_LABEL) != Some(&hash))
        {
            if !available(p) {
                delete_pod(&ctx, p).await?;
            } else if budget > 0 {
                budget -= 1;
                delete_pod(&ctx, p).await?;
            }
        }
    }

    if ds.status.as_ref() != Some(&status) {
        let mut next = ds.as_ref().clone();
        next.status = Some(status);
        match ctx
            .api::<DaemonSet>(&ns)
            .replace_status(&ds.name_any(), &PostParams::default(), &next)
            .await
        {
            Ok(_) => {}
            Err(e) if is_conflict(&e) || is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }

    let mut live: HashSet<String> = HashSet::from([current.name_any()]);
    for r in history::owned(&ctx, &ns, &uid) {
        let h = r
            .labels()
            .get(history::HASH_LABEL)
            .cloned()
            .unwrap_or_default();
        if kept
            .iter()
            .any(|p| p.labels().get(REVISION_LABEL) == Some(&h))
        {
            live.insert(r.name_any());
        }
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
