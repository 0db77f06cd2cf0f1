//! Which resource types the collector watches: every type discovery lists with `list`, `watch` and
//! `delete` (upstream's GetDeletableResources, without events), found again periodically so new custom
//! resources are watched; and how an ownerReference's apiVersion and kind resolve to a type.

use std::collections::HashMap;
use std::sync::Arc;

use kube::discovery::{verbs, Discovery, Scope};
use kube::Client;

use super::graph::Kind;

/// Resource types upstream's collector leaves out (Events are many and never owners).
const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// What one discovery found.
#[derive(Debug, Default)]
pub struct Found {
    /// The type to watch for each group and plural (the group's preferred version).
    pub watched: Vec<Arc<Kind>>,
    /// Every served (group, version, kind), for ownerReferences in any version.
    pub by_gvk: HashMap<(String, String, String), Arc<Kind>>,
}

/// Asks the API server which types exist.
pub async fn discover(client: &Client) -> Result<Found, kube::Error> {
    let d = Discovery::new(client.clone()).run().await?;
    let mut found = Found::default();
    for group in d.groups() {
        let name = group.name().to_string();
        for version in group.versions() {
            for (ar, caps) in group.versioned_resources(version) {
                let kind = Arc::new(Kind {
                    namespaced: caps.scope == Scope::Namespaced,
                    ar,
                });
                found.by_gvk.insert(
                    (name.clone(), version.to_string(), kind.ar.kind.clone()),
                    kind,
                );
            }
        }
        for (ar, caps) in group.recommended_resources() {
            let deletable = [verbs::LIST, verbs::WATCH, verbs::DELETE]
                .iter()
                .all(|v| caps.supports_operation(v));
            if !deletable || IGNORED.contains(&(ar.group.as_str(), ar.plural.as_str())) {
                continue;
            }
            found.watched.push(Arc::new(Kind {
                namespaced: caps.scope == Scope::Namespaced,
                ar,
            }));
        }
    }
    Ok(found)
}

/// The (group, version) of an apiVersion.
pub fn group_version(api_version: &str) -> (String, String) {
    match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_split_into_group_and_version() {
        assert_eq!(group_version("v1"), (String::new(), "v1".into()));
        assert_eq!(group_version("apps/v1"), ("apps".into(), "v1".into()));
    }
}
