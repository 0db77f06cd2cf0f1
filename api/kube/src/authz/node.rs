//! The Node authorizer: an agent (`system:node:<name>` in group `system:nodes`) may read a Secret,
//! ConfigMap, PersistentVolumeClaim, PersistentVolume or ServiceAccount token only when a pod bound to its
//! node uses it, and may otherwise do what upstream's `system:node` rules allow. Upstream keeps a graph
//! of these relations; keel reads the namespace's pods from its store at the time of the request (agents
//! read these objects only when they start pods).

use std::sync::LazyLock;

use serde_json::Value;

use super::attributes::Attributes;
use super::rule::PolicyRule;
use crate::object;
use crate::storage::{prefix_end, Storage};

/// The group of agents' identities.
pub(crate) const NODES_GROUP: &str = "system:nodes";
/// The user-name prefix of agents' identities.
pub(crate) const NODE_USER_PREFIX: &str = "system:node:";

/// What the Node authorizer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    /// Not this authorizer's to allow; the reason (if any) joins the 403's message.
    NoOpinion(String),
}

/// Upstream's `system:node` rules, the ones agents get for everything the graph does not decide.
static NODE_RULES: LazyLock<Vec<PolicyRule>> = LazyLock::new(|| {
    super::bootstrap::cluster_roles()
        .iter()
        .find(|r| object::name(r) == "system:node")
        .map(PolicyRule::all_of)
        .unwrap_or_default()
});

/// The controller of the agents' built-in Ingress controller's classes.
const INGRESS_CONTROLLER: &str = "keel.io/ingress";

/// The node an identity is the agent of, if it is one.
pub(crate) fn node_name(user: &crate::authn::Identity) -> Option<&str> {
    if !user.groups.iter().any(|g| g == NODES_GROUP) {
        return None;
    }
    user.user
        .strip_prefix(NODE_USER_PREFIX)
        .filter(|n| !n.is_empty())
}

/// The Node authorizer of one member.
#[derive(Clone)]
pub(crate) struct NodeAuthorizer {
    storage: Storage,
}

impl NodeAuthorizer {
    pub(crate) fn new(storage: Storage) -> Self {
        NodeAuthorizer { storage }
    }

    /// Decides for agents; no opinion on anyone else.
    pub(crate) fn authorize(&self, a: &Attributes) -> Decision {
        let Some(node) = node_name(&a.user) else {
            return Decision::NoOpinion(String::new());
        };
        let Some(r) = &a.resource else {
            return self.by_rules(a);
        };
        if r.group.is_empty()
            && matches!(
                r.resource.as_str(),
                "persistentvolumeclaims" | "persistentvolumes"
            )
            && r.subresource.is_none()
        {
            return self.provisioner(node, a, r);
        }
        // The provisioner reads classes too (their provisioner and reclaim policy).
        if r.group == "storage.k8s.io"
            && r.resource == "storageclasses"
            && matches!(a.verb.as_str(), "get" | "list" | "watch")
        {
            return Decision::Allow;
        }
        let kind = match (r.group.as_str(), r.resource.as_str()) {
            ("", "secrets") => Some(Ref::Secret),
            ("", "configmaps") => Some(Ref::ConfigMap),
            ("", "persistentvolumeclaims") => Some(Ref::Claim),
            ("", "persistentvolumes") => Some(Ref::Volume),
            _ => None,
        };
        if let Some(kind) = kind {
            if !matches!(a.verb.as_str(), "get" | "list" | "watch") {
                return Decision::NoOpinion("can only read resources of this type".into());
            }
            if r.subresource.is_some() {
                return Decision::NoOpinion("cannot read subresource".into());
            }
            if kind != Ref::Volume && r.namespace.is_empty() {
                return Decision::NoOpinion("can only read namespaced object of this type".into());
            }
            return self.related(node, kind, &r.namespace, r.name.as_deref());
        }
        if r.group.is_empty()
            && r.resource == "serviceaccounts"
            && r.subresource.as_deref() == Some("token")
        {
            if a.verb != "create" {
                return Decision::NoOpinion(
                    "can only create tokens for individual service accounts".into(),
                );
            }
            return self.related(node, Ref::ServiceAccount, &r.namespace, r.name.as_deref());
        }
        self.by_rules(a)
    }

    /// What the agent's built-in local-path provisioner needs: to read every claim and volume (it
    /// watches for claims scheduled to its node, as a provisioner's service account does), to create
    /// volumes (NodeRestriction checks they are local-path ones on this node) and to delete the
    /// local-path volumes of its own node.
    fn provisioner(
        &self,
        node: &str,
        a: &Attributes,
        r: &super::attributes::ResourceAttributes,
    ) -> Decision {
        match (r.resource.as_str(), a.verb.as_str()) {
            (_, "get" | "list" | "watch") => Decision::Allow,
            ("persistentvolumes", "create") => Decision::Allow,
            ("persistentvolumes", "delete") => {
                let name = r.name.as_deref().unwrap_or("");
                let pv = self
                    .objects(&format!("/registry/persistentvolumes/{name}"))
                    .into_iter()
                    .find(|v| object::name(v) == name);
                if pv.is_some_and(|v| local_path_on(&v, node)) {
                    Decision::Allow
                } else {
                    Decision::NoOpinion(format!(
                        "node '{node}' can only delete the local-path volumes of its own node"
                    ))
                }
            }
            _ => self.by_rules(a),
        }
    }

    fn by_rules(&self, a: &Attributes) -> Decision {
        if NODE_RULES.iter().any(|r| r.allows(a)) {
            Decision::Allow
        } else {
            Decision::NoOpinion(String::new())
        }
    }

    /// Allows when a pod bound to `node` uses the named object.
    fn related(&self, node: &str, kind: Ref, namespace: &str, name: Option<&str>) -> Decision {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Decision::NoOpinion("No Object name found".into());
        };
        let none = || {
            Decision::NoOpinion(format!(
                "no relationship found between node '{node}' and this object"
            ))
        };
        if kind == Ref::Volume {
            // A volume is reachable through a claim bound to it that one of the node's pods uses.
            let claims = self.objects("/registry/persistentvolumeclaims/");
            let used = claims.iter().any(|c| {
                object::path(c, "spec.volumeName").and_then(Value::as_str) == Some(name)
                    && self.related(
                        node,
                        Ref::Claim,
                        object::namespace(c),
                        Some(object::name(c)),
                    ) == Decision::Allow
            });
            return if used { Decision::Allow } else { none() };
        }
        if kind == Ref::Secret && self.ingress_tls(namespace, name) {
            return Decision::Allow;
        }
        let pods = self.objects(&format!("/registry/pods/{namespace}/"));
        let uses = pods.iter().any(|p| {
            object::path(p, "spec.nodeName").and_then(Value::as_str) == Some(node)
                && references(p, kind).iter().any(|n| n == name)
        });
        if uses {
            Decision::Allow
        } else {
            none()
        }
    }

    /// Whether an Ingress of one of the agents' own classes (controller `keel.io/ingress`) in `namespace`
    /// names the Secret `name` for TLS: every agent's Ingress controller serves it.
    fn ingress_tls(&self, namespace: &str, name: &str) -> bool {
        let classes: Vec<String> = self
            .objects("/registry/ingressclasses/")
            .iter()
            .filter(|c| {
                object::path(c, "spec.controller").and_then(Value::as_str)
                    == Some(INGRESS_CONTROLLER)
            })
            .map(|c| object::name(c).to_string())
            .collect();
        if classes.is_empty() {
            return false;
        }
        self.objects(&format!("/registry/ingress/{namespace}/"))
            .iter()
            .any(|i| {
                let class = object::path(i, "spec.ingressClassName")
                    .and_then(Value::as_str)
                    .or_else(|| {
                        object::path(i, "metadata.annotations")
                            .and_then(|a| a.get("kubernetes.io/ingress.class"))
                            .and_then(Value::as_str)
                    });
                let tls = object::path(i, "spec.tls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten();
                class.is_some_and(|c| classes.iter().any(|k| k == c))
                    && tls
                        .into_iter()
                        .any(|t| t.get("secretName").and_then(Value::as_str) == Some(name))
            })
    }

    fn objects(&self, prefix: &str) -> Vec<Value> {
        self.storage
            .range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)
            .map(|p| p.items.into_iter().map(|(_, s)| s.object).collect())
            .unwrap_or_default()
    }
}

/// The provisioner of the agents' local-path volumes.
pub(crate) const LOCAL_PATH: &str = "keel.io/local-path";

/// Whether a volume is a local-path volume of `node`: provisioned by the agents' provisioner, with a
/// node affinity of exactly one term, `kubernetes.io/hostname In [node]`.
pub(crate) fn local_path_on(pv: &Value, node: &str) -> bool {
    let by = object::path(pv, "metadata.annotations")
        .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
        .and_then(Value::as_str);
    let terms = object::path(pv, "spec.nodeAffinity.required.nodeSelectorTerms")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let only_here = match terms {
        [term] => {
            let exprs = term.get("matchExpressions").and_then(Value::as_array);
            match exprs.map(Vec::as_slice) {
                Some([e]) => {
                    e.get("key").and_then(Value::as_str) == Some("kubernetes.io/hostname")
                        && e.get("operator").and_then(Value::as_str) == Some("In")
                        && e.get("values") == Some(&serde_json::json!([node]))
                        && term
                            .get("matchFields")
                            .and_then(Value::as_array)
                            .is_none_or(Vec::is_empty)
                }
                _ => false,
            }
        }
        _ => false,
    };
    by == Some(LOCAL_PATH) && only_here
}

/// The kinds of objects a pod refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ref {
    Secret,
    ConfigMap,
    Claim,
    Volume,
    ServiceAccount,
}

/// The names of the objects of `kind` a pod refers to (volumes, projected sources, env, envFrom, image
/// pull secrets, its service account).
pub(crate) fn references(pod: &Value, kind: Ref) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |v: Option<&Value>| {
        if let Some(s) = v.and_then(Value::as_str) {
            out.push(s.to_string());
        }
    };
    let spec = pod.get("spec");
    let list = |v: Option<&Value>, f: &str| -> Vec<Value> {
        v.and_then(|s| s.get(f))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    match kind {
        Ref::ServiceAccount => {
            push(spec.and_then(|s| s.get("serviceAccountName")));
            return out;
        }
        Ref::Volume => return out,
        _ => {}
    }
    for vol in list(spec, "volumes") {
        match kind {
            Ref::Secret => push(object::path(&vol, "secret.secretName")),
            Ref::ConfigMap => push(object::path(&vol, "configMap.name")),
            Ref::Claim => {
                push(object::path(&vol, "persistentVolumeClaim.claimName"));
                // A generic ephemeral volume's claim is named `<pod>-<volume>`.
                if vol.get("ephemeral").is_some() {
                    let claim = vol
                        .get("name")
                        .and_then(Value::as_str)
                        .map(|v| Value::String(format!("{}-{v}", object::name(pod))));
                    push(claim.as_ref());
                }
            }
            _ => {}
        }
        for src in list(vol.get("projected"), "sources") {
            match kind {
                Ref::Secret => push(object::path(&src, "secret.name")),
                Ref::ConfigMap => push(object::path(&src, "configMap.name")),
                _ => {}
            }
        }
        if kind == Ref::Secret {
            for f in [
                "csi.nodePublishSecretRef.name",
                "cephfs.secretRef.name",
                "rbd.secretRef.name",
                "azureFile.secretName",
            ] {
                push(object::path(&vol, f));
            }
        }
    }
    if kind == Ref::Secret {
        for s in list(spec, "imagePullSecrets") {
            push(s.get("name"));
        }
    }
    if matches!(kind, Ref::Secret | Ref::ConfigMap) {
        let (key_ref, from_ref) = match kind {
            Ref::Secret => ("secretKeyRef", "secretRef"),
            _ => ("configMapKeyRef", "configMapRef"),
        };
        for field in ["initContainers", "containers", "ephemeralContainers"] {
            for c in list(spec, field) {
                for e in list(Some(&c), "env") {
                    push(
                        e.get("valueFrom")
                            .and_then(|v| v.get(key_ref))
                            .and_then(|r| r.get("name")),
                    );
                }
                for e in list(Some(&c), "envFrom") {
                    push(e.get(from_ref).and_then(|r| r.get("name")));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_names_what_it_uses() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "serviceAccountName": "sa",
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol-secret"}},
                {"name": "b", "projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}}]}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "claim"}},
                {"name": "d", "ephemeral": {"volumeClaimTemplate": {}}}
            ],
            "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}],
                            "envFrom": [{"configMapRef": {"name": "env-cm"}}]}]
        }});
        let mut s = references(&pod, Ref::Secret);
        s.sort();
        assert_eq!(s, ["env-secret", "proj-secret", "pull", "vol-secret"]);
        let mut c = references(&pod, Ref::ConfigMap);
        c.sort();
        assert_eq!(c, ["env-cm", "proj-cm"]);
        assert_eq!(references(&pod, Ref::Claim), ["claim", "p-d"]);
        assert_eq!(references(&pod, Ref::ServiceAccount), ["sa"]);
    }

    #[test]
    fn only_agents_are_nodes() {
        let id = |u: &str, g: &[&str]| crate::authn::Identity {
            user: u.into(),
            groups: g.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(node_name(&id("system:node:w1", &[NODES_GROUP])), Some("w1"));
        assert_eq!(node_name(&id("system:node:w1", &[])), None);
        assert_eq!(node_name(&id("alice", &[NODES_GROUP])), None);
    }
}
