//! The replicaset controller: keeps `spec.replicas` active pods for every ReplicaSet, adopting matching
//! orphans, releasing pods that no longer match, and reporting what it sees in the status. The
//! replicationcontroller controller is the same logic over ReplicationControllers ([`kind`]).

pub mod expectations;
pub mod kind;
pub mod rank;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, BoxFuture};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use serde_json::json;
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::{owner, pod_state, runner, selector};
use expectations::Expectations;
use kind::Replicated;

/// Most pods one sync creates or deletes (upstream's `burstReplicas`).
pub const BURST: usize = 500;

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: ReplicaSet::CONTROLLER,
        start: start::<ReplicaSet>,
    }
}

/// The replication manager: the same logic for ReplicationControllers.
pub fn replication_controller_def() -> ControllerDef {
    ControllerDef {
        name: ReplicationController::CONTROLLER,
        start: start::<ReplicationController>,
    }
}

struct State {
    expectations: Expectations,
    recorder: Recorder,
    pods: Store<Pod>,
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

fn live(pods: &Store<Pod>, ns: &str, name: &str) -> bool {
    pods.get(&ObjectRef::new(name).within(ns))
        .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
}

fn start<K: Replicated>(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let sets = ctx.shared::<K>();
    let pods = ctx.shared::<Pod>();
    let state = Arc::new(State {
        expectations: Expectations::default(),
        recorder: ctx.recorder(K::COMPONENT),
        pods: pods.store(),
    });
    let sets_store = sets.store();
    let seen = state.clone();
    let controller = Controller::for_shared_stream(sets.subscribe(), sets.store())
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| {
            let ns = pod.namespace().unwrap_or_default();
            if let Some(r) = owner::controller_of(&pod.metadata) {
                if r.kind != K::KIND {
                    return Vec::new();
                }
                let name = pod.name_any();
                seen.expectations
                    .observed(&key(&ns, &r.name), &name, live(&seen.pods, &ns, &name));
                return vec![ObjectRef::new(&r.name).within(&ns)];
            }
            // An orphan: every ReplicaSet that could adopt it looks.
            sets_store
                .state()
                .iter()
                .filter(|o| o.meta().namespace.as_deref() == Some(ns.as_str()))
                .filter(|o| {
                    o.as_replica_set().spec.as_ref().is_some_and(|s| {
                        !selector::is_empty(&s.selector)
                            && selector::matches(&s.selector, pod.metadata.labels.as_ref())
                    })
                })
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect()
        });
    runner::run(K::CONTROLLER, controller, ctx, move |obj, ctx| {
        reconcile(obj, ctx, state.clone())
    })
}

async fn reconcile<K: Replicated>(
    obj: Arc<K>,
    ctx: Arc<Context>,
    state: Arc<State>,
) -> Result<Action> {
    let rs = obj.as_replica_set();
    let about = obj.object_ref(&());
    let ns = rs.namespace().unwrap_or_default();
    let name = rs.name_any();
    let k = key(&ns, &name);
    let Some(spec) = rs.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    let owned = claim::<K>(&rs, &ctx, &state).await?;
    let active: Vec<&Pod> = owned
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| pod_state::is_active(p))
        .collect();
    let ready_to_manage = state
        .expectations
        .satisfied(&k, |n| live(&state.pods, &ns, n));
    let mut failure = None;
    let mut changed = false;
    if ready_to_manage && rs.metadata.deletion_timestamp.is_none() {
        let want = usize::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
        (failure, changed) = manage::<K>(&rs, &about, &active, want, &ctx, &state).await;
    }
    let (new_status, wait) = status::calculate(&rs, &active, failure, Timestamp::now());
    if rs.status.as_ref() != Some(&new_status) {
        let mut updated = (*obj).clone();
        updated.set_status(new_status);
        match ctx
            .api::<K>(&ns)
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            // A newer ReplicaSet is on its way from the watch; it brings the next pass.
            Err(e) if is_conflict(&e) || is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if changed {
        // The pods' own events bring the next pass; this is the safety net if one is missed.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    if !ready_to_manage {
        // Waiting for the cache to show our own writes: look again soon even if an event was missed.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    Ok(match wait {
        Some(w) => Action::requeue(w + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// Whether the ReplicaSet may adopt or release pods. One being deleted does neither, as upstream's
/// controller-ref manager: its pods are the garbage collector's to delete (background, foreground) or to
/// orphan (orphan), and a pod released now would escape a cascading delete, one adopted now would be
/// deleted with an owner that never ran it.
fn claims_change(rs: &ReplicaSet) -> bool {
    rs.metadata.deletion_timestamp.is_none()
}

/// The ReplicaSet's pods: those it controls that still match, plus the orphans it adopts; it releases the
/// ones it controls that no longer match (neither while it is being deleted).
async fn claim<K: Replicated>(
    rs: &ReplicaSet,
    ctx: &Context,
    state: &State,
) -> Result<Vec<Arc<Pod>>> {
    let ns = rs.namespace().unwrap_or_default();
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let Some(sel) = rs.spec.as_ref().map(|s| &s.selector) else {
        return Ok(Vec::new());
    };
    let api = ctx.api::<Pod>(&ns);
    let mut owned = Vec::new();
    let mut checked_fresh = false;
    for pod in state.pods.state() {
        if pod.metadata.namespace.as_deref() != Some(ns.as_str()) {
            continue;
        }
        let matches =
            !selector::is_empty(sel) && selector::matches(sel, pod.metadata.labels.as_ref());
        let ours = owner::controlled_by(&pod.metadata, &uid);
        if ours && matches {
            owned.push(pod);
        } else if ours {
            if pod.metadata.deletion_timestamp.is_some() || !claims_change(rs) {
                continue;
            }
            let refs: Vec<_> = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.uid != uid)
                .cloned()
                .collect();
            let patch = json!({"metadata": {
                "ownerReferences": refs,
                "resourceVersion": pod.metadata.resource_version,
            }});
            match api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => debug!(pod = %pod.name_any(), rs = %rs.name_any(), "released"),
                Err(e) if is_conflict(&e) || is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        } else if matches
            && owner::controller_of(&pod.metadata).is_none()
            && pod.metadata.deletion_timestamp.is_none()
            && claims_change(rs)
        {
            // Adopt only if the ReplicaSet is still the one we read (not deleted and made again).
            if !checked_fresh {
                let fresh = ctx.api::<K>(&ns).get_opt(&rs.name_any()).await?;
                let same = fresh.is_some_and(|f| {
                    f.meta().uid.as_deref() == Some(uid.as_str())
                        && f.meta().deletion_timestamp.is_none()
                });
                if !same {
                    return Ok(owned);
                }
                checked_fresh = true;
            }
            let mut refs: Vec<_> = pod.metadata.owner_references.clone().unwrap_or_default();
            refs.push(owner::controller_ref(&rs.metadata, K::API_VERSION, K::KIND));
            let patch = json!({"metadata": {
                "ownerReferences": refs,
                "resourceVersion": pod.metadata.resource_version,
            }});
            match api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(p) => {
                    debug!(pod = %pod.name_any(), rs = %rs.name_any(), "adopted");
                    owned.push(Arc::new(p));
                }
                Err(e) if is_conflict(&e) || is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(owned)
}

/// Records an Event about `rs`. Each Normal one names its own pod, so it gets a recorder of its own (the
/// shared one would fold them into one series, hiding all names but the first); repeated warnings count up.
#[allow(clippy::too_many_arguments)] // one call per Event kind; a struct would only rename them
async fn event(
    ctx: &Context,
    state: &State,
    about: &ObjectReference,
    component: &str,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    let fresh;
    let recorder = if type_ == EventType::Normal {
        fresh = ctx.recorder(component);
        &fresh
    } else {
        &state.recorder
    };
    if let Err(e) = recorder.publish(&ev, about).await {
        debug!(error = %e, "event not recorded");
    }
}

fn new_pod<K: Replicated>(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.name_any())),
            namespace: rs.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner::controller_ref(
                &rs.metadata,
                K::API_VERSION,
                K::KIND,
            )]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// Creates or deletes pods toward `want`; returns the failure to report, if any, and whether it wrote.
async fn manage<K: Replicated>(
    rs: &ReplicaSet,
    about: &ObjectReference,
    active: &[&Pod],
    want: usize,
    ctx: &Context,
    state: &State,
) -> (Option<(&'static str, String)>, bool) {
    let ns = rs.namespace().unwrap_or_default();
    let k = key(&ns, &rs.name_any());
    let api = ctx.api::<Pod>(&ns);
    if active.len() < want {
        let mut left = (want - active.len()).min(BURST);
        let mut batch = 1;
        let pod = new_pod::<K>(rs);
        // Slow start: 1, 2, 4, … at once, stopping at the first failure (a quota or a bad template would
        // fail every one of them).
        while left > 0 {
            let n = batch.min(left);
            state.expectations.expect_creates(&k, n);
            let pp = PostParams::default();
            let results = join_all((0..n).map(|_| api.create(&pp, &pod))).await;
            let mut failed = None;
            for r in results {
                match r {
                    Ok(p) => {
                        let name = p.name_any();
                        state.expectations.created(&k, Some(name.clone()));
                        event(
                            ctx,
                            state,
                            about,
                            K::COMPONENT,
                            EventType::Normal,
                            "SuccessfulCreate",
                            "Create",
                            format!("Created pod: {name}"),
                        )
                        .await;
                    }
                    Err(e) => {
                        state.expectations.created(&k, None);
                        let msg = format!("Error creating: {}", api_message(&e));
                        if failed.is_none() {
                            event(
                                ctx,
                                state,
                                about,
                                K::COMPONENT,
                                EventType::Warning,
                                "FailedCreate",
                                "Create",
                                msg.clone(),
                            )
                            .await;
                        }
                        failed = Some(msg);
                    }
                }
            }
            if let Some(msg) = failed {
                return (Some(("FailedCreate", msg)), true);
            }
            left -= n;
            batch *= 2;
        }
        return (None, true);
    }
    if active.len() > want {
        let n = (active.len() - want).min(BURST);
        let mut ranked: Vec<&Pod> = active.to_vec();
        rank::sort_for_deletion(&mut ranked);
        let victims: Vec<String> = ranked.iter().take(n).map(|p| p.name_any()).collect();
        for v in &victims {
            state.expectations.expect_delete(&k, v);
        }
        let dp = DeleteParams::default();
        let results = join_all(victims.iter().map(|v| api.delete(v, &dp))).await;
        let mut failed = None;
        for (v, r) in victims.iter().zip(results) {
            match r {
                Ok(_) => {
                    event(
                        ctx,
                        state,
                        about,
                        K::COMPONENT,
                        EventType::Normal,
                        "SuccessfulDelete",
                        "Delete",
                        format!("Deleted pod: {v}"),
                    )
                    .await;
                }
                Err(e) if is_not_found(&e) => state.expectations.observed(&k, v, false),
                Err(e) => {
                    state.expectations.delete_failed(&k, v);
                    let msg = format!("Error deleting: {}", api_message(&e));
                    event(
                        ctx,
                        state,
                        about,
                        K::COMPONENT,
                        EventType::Warning,
                        "FailedDelete",
                        "Delete",
                        msg.clone(),
                    )
                    .await;
                    failed = Some(msg);
                }
            }
        }
        return (failed.map(|m| ("FailedDelete", m)), true);
    }
    (None, false)
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
