//! A Deployment's ReplicaSets: claiming them (adopt orphans, release strays), telling the new one (its
//! template is the Deployment's) from the old, creating the new one, scaling one.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use serde_json::json;

use super::{history, rollout, status, Pass, POD_TEMPLATE_HASH};
use crate::error::{is_conflict, Error, Result};
use crate::{owner, selector};

/// `spec.replicas` of a ReplicaSet.
pub fn size(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `status.availableReplicas` of a ReplicaSet.
pub fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// `status.replicas` of a ReplicaSet.
pub fn actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// The Deployment's ReplicaSets: those it controls that match its selector, plus orphans it adopts; it
/// releases the ones it controls that no longer match.
pub async fn claim(s: &Pass<'_>) -> Result<Vec<ReplicaSet>> {
    let ns = s.ns();
    let uid = s.d.metadata.uid.clone().unwrap_or_default();
    let Some(sel) = s.d.spec.as_ref().map(|x| x.selector.clone()) else {
        return Ok(Vec::new());
    };
    let api = s.ctx.api::<ReplicaSet>(&ns);
    let mut out = Vec::new();
    for rs in s.state.sets.state() {
        if rs.metadata.namespace.as_deref() != Some(ns.as_str()) {
            continue;
        }
        let matches = selector::matches(&sel, rs.metadata.labels.as_ref());
        let ours = owner::controlled_by(&rs.metadata, &uid);
        if ours && matches {
            out.push((*rs).clone());
        } else if ours && rs.metadata.deletion_timestamp.is_none() {
            let refs: Vec<_> = rs
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.uid != uid)
                .cloned()
                .collect();
            let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": rs.metadata.resource_version}});
            api.patch(
                &rs.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        } else if matches
            && owner::controller_of(&rs.metadata).is_none()
            && rs.metadata.deletion_timestamp.is_none()
            && s.d.metadata.deletion_timestamp.is_none()
        {
            let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
            refs.push(owner::controller_ref(
                &s.d.metadata,
                "apps/v1",
                "Deployment",
            ));
            let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": rs.metadata.resource_version}});
            let adopted = api
                .patch(
                    &rs.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            out.push(adopted);
        }
    }
    Ok(out)
}

fn without_hash(t: &PodTemplateSpec) -> serde_json::Value {
    let mut t = t.clone();
    if let Some(m) = t.metadata.as_mut() {
        if let Some(l) = m.labels.as_mut() {
            l.remove(POD_TEMPLATE_HASH);
            if l.is_empty() {
                m.labels = None;
            }
        }
    }
    serde_json::to_value(&t).unwrap_or_default()
}

/// Whether two templates are the same apart from the pod-template-hash label.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

fn created(rs: &ReplicaSet) -> (Option<k8s_openapi::jiff::Timestamp>, String) {
    (
        rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        rs.name_any(),
    )
}

/// Sorts oldest first (ties by name).
pub fn by_creation(sets: &mut [ReplicaSet]) {
    sets.sort_by_key(created);
}

/// Splits `sets` into the new ReplicaSet (the oldest whose template is the Deployment's) and the others.
pub fn split(s: &Pass<'_>, mut sets: Vec<ReplicaSet>) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    by_creation(&mut sets);
    let template =
        s.d.spec
            .as_ref()
            .map(|x| x.template.clone())
            .unwrap_or_default();
    let i = sets.iter().position(|rs| {
        rs.spec
            .as_ref()
            .and_then(|x| x.template.as_ref())
            .is_some_and(|t| equal_ignore_hash(t, &template))
    });
    let new = i.map(|i| sets.remove(i));
    (new, sets)
}

/// The new ReplicaSet (created if `create` and there is none) with its revision brought up to date, and
/// the old ones.
pub async fn new_and_old(
    s: &mut Pass<'_>,
    sets: Vec<ReplicaSet>,
    create: bool,
) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>)> {
    let (existing, old) = split(s, sets);
    let next_revision = (history::max_revision(&old) + 1).to_string();
    if let Some(rs) = existing {
        let mut copy = rs.clone();
        let mut changed = history::set_new_annotations(s, &mut copy, &next_revision, true);
        let min_ready = s.d.spec.as_ref().and_then(|x| x.min_ready_seconds);
        if let Some(spec) = copy.spec.as_mut() {
            if spec.min_ready_seconds.unwrap_or(0) != min_ready.unwrap_or(0) {
                spec.min_ready_seconds = min_ready;
                changed = true;
            }
        }
        let rs = if changed {
            s.ctx
                .api::<ReplicaSet>(&s.ns())
                .replace(&copy.name_any(), &PostParams::default(), &copy)
                .await?
        } else {
            rs
        };
        if let Some(rev) = rs.annotations().get(history::REVISION).cloned() {
            s.set_revision(&rev).await?;
        }
        if status::has_progress_deadline(s) && status::condition(s, status::PROGRESSING).is_none() {
            let mut st = s.d.status.clone().unwrap_or_default();
            status::set_condition(
                &mut st,
                status::new_condition(
                    status::PROGRESSING,
                    "True",
                    "FoundNewReplicaSet",
                    format!("Found new replica set {:?}", rs.name_any()),
                ),
            );
            s.write_status(st).await?;
        }
        return Ok((Some(rs), old));
    }
    if !create {
        return Ok((None, old));
    }
    let rs = create_new(s, &old, &next_revision).await?;
    Ok((Some(rs), old))
}

async fn create_new(s: &mut Pass<'_>, old: &[ReplicaSet], revision: &str) -> Result<ReplicaSet> {
    let ns = s.ns();
    let spec = s.d.spec.clone().unwrap_or_default();
    let collisions = s.d.status.as_ref().and_then(|x| x.collision_count);
    let hash = super::hash::compute(&spec.template, collisions);
    let mut template = spec.template.clone();
    let mut labels: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(POD_TEMPLATE_HASH.into(), hash.clone());
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels = Some(labels.clone());
    let mut sel = spec.selector.clone();
    sel.match_labels
        .get_or_insert_with(Default::default)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let name = format!("{}-{hash}", s.d.name_any());
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner::controller_ref(
                &s.d.metadata,
                "apps/v1",
                "Deployment",
            )]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(0),
            min_ready_seconds: spec.min_ready_seconds,
            selector: sel,
            template: Some(template),
        }),
        status: None,
    };
    let mut all: Vec<ReplicaSet> = old.to_vec();
    all.push(rs.clone());
    let want = rollout::new_rs_new_replicas(s, &all, &rs)?;
    if let Some(x) = rs.spec.as_mut() {
        x.replicas = Some(want);
    }
    history::set_new_annotations(s, &mut rs, revision, false);
    let api = s.ctx.api::<ReplicaSet>(&ns);
    let made = match api.create(&PostParams::default(), &rs).await {
        Ok(made) => made,
        Err(e) if is_conflict(&e) => {
            // The name is taken: ours already (a cache behind), or a hash collision.
            let found = api.get(&name).await?;
            let same =
                owner::controlled_by(&found.metadata, s.d.metadata.uid.as_deref().unwrap_or(""))
                    && found
                        .spec
                        .as_ref()
                        .and_then(|x| x.template.as_ref())
                        .is_some_and(|t| equal_ignore_hash(t, &spec.template));
            if same {
                return Ok(found);
            }
            let mut st = s.d.status.clone().unwrap_or_default();
            st.collision_count = Some(collisions.unwrap_or(0).saturating_add(1));
            s.write_status(st).await?;
            return Err(Error::Invalid(format!(
                "hash collision on replica set {name}; collisionCount raised"
            )));
        }
        Err(e) => {
            let msg = format!("Failed to create new replica set {name:?}: {e}");
            s.event(EventType::Warning, "FailedCreate", msg.clone())
                .await;
            if status::has_progress_deadline(s) {
                let mut st = s.d.status.clone().unwrap_or_default();
                status::set_condition(
                    &mut st,
                    status::new_condition(
                        status::PROGRESSING,
                        "False",
                        "ReplicaSetCreateError",
                        msg,
                    ),
                );
                s.write_status(st).await?;
            }
            return Err(e.into());
        }
    };
    if want > 0 {
        s.event(
            EventType::Normal,
            "ScalingReplicaSet",
            format!("Scaled up replica set {name} from 0 to {want}"),
        )
        .await;
    }
    s.set_revision(revision).await?;
    if status::has_progress_deadline(s) {
        let mut st = s.d.status.clone().unwrap_or_default();
        status::set_condition(
            &mut st,
            status::new_condition(
                status::PROGRESSING,
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set {name:?}"),
            ),
        );
        s.write_status(st).await?;
    }
    Ok(made)
}

/// Scales `rs` to `to` (and refreshes its replicas annotations); returns whether the size changed.
pub async fn scale_to(s: &Pass<'_>, rs: &mut ReplicaSet, to: i32) -> Result<bool> {
    let from = size(rs);
    let mut copy = rs.clone();
    if let Some(x) = copy.spec.as_mut() {
        x.replicas = Some(to);
    }
    let max = s.replicas() + rollout::max_surge(s)?;
    let annotations = history::set_replicas_annotations(&mut copy, s.replicas(), max);
    if from == to && !annotations {
        return Ok(false);
    }
    *rs = s
        .ctx
        .api::<ReplicaSet>(&s.ns())
        .replace(&copy.name_any(), &PostParams::default(), &copy)
        .await?;
    if from != to {
        let dir = if to > from { "up" } else { "down" };
        s.event(
            EventType::Normal,
            "ScalingReplicaSet",
            format!(
                "Scaled {dir} replica set {} from {from} to {to}",
                rs.name_any()
            ),
        )
        .await;
    }
    Ok(from != to)
}
