//! Counting what a namespace holds against one quota: every kind the quota limits is listed from the API
//! server (a consistent read, so nothing admission charged and stored is missed), and each object the
//! quota matches adds its usage.

use std::collections::{BTreeMap, BTreeSet};

use keel_client_kit::quantity::Quantity;
use keel_client_kit::quota::{self, list, list::ResourceList};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::context::Context;
use crate::error::{Error, Result};

/// The kinds whose usage `name` is part of, as (group, plural).
fn kind_of(name: &str) -> Option<(String, String)> {
    if let Some(rest) = name.strip_prefix("count/") {
        return Some(match rest.split_once('.') {
            Some((plural, group)) => (group.to_string(), plural.to_string()),
            None => (String::new(), rest.to_string()),
        });
    }
    for plural in [
        "pods",
        "services",
        "configmaps",
        "secrets",
        "replicationcontrollers",
        "resourcequotas",
        "persistentvolumeclaims",
    ] {
        if quota::usage::tracks("", plural, name) {
            return Some((String::new(), plural.to_string()));
        }
    }
    None
}

/// What the objects of `ns` use of each resource in `hard`, as `quota` (its scopes) counts them; every
/// resource of `hard` is present, 0 when nothing uses it.
pub(super) async fn usage(
    ctx: &Context,
    ns: &str,
    quota: &Value,
    hard: &ResourceList,
) -> Result<ResourceList> {
    let kinds: BTreeSet<(String, String)> = hard.keys().filter_map(|n| kind_of(n)).collect();
    let now = jiff::Timestamp::now().as_second();
    // Matching reads `status.hard`: count as if the controller had already copied `spec.hard` there.
    let mut probe = quota.clone();
    probe["status"] = serde_json::json!({"hard": list::to_value(hard)});
    let mut total: ResourceList = hard
        .keys()
        .map(|k| (k.clone(), Quantity::count(0)))
        .collect();
    let mut versions: BTreeMap<String, String> = BTreeMap::new();
    for (group, plural) in kinds {
        let Some(objects) = list_objects(ctx, ns, &group, &plural, &mut versions).await? else {
            continue;
        };
        for obj in objects {
            if quota::matches(&probe, &group, &plural, &obj) {
                let used = quota::usage::of(&group, &plural, &obj, now);
                total = list::add(&total, &list::mask(&used, hard.keys()));
            }
        }
    }
    Ok(list::mask(&total, hard.keys()))
}

/// The objects of one kind in `ns` as JSON, or None when the API does not serve the kind.
async fn list_objects(
    ctx: &Context,
    ns: &str,
    group: &str,
    plural: &str,
    versions: &mut BTreeMap<String, String>,
) -> Result<Option<Vec<Value>>> {
    let version = if group.is_empty() {
        "v1".to_string()
    } else if let Some(v) = versions.get(group) {
        v.clone()
    } else {
        match kube::discovery::group(&ctx.client, group).await {
            Ok(g) => {
                let v = g.preferred_version_or_latest().to_string();
                versions.insert(group.to_string(), v.clone());
                v
            }
            Err(_) => return Ok(None),
        }
    };
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, &version, ""), plural);
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    let items = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    items
        .into_iter()
        .map(|o| serde_json::to_value(o).map_err(|e| Error::Invalid(e.to_string())))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_their_kinds() {
        let k = |n: &str| kind_of(n).map(|(g, p)| format!("{g}/{p}"));
        assert_eq!(k("requests.cpu").as_deref(), Some("/pods"));
        assert_eq!(k("services.nodeports").as_deref(), Some("/services"));
        assert_eq!(
            k("count/deployments.apps").as_deref(),
            Some("apps/deployments")
        );
        assert_eq!(k("count/secrets").as_deref(), Some("/secrets"));
        assert_eq!(k("configmaps").as_deref(), Some("/configmaps"));
        assert_eq!(
            k("requests.storage").as_deref(),
            Some("/persistentvolumeclaims")
        );
        assert_eq!(k("requests.nothing"), None);
    }
}
