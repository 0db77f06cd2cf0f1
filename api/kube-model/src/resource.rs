//! What the Kubernetes API serves: one [`ResourceDef`] per resource, looked up by URL segments.
//!
//! Discovery, storage keys, Table printers, field selectors and defaulting all read this one table, so a
//! resource is added in one place. Custom resources (CRDs) get definitions of the same type at run time
//! from the CRD registry (`crd::registry::Registry`), so definitions are shared as `Arc<ResourceDef>` and their names
//! are `Cow`s: borrowed for built-ins, owned for custom resources (freed when the CRD goes away).

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

/// A name in a definition: static for built-ins, owned for custom resources.
pub type Str = Cow<'static, str>;
/// A list of names (short names, categories).
pub type Names = Vec<Str>;

/// Which `kubectl get` columns a resource prints (see `table/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    Pod,
    Node,
    Namespace,
    Service,
    Endpoints,
    ConfigMap,
    Secret,
    ServiceAccount,
    Event,
    EventsV1,
    Deployment,
    ReplicaSet,
    ReplicationController,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    Lease,
    EndpointSlice,
    NetworkPolicy,
    /// `networking.k8s.io` Ingresses: Class, Hosts, Address, Ports, Age.
    Ingress,
    /// `networking.k8s.io` IngressClasses: Controller, Parameters, Age.
    IngressClass,
    /// PersistentVolumes: Capacity, Access Modes, Reclaim Policy, Status, Claim, StorageClass, ...
    PersistentVolume,
    /// PersistentVolumeClaims: Status, Volume, Capacity, Access Modes, StorageClass, ...
    PersistentVolumeClaim,
    /// `storage.k8s.io` StorageClasses: Provisioner, ReclaimPolicy, VolumeBindingMode, ...
    StorageClass,
    /// `storage.k8s.io` VolumeAttachments: Attacher, PV, Node, Attached, Age.
    VolumeAttachment,
    /// `storage.k8s.io` CSIDrivers: AttachRequired, PodInfoOnMount, ..., Modes, Age.
    CSIDriver,
    /// `storage.k8s.io` CSINodes: Drivers, Age.
    CSINode,
    /// `storage.k8s.io` CSIStorageCapacities: StorageClassName, Age.
    CSIStorageCapacity,
    RoleBinding,
    PodDisruptionBudget,
    ControllerRevision,
    /// `apiregistration.k8s.io` APIServices: Service (or `Local`), Available.
    APIService,
    /// `scheduling.k8s.io` PriorityClasses: Value, Global-Default, Age, PreemptionPolicy.
    PriorityClass,
    /// ResourceQuotas: Age, then `Request` and `Limit` as `used/hard` per resource.
    ResourceQuota,
    /// PodTemplates: Containers, Images, Pod Labels.
    PodTemplate,
    /// `admissionregistration.k8s.io` webhook configurations: Webhooks, Age.
    WebhookConfiguration,
    /// `node.k8s.io` RuntimeClasses: Handler, Age.
    RuntimeClass,
    /// ValidatingAdmissionPolicies: Validations, ParamKind, Age.
    ValidatingAdmissionPolicy,
    /// ValidatingAdmissionPolicyBindings: PolicyName, ParamRef, Age.
    ValidatingAdmissionPolicyBinding,
    /// `autoscaling` HorizontalPodAutoscalers: Reference, Targets, MinPods, MaxPods, Replicas, Age.
    HorizontalPodAutoscaler,
    /// Upstream's fallback: Name and Created At.
    Default,
    /// A custom resource: Name, then its CRD's additionalPrinterColumns (Age when it declares none).
    Custom,
}

/// One served resource of one group-version.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    /// API group, "" for core.
    pub group: Str,
    /// Version, e.g. `v1`.
    pub version: Str,
    /// Kind of a single object.
    pub kind: Str,
    /// URL segment (plural, lowercase).
    pub plural: Str,
    /// Singular name (`kubectl get deployment`).
    pub singular: Str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `kubectl get po` style aliases.
    pub short_names: Names,
    /// `all` etc.
    pub categories: Names,
    /// Served `/status`.
    pub status: bool,
    /// Served `/scale` (autoscaling/v1 Scale).
    pub scale: bool,
    /// Key segment under `/registry/` (upstream's layout: `minions`, `services/specs`, ...).
    pub storage: Str,
    /// Table columns.
    pub printer: Printer,
    /// Field selectors beyond `metadata.name` / `metadata.namespace`.
    pub fields: &'static [&'static str],
    /// PUT of a missing object creates it (upstream's AllowCreateOnUpdate).
    pub create_on_update: bool,
    /// Spec changes bump `metadata.generation` (kinds with a spec/status split).
    pub tracks_generation: bool,
    /// What a custom resource adds (schema, printer columns, scale paths); None for built-ins.
    pub custom: Option<Arc<Custom>>,
}

impl ResourceDef {
    /// `(group, kind)`, for matching on kinds.
    pub fn gk(&self) -> (&str, &str) {
        (&self.group, &self.kind)
    }

    /// `apps/v1`, or `v1` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, or `pods` for core.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The Kind of this resource's list (a CRD's `spec.names.listKind`, else `<Kind>List`).
    pub fn list_kind(&self) -> String {
        match &self.custom {
            Some(c) if !c.list_kind.is_empty() => c.list_kind.clone(),
            _ => format!("{}List", self.kind),
        }
    }

    /// Key prefix of every object of this resource (ends with `/`).
    pub fn prefix(&self) -> String {
        format!("/registry/{}/", self.storage)
    }

    /// Key prefix of one namespace's objects (ends with `/`).
    pub fn ns_prefix(&self, ns: &str) -> String {
        format!("/registry/{}/{ns}/", self.storage)
    }

    /// The key of one object.
    pub fn key(&self, ns: Option<&str>, name: &str) -> String {
        match ns {
            Some(ns) if self.namespaced => format!("/registry/{}/{ns}/{name}", self.storage),
            _ => format!("/registry/{}/{name}", self.storage),
        }
    }
}

const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

/// Field selectors of pods (upstream's `PodToSelectableFields`).
const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
/// Field selectors of core events.
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

macro_rules! res {
    ($group:expr, $kind:expr, $plural:expr, $singular:expr, ns=$ns:expr, short=$short:expr, cat=$cat:expr,
     status=$status:expr, scale=$scale:expr, storage=$storage:expr, printer=$printer:ident, fields=$fields:expr,
     cou=$cou:expr, gen=$gen:expr) => {
        Arc::new(ResourceDef {
            group: Cow::Borrowed($group),
            version: Cow::Borrowed("v1"),
            kind: Cow::Borrowed($kind),
            plural: Cow::Borrowed($plural),
            singular: Cow::Borrowed($singular),
            namespaced: $ns,
            short_names: names($short),
            categories: names($cat),
            status: $status,
            scale: $scale,
            storage: Cow::Borrowed($storage),
            printer: Printer::$printer,
            fields: $fields,
            create_on_update: $cou,
            tracks_generation: $gen,
            custom: None,
        })
    };
}

/// HorizontalPodAutoscalers, served in `autoscaling/v2` and `v1`.
fn horizontal_pod_autoscalers() -> Arc<ResourceDef> {
    res!(
        "autoscaling",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        ns = true,
        short = &["hpa"],
        cat = ALL,
        status = true,
        scale = false,
        storage = "horizontalpodautoscalers",
        printer = HorizontalPodAutoscaler,
        fields = NONE,
        cou = false,
        gen = false
    )
}

/// `def` served in another version than the macro's `v1`.
fn in_version(def: Arc<ResourceDef>, version: &'static str) -> Arc<ResourceDef> {
    let mut d = Arc::unwrap_or_clone(def);
    d.version = Cow::Borrowed(version);
    Arc::new(d)
}

fn names(list: &'static [&'static str]) -> Names {
    list.iter().map(|n| Cow::Borrowed(*n)).collect()
}

/// Every built-in resource keel serves, in discovery order.
pub static BUILTIN: LazyLock<Vec<Arc<ResourceDef>>> = LazyLock::new(|| {
    vec![
        res!(
            "",
            "Namespace",
            "namespaces",
            "namespace",
            ns = false,
            short = &["ns"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "namespaces",
            printer = Namespace,
            fields = &["status.phase"],
            cou = false,
            gen = false
        ),
        res!(
            "",
            "Pod",
            "pods",
            "pod",
            ns = true,
            short = &["po"],
            cat = ALL,
            status = true,
            scale = false,
            storage = "pods",
            printer = Pod,
            fields = POD_FIELDS,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "Node",
            "nodes",
            "node",
            ns = false,
            short = &["no"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "minions",
            printer = Node,
            fields = &["spec.unschedulable"],
            cou = false,
            gen = false
        ),
        res!(
            "",
            "Service",
            "services",
            "service",
            ns = true,
            short = &["svc"],
            cat = ALL,
            status = true,
            scale = false,
            storage = "services/specs",
            printer = Service,
            fields = &["spec.clusterIP", "spec.type"],
            cou = false,
            gen = false
        ),
        res!(
            "",
            "Endpoints",
            "endpoints",
            "endpoints",
            ns = true,
            short = &["ep"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "services/endpoints",
            printer = Endpoints,
            fields = NONE,
            cou = true,
            gen = false
        ),
        res!(
            "",
            "ConfigMap",
            "configmaps",
            "configmap",
            ns = true,
            short = &["cm"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "configmaps",
            printer = ConfigMap,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "Secret",
            "secrets",
            "secret",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "secrets",
            printer = Secret,
            fields = &["type"],
            cou = false,
            gen = false
        ),
        res!(
            "",
            "ServiceAccount",
            "serviceaccounts",
            "serviceaccount",
            ns = true,
            short = &["sa"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "serviceaccounts",
            printer = ServiceAccount,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "ResourceQuota",
            "resourcequotas",
            "resourcequota",
            ns = true,
            short = &["quota"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "resourcequotas",
            printer = ResourceQuota,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "LimitRange",
            "limitranges",
            "limitrange",
            ns = true,
            short = &["limits"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "limitranges",
            printer = Default,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "PodTemplate",
            "podtemplates",
            "podtemplate",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "podtemplates",
            printer = PodTemplate,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "PersistentVolume",
            "persistentvolumes",
            "persistentvolume",
            ns = false,
            short = &["pv"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "persistentvolumes",
            printer = PersistentVolume,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            ns = true,
            short = &["pvc"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "persistentvolumeclaims",
            printer = PersistentVolumeClaim,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "",
            "ReplicationController",
            "replicationcontrollers",
            "replicationcontroller",
            ns = true,
            short = &["rc"],
            cat = ALL,
            status = true,
            scale = true,
            storage = "controllers",
            printer = ReplicationController,
            fields = &["status.replicas"],
            cou = false,
            gen = true
        ),
        res!(
            "",
            "Event",
            "events",
            "event",
            ns = true,
            short = &["ev"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "events",
            printer = Event,
            fields = EVENT_FIELDS,
            cou = true,
            gen = false
        ),
        res!(
            "apps",
            "Deployment",
            "deployments",
            "deployment",
            ns = true,
            short = &["deploy"],
            cat = ALL,
            status = true,
            scale = true,
            storage = "deployments",
            printer = Deployment,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "apps",
            "ReplicaSet",
            "replicasets",
            "replicaset",
            ns = true,
            short = &["rs"],
            cat = ALL,
            status = true,
            scale = true,
            storage = "replicasets",
            printer = ReplicaSet,
            fields = &["status.replicas"],
            cou = false,
            gen = true
        ),
        res!(
            "apps",
            "StatefulSet",
            "statefulsets",
            "statefulset",
            ns = true,
            short = &["sts"],
            cat = ALL,
            status = true,
            scale = true,
            storage = "statefulsets",
            printer = StatefulSet,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "apps",
            "DaemonSet",
            "daemonsets",
            "daemonset",
            ns = true,
            short = &["ds"],
            cat = ALL,
            status = true,
            scale = false,
            storage = "daemonsets",
            printer = DaemonSet,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "apps",
            "ControllerRevision",
            "controllerrevisions",
            "controllerrevision",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "controllerrevisions",
            printer = ControllerRevision,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "events.k8s.io",
            "Event",
            "events",
            "event",
            ns = true,
            short = &["ev"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "events",
            printer = EventsV1,
            fields = EVENT_FIELDS,
            cou = true,
            gen = false
        ),
        // autoscaling/v2 is stored and preferred; v1 is the same objects seen through upstream's conversion.
        in_version(horizontal_pod_autoscalers(), "v2"),
        horizontal_pod_autoscalers(),
        res!(
            "batch",
            "Job",
            "jobs",
            "job",
            ns = true,
            short = NONE,
            cat = ALL,
            status = true,
            scale = false,
            storage = "jobs",
            printer = Job,
            fields = &["status.successful"],
            cou = false,
            gen = true
        ),
        res!(
            "batch",
            "CronJob",
            "cronjobs",
            "cronjob",
            ns = true,
            short = &["cj"],
            cat = ALL,
            status = true,
            scale = false,
            storage = "cronjobs",
            printer = CronJob,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "policy",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            ns = true,
            short = &["pdb"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "poddisruptionbudgets",
            printer = PodDisruptionBudget,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            ns = false,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "clusterrolebindings",
            printer = RoleBinding,
            fields = NONE,
            cou = true,
            gen = false
        ),
        res!(
            "rbac.authorization.k8s.io",
            "ClusterRole",
            "clusterroles",
            "clusterrole",
            ns = false,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "clusterroles",
            printer = Default,
            fields = NONE,
            cou = true,
            gen = false
        ),
        res!(
            "rbac.authorization.k8s.io",
            "RoleBinding",
            "rolebindings",
            "rolebinding",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "rolebindings",
            printer = RoleBinding,
            fields = NONE,
            cou = true,
            gen = false
        ),
        res!(
            "rbac.authorization.k8s.io",
            "Role",
            "roles",
            "role",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "roles",
            printer = Default,
            fields = NONE,
            cou = true,
            gen = false
        ),
        res!(
            "scheduling.k8s.io",
            "PriorityClass",
            "priorityclasses",
            "priorityclass",
            ns = false,
            short = &["pc"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "priorityclasses",
            printer = PriorityClass,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "certificates.k8s.io",
            "CertificateSigningRequest",
            "certificatesigningrequests",
            "certificatesigningrequest",
            ns = false,
            short = &["csr"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "certificatesigningrequests",
            printer = Default,
            fields = &["spec.signerName"],
            cou = false,
            gen = false
        ),
        res!(
            "coordination.k8s.io",
            "Lease",
            "leases",
            "lease",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "leases",
            printer = Lease,
            fields = NONE,
            cou = true,
            gen = false
        ),
        res!(
            "discovery.k8s.io",
            "EndpointSlice",
            "endpointslices",
            "endpointslice",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "endpointslices",
            printer = EndpointSlice,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "networking.k8s.io",
            "NetworkPolicy",
            "networkpolicies",
            "networkpolicy",
            ns = true,
            short = &["netpol"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "networkpolicies",
            printer = NetworkPolicy,
            fields = NONE,
            cou = false,
            gen = true
        ),
        // Stored under upstream's keys: `/registry/ingress/<ns>/<name>` (singular, as kube-apiserver).
        res!(
            "networking.k8s.io",
            "Ingress",
            "ingresses",
            "ingress",
            ns = true,
            short = &["ing"],
            cat = NONE,
            status = true,
            scale = false,
            storage = "ingress",
            printer = Ingress,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "networking.k8s.io",
            "IngressClass",
            "ingressclasses",
            "ingressclass",
            ns = false,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "ingressclasses",
            printer = IngressClass,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "storage.k8s.io",
            "StorageClass",
            "storageclasses",
            "storageclass",
            ns = false,
            short = &["sc"],
            cat = NONE,
            status = false,
            scale = false,
            storage = "storageclasses",
            printer = StorageClass,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "storage.k8s.io",
            "VolumeAttachment",
            "volumeattachments",
            "volumeattachment",
            ns = false,
            short = NONE,
            cat = NONE,
            status = true,
            scale = false,
            storage = "volumeattachments",
            printer = VolumeAttachment,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "storage.k8s.io",
            "CSIDriver",
            "csidrivers",
            "csidriver",
            ns = false,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "csidrivers",
            printer = CSIDriver,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "storage.k8s.io",
            "CSINode",
            "csinodes",
            "csinode",
            ns = false,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "csinodes",
            printer = CSINode,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "storage.k8s.io",
            "CSIStorageCapacity",
            "csistoragecapacities",
            "csistoragecapacity",
            ns = true,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "csistoragecapacities",
            printer = CSIStorageCapacity,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            "mutatingwebhookconfiguration",
            ns = false,
            short = NONE,
            cat = &["api-extensions"],
            status = false,
            scale = false,
            storage = "mutatingwebhookconfigurations",
            printer = WebhookConfiguration,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            ns = false,
            short = NONE,
            cat = &["api-extensions"],
            status = true,
            scale = false,
            storage = "validatingadmissionpolicies",
            printer = ValidatingAdmissionPolicy,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            ns = false,
            short = NONE,
            cat = &["api-extensions"],
            status = false,
            scale = false,
            storage = "validatingadmissionpolicybindings",
            printer = ValidatingAdmissionPolicyBinding,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            "validatingwebhookconfiguration",
            ns = false,
            short = NONE,
            cat = &["api-extensions"],
            status = false,
            scale = false,
            storage = "validatingwebhookconfigurations",
            printer = WebhookConfiguration,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            "customresourcedefinition",
            ns = false,
            short = &["crd", "crds"],
            cat = &["api-extensions"],
            status = true,
            scale = false,
            storage = "apiextensions.k8s.io/customresourcedefinitions",
            printer = Default,
            fields = NONE,
            cou = false,
            gen = true
        ),
        res!(
            "apiregistration.k8s.io",
            "APIService",
            "apiservices",
            "apiservice",
            ns = false,
            short = NONE,
            cat = &["api-extensions"],
            status = true,
            scale = false,
            storage = "apiregistration.k8s.io/apiservices",
            printer = APIService,
            fields = NONE,
            cou = false,
            gen = false
        ),
        res!(
            "node.k8s.io",
            "RuntimeClass",
            "runtimeclasses",
            "runtimeclass",
            ns = false,
            short = NONE,
            cat = NONE,
            status = false,
            scale = false,
            storage = "runtimeclasses",
            printer = RuntimeClass,
            fields = NONE,
            cou = false,
            gen = false
        ),
    ]
});

/// The built-in groups in discovery order (core first, as `/apis` lists the rest).
pub fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in BUILTIN.iter() {
        if let Cow::Borrowed(g) = r.group {
            if !g.is_empty() && !out.contains(&g) {
                out.push(g);
            }
        }
    }
    out
}

/// The versions a built-in group serves, preferred first (the order of [`BUILTIN`]).
pub fn versions(group: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in BUILTIN.iter().filter(|r| r.group == group) {
        if let Cow::Borrowed(v) = r.version {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// The built-in resources of one group-version.
pub fn of_group_version(group: &str, version: &str) -> Vec<Arc<ResourceDef>> {
    BUILTIN
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .cloned()
        .collect()
}

/// The built-in resource served at `/<prefix>/<group>/<version>/<plural>`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
    BUILTIN
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
        .cloned()
}

/// The built-in resource of a Kind in a group (for owner references and events).
pub fn by_kind(group: &str, kind: &str) -> Option<Arc<ResourceDef>> {
    BUILTIN
        .iter()
        .find(|r| r.group == group && r.kind == kind)
        .cloned()
}

/// What one served version of a custom resource adds to its [`ResourceDef`] (kept here, below the
/// CRD machinery that builds it, so the resource table depends on nothing above it).
#[derive(Debug, Clone)]
pub struct Custom {
    /// The CRD's name (`<plural>.<group>`).
    pub crd_name: String,
    /// The CRD's uid and generation: a change of either is a new definition (watches of it end).
    pub crd_uid: String,
    /// See `crd_uid`.
    pub crd_generation: i64,
    /// The version objects are stored in (`apiVersion` of stored objects).
    pub storage_version: String,
    /// `openAPIV3Schema` of this version, if any.
    pub schema: Option<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps>,
    /// `additionalPrinterColumns` of this version.
    pub columns: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition>,
    /// The scale subresource's paths, if served.
    pub scale: Option<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceSubresourceScale>,
    /// `listKind`.
    pub list_kind: String,
    /// The CRD is being deleted: no new objects.
    pub terminating: bool,
    /// `selectableFields` as field-selector names (`spec.color`).
    pub selectable: Vec<String>,
    /// The conversion webhook, when the CRD's conversion strategy is `Webhook`.
    pub conversion_webhook:
        Option<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookConversion>,
}

impl Custom {
    /// Whether `other` was built from the same CRD spec (status changes do not count).
    pub fn same_definition(&self, other: &Custom) -> bool {
        self.crd_uid == other.crd_uid && self.crd_generation == other.crd_generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_upstream_layout() {
        let svc = find("", "v1", "services").expect("services");
        assert_eq!(
            svc.key(Some("default"), "kubernetes"),
            "/registry/services/specs/default/kubernetes"
        );
        let node = find("", "v1", "nodes").expect("nodes");
        assert_eq!(node.key(None, "n1"), "/registry/minions/n1");
        let d = find("apps", "v1", "deployments").expect("deployments");
        assert_eq!(d.qualified(), "deployments.apps");
        assert_eq!(d.api_version(), "apps/v1");
    }

    #[test]
    fn plurals_unique_per_group_version() {
        for (i, a) in BUILTIN.iter().enumerate() {
            for b in &BUILTIN[i + 1..] {
                assert!(
                    !(a.group == b.group && a.version == b.version && a.plural == b.plural),
                    "{}",
                    a.plural
                );
            }
        }
    }
}
