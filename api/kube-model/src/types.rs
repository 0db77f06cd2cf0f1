//! The `k8s-openapi` type of each built-in kind, for code that needs the Rust type (shape checks, schemas).

/// Evaluates `$body` with `$T` naming the `k8s-openapi` type of the built-in `($group, $kind)` (in
/// `$version` when given, else the stored version), or `$default` for kinds without one. The caller depends on `k8s-openapi` (the expansion names its types).
#[macro_export]
macro_rules! with_builtin_type {
    ($group:expr, $kind:expr, $T:ident => $body:expr, _ => $default:expr) => {
        $crate::with_builtin_type!($group, "", $kind, $T => $body, _ => $default)
    };
    ($group:expr, $version:expr, $kind:expr, $T:ident => $body:expr, _ => $default:expr) => {{
        let version: &str = &*$version;
        #[allow(unused_imports)]
        use k8s_openapi::api::{
            admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v1 as autoscaling_v1, autoscaling::v2 as autoscaling, batch::v1 as batch, certificates::v1 as certs, coordination::v1 as coord, core::v1 as core, node::v1 as node,
            discovery::v1 as disc, events::v1 as events, networking::v1 as net, policy::v1 as policy,
            rbac::v1 as rbac, scheduling::v1 as scheduling, storage::v1 as storage,
        };
        macro_rules! arm {
            ($ty:ty) => {{
                type $T = $ty;
                $body
            }};
        }
        match (&*$group, &*$kind) {
            ("", "Namespace") => arm!(core::Namespace),
            ("", "Pod") => arm!(core::Pod),
            ("", "Node") => arm!(core::Node),
            ("", "Service") => arm!(core::Service),
            ("", "Endpoints") => arm!(core::Endpoints),
            ("", "ConfigMap") => arm!(core::ConfigMap),
            ("", "Secret") => arm!(core::Secret),
            ("", "ServiceAccount") => arm!(core::ServiceAccount),
            ("", "Event") => arm!(core::Event),
            ("", "PersistentVolume") => arm!(core::PersistentVolume),
            ("", "PersistentVolumeClaim") => arm!(core::PersistentVolumeClaim),
            ("", "ReplicationController") => arm!(core::ReplicationController),
            ("", "ResourceQuota") => arm!(core::ResourceQuota),
            ("", "LimitRange") => arm!(core::LimitRange),
            ("", "PodTemplate") => arm!(core::PodTemplate),
            ("autoscaling", "HorizontalPodAutoscaler") if version == "v1" => {
                arm!(autoscaling_v1::HorizontalPodAutoscaler)
            }
            ("autoscaling", "HorizontalPodAutoscaler") => arm!(autoscaling::HorizontalPodAutoscaler),
            ("apps", "Deployment") => arm!(apps::Deployment),
            ("apps", "ReplicaSet") => arm!(apps::ReplicaSet),
            ("apps", "StatefulSet") => arm!(apps::StatefulSet),
            ("apps", "DaemonSet") => arm!(apps::DaemonSet),
            ("apps", "ControllerRevision") => arm!(apps::ControllerRevision),
            ("policy", "PodDisruptionBudget") => arm!(policy::PodDisruptionBudget),
            ("events.k8s.io", "Event") => arm!(events::Event),
            ("batch", "Job") => arm!(batch::Job),
            ("batch", "CronJob") => arm!(batch::CronJob),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding") => arm!(rbac::ClusterRoleBinding),
            ("rbac.authorization.k8s.io", "ClusterRole") => arm!(rbac::ClusterRole),
            ("rbac.authorization.k8s.io", "RoleBinding") => arm!(rbac::RoleBinding),
            ("rbac.authorization.k8s.io", "Role") => arm!(rbac::Role),
            ("scheduling.k8s.io", "PriorityClass") => arm!(scheduling::PriorityClass),
            ("coordination.k8s.io", "Lease") => arm!(coord::Lease),
            ("certificates.k8s.io", "CertificateSigningRequest") => {
                arm!(certs::CertificateSigningRequest)
            }
            ("discovery.k8s.io", "EndpointSlice") => arm!(disc::EndpointSlice),
            ("networking.k8s.io", "NetworkPolicy") => arm!(net::NetworkPolicy),
            ("networking.k8s.io", "Ingress") => arm!(net::Ingress),
            ("networking.k8s.io", "IngressClass") => arm!(net::IngressClass),
            ("storage.k8s.io", "StorageClass") => arm!(storage::StorageClass),
            ("storage.k8s.io", "VolumeAttachment") => arm!(storage::VolumeAttachment),
            ("storage.k8s.io", "CSIDriver") => arm!(storage::CSIDriver),
            ("storage.k8s.io", "CSINode") => arm!(storage::CSINode),
            ("storage.k8s.io", "CSIStorageCapacity") => arm!(storage::CSIStorageCapacity),
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
                arm!(admission::MutatingWebhookConfiguration)
            }
            ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
                arm!(admission::ValidatingWebhookConfiguration)
            }
            ("node.k8s.io", "RuntimeClass") => arm!(node::RuntimeClass),
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
                arm!(admission::ValidatingAdmissionPolicy)
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
                arm!(admission::ValidatingAdmissionPolicyBinding)
            }
            ("apiextensions.k8s.io", "CustomResourceDefinition") => arm!(
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition
            ),
            ("apiregistration.k8s.io", "APIService") => arm!(
                k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService
            ),
            _ => $default,
        }
    }};
}

pub use crate::with_builtin_type;
