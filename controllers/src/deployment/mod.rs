//! The deployment controller: one ReplicaSet per pod template, rolled from old to new (RollingUpdate or
//! Recreate), scaled in proportion when the replicas change mid-rollout, old ones pruned past
//! `revisionHistoryLimit`, and the Deployment's status and conditions kept as upstream reports them.

pub mod hash;
pub mod history;
pub mod recreate;
pub mod replicasets;
pub mod rollout;
pub mod scale;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::{owner, pod_state, runner, selector};

/// The label that keeps each ReplicaSet's pods apart.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "deployment",
        start,
    }
}

/// What the controller keeps between passes.
pub struct State {
    recorder: Recorder,
    sets: Store<ReplicaSet>,
    pods: Store<Pod>,
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let deployments = ctx.shared::<Deployment>();
    let sets = ctx.shared::<ReplicaSet>();
    let pods = ctx.shared::<Pod>();
    let state = Arc::new(State {
        recorder: ctx.recorder("deployment-controller"),
        sets: sets.store(),
        pods: pods.store(),
    });
    let dstore = deployments.store();
    let sets_store = sets.store();
    let controller = Controller::for_shared_stream(deployments.subscribe(), deployments.store())
        .watches_shared_stream(sets.subscribe(), move |rs: Arc<ReplicaSet>| {
            let ns = rs.namespace().unwrap_or_default();
            if let Some(r) = owner::controller_of(&rs.metadata) {
                return if r.kind == "Deployment" {
                    vec![ObjectRef::new(&r.name).within(&ns)]
                } else {
                    Vec::new()
                };
            }
            dstore
                .state()
                .iter()
                .filter(|d| d.metadata.namespace.as_deref() == Some(ns.as_str()))
                .filter(|d| {
                    d.spec.as_ref().is_some_and(|s| {
                        !selector::is_empty(&s.selector)
                            && selector::matches(&s.selector, rs.metadata.labels.as_ref())
                    })
                })
                .map(|d| ObjectRef::from_obj(d.as_ref()))
                .collect()
        })
        // Recreate waits for the old pods to be gone: a pod that stops or goes away is news.
        .watches_shared_stream(pods.subscribe(), {
            let pods_store = pods.store();
            move |pod: Arc<Pod>| {
                let ns = pod.namespace().unwrap_or_default();
                let gone = pods_store.get(&ObjectRef::from_obj(pod.as_ref())).is_none();
                if !gone && pod_state::is_active(&pod) {
                    return None;
                }
                let rs = owner::controller_of(&pod.metadata).filter(|r| r.kind == "ReplicaSet")?;
                let rs = sets_store.get(&ObjectRef::new(&rs.name).within(&ns))?;
                let d = owner::controller_of(&rs.metadata).filter(|r| r.kind == "Deployment")?;
                Some(ObjectRef::new(&d.name).within(&ns))
            }
        });
    runner::run("deployment", controller, ctx, move |d, ctx| {
        reconcile(d, ctx, state.clone())
    })
}

/// One pass over one Deployment: the object as it is being changed, and what to do next.
pub struct Pass<'a> {
    /// The client and informers.
    pub ctx: &'a Context,
    /// The controller's state.
    pub state: &'a State,
    /// The Deployment, updated as its writes return.
    pub d: Deployment,
    /// When to look again even if nothing changes (the progress deadline, a missed event).
    pub requeue: Option<Duration>,
}

impl Pass<'_> {
    /// `spec.replicas`.
    pub fn replicas(&self) -> i32 {
        self.d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    /// The namespace.
    pub fn ns(&self) -> String {
        self.d.namespace().unwrap_or_default()
    }

    /// Records an Event about the Deployment. Normal ones each say something new ("Scaled up … from 0 to
    /// 3"), so each gets a recorder of its own rather than being folded into the first one's series.
    pub async fn event(&self, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        let fresh;
        let recorder = if type_ == EventType::Normal {
            fresh = self.ctx.recorder("deployment-controller");
            &fresh
        } else {
            &self.state.recorder
        };
        if let Err(e) = recorder.publish(&ev, &self.d.object_ref(&())).await {
            debug!(error = %e, "event not recorded");
        }
    }

    /// Asks to look again within `after`.
    pub fn requeue_within(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Writes `status` through `/status` if it differs (conditional on the resourceVersion read).
    pub async fn write_status(&mut self, status: DeploymentStatus) -> Result<()> {
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut d = self.d.clone();
        d.status = Some(status);
        let written = self
            .ctx
            .api::<Deployment>(&self.ns())
            .replace_status(&d.name_any(), &PostParams::default(), &d)
            .await?;
        self.d = written;
        Ok(())
    }

    /// Sets the Deployment's revision annotation (as upstream does, for `kubectl rollout history`).
    pub async fn set_revision(&mut self, revision: &str) -> Result<()> {
        let current = self
            .d
            .annotations()
            .get(history::REVISION)
            .map(String::as_str);
        let newer = match (
            current.and_then(|c| c.parse::<i64>().ok()),
            revision.parse::<i64>(),
        ) {
            (Some(c), Ok(r)) => c < r,
            _ => current != Some(revision),
        };
        if !newer {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "annotations": {history::REVISION: revision},
            "resourceVersion": self.d.metadata.resource_version,
        }});
        let written = self
            .ctx
            .api::<Deployment>(&self.ns())
            .patch(
                &self.d.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        self.d = written;
        Ok(())
    }
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>, state: Arc<State>) -> Result<Action> {
    let Some(spec) = d.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    let mut s = Pass {
        ctx: &ctx,
        state: &state,
        d: (*d).clone(),
        requeue: None,
    };
    if selector::is_empty(&spec.selector) {
        s.event(
            EventType::Warning,
            "SelectingAll",
            "This deployment is selecting all pods. A non-empty selector is required.".into(),
        )
        .await;
        return Ok(Action::await_change());
    }
    let result = run(&mut s).await;
    match result {
        Ok(()) => Ok(s.requeue.map_or_else(Action::await_change, Action::requeue)),
        // Someone else wrote first (or the cache was behind): the watch brings the next pass.
        Err(crate::Error::Kube(e)) if is_conflict(&e) || is_not_found(&e) => {
            debug!(deployment = %d.name_any(), error = %e, "stale; retrying on the next event");
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Err(e) => Err(e),
    }
}

async fn run(s: &mut Pass<'_>) -> Result<()> {
    let sets = replicasets::claim(s).await?;
    if s.d.metadata.deletion_timestamp.is_some() {
        let (new, old) = replicasets::split(s, sets);
        return status::sync_status_only(s, new.as_ref(), &old).await;
    }
    status::check_paused(s).await?;
    let paused = s.d.spec.as_ref().and_then(|x| x.paused).unwrap_or(false);
    if paused || scale::is_scaling_event(s, &sets) {
        return scale::sync(s, sets).await;
    }
    let recreate =
        s.d.spec
            .as_ref()
            .and_then(|x| x.strategy.as_ref())
            .and_then(|x| x.type_.as_deref())
            == Some("Recreate");
    if recreate {
        recreate::rollout(s, sets).await
    } else {
        rollout::rolling(s, sets).await
    }
}
