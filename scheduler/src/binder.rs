//! DefaultBinder: POSTs a `v1` Binding to `pods/{name}/binding`, carrying the pod's uid as a
//! precondition, so a pod deleted and created again under the same name is not bound by mistake.

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::Client;

use crate::pod_info::PodInfo;

/// Binds `pod` to `node`.
pub async fn bind(client: &Client, pod: &PodInfo, node: &str) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.name().to_string()),
            namespace: Some(pod.namespace().to_string()),
            uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    Api::<Pod>::namespaced(client.clone(), pod.namespace())
        .create_subresource::<_, kube::core::Status>(
            "binding",
            pod.name(),
            &PostParams::default(),
            &binding,
        )
        .await
        .map(|_| ())
}

/// Why a binding cycle failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The API server refused the Binding.
    #[error("{}", error_text(.0))]
    Api(kube::Error),
    /// The pod's volumes could not be bound (PreBind).
    #[error("{0}")]
    Volumes(String),
}

/// The text of a failed request, as the API server worded it.
pub fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
