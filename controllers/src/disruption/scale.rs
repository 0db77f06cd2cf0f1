//! The replicas a budget measures against: the sum over the pods' distinct controllers of their `/scale`
//! (a ReplicaSet owned by a Deployment counts as that Deployment, as upstream's finders do).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::ResourceExt;
use std::sync::Arc;

use crate::context::Context;

fn controller_of(refs: &[OwnerReference]) -> Option<&OwnerReference> {
    refs.iter().find(|r| r.controller == Some(true))
}

fn group(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// The replicas of the controller `r` in `ns`, with its uid (the key of distinct controllers).
async fn scale_of(ctx: &Context, ns: &str, r: &OwnerReference) -> Result<(String, i32), String> {
    let err = |e: kube::Error| format!("{} {}/{}: {e}", r.kind, ns, r.name);
    let check = |uid: Option<String>| -> Result<(), String> {
        if uid.as_deref() == Some(r.uid.as_str()) {
            Ok(())
        } else {
            Err(format!("{} {}/{} was replaced", r.kind, ns, r.name))
        }
    };
    match (group(&r.api_version), r.kind.as_str()) {
        ("apps", "ReplicaSet") => {
            let rs = ctx.api::<ReplicaSet>(ns).get(&r.name).await.map_err(err)?;
            check(rs.uid())?;
            if let Some(d) = controller_of(rs.owner_references())
                .filter(|d| group(&d.api_version) == "apps" && d.kind == "Deployment")
            {
                let api: Api<Deployment> = ctx.api(ns);
                let s = api.get_scale(&d.name).await.map_err(err)?;
                return Ok((d.uid.clone(), s.spec.and_then(|s| s.replicas).unwrap_or(0)));
            }
            let s = ctx
                .api::<ReplicaSet>(ns)
                .get_scale(&r.name)
                .await
                .map_err(err)?;
            Ok((r.uid.clone(), s.spec.and_then(|s| s.replicas).unwrap_or(0)))
        }
        ("apps", "StatefulSet") => {
            let s = ctx
                .api::<StatefulSet>(ns)
                .get_scale(&r.name)
                .await
                .map_err(err)?;
            Ok((r.uid.clone(), s.spec.and_then(|s| s.replicas).unwrap_or(0)))
        }
        ("apps", "Deployment") => {
            let s = ctx
                .api::<Deployment>(ns)
                .get_scale(&r.name)
                .await
                .map_err(err)?;
            Ok((r.uid.clone(), s.spec.and_then(|s| s.replicas).unwrap_or(0)))
        }
        ("", "ReplicationController") => {
            let s = ctx
                .api::<ReplicationController>(ns)
                .get_scale(&r.name)
                .await
                .map_err(err)?;
            Ok((r.uid.clone(), s.spec.and_then(|s| s.replicas).unwrap_or(0)))
        }
        _ => Err(format!(
            "found no controllers for pod controlled by {} {}",
            r.kind, r.name
        )),
    }
}

/// The sum of the replicas of the pods' controllers; upstream's messages for pods without one.
pub async fn expected_scale(ctx: &Context, ns: &str, pods: &[Arc<Pod>]) -> Result<i32, String> {
    let mut seen: BTreeMap<String, i32> = BTreeMap::new();
    for pod in pods {
        let Some(r) = controller_of(pod.owner_references()) else {
            return Err(format!(
                "found no controller ref for pod {:?}",
                pod.name_any()
            ));
        };
        if seen.contains_key(&r.uid) {
            continue;
        }
        let (uid, replicas) = scale_of(ctx, ns, r).await?;
        seen.insert(r.uid.clone(), 0);
        seen.insert(uid, replicas);
    }
    Ok(seen.values().sum())
}
