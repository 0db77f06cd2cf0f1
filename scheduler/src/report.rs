//! What the scheduler writes besides bindings: Events (`Scheduled`, `FailedScheduling`) in
//! `events.k8s.io/v1`, reported as `default-scheduler`, and the pod's `PodScheduled=False` condition when
//! it fits nowhere (written only when reason or message change, as upstream's updatePod).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::pod_info::DEFAULT_SCHEDULER_NAME;

/// `Warning` or `Normal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Things went as they should.
    Normal,
    /// Something needs attention.
    Warning,
}

fn reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// What an Event says: its type, reason, action and note, and the pod it relates to, if any.
#[derive(Debug, Clone)]
pub struct Note<'a> {
    /// Normal or Warning.
    pub kind: Kind,
    /// `Scheduled`, `FailedScheduling`, `Preempted`.
    pub reason: &'a str,
    /// `Binding`, `Scheduling`, `Preempting`.
    pub action: &'a str,
    /// The human-readable text.
    pub note: String,
    /// A second pod involved (the preemptor of a victim).
    pub related: Option<&'a Pod>,
}

/// Posts an Event about `pod`.
pub async fn event(
    client: &Client,
    holder: &str,
    pod: &Pod,
    what: Note<'_>,
) -> Result<(), kube::Error> {
    let Note {
        kind,
        reason,
        action,
        note,
        related,
    } = what;
    let now = k8s_openapi::jiff::Timestamp::now();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = format!(
        "{}.{:x}",
        pod.metadata.name.as_deref().unwrap_or("pod"),
        now.as_nanosecond()
    );
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(
            match kind {
                Kind::Normal => "Normal",
                Kind::Warning => "Warning",
            }
            .into(),
        ),
        reason: Some(reason.into()),
        action: Some(action.into()),
        note: Some(note),
        regarding: Some(reference(pod)),
        related: related.map(reference),
        reporting_controller: Some(DEFAULT_SCHEDULER_NAME.into()),
        reporting_instance: Some(format!("{DEFAULT_SCHEDULER_NAME}-{holder}")),
        ..Default::default()
    };
    Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &ev)
        .await
        .map(|_| ())
}

/// Applies a strategic merge `patch` to `pod`'s status.
async fn patch_status(
    client: &Client,
    pod: &Pod,
    patch: serde_json::Value,
) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|_| ())
}

/// Sets `PodScheduled=False` with `reason` and `message`, and `status.nominatedNodeName` when
/// preemption chose a node, unless the pod already says exactly that.
pub async fn unschedulable_condition(
    client: &Client,
    pod: &Pod,
    reason: &str,
    message: &str,
    nominated: Option<&str>,
) -> Result<(), kube::Error> {
    let current_nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref());
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if let Some(c) = current {
        if c.status == "False"
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
            && (nominated.is_none() || nominated == current_nominated)
        {
            return Ok(());
        }
    }
    let since = match current {
        Some(c) if c.status == "False" => c
            .last_transition_time
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().to_string()),
        _ => k8s_openapi::jiff::Timestamp::now().to_string(),
    };
    let mut patch = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
        "lastProbeTime": null, "lastTransitionTime": since,
    }]}});
    if let Some(node) = nominated {
        patch["status"]["nominatedNodeName"] = json!(node);
    }
    patch_status(client, pod, patch).await
}

/// Marks `victim` with `DisruptionTarget=True` (reason PreemptionByScheduler), as upstream does before
/// it deletes a preemption victim, so its owner and the kubelet can tell why it goes.
pub async fn disruption_target(
    client: &Client,
    victim: &Pod,
    scheduler_name: &str,
) -> Result<(), kube::Error> {
    let patch = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True",
        "reason": crate::preemption::REASON_PREEMPTION,
        "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    patch_status(client, victim, patch).await
}

/// Clears `status.nominatedNodeName` of `pod`.
pub async fn clear_nomination(client: &Client, pod: &Pod) -> Result<(), kube::Error> {
    let patch = json!({"status": {"nominatedNodeName": null}});
    patch_status(client, pod, patch).await
}
