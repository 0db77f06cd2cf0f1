//! Authorization, in upstream's order: the `system:masters` group may do anything, then the Node
//! authorizer (agents' identities), then RBAC. A request nobody allows is a 403 with upstream's message.
//!
//! - `attributes`: who asks what (a request's `RequestInfo` with its user, or a check on a user's behalf).
//! - `rule`, `rbac`: RBAC rules and the per-member view of Roles and bindings.
//! - `node`: what an agent (`system:node:<name>` in `system:nodes`) may read and write.
//! - `escalation`: a user may grant only what they hold (or with `escalate`/`bind`).
//! - `review`: SubjectAccessReview and friends, SelfSubjectRulesReview, SelfSubjectReview.
//! - `impersonate`: `Impersonate-User`/`-Group` headers (`kubectl --as`).
//! - `bootstrap`: upstream's default roles and bindings, created at start.

pub(crate) mod attributes;
pub(crate) mod bootstrap;
pub(crate) mod ensure;
pub(crate) mod escalation;
pub(crate) mod impersonate;
pub(crate) mod node;
pub(crate) mod rbac;
pub(crate) mod review;
pub(crate) mod rule;

use std::sync::Arc;

use attributes::Attributes;

use crate::status::{ApiError, Target};
use crate::storage::Storage;

/// The group whose members may do anything (kube-apiserver's privileged group).
pub(crate) const MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub(crate) const AUTHENTICATED: &str = "system:authenticated";

/// The answer of the authorizer chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Why (upstream's reason: `RBAC: allowed by ...`, the node authorizer's, or resolution errors).
    pub reason: String,
}

/// The chain every member runs.
#[derive(Clone)]
pub struct Authorizer {
    pub rbac: Arc<rbac::Rbac>,
    node: node::NodeAuthorizer,
}

impl Authorizer {
    /// An authorizer over `storage` (RBAC's view is filled by [`rbac::run`]).
    pub fn new(storage: Storage) -> Self {
        Authorizer {
            rbac: Arc::new(rbac::Rbac::default()),
            node: node::NodeAuthorizer::new(storage),
        }
    }

    /// Runs the chain; a denial's reason joins every authorizer's reason with a newline, as upstream's
    /// union authorizer does.
    pub fn authorize(&self, a: &Attributes) -> Verdict {
        if a.user.groups.iter().any(|g| g == MASTERS) {
            return Verdict {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut reasons = Vec::new();
        match self.node.authorize(a) {
            node::Decision::Allow => {
                return Verdict {
                    allowed: true,
                    reason: String::new(),
                }
            }
            node::Decision::NoOpinion(r) => {
                if !r.is_empty() {
                    reasons.push(r)
                }
            }
        }
        let (allowed, reason) = self.rbac.authorize(a);
        if allowed {
            return Verdict { allowed, reason };
        }
        if !reason.is_empty() {
            reasons.push(reason);
        }
        Verdict {
            allowed: false,
            reason: reasons.join("\n"),
        }
    }

    /// `Ok` when allowed, else upstream's 403.
    pub fn check(&self, a: &Attributes) -> Result<(), ApiError> {
        let v = self.authorize(a);
        if v.allowed {
            Ok(())
        } else {
            Err(forbidden(a, &v.reason))
        }
    }
}

/// Upstream's `forbiddenMessage`: `User "alice" cannot list resource "pods" in API group "" in the
/// namespace "default"` (or `at the cluster scope`, or `cannot get path "/metrics"`).
pub(crate) fn forbidden_message(a: &Attributes) -> String {
    let user = &a.user.user;
    match &a.resource {
        None => format!("User {user:?} cannot {} path {:?}", a.verb, a.path),
        Some(r) => {
            let resource = match &r.subresource {
                Some(s) => format!("{}/{s}", r.resource),
                None => r.resource.clone(),
            };
            if r.namespace.is_empty() {
                format!(
                    "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                    a.verb, r.group
                )
            } else {
                format!(
                    "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                    a.verb, r.group, r.namespace
                )
            }
        }
    }
}

/// The 403 of a denied request: `pods "web" is forbidden: <message>[: <reason>]`.
pub(crate) fn forbidden(a: &Attributes, reason: &str) -> ApiError {
    let mut detail = forbidden_message(a);
    if !reason.is_empty() {
        detail = format!("{detail}: {reason}");
    }
    match &a.resource {
        None => ApiError::Forbidden {
            target: Target::default(),
            message: format!("forbidden: {detail}"),
        },
        Some(r) => {
            let target = Target::new(&r.group, &r.resource, r.name.as_deref().unwrap_or(""));
            let message = match r.name.as_deref() {
                Some(n) if !n.is_empty() => {
                    format!("{} {n:?} is forbidden: {detail}", target.qualified())
                }
                _ => format!("{} is forbidden: {detail}", target.qualified()),
            };
            ApiError::Forbidden { target, message }
        }
    }
}
