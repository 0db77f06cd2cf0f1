//! ControllerRevisions: the template history of StatefulSets and DaemonSets (upstream's
//! `controller/history`), named `<owner>-<hash>` with a collision count folded into the hash.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::ResourceExt;
use serde_json::{json, Value};
use tracing::debug;

use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};

/// The label carrying a revision's hash.
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// Tries before giving up on hash collisions in one reconcile.
const COLLISION_TRIES: i32 = 8;

/// Upstream's SafeEncodeString alphabet (no vowels, no look-alike digits).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-32a of the revision's data and the collision count, written in the safe alphabet.
pub fn hash(data: &Value, collision: i32) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(data.to_string().as_bytes());
    if collision > 0 {
        feed(&collision.to_le_bytes());
    }
    h.to_string()
        .bytes()
        .map(|d| char::from(ALPHABET[usize::from(d - b'0') % ALPHABET.len()]))
        .collect()
}

/// The revisions controlled by the owner with `uid`, oldest first.
pub fn owned(ctx: &Context, ns: &str, uid: &str) -> Vec<Arc<ControllerRevision>> {
    let mut out: Vec<_> = ctx
        .store::<ControllerRevision>()
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns))
        .filter(|r| {
            r.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    out.sort_by_key(|r| r.revision);
    out
}

/// The revision data of a template (what a ControllerRevision stores: a patch replacing it).
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut t = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(m) = t.as_object_mut() {
        m.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The template a revision's data holds.
pub fn template_of(data: &Value) -> Option<PodTemplateSpec> {
    let mut t = data.get("spec")?.get("template")?.clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    serde_json::from_value(t).ok()
}

/// A revision's data as JSON.
pub fn data_of(r: &ControllerRevision) -> Option<&Value> {
    r.data.as_ref().map(|d| &d.0)
}

/// The revision that records `data`: the newest equal one (renumbered to be the latest if it is not),
/// or a new one. Returns it and the collision count used.
#[allow(clippy::too_many_arguments)]
pub async fn ensure(
    ctx: &Context,
    ns: &str,
    owner: &OwnerReference,
    labels: &BTreeMap<String, String>,
    data: Value,
    revisions: &[Arc<ControllerRevision>],
    mut collision: i32,
) -> Result<(ControllerRevision, i32)> {
    let api = ctx.api::<ControllerRevision>(ns);
    let max = revisions.iter().map(|r| r.revision).max().unwrap_or(0);
    if let Some(eq) = revisions.iter().rev().find(|r| data_of(r) == Some(&data)) {
        if eq.revision == max {
            return Ok((eq.as_ref().clone(), collision));
        }
        // Rolling back to an old template: the old revision becomes the newest again.
        let mut bumped = eq.as_ref().clone();
        bumped.revision = max + 1;
        let r = api
            .replace(&eq.name_any(), &PostParams::default(), &bumped)
            .await?;
        return Ok((r, collision));
    }
    for _ in 0..COLLISION_TRIES {
        let h = hash(&data, collision);
        let mut l = labels.clone();
        l.insert(HASH_LABEL.into(), h.clone());
        let rev = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(format!("{}-{h}", owner.name)),
                namespace: Some(ns.into()),
                labels: Some(l),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            },
            data: Some(RawExtension(data.clone())),
            revision: max + 1,
        };
        match api.create(&PostParams::default(), &rev).await {
            Ok(r) => return Ok((r, collision)),
            Err(e) if is_conflict(&e) => {
                if let Ok(found) = api.get(&rev.name_any()).await {
                    let ours = found.owner_references().iter().any(|o| o.uid == owner.uid);
                    if ours && data_of(&found) == Some(&data) {
                        return Ok((found, collision));
                    }
                }
                debug!(revision = %rev.name_any(), "controller revision hash collision");
                collision += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(crate::Error::Invalid(format!(
        "no free ControllerRevision name for {} after {COLLISION_TRIES} collisions",
        owner.name
    )))
}

/// Deletes the oldest revisions beyond `limit` that are not in `live` (current, update, or used by a pod).
pub async fn truncate(
    ctx: &Context,
    ns: &str,
    revisions: &[Arc<ControllerRevision>],
    live: &HashSet<String>,
    limit: i32,
) -> Result<()> {
    let old: Vec<_> = revisions
        .iter()
        .filter(|r| !live.contains(&r.name_any()))
        .collect();
    let excess = old
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(0));
    let api = ctx.api::<ControllerRevision>(ns);
    for r in old.into_iter().take(excess) {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: r.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&r.name_any(), &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_changes_with_collisions() {
        let d = serde_json::json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}});
        assert_eq!(hash(&d, 0), hash(&d, 0));
        assert_ne!(hash(&d, 0), hash(&d, 1));
        assert!(hash(&d, 0).bytes().all(|b| ALPHABET.contains(&b)));
    }

    #[test]
    fn template_patches_round_trip() {
        let t = PodTemplateSpec::default();
        assert_eq!(template_of(&template_patch(&t)), Some(t));
    }
}
