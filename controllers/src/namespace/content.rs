//! Deleting a terminating namespace's content (upstream's namespacedResourcesDeleter): every namespaced
//! type discovery lists with `delete`, by deletecollection where served (else one by one), with the
//! Background policy; then what remains is counted, with the finalizers that hold it.

use std::collections::BTreeMap;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PropagationPolicy};
use kube::discovery::{verbs, ApiCapabilities, ApiResource, Discovery, Scope};
use kube::Client;

use crate::error::is_not_found;

/// What one pass over the namespace found.
#[derive(Debug, Default)]
pub struct Pass {
    /// Discovery failures (the types of those groups were not deleted).
    pub discovery_errors: Vec<String>,
    /// Deletions or lists that failed.
    pub delete_errors: Vec<String>,
    /// Objects remaining per "resource.group".
    pub remaining: BTreeMap<String, usize>,
    /// Remaining objects per finalizer.
    pub finalizers: BTreeMap<String, usize>,
}

impl Pass {
    /// Whether the namespace is empty.
    pub fn done(&self) -> bool {
        self.discovery_errors.is_empty()
            && self.delete_errors.is_empty()
            && self.remaining.is_empty()
    }
}

/// Every namespaced type that can be deleted, in its group's preferred version.
async fn deletable(client: &Client, pass: &mut Pass) -> Vec<(ApiResource, ApiCapabilities)> {
    let d = match Discovery::new(client.clone()).run().await {
        Ok(d) => d,
        Err(e) => {
            pass.discovery_errors.push(e.to_string());
            return Vec::new();
        }
    };
    d.groups()
        .flat_map(|g| g.recommended_resources())
        .filter(|(_, caps)| {
            caps.scope == Scope::Namespaced && caps.supports_operation(verbs::DELETE)
        })
        .collect()
}

/// Deletes the content of `ns` once and reports what remains.
pub async fn delete_all(client: &Client, ns: &str) -> Pass {
    let mut pass = Pass::default();
    for (ar, caps) in deletable(client, &mut pass).await {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let what = format!("{}.{}", ar.plural, ar.group);
        if caps.supports_operation(verbs::DELETE_COLLECTION) {
            if let Err(e) = api.delete_collection(&dp, &ListParams::default()).await {
                if !is_not_found(&e) {
                    pass.delete_errors.push(format!("{what}: {e}"));
                }
            }
        } else if caps.supports_operation(verbs::LIST) {
            match api.list_metadata(&ListParams::default()).await {
                Ok(list) => {
                    for o in list.items {
                        let Some(name) = o.metadata.name else {
                            continue;
                        };
                        match api.delete(&name, &dp).await {
                            Ok(_) => {}
                            Err(e) if is_not_found(&e) => {}
                            Err(e) => pass.delete_errors.push(format!("{what}: {e}")),
                        }
                    }
                }
                Err(e) => pass.delete_errors.push(format!("{what}: {e}")),
            }
        }
        if !caps.supports_operation(verbs::LIST) {
            continue;
        }
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) if !list.items.is_empty() => {
                pass.remaining.insert(what, list.items.len());
                for o in &list.items {
                    for f in o.metadata.finalizers.iter().flatten() {
                        *pass.finalizers.entry(f.clone()).or_default() += 1;
                    }
                }
            }
            Ok(_) => {}
            Err(e) => pass.delete_errors.push(format!("{what}: {e}")),
        }
    }
    pass
}
