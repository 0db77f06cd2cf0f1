//! A StatefulSet's claims: one per `volumeClaimTemplates` entry and ordinal, named
//! `<template>-<set>-<ordinal>`, made before the pod that mounts it and kept across the pod's
//! replacements; who owns each claim follows `persistentVolumeClaimRetentionPolicy` (the set, so the
//! claims go with it; the pod of a scaled-down ordinal, so they go with it; or nobody).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::PostParams;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::event;
use crate::context::Context;
use crate::error::{is_conflict, Error, Result};
use crate::owner::controller_ref;

/// The claim of `template` for the pod with `ordinal`.
pub fn claim_name(template: &PersistentVolumeClaim, set: &str, ordinal: i32) -> String {
    format!("{}-{set}-{ordinal}", template.name_any())
}

fn templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_deref())
        .unwrap_or(&[])
}

/// Points the pod's volumes named after the templates at the ordinal's claims (a template replaces a
/// template volume of the same name).
pub fn mount_claims(set: &StatefulSet, spec: &mut PodSpec, ordinal: i32) {
    let set_name = set.name_any();
    let list = templates(set);
    if list.is_empty() {
        return;
    }
    let mut volumes: Vec<Volume> = list
        .iter()
        .map(|t| Volume {
            name: t.name_any(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(t, &set_name, ordinal),
                read_only: Some(false),
            }),
            ..Default::default()
        })
        .collect();
    for v in spec.volumes.take().unwrap_or_default() {
        if !volumes.iter().any(|c| c.name == v.name) {
            volumes.push(v);
        }
    }
    spec.volumes = Some(volumes);
}

/// The claim of `template` for `ordinal`: the template's spec and metadata, labelled with the set's
/// selector labels (which win over the template's).
fn new_claim(
    set: &StatefulSet,
    template: &PersistentVolumeClaim,
    ordinal: i32,
) -> PersistentVolumeClaim {
    let mut meta = template.metadata.clone();
    meta.name = Some(claim_name(template, &set.name_any(), ordinal));
    meta.namespace = set.namespace();
    meta.generate_name = None;
    meta.resource_version = None;
    meta.uid = None;
    meta.owner_references = None;
    let selector = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    let mut labels = meta.labels.take().unwrap_or_default();
    labels.extend(selector);
    meta.labels = Some(labels);
    PersistentVolumeClaim {
        metadata: meta,
        spec: template.spec.clone(),
        status: None,
    }
}

/// Makes the claims of `pod` (ordinal `ordinal`) that do not exist yet; an existing claim is used as
/// it is. Fails while one is being deleted, so the pod is not made on a claim about to go.
pub async fn ensure(ctx: &Context, set: &StatefulSet, pod: &str, ordinal: i32) -> Result<()> {
    let ns = set.namespace().unwrap_or_default();
    let store = ctx.store::<PersistentVolumeClaim>();
    for t in templates(set) {
        let name = claim_name(t, &set.name_any(), ordinal);
        if let Some(c) = store.get(&ObjectRef::new(&name).within(&ns)) {
            if c.metadata.deletion_timestamp.is_some() {
                return Err(Error::Invalid(format!("pvc {name} is being deleted")));
            }
            continue;
        }
        let claim = new_claim(set, t, ordinal);
        match ctx
            .api::<PersistentVolumeClaim>(&ns)
            .create(&PostParams::default(), &claim)
            .await
        {
            Ok(_) => {
                let note = format!(
                    "create Claim {name} Pod {pod} in StatefulSet {} success",
                    set.name_any()
                );
                event(ctx, set, EventType::Normal, "SuccessfulCreate", note).await;
            }
            Err(e) if is_conflict(&e) => {}
            Err(e) => {
                let note = format!(
                    "create Claim {name} for Pod {pod} in StatefulSet {} failed error: {e}",
                    set.name_any()
                );
                event(ctx, set, EventType::Warning, "FailedCreate", note).await;
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// The policy's two answers: (whenDeleted is Delete, whenScaled is Delete).
fn policy(set: &StatefulSet) -> (bool, bool) {
    let p = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    (
        delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete(p.and_then(|p| p.when_scaled.as_ref())),
    )
}

fn same_object(r: &OwnerReference, api_version: &str, kind: &str, name: &str) -> bool {
    r.api_version == api_version && r.kind == kind && r.name == name
}

/// The owner references a claim should have under the policy, or None when the claim is left alone (a
/// reference to an older set or pod of the same name, or another controller, is not ours to change).
fn desired_refs(
    set: &StatefulSet,
    pod: &Pod,
    condemned: bool,
    claim: &PersistentVolumeClaim,
) -> Option<Vec<OwnerReference>> {
    let (when_deleted, when_scaled) = policy(set);
    let set_name = set.name_any();
    let pod_name = pod.name_any();
    let set_uid = set.uid().unwrap_or_default();
    let pod_uid = pod.uid().unwrap_or_default();
    let mut others = Vec::new();
    for r in claim.owner_references() {
        let is_set = same_object(r, "apps/v1", "StatefulSet", &set_name);
        let is_pod = same_object(r, "v1", "Pod", &pod_name);
        if (is_set && r.uid != set_uid) || (is_pod && r.uid != pod_uid) {
            return None;
        }
        if !is_set && !is_pod {
            if r.controller == Some(true) && (when_deleted || when_scaled) {
                return None;
            }
            others.push(r.clone());
        }
    }
    if when_scaled && condemned {
        others.push(controller_ref(&pod.metadata, "v1", "Pod"));
    } else if when_deleted {
        others.push(controller_ref(&set.metadata, "apps/v1", "StatefulSet"));
    }
    Some(others)
}

/// Sets the owners of `pod`'s claims as the retention policy wants them (`condemned`: the pod's ordinal
/// is being scaled away).
pub async fn apply_policy(
    ctx: &Context,
    set: &StatefulSet,
    pod: &Pod,
    ordinal: i32,
    condemned: bool,
) -> Result<()> {
    if pod.uid().is_none() {
        return Ok(());
    }
    let ns = set.namespace().unwrap_or_default();
    let store = ctx.store::<PersistentVolumeClaim>();
    for t in templates(set) {
        let name = claim_name(t, &set.name_any(), ordinal);
        let Some(claim) = store.get(&ObjectRef::new(&name).within(&ns)) else {
            continue;
        };
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(refs) = desired_refs(set, pod, condemned, &claim) else {
            continue;
        };
        if refs.as_slice() == claim.owner_references() {
            continue;
        }
        let mut next: PersistentVolumeClaim = Arc::unwrap_or_clone(claim);
        next.metadata.owner_references = (!refs.is_empty()).then_some(refs);
        match ctx
            .api::<PersistentVolumeClaim>(&ns)
            .replace(&name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(policy: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "a", "uid": "set-uid"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {},
                     "serviceName": "web", "persistentVolumeClaimRetentionPolicy": policy,
                     "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"app": "x", "tier": "db"}},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
        }))
        .unwrap()
    }

    fn pod() -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "web-1", "namespace": "a", "uid": "pod-uid"}}),
        )
        .unwrap()
    }

    #[test]
    fn claims_are_named_labelled_and_mounted() {
        let s = set(json!({}));
        let c = new_claim(&s, &templates(&s)[0], 1);
        assert_eq!(c.name_any(), "data-web-1");
        let labels = c.labels();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("db"));
        let mut spec = PodSpec {
            volumes: Some(vec![
                Volume {
                    name: "data".into(),
                    ..Default::default()
                },
                Volume {
                    name: "cfg".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        mount_claims(&s, &mut spec, 1);
        let vols = spec.volumes.unwrap();
        assert_eq!(vols.len(), 2);
        assert_eq!(
            vols[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("data-web-1")
        );
        assert_eq!(vols[1].name, "cfg");
    }

    #[test]
    fn owners_follow_the_retention_policy() {
        let claim = new_claim(&set(json!({})), &templates(&set(json!({})))[0], 1);
        let owner = |p: serde_json::Value, condemned: bool| {
            desired_refs(&set(p), &pod(), condemned, &claim)
                .unwrap()
                .iter()
                .map(|r| r.kind.clone())
                .collect::<Vec<_>>()
        };
        assert!(owner(json!({}), true).is_empty());
        assert_eq!(
            owner(json!({"whenDeleted": "Delete"}), true),
            ["StatefulSet"]
        );
        assert_eq!(owner(json!({"whenScaled": "Delete"}), true), ["Pod"]);
        assert!(owner(json!({"whenScaled": "Delete"}), false).is_empty());
        assert_eq!(
            owner(
                json!({"whenScaled": "Delete", "whenDeleted": "Delete"}),
                false
            ),
            ["StatefulSet"]
        );
        // A claim owned by an older set of the same name is left alone.
        let mut stale = claim.clone();
        stale.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "StatefulSet".into(),
            name: "web".into(),
            uid: "old".into(),
            ..Default::default()
        }]);
        assert!(desired_refs(
            &set(json!({"whenDeleted": "Delete"})),
            &pod(),
            false,
            &stale
        )
        .is_none());
    }
}
