//! The RBAC authorizer: every member keeps the Roles, ClusterRoles and their bindings of its own store in
//! memory (reloaded whole on any change: they are few and rarely written) and walks them per request as
//! upstream's `DefaultRuleResolver` does.
//!
//! The view is always one moment of the store: the four kinds are read at one revision, and a view
//! replaces the current one only if it is newer, so no request sees a binding without its role or a
//! deleted binding beside a newer one. A write of an RBAC object through this member answers only once
//! the view includes it ([`Rbac::caught_up`]): a deletion acknowledged is never honoured afterwards.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tracing::debug;

use super::attributes::Attributes;
use super::rule::PolicyRule;
use crate::authn::Identity;
use crate::object;
use crate::storage::{prefix_end, Storage, WatchBatch};

/// Where the four kinds are stored (upstream's key layout).
const PREFIXES: [&str; 4] = [
    "/registry/clusterroles/",
    "/registry/clusterrolebindings/",
    "/registry/roles/",
    "/registry/rolebindings/",
];

/// The API group of the four kinds.
pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";

/// The prefix of service-account user names.
pub(crate) const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// One subject of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subject {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

impl Subject {
    /// Whether the subject names `user` (a ServiceAccount without namespace takes the binding's).
    fn applies_to(&self, user: &Identity, binding_ns: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.user == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_ns
                } else {
                    &self.namespace
                };
                !ns.is_empty()
                    && user.user.strip_prefix(SERVICE_ACCOUNT_PREFIX)
                        == Some(&format!("{ns}:{}", self.name))
            }
            _ => false,
        }
    }

    /// Upstream's `describeSubject`: `User "alice"`, `ServiceAccount "name/namespace"`.
    fn describe(&self, binding_ns: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_ns
                } else {
                    &self.namespace
                };
                format!("{} {:?}", self.kind, format!("{}/{ns}", self.name))
            }
            _ => format!("{} {:?}", self.kind, self.name),
        }
    }
}

/// A RoleBinding (namespace set) or ClusterRoleBinding (namespace empty).
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub name: String,
    pub namespace: String,
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<Subject>,
}

impl Binding {
    fn from_json(v: &Value) -> Self {
        let s = |p: &str| {
            object::path(v, p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let subjects = v
            .get("subjects")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|x| Subject {
                        kind: x
                            .get("kind")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        name: x
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        namespace: x
                            .get("namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Binding {
            name: object::name(v).to_string(),
            namespace: object::namespace(v).to_string(),
            role_kind: s("roleRef.kind"),
            role_name: s("roleRef.name"),
            subjects,
        }
    }
}

/// Which binding granted a rule, as upstream's describers print it.
pub struct Source<'a> {
    binding: &'a Binding,
    subject: &'a Subject,
}

impl fmt::Display for Source<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.binding;
        if b.namespace.is_empty() {
            write!(
                f,
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                b.name,
                b.role_kind,
                b.role_name,
                self.subject.describe("")
            )
        } else {
            write!(
                f,
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", b.name, b.namespace),
                b.role_kind,
                b.role_name,
                self.subject.describe(&b.namespace)
            )
        }
    }
}

/// The RBAC objects of one member's store.
#[derive(Debug, Default)]
struct Objects {
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    roles: HashMap<(String, String), Arc<Vec<PolicyRule>>>,
    cluster_bindings: Vec<Binding>,
    bindings: HashMap<String, Vec<Binding>>,
    /// Whether the store has been read once (before, every request is refused for want of rules).
    loaded: bool,
    /// The store revision this view was read at.
    revision: i64,
}

/// What a walk over a user's rules reports: a granted rule, or a binding whose role is missing.
pub enum Visit<'a> {
    Rule(&'a Source<'a>, &'a PolicyRule),
    Error(String),
}

/// RBAC's view of the store.
#[derive(Debug, Default)]
pub struct Rbac {
    objects: RwLock<Objects>,
}

impl Rbac {
    /// Whether the store has been read.
    pub fn loaded(&self) -> bool {
        self.read().loaded
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Objects> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The store revision the view was read at (0 before the first read).
    pub fn revision(&self) -> i64 {
        self.read().revision
    }

    /// Rereads all four kinds from `storage` at one revision; returns the revision read at.
    pub fn reload(&self, storage: &Storage) -> Result<i64, crate::status::ApiError> {
        let mut o = Objects {
            loaded: true,
            ..Default::default()
        };
        // The first read picks the revision (the latest); the others read at it.
        let mut rev = 0;
        for prefix in PREFIXES {
            let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), rev, 0)?;
            rev = page.revision;
            for (_, s) in page.items {
                let v = s.object;
                match prefix {
                    "/registry/clusterroles/" => {
                        o.cluster_roles.insert(
                            object::name(&v).to_string(),
                            Arc::new(PolicyRule::all_of(&v)),
                        );
                    }
                    "/registry/roles/" => {
                        o.roles.insert(
                            (
                                object::namespace(&v).to_string(),
                                object::name(&v).to_string(),
                            ),
                            Arc::new(PolicyRule::all_of(&v)),
                        );
                    }
                    "/registry/clusterrolebindings/" => {
                        let mut b = Binding::from_json(&v);
                        b.namespace.clear();
                        o.cluster_bindings.push(b);
                    }
                    _ => {
                        let b = Binding::from_json(&v);
                        o.bindings.entry(b.namespace.clone()).or_default().push(b);
                    }
                }
            }
        }
        // Keys are read in name order, so walks (and the first granting binding) are deterministic.
        o.revision = rev;
        let mut current = self.objects.write().unwrap_or_else(|e| e.into_inner());
        // A reload that raced this one may have installed a newer view already.
        if current.revision <= rev {
            *current = o;
        }
        Ok(rev)
    }

    /// Makes the view at least as new as `storage`'s latest revision, rereading now if it is older:
    /// called after a write of an RBAC object, before the write is answered.
    pub fn caught_up(&self, storage: &Storage) -> Result<(), crate::status::ApiError> {
        if self.revision() >= storage.revision() {
            return Ok(());
        }
        self.reload(storage).map(|_| ())
    }

    /// The rules of a role a binding names, or upstream's not-found error text.
    fn role_rules(o: &Objects, b: &Binding) -> Result<Arc<Vec<PolicyRule>>, String> {
        match b.role_kind.as_str() {
            "ClusterRole" => o.cluster_roles.get(&b.role_name).cloned().ok_or_else(|| {
                format!(
                    "clusterrole.rbac.authorization.k8s.io {:?} not found",
                    b.role_name
                )
            }),
            "Role" if !b.namespace.is_empty() => o
                .roles
                .get(&(b.namespace.clone(), b.role_name.clone()))
                .cloned()
                .ok_or_else(|| {
                    format!("role.rbac.authorization.k8s.io {:?} not found", b.role_name)
                }),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// Walks every rule granted to `user` in `namespace` ("" = cluster bindings only) until `visit`
    /// returns false (upstream's `VisitRulesFor`).
    pub fn visit_rules_for(
        &self,
        user: &Identity,
        namespace: &str,
        mut visit: impl FnMut(Visit<'_>) -> bool,
    ) {
        let o = self.read();
        let lists: [(&[Binding], &str); 2] = [
            (&o.cluster_bindings, ""),
            (
                if namespace.is_empty() {
                    &[]
                } else {
                    o.bindings.get(namespace).map(Vec::as_slice).unwrap_or(&[])
                },
                namespace,
            ),
        ];
        for (bindings, ns) in lists {
            for b in bindings {
                let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, ns)) else {
                    continue;
                };
                match Self::role_rules(&o, b) {
                    Ok(rules) => {
                        let source = Source {
                            binding: b,
                            subject,
                        };
                        for r in rules.iter() {
                            if !visit(Visit::Rule(&source, r)) {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        if !visit(Visit::Error(e)) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Every rule granted to `user` in `namespace`, and the resolution errors met.
    pub fn rules_for(&self, user: &Identity, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        self.visit_rules_for(user, namespace, |v| {
            match v {
                Visit::Rule(_, r) => rules.push(r.clone()),
                Visit::Error(e) => errors.push(e),
            }
            true
        });
        (rules, errors)
    }

    /// Allowed with upstream's reason (`RBAC: allowed by ...`), or not with the resolution errors as the
    /// reason (`RBAC: [...]`, or "" when there were none).
    pub fn authorize(&self, a: &Attributes) -> (bool, String) {
        let ns = a
            .resource
            .as_ref()
            .map(|r| r.namespace.as_str())
            .unwrap_or("");
        let mut allowed = None;
        let mut errors = Vec::new();
        self.visit_rules_for(&a.user, ns, |v| match v {
            Visit::Rule(source, rule) => {
                if rule.allows(a) {
                    allowed = Some(format!("RBAC: allowed by {source}"));
                    false
                } else {
                    true
                }
            }
            Visit::Error(e) => {
                errors.push(e);
                true
            }
        });
        match allowed {
            Some(reason) => (true, reason),
            None if errors.is_empty() => (false, String::new()),
            None if errors.len() == 1 => (false, format!("RBAC: {}", errors[0])),
            None => (false, format!("RBAC: [{}]", errors.join(", "))),
        }
    }
}

/// Keeps `rbac` in step with the store until `stop` fires: a full reload at start and after every change.
pub(crate) async fn run(
    rbac: Arc<Rbac>,
    storage: Storage,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let rev = match rbac.reload(&storage) {
            Ok(r) => r,
            Err(e) => {
                debug!(error = %e, "reading RBAC objects failed; retrying");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        let mut watches = Vec::with_capacity(PREFIXES.len());
        for p in PREFIXES {
            match storage
                .watch(p.as_bytes(), &prefix_end(p.as_bytes()), rev + 1, false)
                .await
            {
                Ok(w) => watches.push(w),
                Err(_) => break,
            }
        }
        if watches.len() < PREFIXES.len() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        // Any change rereads everything; a watch that ends starts the loop over.
        let changed = async {
            let futs = watches.iter_mut().map(|w| {
                Box::pin(async move {
                    loop {
                        match w.next().await {
                            WatchBatch::Events(_) => return true,
                            WatchBatch::Progress(_) => {}
                            WatchBatch::Compacted(_) | WatchBatch::Ended => return false,
                        }
                    }
                })
            });
            futures::future::select_all(futs).await.0
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = changed => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_apply_as_upstream_matches_them() {
        let alice = Identity {
            user: "alice".into(),
            groups: vec!["dev".into()],
        };
        let sa = Identity {
            user: "system:serviceaccount:ns1:robot".into(),
            groups: vec![],
        };
        let b = Binding::from_json(&json!({
            "metadata": {"name": "b", "namespace": "ns1"},
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "Group", "name": "dev"}, {"kind": "ServiceAccount", "name": "robot"}]
        }));
        assert!(b.subjects[0].applies_to(&alice, "ns1"));
        assert!(!b.subjects[0].applies_to(&sa, "ns1"));
        assert!(b.subjects[1].applies_to(&sa, "ns1"));
        assert!(!b.subjects[1].applies_to(&sa, "ns2"));
        let source = Source {
            binding: &b,
            subject: &b.subjects[1],
        };
        assert_eq!(
            source.to_string(),
            r#"RoleBinding "b/ns1" of Role "r" to ServiceAccount "robot/ns1""#
        );
    }
}
