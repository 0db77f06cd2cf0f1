//! Upstream's `rbac/bootstrap-roles` post-start hook: every member makes sure the default roles and
//! bindings exist, and adds back to an `autoupdate` role the permissions an upgrade brought (what a user
//! added to it stays). A member is not ready until this has run once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::{debug, info};

use super::bootstrap;
use super::escalation::missing;
use super::rule::PolicyRule;
use crate::object;
use crate::status::ApiError;
use crate::storage::{Storage, WriteOutcome};
use std::sync::atomic::AtomicBool;

/// The readiness check's name, as upstream's.
pub(crate) const HOOK: &str = "poststarthook/rbac/bootstrap-roles";

const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

fn key(obj: &Value) -> Option<String> {
    let plural = match obj.get("kind").and_then(Value::as_str)? {
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        _ => return None,
    };
    let ns = object::namespace(obj);
    Some(if ns.is_empty() {
        format!("/registry/{plural}/{}", object::name(obj))
    } else {
        format!("/registry/{plural}/{ns}/{}", object::name(obj))
    })
}

/// keel's own addition to upstream's policy: the agent is kubelet and kube-proxy (and the cluster DNS
/// server) in one process with one identity, so agents (`system:nodes`) may also read what the network
/// programmer and the DNS server watch.
fn keel_roles() -> Vec<Value> {
    let meta = |name: &str| {
        json!({"name": name, "labels": {"app.kubernetes.io/managed-by": "keel"},
               "annotations": {AUTOUPDATE: "true"}})
    };
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(AGENT_NETWORK),
            "rules": [
                {"apiGroups": [""], "resources": ["services", "endpoints", "namespaces", "nodes", "pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies", "ingresses", "ingressclasses"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses/status"], "verbs": ["patch", "update"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}
            ]
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(AGENT_NETWORK),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_NETWORK},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
        }),
        // Each agent's resolver publishes itself: the shared `kube-dns` Service and its own
        // EndpointSlice. NodeRestriction narrows this to those two names.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dns_meta(),
            "rules": [
                {"apiGroups": [""], "resources": ["services"], "verbs": ["create"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["create", "update", "patch", "delete"]}
            ]
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dns_meta(),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_DNS},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
        }),
    ]
}

/// The name of keel's role and binding for agents' network duties.
pub(crate) const AGENT_NETWORK: &str = "keel:agent-network";
/// The name of keel's Role and RoleBinding (in `kube-system`) for agents' cluster DNS publishing.
pub(crate) const AGENT_DNS: &str = "keel:agent-dns";

fn dns_meta() -> Value {
    json!({"name": AGENT_DNS, "namespace": "kube-system",
           "labels": {"app.kubernetes.io/managed-by": "keel"},
           "annotations": {AUTOUPDATE: "true"}})
}

/// Creates what is missing and completes `autoupdate` roles; `Ok` once everything is in place.
pub(crate) async fn ensure(storage: &Storage) -> Result<(), ApiError> {
    let wanted = bootstrap::cluster_roles()
        .into_iter()
        .chain(keel_roles())
        .chain(bootstrap::roles())
        .chain(bootstrap::cluster_role_bindings())
        .chain(bootstrap::role_bindings());
    let mut created = 0;
    for mut obj in wanted {
        let Some(key) = key(&obj) else { continue };
        match storage.get(&key, true).await? {
            None => {
                let meta = object::meta_mut(&mut obj);
                meta.insert("uid".into(), json!(object::new_uid()));
                meta.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
                if let WriteOutcome::Done(_) = storage.put_if(&key, &obj, 0).await? {
                    created += 1;
                }
            }
            Some(cur) => {
                let auto = object::path(&cur.object, "metadata.annotations")
                    .and_then(|a| a.get(AUTOUPDATE))
                    .and_then(Value::as_str)
                    != Some("false");
                let is_role = obj.get("rules").is_some()
                    && cur.object.get("aggregationRule").is_none_or(Value::is_null);
                if !auto || !is_role {
                    continue;
                }
                let have = PolicyRule::all_of(&cur.object);
                let add: Vec<PolicyRule> = PolicyRule::all_of(&obj)
                    .into_iter()
                    .filter(|r| !missing(&have, std::slice::from_ref(r)).is_empty())
                    .collect();
                if add.is_empty() {
                    continue;
                }
                let mut next = cur.object.clone();
                let rules: Vec<Value> = have
                    .iter()
                    .chain(add.iter())
                    .map(PolicyRule::to_json)
                    .collect();
                next["rules"] = json!(rules);
                let _ = storage.put_if(&key, &next, cur.mod_revision).await?;
                info!(key, added = add.len(), "completed a default RBAC role");
            }
        }
    }
    if created > 0 {
        info!(created, "created the default RBAC roles and bindings");
    }
    Ok(())
}

/// Runs [`ensure`] until it succeeds (it needs a quorum), then sets `ready` (the `/readyz` hook).
pub(crate) async fn run(
    storage: Storage,
    authz: Arc<super::Authorizer>,
    ready: Arc<AtomicBool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut delay = Duration::from_millis(200);
    loop {
        match ensure(&storage).await {
            Ok(()) => {
                // Read what was just written before saying so, so no request waits on the watch.
                if authz.rbac.reload(&storage).is_ok() {
                    ready.store(true, Ordering::Release);
                    return;
                }
            }
            Err(e) => debug!(error = %e, "creating the default RBAC roles failed; retrying"),
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}
