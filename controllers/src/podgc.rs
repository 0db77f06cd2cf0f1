//! The pod garbage collector: every 20 s it force-deletes (grace 0) pods no kubelet will ever finish:
//! pods bound to nodes that no longer exist (after a quarantine and a live re-check), terminated pods
//! beyond the threshold (oldest first), terminating pods on out-of-service nodes that are not ready,
//! and terminating pods that were never scheduled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use serde_json::json;
use tracing::{debug, info};

use crate::context::Context;
use crate::endpointslice::pods::terminal;
use crate::error::is_not_found;
use crate::manager::ControllerDef;
use crate::node_lifecycle::taints::{self, OUT_OF_SERVICE};

/// How often the collector runs (upstream's gcCheckPeriod).
pub const PERIOD: Duration = Duration::from_secs(20);
/// How long a node must be missing from the cache before it is checked for real (upstream's quarantineTime).
pub const QUARANTINE: Duration = Duration::from_secs(40);
/// Terminated pods kept at most (`--terminated-pod-gc-threshold`).
pub const TERMINATED_POD_GC_THRESHOLD: usize = 12500;

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef {
        name: "pod-garbage-collector",
        start,
    }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    ctx.shared::<Node>();
    ctx.shared::<Pod>();
    let ctx = ctx.clone();
    async move {
        let mut gc = Collector::default();
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            gc.pass(&ctx).await;
        }
    }
    .boxed()
}

#[derive(Default)]
struct Collector {
    /// Nodes pods are bound to that the cache lacks, since when.
    missing: HashMap<String, Instant>,
}

/// Why a pod is collected: the condition it gets before it goes, if any.
#[derive(Clone, Copy)]
enum Why {
    NodeGone,
    Other,
}

impl Collector {
    async fn pass(&mut self, ctx: &Arc<Context>) {
        let nodes = ctx.store::<Node>();
        let pods = ctx.store::<Pod>().state();
        let mut doomed: Vec<(Arc<Pod>, Why)> = Vec::new();
        // Terminated pods beyond the threshold, oldest first.
        let mut terminated: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| terminal(p) && p.metadata.deletion_timestamp.is_none())
            .collect();
        if terminated.len() > TERMINATED_POD_GC_THRESHOLD {
            terminated.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
            let excess = terminated.len() - TERMINATED_POD_GC_THRESHOLD;
            doomed.extend(
                terminated
                    .into_iter()
                    .take(excess)
                    .map(|p| (p.clone(), Why::Other)),
            );
        }
        // Pods bound to nodes that are gone, after the quarantine and a live look.
        let mut absent: HashSet<String> = HashSet::new();
        for p in &pods {
            let Some(node) = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty())
            else {
                continue;
            };
            if nodes.get(&ObjectRef::new(&node)).is_none() {
                absent.insert(node);
            }
        }
        self.missing.retain(|n, _| absent.contains(n));
        let mut gone: HashSet<String> = HashSet::new();
        for n in absent {
            let since = *self.missing.entry(n.clone()).or_insert_with(Instant::now);
            if since.elapsed() < QUARANTINE {
                continue;
            }
            match ctx.api_all::<Node>().get(&n).await {
                Err(e) if is_not_found(&e) => {
                    gone.insert(n);
                }
                Ok(_) => {
                    self.missing.remove(&n);
                }
                Err(e) => debug!(node = %n, error = %e, "checking a missing node"),
            }
        }
        for p in &pods {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("");
            if gone.contains(node) {
                doomed.push((p.clone(), Why::NodeGone));
                continue;
            }
            if p.metadata.deletion_timestamp.is_none() {
                continue;
            }
            if node.is_empty() {
                // Terminating and never scheduled: no kubelet will confirm it.
                doomed.push((p.clone(), Why::Other));
            } else if let Some(n) = nodes.get(&ObjectRef::new(node)) {
                let out_of_service = taints::taints(&n).iter().any(|t| t.key == OUT_OF_SERVICE);
                if out_of_service && taints::ready_status(&n) != "True" {
                    doomed.push((p.clone(), Why::Other));
                }
            }
        }
        for (p, why) in doomed {
            force_delete(ctx, &p, why).await;
        }
    }
}

/// Marks a pod that has not finished Failed (with the DisruptionTarget condition when its node is gone),
/// then deletes it with grace 0 (upstream's markFailedAndDeletePod).
async fn force_delete(ctx: &Arc<Context>, pod: &Pod, why: Why) {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api = ctx.api::<Pod>(&ns);
    if !terminal(pod) {
        let mut status = json!({"phase": "Failed"});
        if let Why::NodeGone = why {
            status["conditions"] = json!([{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
                "lastTransitionTime": jiff::Timestamp::now().to_string(),
            }]);
        }
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": status})),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return,
            Err(e) => {
                debug!(pod = %name, error = %e, "marking a collected pod Failed");
                return;
            }
        }
    }
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => info!(pod = %format!("{ns}/{name}"), "pod garbage-collected"),
        Err(e) if is_not_found(&e) => {}
        Err(e) => debug!(pod = %name, error = %e, "force-deleting a pod"),
    }
}
