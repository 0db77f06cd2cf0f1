//! Per-kind rules of writes, shaped like upstream's registry strategies (kube-apiserver's
//! `pkg/registry/<group>/<kind>/strategy.go`).
//!
//! The generic verbs (`handler::write`, `handler::apply`, `handler::delete`, `handler::scale`) know nothing
//! about kinds: they decode, check optimistic concurrency, keep server-owned metadata, record managedFields
//! and write. Every rule that belongs to one kind sits in that kind's [`Strategy`], found from the resource
//! table with [`of`]:
//!
//! - create: [`Strategy::set_defaults`], [`Strategy::prepare_for_create`] (status reset, the Pod's QoS
//!   class, the Job's selector), [`Strategy::validate`] (after the generic metadata checks, with the name
//!   rule of [`Strategy::name_rule`]), [`Strategy::warnings_on_create`], [`Strategy::canonicalize`], then
//!   [`Strategy::allocate`] (a Service's ClusterIP and node ports, written as claims in the same Txn);
//! - update of the object itself: [`Strategy::prepare_for_update`] (status kept, generation bumped when
//!   [`Strategy::generation_changes`]), [`Strategy::allocate_update`] (a Service's claims taken and
//!   released in the Txn that writes it), [`Strategy::validate_update`] (immutable fields; with
//!   [`Strategy::validate`] too unless [`Strategy::revalidates_on_update`] says otherwise);
//! - update of a subresource: the [`Subresource`] [`Strategy::subresource`] names (`status` for every kind
//!   with a status, `finalize` for namespaces) builds the stored object from the stored one and the
//!   client's, and validates it; a kind's own subresource rules (pod bindings, evictions, the node agent's
//!   pod status) are one more [`Subresource`] in its module, and the route is served once it is named;
//! - delete: [`Strategy::graceful_delete`] (the pod's grace period), [`Strategy::deletion_held`] and
//!   [`Strategy::prepare_for_delete`] (a namespace's `spec.finalizers`, the CRD's cleanup finalizer),
//!   [`Strategy::mark_deleting`] (a namespace's `Terminating` phase), [`Strategy::claims`] (what the
//!   delete releases), [`Strategy::returns_deleted_object`], [`Strategy::delete_forbidden`] (the built-in
//!   PriorityClasses);
//! - decoding: [`Strategy::prune_unknown`] (field validation) and [`Strategy::strategic_merge`], which
//!   differ for CRDs and custom resources; [`Strategy::scale_paths`] for `/scale`.
//!
//! Every method has a default, the rule of a kind without rules of its own, so a module overrides only
//! what its kind changes. Shared building blocks (pod spec defaults and checks, selector/template checks,
//! name rules) stay in `admission`, which also runs defaulting and validation through this table.

mod admission_policy;
mod apiservice;
mod autoscaling;
mod configmap;
mod crd;
mod cronjob;
pub mod csr;
mod custom;
mod daemonset;
mod deployment;
mod endpoints;
mod endpointslice;
mod ingress;
mod job;
mod limitrange;
mod namespace;
mod networkpolicy;
mod node;
mod node_runtime;
mod persistentvolume;
mod pod;
pub mod priorityclass;
mod rbac;
mod replicaset;
mod replicationcontroller;
mod resourcequota;
mod secret;
mod service;
mod statefulset;
mod storage;
mod webhook;
mod workload;

pub use apiservice::ca_bundle_len;

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Value};

use crate::alloc::Reallocation;
use crate::body;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Cause};
use crate::storage::Storage;
use crate::validation::names::NameRule;
use crate::validation::validate;

/// What [`Strategy::allocate`] returns: the claim keys to write with the object.
pub type Allocation<'a> = Pin<Box<dyn Future<Output = Result<Vec<String>, ApiError>> + Send + 'a>>;

/// What [`Strategy::allocate_update`] returns: the claim keys to take and to release with the write.
pub type UpdateAllocation<'a> =
    Pin<Box<dyn Future<Output = Result<Reallocation, ApiError>> + Send + 'a>>;

/// Where a resource keeps what its `/scale` subresource shows (dotted paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas.
    pub spec: String,
    /// The observed replicas.
    pub status: String,
    /// The label selector, if any.
    pub selector: Option<String>,
    /// What the selector at that path looks like.
    pub selector_form: SelectorForm,
}

/// The shape of a `/scale` selector in its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorForm {
    /// A `metav1.LabelSelector` (`matchLabels`, `matchExpressions`).
    Object,
    /// A label map (a ReplicationController's `spec.selector`).
    Map,
    /// The string form already (custom resources' `labelSelectorPath`).
    Text,
}

/// The rules of one kind. Every method has the default of a kind without rules of its own.
pub trait Strategy: Sync {
    /// The rule `metadata.name` follows.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// Removes the fields the kind does not have and returns their paths (`spec.replicaz`), for field
    /// validation. Default: the fields of the built-in type in the generated schema table.
    fn prune_unknown(&self, def: &ResourceDef, obj: &mut Value) -> Vec<String> {
        match crate::protobuf::schema::message_for(&def.api_version(), &def.kind) {
            Some(root) => crate::validation::prune::prune(obj, &root),
            None => Vec::new(),
        }
    }

    /// Applies a strategic merge patch to `current`. Default: the merge keys and patch strategies of the
    /// built-in type.
    fn strategic_merge(
        &self,
        def: &ResourceDef,
        current: Value,
        patch: &[u8],
    ) -> Result<Value, ApiError> {
        let p = body::json(patch)?;
        let root = crate::protobuf::schema::message_for(&def.api_version(), &def.kind).ok_or_else(
            || {
                ApiError::UnsupportedMediaType(format!(
                    "strategic merge patch is not supported for {}",
                    def.qualified()
                ))
            },
        )?;
        crate::patch::strategic::apply(current, &p, &root)
            .map_err(|e| ApiError::BadRequest(e.to_string()))
    }

    /// Why no object of `def` may be created now (a 405 `MethodNotAllowed` with this message), if so.
    fn create_forbidden(&self, _def: &ResourceDef) -> Option<&'static str> {
        None
    }

    /// Fills in upstream's defaults, on create and on updates of the object itself.
    fn set_defaults(&self, _def: &ResourceDef, _obj: &mut Value) {}

    /// Resets what a create may not set (PrepareForCreate). The caller has already replaced the
    /// server-owned metadata (uid, creationTimestamp, ...). Default: generation 1 for kinds that count
    /// generations, and an empty status for kinds with a status subresource.
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        if def.status {
            set_status(obj, json!({}));
        }
    }

    /// The kind's checks of a new object (Validate); the caller checks metadata first.
    fn validate(&self, _def: &ResourceDef, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Warnings about a valid new object, returned as `Warning` headers (WarningsOnCreate).
    fn warnings_on_create(&self, _def: &ResourceDef, _obj: &Value) -> Vec<String> {
        Vec::new()
    }

    /// Normalises a validated object before it is stored (Canonicalize).
    fn canonicalize(&self, _obj: &mut Value) {}

    /// Allocates what a new object needs from shared ranges (a Service's ClusterIP and node ports) and
    /// returns the claim keys to write in the same Txn, so two members cannot hand out the same value.
    fn allocate<'a>(
        &'a self,
        _storage: &'a Storage,
        _def: &'a ResourceDef,
        _obj: &'a mut Value,
    ) -> Allocation<'a> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Allocates and releases what an update of the object itself changes (a Service changing type,
    /// ports or traffic policy), fills in and clears the fields that go with it, and returns the claim
    /// keys to take and to release in the Txn that writes it. Runs before the update is validated, as
    /// upstream's BeginUpdate does, so a failed validation or a lost write changes no claim.
    fn allocate_update<'a>(
        &'a self,
        _storage: &'a Storage,
        _def: &'a ResourceDef,
        _old: &'a Value,
        _new: &'a mut Value,
    ) -> UpdateAllocation<'a> {
        Box::pin(std::future::ready(Ok(Reallocation::default())))
    }

    /// The claim keys a stored object holds (released in the Txn that deletes it).
    fn claims(&self, _obj: &Value) -> Vec<String> {
        Vec::new()
    }

    /// Builds the stored form of an update of the object itself (PrepareForUpdate). `new` already carries
    /// the stored server-owned metadata. Default: the status subresource's status is kept, and the
    /// generation is bumped when [`Strategy::generation_changes`].
    fn prepare_for_update(&self, def: &ResourceDef, old: &Value, new: &mut Value) {
        if def.status {
            keep_status(old, new);
        }
        if def.tracks_generation && self.generation_changes(def, old, new) {
            bump_generation(old, new);
        }
    }

    /// Whether an update changes what `metadata.generation` counts. Default: the spec.
    fn generation_changes(&self, _def: &ResourceDef, old: &Value, new: &Value) -> bool {
        old.get("spec") != new.get("spec")
    }

    /// The kind's checks of an update against the stored object (ValidateUpdate: immutable fields), on
    /// top of [`Strategy::validate`] of the new object.
    fn validate_update(&self, _def: &ResourceDef, _old: &Value, _new: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Whether an update is also checked with [`Strategy::validate`]: upstream's ValidateUpdate calls the
    /// create checks for most kinds, not for PriorityClasses. Metadata is checked either way.
    fn revalidates_on_update(&self) -> bool {
        true
    }

    /// The rules of a subresource written with PUT or PATCH; a subresource without rules here is not
    /// served (except `scale`, which has its own handler). Default: `status`.
    fn subresource(&self, name: &str) -> Option<&'static dyn Subresource> {
        status_only(name)
    }

    /// The grace period a delete waits before the object goes (CheckGracefulDelete); 0 deletes at once.
    fn graceful_delete(&self, _obj: &Value, _requested: Option<i64>) -> i64 {
        0
    }

    /// Why a DELETE of the object named `name` alone is refused (a 403 with this reason), if it is: the
    /// built-in PriorityClasses. As upstream's registry, a collection delete does not ask.
    fn delete_forbidden(&self, _name: &str) -> Option<&'static str> {
        None
    }

    /// Whether a delete only marks the object, beyond `metadata.finalizers` and a grace period.
    fn deletion_held(&self, _obj: &Value) -> bool {
        false
    }

    /// Whether a deleting object with no `metadata.finalizers` left still stays (a namespace until its
    /// `spec.finalizers` are empty too).
    fn kept_after_finalizers(&self, _obj: &Value) -> bool {
        false
    }

    /// Changes an object whose deletion is held, before it is marked (the CRD's cleanup finalizer).
    fn prepare_for_delete(&self, _obj: &mut Value) {}

    /// Changes an object as its `deletionTimestamp` is set (a namespace's `Terminating` phase).
    fn mark_deleting(&self, _obj: &mut Value) {}

    /// Whether a delete that removes the object answers with the object rather than a Status.
    fn returns_deleted_object(&self) -> bool {
        false
    }

    /// Where `/scale` reads and writes replicas and the selector.
    fn scale_paths(&self, _def: &ResourceDef) -> ScalePaths {
        ScalePaths {
            spec: "spec.replicas".into(),
            status: "status.replicas".into(),
            selector: Some("spec.selector".into()),
            selector_form: SelectorForm::Object,
        }
    }
}

/// Checks an object before it is created (or replaced): every problem as a cause. Metadata is checked
/// here, the rest by the kind's strategy ([`Strategy::validate`]).
pub fn validate_object(def: &ResourceDef, obj: &Value) -> Vec<Cause> {
    let strategy = of(def);
    let mut causes = Vec::new();
    validate::check_meta(strategy.name_rule(), obj, &mut causes);
    causes.extend(strategy.validate(def, obj));
    causes
}

/// Checks an update against the stored object: the new object as [`validate_object`] does (only its metadata when
/// the kind's [`Strategy::revalidates_on_update`] says so), then the kind's update rules
/// ([`Strategy::validate_update`]: immutable fields).
pub fn validate_update(def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
    let strategy = of(def);
    let mut causes = if strategy.revalidates_on_update() {
        validate_object(def, new)
    } else {
        let mut meta = Vec::new();
        validate::check_meta(strategy.name_rule(), new, &mut meta);
        meta
    };
    causes.extend(strategy.validate_update(def, old, new));
    causes
}

/// The rules of one subresource (upstream's `<kind>StatusStrategy` and friends).
pub trait Subresource: Sync {
    /// The object to store, from the stored one and the client's (PrepareForUpdate): only what the
    /// subresource owns is taken from `new`.
    fn prepare_for_update(&self, def: &ResourceDef, old: &Value, new: Value) -> Value;

    /// Checks the result (ValidateUpdate). Default: the kind's update validation.
    fn validate_update(&self, def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        validate_update(def, old, new)
    }
}

/// `/status`: the stored object with the client's status; spec and metadata stay as stored.
pub struct Status;

impl Subresource for Status {
    fn prepare_for_update(&self, _def: &ResourceDef, old: &Value, new: Value) -> Value {
        let mut out = old.clone();
        set_status(&mut out, new.get("status").cloned().unwrap_or(json!({})));
        out
    }
}

/// The subresources of a kind whose only one is `status` ([`Strategy::subresource`]'s default).
pub fn status_only(name: &str) -> Option<&'static dyn Subresource> {
    match name {
        "status" => Some(&Status),
        _ => None,
    }
}

/// A kind without rules of its own.
pub struct Plain;

impl Strategy for Plain {}

/// Built-in kinds with rules, by (group, kind).
static BUILTIN: &[((&str, &str), &dyn Strategy)] = &[
    (("", "Pod"), &pod::Pod),
    (("", "Namespace"), &namespace::Namespace),
    (("", "Node"), &node::Node),
    (("", "Service"), &service::Service),
    (("", "ConfigMap"), &configmap::ConfigMap),
    (("", "Secret"), &secret::Secret),
    (("", "Endpoints"), &endpoints::Endpoints),
    (
        ("", "ReplicationController"),
        &replicationcontroller::ReplicationController,
    ),
    (("", "ResourceQuota"), &resourcequota::ResourceQuota),
    (("", "LimitRange"), &limitrange::LimitRange),
    (
        ("", "PersistentVolume"),
        &persistentvolume::PersistentVolume,
    ),
    (
        ("", "PersistentVolumeClaim"),
        &persistentvolume::PersistentVolumeClaim,
    ),
    (("storage.k8s.io", "StorageClass"), &storage::StorageClass),
    (
        ("storage.k8s.io", "VolumeAttachment"),
        &storage::VolumeAttachment,
    ),
    (("storage.k8s.io", "CSIDriver"), &storage::CsiDriver),
    (("storage.k8s.io", "CSINode"), &storage::CsiNode),
    (
        ("storage.k8s.io", "CSIStorageCapacity"),
        &storage::CsiStorageCapacity,
    ),
    (
        ("certificates.k8s.io", "CertificateSigningRequest"),
        &csr::CertificateSigningRequest,
    ),
    (("apps", "Deployment"), &deployment::Deployment),
    (("apps", "ReplicaSet"), &replicaset::ReplicaSet),
    (("apps", "StatefulSet"), &statefulset::StatefulSet),
    (("apps", "DaemonSet"), &daemonset::DaemonSet),
    (("batch", "Job"), &job::Job),
    (
        ("discovery.k8s.io", "EndpointSlice"),
        &endpointslice::EndpointSlice,
    ),
    (("batch", "CronJob"), &cronjob::CronJob),
    (
        ("networking.k8s.io", "NetworkPolicy"),
        &networkpolicy::NetworkPolicy,
    ),
    (("networking.k8s.io", "Ingress"), &ingress::Ingress),
    (
        ("networking.k8s.io", "IngressClass"),
        &ingress::IngressClass,
    ),
    (("rbac.authorization.k8s.io", "Role"), &rbac::Role),
    (("rbac.authorization.k8s.io", "ClusterRole"), &rbac::Role),
    (
        ("rbac.authorization.k8s.io", "RoleBinding"),
        &rbac::RoleBinding,
    ),
    (
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        &rbac::ClusterRoleBinding,
    ),
    (
        (crate::crd::GROUP, "CustomResourceDefinition"),
        &crd::CustomResourceDefinition,
    ),
    (
        ("apiregistration.k8s.io", "APIService"),
        &apiservice::ApiService,
    ),
    (
        ("scheduling.k8s.io", "PriorityClass"),
        &priorityclass::PriorityClass,
    ),
    (("", "PodTemplate"), &node_runtime::PodTemplate),
    (
        ("autoscaling", "HorizontalPodAutoscaler"),
        &autoscaling::HorizontalPodAutoscaler,
    ),
    (("node.k8s.io", "RuntimeClass"), &node_runtime::RuntimeClass),
    (
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
        ),
        &webhook::WebhookConfiguration,
    ),
    (
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
        ),
        &webhook::WebhookConfiguration,
    ),
    (
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        &admission_policy::ValidatingAdmissionPolicy,
    ),
    (
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
        ),
        &admission_policy::ValidatingAdmissionPolicyBinding,
    ),
];

/// The strategy of a served resource: its kind's, the custom resources' one, or [`Plain`].
pub fn of(def: &ResourceDef) -> &'static dyn Strategy {
    if def.custom.is_some() {
        return &custom::CustomResource;
    }
    BUILTIN
        .iter()
        .find(|(gk, _)| *gk == def.gk())
        .map_or(&Plain as &dyn Strategy, |(_, s)| *s)
}

/// The string at dotted path `p` of `v`, if it is one.
pub(super) fn str_at<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    object::path(v, p).and_then(Value::as_str)
}

/// The array at dotted path `p` of `v` (empty when absent or not an array).
pub(super) fn list_at<'a>(v: &'a Value, p: &str) -> &'a [Value] {
    object::path(v, p)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Generation 1 on create, for kinds that count generations.
pub fn start_generation(def: &ResourceDef, obj: &mut Value) {
    if def.tracks_generation {
        object::meta_mut(obj).insert("generation".into(), json!(1));
    }
}

/// Replaces the object's status.
pub fn set_status(obj: &mut Value, status: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert("status".into(), status);
    }
}

/// Keeps the stored status (an update of the object itself does not write it).
pub fn keep_status(old: &Value, new: &mut Value) {
    if let Some(m) = new.as_object_mut() {
        match old.get("status") {
            Some(s) => m.insert("status".into(), s.clone()),
            None => m.remove("status"),
        };
    }
}

/// The stored generation plus one.
pub fn bump_generation(old: &Value, new: &mut Value) {
    let g = object::path(old, "metadata.generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    object::meta_mut(new).insert("generation".into(), json!(g + 1));
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn deployment_selector_must_match() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let d = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let causes = validate_object(def, &d);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }

    #[test]
    fn pod_spec_is_mostly_immutable() {
        let def = &resource::find("", "v1", "pods").expect("pods");
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}]}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("b");
        assert!(validate_update(def, &old, &new).is_empty());
        new["spec"]["containers"][0]["name"] = json!("d");
        assert_eq!(validate_update(def, &old, &new).len(), 1);
    }
    use crate::resource;

    #[test]
    fn every_builtin_kind_in_the_table_is_served() {
        for ((group, kind), _) in BUILTIN {
            assert!(
                resource::by_kind(group, kind).is_some(),
                "{group}/{kind} has a strategy but is not served"
            );
        }
    }

    #[test]
    fn kinds_without_rules_get_the_plain_strategy() {
        let cm = resource::find("", "v1", "endpoints").expect("endpoints");
        assert_eq!(of(&cm).name_rule(), NameRule::Subdomain);
        assert!(of(&cm).subresource("finalize").is_none());
        let ns = resource::find("", "v1", "namespaces").expect("namespaces");
        assert_eq!(of(&ns).name_rule(), NameRule::Label);
        assert!(of(&ns).subresource("finalize").is_some());
    }
}
