//! The admission chain: every plugin a create or an update of an object passes, in the one order this
//! list gives. The mutating plugins run on the decoded and defaulted object; the validating ones run
//! after the object's own validation and may only refuse (or warn). A plugin says which requests it
//! handles; the registry's generic store runs the two phases at their places in every create and update
//! (through the handler's `Admission`) and nothing else decides admission. `docs/architecture.md` prints this list (a test keeps the two equal).

use serde_json::Value;

use super::webhook::{self, Webhooks};
use super::{
    default_ingress_class, default_storage_class, limit_ranger, node_restriction, node_taint,
    pod_security, resource_quota, runtime_class,
};
use crate::authn::Identity;
use crate::authz::Authorizer;
use crate::serviceaccount::key::SigningKey;
use crate::status::ApiError;
use crate::storage::Storage;
use keel_kube_registry::generic::Admitted;
pub use keel_kube_registry::generic::Operation;

/// What a plugin may read about the request (the write's step, through `Deref`), and the services it may
/// call.
pub struct Attributes<'a> {
    /// The write at this step: kind, namespace, subresource, operation, name, dry run.
    pub write: &'a Admitted<'a>,
    /// The store plugins read quotas, ranges, namespaces and accounts from.
    pub storage: &'a Storage,
    /// The authorizer (escalation checks).
    pub authz: &'a Authorizer,
    /// Who asks.
    pub identity: &'a Identity,
    /// The service-account signing key (legacy token Secrets).
    pub sa_key: &'a SigningKey,
    /// The cluster CA in PEM (legacy token Secrets carry it).
    pub ca_pem: &'a str,
    /// The admission webhook dispatcher.
    pub webhooks: &'a Webhooks,
    /// The served resources (a policy's parameter kind).
    pub registry: &'a crate::crd::registry::Registry,
    /// Where mutating steps leave warnings for the answer (the validating phase returns them).
    pub warnings: &'a std::sync::Mutex<Vec<String>>,
}

impl<'a> std::ops::Deref for Attributes<'a> {
    type Target = Admitted<'a>;

    fn deref(&self) -> &Admitted<'a> {
        self.write
    }
}

impl Attributes<'_> {
    fn is_create(&self) -> bool {
        matches!(self.op, Operation::Create)
    }

    fn is_kind(&self, group: &str, kind: &str) -> bool {
        self.def.group == group && self.def.kind == kind
    }

    /// The request as webhooks see it.
    fn webhook_request(&self) -> webhook::Request<'_> {
        let (operation, old) = match self.op {
            Operation::Create => (webhook::Operation::Create, None),
            Operation::Update { old, .. } => (webhook::Operation::Update, Some(old)),
        };
        webhook::Request {
            operation,
            requested: self.requested,
            stored: self.def,
            namespace: self.namespace,
            name: self.name,
            subresource: self.subresource,
            dry_run: self.dry_run,
            identity: self.identity,
            old,
            authz: Some(self.authz),
        }
    }

    /// Any create, or an update of the object itself that changes it.
    fn changes_object(&self) -> bool {
        match self.op {
            Operation::Create => true,
            Operation::Update { changed, .. } => self.subresource.is_none() && changed,
        }
    }
}

/// A plugin that may change the object.
#[derive(Clone, Copy, Debug)]
pub enum Mutating {
    /// Priority: a pod's `priority` and `preemptionPolicy` from its PriorityClass (kept on update).
    Priority,
    /// TaintNodesByCondition: a new Node starts tainted not-ready.
    TaintNodesByCondition,
    /// ServiceAccount: a new pod's account token volume and image pull secrets.
    ServiceAccount,
    /// The token controller's part at create: a legacy service-account token Secret gets its token.
    ServiceAccountTokenSecret,
    /// LimitRanger: a new pod's default requests and limits from its namespace's LimitRanges.
    LimitRanger,
    /// DefaultStorageClass: a new claim without a class gets the default StorageClass.
    DefaultStorageClass,
    /// StorageObjectInUseProtection: a new claim or volume gets its protection finalizer.
    StorageObjectInUseProtection,
    /// RuntimeClass: a new pod takes its RuntimeClass's overhead and scheduling constraints.
    RuntimeClass,
    /// DefaultIngressClass: a new Ingress without a class gets the default IngressClass.
    DefaultIngressClass,
    /// MutatingAdmissionWebhook: the registered mutating webhooks the request reaches.
    MutatingAdmissionWebhook,
}

/// The mutating plugins, in kube-apiserver 1.32's plugin order (LimitRanger, ServiceAccount,
/// TaintNodesByCondition, Priority, DefaultStorageClass, StorageObjectInUseProtection, RuntimeClass,
/// DefaultIngressClass, MutatingAdmissionWebhook); keel's token step follows ServiceAccount.
pub const MUTATING: &[Mutating] = &[
    Mutating::LimitRanger,
    Mutating::ServiceAccount,
    Mutating::ServiceAccountTokenSecret,
    Mutating::TaintNodesByCondition,
    Mutating::Priority,
    Mutating::DefaultStorageClass,
    Mutating::StorageObjectInUseProtection,
    Mutating::RuntimeClass,
    Mutating::DefaultIngressClass,
    Mutating::MutatingAdmissionWebhook,
];

impl Mutating {
    /// The plugin's name as upstream calls it (or, for keel's own steps, what they do).
    pub fn name(self) -> &'static str {
        match self {
            Mutating::Priority => "Priority",
            Mutating::TaintNodesByCondition => "TaintNodesByCondition",
            Mutating::ServiceAccount => "ServiceAccount",
            Mutating::ServiceAccountTokenSecret => "ServiceAccountTokenSecret",
            Mutating::LimitRanger => "LimitRanger",
            Mutating::DefaultStorageClass => "DefaultStorageClass",
            Mutating::StorageObjectInUseProtection => "StorageObjectInUseProtection",
            Mutating::RuntimeClass => "RuntimeClass",
            Mutating::DefaultIngressClass => "DefaultIngressClass",
            Mutating::MutatingAdmissionWebhook => "MutatingAdmissionWebhook",
        }
    }

    /// What the plugin handles.
    pub fn handles_text(self) -> &'static str {
        match self {
            Mutating::Priority => "pods: create, update",
            Mutating::TaintNodesByCondition => "nodes: create",
            Mutating::ServiceAccount => "pods: create",
            Mutating::ServiceAccountTokenSecret => "secrets: create",
            Mutating::LimitRanger => "pods: create",
            Mutating::DefaultStorageClass => "persistentvolumeclaims: create",
            Mutating::StorageObjectInUseProtection => {
                "persistentvolumeclaims, persistentvolumes: create"
            }
            Mutating::RuntimeClass => "pods: create",
            Mutating::DefaultIngressClass => "ingresses: create",
            Mutating::MutatingAdmissionWebhook => {
                "what registered webhooks match: create, update (subresources too)"
            }
        }
    }

    fn handles(self, a: &Attributes<'_>) -> bool {
        match self {
            Mutating::Priority => {
                a.is_kind("", "Pod") && (a.is_create() || a.subresource.is_none())
            }
            Mutating::TaintNodesByCondition => a.is_create() && a.is_kind("", "Node"),
            Mutating::ServiceAccount => a.is_create() && a.is_kind("", "Pod"),
            Mutating::ServiceAccountTokenSecret => a.is_create() && a.is_kind("", "Secret"),
            Mutating::LimitRanger => a.is_create() && a.is_kind("", "Pod"),
            Mutating::DefaultStorageClass => {
                a.is_create() && a.is_kind("", "PersistentVolumeClaim")
            }
            Mutating::StorageObjectInUseProtection => {
                a.is_create()
                    && (a.is_kind("", "PersistentVolumeClaim") || a.is_kind("", "PersistentVolume"))
            }
            Mutating::DefaultIngressClass => {
                a.is_create() && a.is_kind("networking.k8s.io", "Ingress")
            }
            Mutating::RuntimeClass => a.is_create() && a.is_kind("", "Pod"),
            Mutating::MutatingAdmissionWebhook => true,
        }
    }

    async fn admit(self, a: &Attributes<'_>, obj: &mut Value) -> Result<(), ApiError> {
        match (self, a.op) {
            (Mutating::Priority, Operation::Create) => {
                crate::priority::admit_create(a.storage, a.def, a.name, obj).await
            }
            (Mutating::Priority, Operation::Update { old, .. }) => {
                crate::priority::admit_update(a.def, old, obj);
                Ok(())
            }
            (Mutating::TaintNodesByCondition, _) => {
                node_taint::admit_create(a.def, obj);
                Ok(())
            }
            (Mutating::ServiceAccount, _) => {
                crate::serviceaccount::admission::admit_create(a.storage, obj).await;
                Ok(())
            }
            (Mutating::ServiceAccountTokenSecret, _) => {
                crate::serviceaccount::legacy::fill(a.storage, a.sa_key, a.ca_pem, obj).await;
                Ok(())
            }
            (Mutating::LimitRanger, _) => {
                limit_ranger::admit_create(a.storage, a.def, a.name, obj).await
            }
            (Mutating::DefaultStorageClass, _) => {
                default_storage_class::admit_create(a.storage, obj).await
            }
            (Mutating::StorageObjectInUseProtection, _) => {
                let finalizer = if a.is_kind("", "PersistentVolume") {
                    "kubernetes.io/pv-protection"
                } else {
                    "kubernetes.io/pvc-protection"
                };
                default_storage_class::protect(obj, finalizer);
                Ok(())
            }
            (Mutating::DefaultIngressClass, _) => {
                default_ingress_class::admit_create(a.storage, obj).await
            }
            (Mutating::RuntimeClass, _) => {
                runtime_class::admit_create(a.storage, a.name, obj).await
            }
            (Mutating::MutatingAdmissionWebhook, _) => {
                let warnings = a
                    .webhooks
                    .mutate(a.storage, &a.webhook_request(), obj)
                    .await?;
                if !warnings.is_empty() {
                    let mut sink = a.warnings.lock().unwrap_or_else(|e| e.into_inner());
                    sink.extend(warnings);
                }
                Ok(())
            }
        }
    }
}

/// A plugin that may only refuse the object, or warn about it.
#[derive(Clone, Copy, Debug)]
pub enum Validating {
    /// NamespaceLifecycle: nothing new in a namespace that is missing or being deleted.
    NamespaceLifecycle,
    /// Priority: at most one global-default PriorityClass.
    PriorityClass,
    /// NodeRestriction: a node writes only its own Node, pods and leases.
    NodeRestriction,
    /// RBAC escalation: a role or binding grants only what its writer holds (upstream's RBAC storage).
    RbacEscalation,
    /// PodSecurity: the namespace's enforce level refuses, its warn level warns.
    PodSecurity,
    /// PersistentVolumeClaimResize: a claim grows only when Bound and its class allows expansion.
    PersistentVolumeClaimResize,
    /// RuntimeClass: a new pod's declared overhead is its RuntimeClass's.
    RuntimeClass,
    /// ValidatingAdmissionPolicy: the CEL policies bound to what the request writes.
    ValidatingAdmissionPolicy,
    /// ValidatingAdmissionWebhook: the registered validating webhooks the request reaches, together.
    ValidatingAdmissionWebhook,
    /// ResourceQuota: the namespace's quotas are charged, or the write refused.
    ResourceQuota,
}

/// The validating plugins, in kube-apiserver 1.32's order. The RBAC escalation check comes first:
/// upstream makes it in the RBAC storage, before the validating plugins run. ResourceQuota is last,
/// so nothing after it may refuse a charged write.
pub const VALIDATING: &[Validating] = &[
    Validating::RbacEscalation,
    Validating::NamespaceLifecycle,
    Validating::NodeRestriction,
    Validating::PodSecurity,
    Validating::PriorityClass,
    Validating::PersistentVolumeClaimResize,
    Validating::RuntimeClass,
    Validating::ValidatingAdmissionPolicy,
    Validating::ValidatingAdmissionWebhook,
    Validating::ResourceQuota,
];

impl Validating {
    /// The plugin's name as upstream calls it.
    pub fn name(self) -> &'static str {
        match self {
            Validating::NamespaceLifecycle => "NamespaceLifecycle",
            Validating::PriorityClass => "Priority",
            Validating::NodeRestriction => "NodeRestriction",
            Validating::RbacEscalation => "RBACEscalation",
            Validating::PodSecurity => "PodSecurity",
            Validating::PersistentVolumeClaimResize => "PersistentVolumeClaimResize",
            Validating::RuntimeClass => "RuntimeClass",
            Validating::ValidatingAdmissionPolicy => "ValidatingAdmissionPolicy",
            Validating::ValidatingAdmissionWebhook => "ValidatingAdmissionWebhook",
            Validating::ResourceQuota => "ResourceQuota",
        }
    }

    /// What the plugin handles.
    pub fn handles_text(self) -> &'static str {
        match self {
            Validating::NamespaceLifecycle => "namespaced objects: create",
            Validating::PriorityClass => "priorityclasses: create, update",
            Validating::NodeRestriction => "requests by nodes: create, update (subresources too)",
            Validating::RbacEscalation => {
                "roles, clusterroles and their bindings: create, update that changes them"
            }
            Validating::PodSecurity => "pods and templates: create, update that changes them",
            Validating::PersistentVolumeClaimResize => "persistentvolumeclaims: update",
            Validating::RuntimeClass => "pods: create",
            Validating::ValidatingAdmissionPolicy => {
                "what bound policies match: create, update (subresources too), delete"
            }
            Validating::ValidatingAdmissionWebhook => {
                "what registered webhooks match: create, update (subresources too), delete"
            }
            Validating::ResourceQuota => "namespaced objects: create, update that changes them",
        }
    }

    fn handles(self, a: &Attributes<'_>) -> bool {
        match self {
            Validating::NamespaceLifecycle => a.is_create() && a.namespace.is_some(),
            Validating::PriorityClass => a.is_create() || a.subresource.is_none(),
            Validating::NodeRestriction
            | Validating::ValidatingAdmissionPolicy
            | Validating::ValidatingAdmissionWebhook => true,
            Validating::RuntimeClass => a.is_create() && a.is_kind("", "Pod"),
            Validating::PersistentVolumeClaimResize => {
                !a.is_create() && a.subresource.is_none() && a.is_kind("", "PersistentVolumeClaim")
            }
            Validating::RbacEscalation | Validating::PodSecurity | Validating::ResourceQuota => {
                a.changes_object()
            }
        }
    }

    async fn validate(self, a: &Attributes<'_>, obj: &Value) -> Result<Vec<String>, ApiError> {
        let old = match a.op {
            Operation::Create => None,
            Operation::Update { old, .. } => Some(old),
        };
        match self {
            Validating::NamespaceLifecycle => {
                if let Some(ns) = a.namespace {
                    crate::lifecycle::check_namespace_open(a.storage, ns).await?;
                }
            }
            Validating::PriorityClass => {
                crate::priority::validate_write(a.storage, a.def, obj, old.is_some()).await?
            }
            Validating::NodeRestriction => {
                let op = match old {
                    None => node_restriction::Operation::Create,
                    Some(_) => node_restriction::Operation::Update,
                };
                node_restriction::admit(a.identity, a.def, a.subresource, op, old, Some(obj))?
            }
            Validating::RbacEscalation => {
                crate::authz::escalation::check_write(a.authz, a.storage, a.identity, a.def, obj)
                    .await?
            }
            Validating::PodSecurity => {
                return pod_security::admit(a.storage, a.def, a.subresource, old, obj).await
            }
            Validating::PersistentVolumeClaimResize => {
                if let Some(old) = old {
                    default_storage_class::admit_resize(a.storage, a.name, old, obj).await?;
                }
            }
            Validating::RuntimeClass => {
                runtime_class::validate_create(a.storage, a.name, obj).await?
            }
            Validating::ValidatingAdmissionPolicy => {
                return super::policy::validate(
                    a.storage,
                    a.registry,
                    &a.webhook_request(),
                    Some(obj),
                )
                .await;
            }
            Validating::ValidatingAdmissionWebhook => {
                return a
                    .webhooks
                    .validate(a.storage, &a.webhook_request(), Some(obj))
                    .await;
            }
            Validating::ResourceQuota => {
                let op = match old {
                    None => resource_quota::Operation::Create,
                    Some(old) => resource_quota::Operation::Update(old),
                };
                resource_quota::admit(a.storage, a.def, op, a.name, obj, a.dry_run).await?
            }
        }
        Ok(Vec::new())
    }
}

/// Runs the mutating plugins that handle the request, in order; the first refusal stops the write.
pub async fn mutate(a: &Attributes<'_>, obj: &mut Value) -> Result<(), ApiError> {
    for plugin in MUTATING {
        if plugin.handles(a) {
            plugin.admit(a, obj).await?;
        }
    }
    Ok(())
}

/// Runs the validating plugins that handle the request, in order; the first refusal stops the write.
/// Returns the warnings they raised.
pub async fn validate(a: &Attributes<'_>, obj: &Value) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    for plugin in VALIDATING {
        if plugin.handles(a) {
            warnings.extend(plugin.validate(a, obj).await?);
        }
    }
    Ok(warnings)
}

/// The chain as a Markdown table, as `docs/architecture.md` shows it.
pub fn markdown() -> String {
    let mut out = String::from("| # | phase | plugin | handles |\n|---|---|---|---|\n");
    let rows = MUTATING
        .iter()
        .map(|p| ("mutating", p.name(), p.handles_text()))
        .chain(
            VALIDATING
                .iter()
                .map(|p| ("validating", p.name(), p.handles_text())),
        );
    for (i, (phase, name, handles)) in rows.enumerate() {
        out.push_str(&format!("| {} | {phase} | {name} | {handles} |\n", i + 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/architecture.md shows the chain as this file lists it. `KEEL_WRITE_DOCS=1` rewrites it.
    #[test]
    fn the_documented_order_is_the_chain() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
        let doc = std::fs::read_to_string(path).expect("docs/architecture.md");
        let (begin, end) = (
            "<!-- admission-chain:begin -->\n",
            "<!-- admission-chain:end -->",
        );
        let start = doc.find(begin).expect("begin marker") + begin.len();
        let stop = doc.find(end).expect("end marker");
        let want = markdown();
        if std::env::var_os("KEEL_WRITE_DOCS").is_some() {
            let updated = format!("{}{want}{}", &doc[..start], &doc[stop..]);
            std::fs::write(path, updated).expect("write docs/architecture.md");
            return;
        }
        assert_eq!(
            &doc[start..stop],
            want,
            "docs/architecture.md's admission table differs from admission/chain.rs; \
             run KEEL_WRITE_DOCS=1 cargo test -p keel-kube-api --lib chain"
        );
    }

    #[test]
    fn resource_quota_comes_last() {
        assert!(matches!(VALIDATING.last(), Some(Validating::ResourceQuota)));
    }

    /// Upstream's NamespaceLifecycle refuses before the other validating plugins (nothing is charged to a
    /// quota for a write it refuses); only the RBAC storage's escalation check comes earlier.
    #[test]
    fn namespace_lifecycle_comes_before_the_other_plugins() {
        assert!(matches!(
            VALIDATING[..2],
            [Validating::RbacEscalation, Validating::NamespaceLifecycle]
        ));
    }
}
