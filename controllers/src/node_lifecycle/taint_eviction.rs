//! The taint-eviction controller: pods on a node with NoExecute taints they do not tolerate are deleted
//! at once; pods that tolerate them for `tolerationSeconds` are deleted when that time has passed since
//! the controller first saw them under the taints. Each gets the `DisruptionTarget` condition first.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use super::taints::{self, NO_EXECUTE};
use crate::context::Context;
use crate::error::is_not_found;
use crate::manager::ControllerDef;

/// How often tainted nodes' pods are looked at.
pub const PERIOD: Duration = Duration::from_secs(1);
/// The condition an evicted pod gets.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Its reason.
pub const REASON: &str = "DeletionByTaintManager";

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "taint-eviction",
        start,
    }
}

#[derive(Default)]
struct Evictor {
    /// When each pod (by uid) was first seen under NoExecute taints.
    since: HashMap<String, Instant>,
    /// Pods already deleted, so a lagging cache does not delete them again.
    deleted: HashSet<String>,
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    ctx.shared::<Node>();
    ctx.shared::<Pod>();
    let ctx = ctx.clone();
    async move {
        let mut ev = Evictor::default();
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            ev.pass(&ctx).await;
        }
    }
    .boxed()
}

impl Evictor {
    async fn pass(&mut self, ctx: &Arc<Context>) {
        let tainted: HashMap<String, Vec<Taint>> = ctx
            .store::<Node>()
            .state()
            .iter()
            .filter_map(|n| {
                let t: Vec<Taint> = taints::taints(n)
                    .iter()
                    .filter(|t| t.effect == NO_EXECUTE)
                    .cloned()
                    .collect();
                (!t.is_empty()).then(|| (n.name_any(), t))
            })
            .collect();
        let pods = ctx.store::<Pod>().state();
        let uids: HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        self.deleted.retain(|u| uids.contains(u));
        if tainted.is_empty() {
            self.since.clear();
            return;
        }
        let mut under: HashSet<String> = HashSet::new();
        for pod in pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            let Some(node_taints) = tainted.get(node) else {
                continue;
            };
            let Some(uid) = pod.uid() else { continue };
            if pod.metadata.deletion_timestamp.is_some() || self.deleted.contains(&uid) {
                continue;
            }
            under.insert(uid.clone());
            let first = *self.since.entry(uid.clone()).or_insert_with(Instant::now);
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            let refs: Vec<&Taint> = node_taints.iter().collect();
            let due = match taints::toleration_time(&tolerations, &refs) {
                None => true,
                Some(None) => false,
                Some(Some(secs)) => first.elapsed() >= Duration::from_secs(secs.max(0) as u64),
            };
            if due && evict(ctx, &pod).await {
                self.deleted.insert(uid);
            }
        }
        self.since.retain(|u, _| under.contains(u));
    }
}

/// Marks `pod` a disruption target and deletes it; whether it is gone or going.
async fn evict(ctx: &Arc<Context>, pod: &Pod) -> bool {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api = ctx.api::<Pod>(&ns);
    let now = jiff::Timestamp::now().to_string();
    let condition = json!({"status": {"conditions": [{
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": REASON,
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastTransitionTime": now,
    }]}});
    if let Err(e) = api
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(condition))
        .await
    {
        if is_not_found(&e) {
            return true;
        }
        debug!(pod = %name, error = %e, "adding the DisruptionTarget condition");
        return false;
    }
    let _ = ctx
        .recorder("taint-eviction-controller")
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "TaintManagerEviction".into(),
                note: Some(format!("Marking for deletion Pod {ns}/{name}")),
                action: "Delete".into(),
                secondary: None,
            },
            &pod.object_ref(&()),
        )
        .await;
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => {
            info!(pod = %format!("{ns}/{name}"), "evicted: it does not tolerate its node's NoExecute taints");
            true
        }
        Err(e) if is_not_found(&e) => true,
        Err(e) => {
            debug!(pod = %name, error = %e, "deleting a pod for a NoExecute taint");
            false
        }
    }
}
