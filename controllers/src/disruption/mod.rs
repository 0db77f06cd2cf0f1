//! The disruption controller: keeps each PodDisruptionBudget's status (expected and healthy pods, the
//! disruptions allowed, the `DisruptionAllowed` condition) so the eviction subresource can decide.

pub mod budget;
pub mod scale;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::pod_state::is_ready as pod_ready;
use crate::runner;
use crate::selector::selects;

/// The condition the controller keeps.
pub const CONDITION: &str = "DisruptionAllowed";
/// Reason: at least one disruption is allowed.
pub const SUFFICIENT: &str = "SufficientPods";
/// Reason: no disruption is allowed.
pub const INSUFFICIENT: &str = "InsufficientPods";
/// Reason: the status could not be computed (fail safe: nothing allowed).
pub const SYNC_FAILED: &str = "SyncFailed";

/// How often a budget measured against controllers' scale is recomputed (their replicas are not watched).
const RESYNC: Duration = Duration::from_secs(30);

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "disruption",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let budgets = ctx.shared::<PodDisruptionBudget>();
    let pods = ctx.shared::<Pod>();
    let store = budgets.store();
    let controller = Controller::for_shared_stream(budgets.subscribe(), budgets.store())
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| {
            let ns = pod.namespace();
            store
                .state()
                .into_iter()
                .filter(|b| b.namespace() == ns)
                .filter(|b| {
                    selects(
                        b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                        pod.metadata.labels.as_ref(),
                    )
                })
                .map(|b| ObjectRef::from_obj(b.as_ref()))
                .collect::<Vec<_>>()
        });
    runner::run("disruption", controller, ctx, reconcile)
}

async fn reconcile(pdb: Arc<PodDisruptionBudget>, ctx: Arc<Context>) -> Result<Action> {
    let ns = pdb.namespace().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = ctx
        .store::<Pod>()
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| selects(spec.selector.as_ref(), p.metadata.labels.as_ref()))
        .collect();
    let min = spec.min_available.as_ref();
    let max = spec.max_unavailable.as_ref();
    let scale = if budget::needs_scale(min, max) {
        match scale::expected_scale(&ctx, &ns, &pods).await {
            Ok(s) => s,
            Err(e) => return fail_safe(&ctx, &pdb, &e).await,
        }
    } else {
        0
    };
    let (expected, desired) = match budget::expected_and_desired(min, max, count(pods.len()), scale)
    {
        Ok(v) => v,
        Err(e) => return fail_safe(&ctx, &pdb, &e).await,
    };
    let old = pdb.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let (disrupted, next_expiry) = budget::in_flight(
        &old.disrupted_pods.clone().unwrap_or_default(),
        |name| {
            pods.iter()
                .any(|p| p.name_any() == name && p.metadata.deletion_timestamp.is_none())
        },
        now,
    );
    let healthy = count(
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| !disrupted.contains_key(&p.name_any()))
            .filter(|p| pod_ready(p))
            .count(),
    );
    let allowed = budget::allowed(healthy, desired, expected);
    let (status, reason) = if allowed > 0 {
        ("True", SUFFICIENT)
    } else {
        ("False", INSUFFICIENT)
    };
    let status = PodDisruptionBudgetStatus {
        current_healthy: healthy,
        desired_healthy: desired,
        expected_pods: expected,
        disruptions_allowed: allowed,
        observed_generation: pdb.metadata.generation,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        conditions: Some(condition(&old, status, reason, "", pdb.metadata.generation)),
    };
    write_status(&ctx, &pdb, status).await?;
    let mut wait = if budget::needs_scale(min, max) {
        Some(RESYNC)
    } else {
        None
    };
    if let Some(at) = next_expiry {
        let secs = at.duration_since(now).as_secs().max(1);
        let d = Duration::from_secs(u64::try_from(secs).unwrap_or(1));
        wait = Some(wait.map_or(d, |w| w.min(d)));
    }
    Ok(wait.map_or_else(Action::await_change, Action::requeue))
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The condition list with `DisruptionAllowed` set; its transition time moves only when its status does.
fn condition(
    old: &PodDisruptionBudgetStatus,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Vec<Condition> {
    let mut list = old.conditions.clone().unwrap_or_default();
    let prior = list.iter().position(|c| c.type_ == CONDITION);
    let since = prior
        .and_then(|i| list.get(i))
        .filter(|c| c.status == status)
        .map_or_else(
            || Time(Timestamp::now()),
            |c| c.last_transition_time.clone(),
        );
    let c = Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since,
        observed_generation: generation,
    };
    match prior {
        Some(i) => list[i] = c,
        None => list.push(c),
    }
    list
}

/// Upstream's failSafe: a budget whose status cannot be computed allows nothing.
async fn fail_safe(ctx: &Context, pdb: &PodDisruptionBudget, err: &str) -> Result<Action> {
    debug!(pdb = %pdb.name_any(), error = err, "disruption budget fails safe");
    let old = pdb.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.disruptions_allowed = 0;
    status.conditions = Some(condition(
        &old,
        "False",
        SYNC_FAILED,
        err,
        pdb.metadata.generation,
    ));
    write_status(ctx, pdb, status).await?;
    Ok(Action::requeue(RESYNC))
}

/// Writes the status if it changed, conditionally on the cached resourceVersion: an eviction that took
/// a disruption meanwhile wins, and this reconcile runs again on the new object.
async fn write_status(
    ctx: &Context,
    pdb: &PodDisruptionBudget,
    status: PodDisruptionBudgetStatus,
) -> Result<()> {
    if pdb.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut next = pdb.clone();
    next.status = Some(status);
    let ns = pdb.namespace().unwrap_or_default();
    match ctx
        .api::<PodDisruptionBudget>(&ns)
        .replace_status(&pdb.name_any(), &PostParams::default(), &next)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
