//! What the EndpointSlice and Endpoints controllers share: which pods a Service selects, which of them
//! count as endpoints, their readiness and their resolved ports.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

/// The Service's selector, when it has one the controllers act on (none or empty: the user's endpoints).
pub fn selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty())
}

/// Whether `labels` match every pair of `selector`.
pub fn matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The pods of `svc`'s namespace its selector matches.
pub fn selected(svc: &Service, pods: &Store<Pod>) -> Vec<Arc<Pod>> {
    let Some(sel) = selector(svc) else {
        return Vec::new();
    };
    let ns = svc.namespace().unwrap_or_default();
    let mut out: Vec<Arc<Pod>> = pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()) && matches(sel, p.labels()))
        .collect();
    out.sort_by_key(|p| p.name_any());
    out
}

/// The Services of `pod`'s namespace whose selector matches it.
pub fn services_of(pod: &Pod, services: &Store<Service>) -> Vec<ObjectRef<Service>> {
    let ns = pod.namespace().unwrap_or_default();
    services
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| selector(s).is_some_and(|sel| matches(sel, pod.labels())))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// Whether the pod finished (Succeeded or Failed): it serves nothing any more.
pub fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the pod is being deleted.
pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether the pod belongs among a Service's endpoints (upstream's ShouldPodBeInEndpoints): it has an IP,
/// has not finished, and is not being deleted unless `include_terminating`.
pub fn eligible(pod: &Pod, include_terminating: bool) -> bool {
    if terminal(pod) || (!include_terminating && terminating(pod)) {
        return false;
    }
    !ips(pod).is_empty()
}

/// The pod's IPs (`status.podIPs`, or the single `status.podIP`).
pub fn ips(pod: &Pod) -> Vec<String> {
    let Some(st) = pod.status.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<String> = st
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.clone())
        .filter(|ip| !ip.is_empty())
        .collect();
    if out.is_empty() {
        out.extend(st.pod_ip.clone().filter(|ip| !ip.is_empty()));
    }
    out
}

/// The address family of an IP, as EndpointSlices name it.
pub fn family(ip: &str) -> &'static str {
    if ip.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// The Service's address families (`spec.ipFamilies`, IPv4 when unset).
pub fn families(svc: &Service) -> Vec<&'static str> {
    let fams: Vec<&'static str> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.as_ref())
        .into_iter()
        .flatten()
        .map(|f| if f == "IPv6" { "IPv6" } else { "IPv4" })
        .collect();
    if fams.is_empty() {
        vec!["IPv4"]
    } else {
        fams
    }
}

/// The pod's IP of `family`, if it has one.
pub fn ip_of(pod: &Pod, fam: &str) -> Option<String> {
    ips(pod).into_iter().find(|ip| family(ip) == fam)
}

/// Whether the Service publishes pods that are not ready.
pub fn publish_not_ready(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// The container port a Service port's `targetPort` means for `pod` (a named port is looked up in the
/// pod's containers, matching the protocol); none when the pod lacks the name.
pub fn target_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) if *n == 0 => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| {
                p.name.as_deref() == Some(name.as_str())
                    && p.protocol.as_deref().unwrap_or("TCP") == protocol
            })
            .map(|p| p.container_port),
    }
}

/// The reference an endpoint keeps to its pod.
pub fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.namespace(),
        name: Some(pod.name_any()),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    }
}

/// The hostname a headless Service gives the pod (its `spec.hostname` when its `subdomain` is the Service).
pub fn hostname(pod: &Pod, svc: &Service) -> Option<String> {
    let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    let spec = pod.spec.as_ref()?;
    (headless && spec.subdomain.as_deref() == Some(svc.name_any().as_str()))
        .then(|| spec.hostname.clone())
        .flatten()
        .filter(|h| !h.is_empty())
}

/// The labels the controllers copy from the Service onto its Endpoints and slices.
pub fn copied_labels(svc: &Service) -> BTreeMap<String, String> {
    svc.labels()
        .iter()
        .filter(|(k, _)| {
            k.as_str() != crate::endpointslice::SERVICE_NAME_LABEL
                && k.as_str() != crate::endpointslice::MANAGED_BY_LABEL
                && k.as_str() != "service.kubernetes.io/headless"
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The ownerReference every slice carries to its Service.
pub fn owner(svc: &Service) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: svc.name_any(),
        uid: svc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    fn pod_with_port(name: &str, port: i32) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some(name.into()),
                        container_port: port,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn named_target_ports_resolve_per_pod() {
        let sp = ServicePort {
            port: 80,
            target_port: Some(IntOrString::String("http".into())),
            ..Default::default()
        };
        assert_eq!(target_port(&pod_with_port("http", 8080), &sp), Some(8080));
        assert_eq!(target_port(&pod_with_port("web", 8080), &sp), None);
        let udp = ServicePort {
            protocol: Some("UDP".into()),
            ..sp.clone()
        };
        assert_eq!(target_port(&pod_with_port("http", 8080), &udp), None);
        let plain = ServicePort {
            port: 80,
            ..Default::default()
        };
        assert_eq!(target_port(&pod_with_port("http", 8080), &plain), Some(80));
    }
}
