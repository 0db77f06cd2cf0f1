//! Making the node's resolver the cluster DNS Service: `kube-system/kube-dns` and this node's
//! EndpointSlice for it.
//!
//! Model: the Service is shared by every node and owned by nobody in particular, so it is only
//! created when absent, never changed (an operator's own `kube-dns` wins). It has no selector and
//! `internalTrafficPolicy: Local`; each node keeps one EndpointSlice,
//! `kube-system/kube-dns-<node>`, listing only its own resolver. netprog then sends a pod's DNS
//! packets for the Service IP to the resolver on the pod's own node. The slice is written with
//! server-side apply, so re-applying it is harmless and it comes back if someone deletes it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use crate::error::{Error, Result};

/// The DNS Service's namespace.
pub const NAMESPACE: &str = "kube-system";
/// The DNS Service's name, as kubeadm and CoreDNS manifests call it.
pub const SERVICE: &str = "kube-dns";
/// The field manager and `managed-by` value of what the agent writes.
pub const MANAGER: &str = "keel-agent";

/// How often a published slice is applied again (it may have been deleted).
const REASSERT: Duration = Duration::from_secs(60);
/// The longest wait between two failed attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The name of `node`'s EndpointSlice for the DNS Service.
pub fn slice_name(node: &str) -> String {
    format!("{SERVICE}-{node}")
}

/// The DNS Service: `clusterIP` = `ip`, ports 53 UDP and TCP, no selector, node-local traffic.
pub fn dns_service(ip: Ipv4Addr) -> Service {
    let port = |name: &str, protocol: &str| ServicePort {
        name: Some(name.to_string()),
        protocol: Some(protocol.to_string()),
        port: 53,
        target_port: Some(IntOrString::Int(53)),
        ..ServicePort::default()
    };
    Service {
        metadata: ObjectMeta {
            name: Some(SERVICE.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(BTreeMap::from([
                ("k8s-app".to_string(), "kube-dns".to_string()),
                (
                    "kubernetes.io/cluster-service".to_string(),
                    "true".to_string(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            cluster_ip: Some(ip.to_string()),
            cluster_ips: Some(vec![ip.to_string()]),
            internal_traffic_policy: Some("Local".to_string()),
            ports: Some(vec![port("dns", "UDP"), port("dns-tcp", "TCP")]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `node`'s EndpointSlice: one ready endpoint, the resolver at `addr`, on the node (and owned by
/// the Node when its `uid` is known, so deleting the Node removes it).
pub fn dns_slice(node: &str, addr: SocketAddr, node_uid: Option<&str>) -> EndpointSlice {
    let port = |name: &str, protocol: &str| EndpointPort {
        name: Some(name.to_string()),
        protocol: Some(protocol.to_string()),
        port: Some(i32::from(addr.port())),
        ..EndpointPort::default()
    };
    let address_type = match addr.ip() {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    };
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(node)),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(BTreeMap::from([
                (
                    "kubernetes.io/service-name".to_string(),
                    SERVICE.to_string(),
                ),
                (
                    "endpointslice.kubernetes.io/managed-by".to_string(),
                    MANAGER.to_string(),
                ),
            ])),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".to_string(),
                    kind: "Node".to_string(),
                    name: node.to_string(),
                    uid: uid.to_string(),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        address_type: address_type.to_string(),
        endpoints: vec![Endpoint {
            addresses: vec![addr.ip().to_string()],
            node_name: Some(node.to_string()),
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            ..Endpoint::default()
        }],
        ports: Some(vec![port("dns", "UDP"), port("dns-tcp", "TCP")]),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Creates `kube-system/kube-dns` with ClusterIP `ip` unless a Service of that name exists.
pub async fn ensure_service(client: &Client, ip: Ipv4Addr) -> Result<()> {
    let api: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let params = PostParams {
        field_manager: Some(MANAGER.to_string()),
        ..PostParams::default()
    };
    if exists(&api, ip).await {
        return Ok(());
    }
    match api.create(&params, &dns_service(ip)).await {
        Ok(_) => {
            info!(%ip, "created Service {NAMESPACE}/{SERVICE}");
            Ok(())
        }
        Err(e) if is_status(&e, 409) => Ok(()),
        // Another agent made it between our read and our create: asking for the same IP then
        // fails validation (422, "provided IP is already allocated") before the name clashes.
        Err(_) if exists(&api, ip).await => Ok(()),
        Err(e) => Err(Error::kube(
            format!("create Service {NAMESPACE}/{SERVICE}"),
            e,
        )),
    }
}

/// Whether `kube-dns` exists (noting when it has another ClusterIP than ours).
async fn exists(api: &Api<Service>, ip: Ipv4Addr) -> bool {
    match api.get_opt(SERVICE).await {
        Ok(Some(svc)) => {
            let have = svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
            if have != ip.to_string() {
                warn!(%have, want = %ip, "Service {NAMESPACE}/{SERVICE} has another ClusterIP than --cluster-dns");
            }
            true
        }
        _ => false,
    }
}

/// Creates or updates `node`'s EndpointSlice (server-side apply) listing the resolver at `addr`.
pub async fn apply_slice(client: &Client, node: &str, addr: SocketAddr) -> Result<()> {
    let uid = match Api::<Node>::all(client.clone()).get_opt(node).await {
        Ok(n) => n.and_then(|n| n.metadata.uid),
        Err(e) => {
            debug!(error = %e, "Node not read; the DNS slice gets no owner");
            None
        }
    };
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let name = slice_name(node);
    let slice = dns_slice(node, addr, uid.as_deref());
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&slice),
    )
    .await
    .map_err(|e| Error::kube(format!("apply EndpointSlice {NAMESPACE}/{name}"), e))?;
    Ok(())
}

/// Deletes `node`'s EndpointSlice (absent is fine): what the agent does when it leaves for good.
pub async fn delete_slice(client: &Client, node: &str) -> Result<()> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let name = slice_name(node);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(Error::kube(
            format!("delete EndpointSlice {NAMESPACE}/{name}"),
            e,
        )),
    }
}

/// Keeps the Service and this node's slice published, retrying with back-off; never returns.
pub(crate) async fn keep_published(client: Client, node: String, ip: Ipv4Addr, addr: SocketAddr) {
    // An unspecified address (0.0.0.0) is not somewhere pods can be sent.
    let publish_slice = !addr.ip().is_unspecified();
    if !publish_slice {
        warn!(%addr, "the DNS resolver listens on no particular address; its EndpointSlice is not published");
    }
    let mut backoff = Duration::from_secs(1);
    let mut published = false;
    loop {
        let mut result = ensure_service(&client, ip).await;
        if result.is_ok() && publish_slice {
            result = apply_slice(&client, &node, addr).await;
        }
        match result {
            Ok(()) => {
                if !published {
                    info!(%addr, %ip, "cluster DNS published as {NAMESPACE}/{SERVICE}");
                }
                published = true;
                backoff = Duration::from_secs(1);
                tokio::time::sleep(REASSERT).await;
            }
            Err(e) => {
                warn!(error = %e, "cluster DNS not published; retrying");
                published = false;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_is_what_clients_of_kube_dns_expect() {
        let v = serde_json::to_value(dns_service(Ipv4Addr::new(10, 96, 0, 10))).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Service");
        assert_eq!(v["metadata"]["namespace"], "kube-system");
        assert_eq!(v["metadata"]["name"], "kube-dns");
        assert_eq!(v["metadata"]["labels"]["k8s-app"], "kube-dns");
        assert_eq!(
            v["metadata"]["labels"]["kubernetes.io/cluster-service"],
            "true"
        );
        assert_eq!(v["spec"]["clusterIP"], "10.96.0.10");
        assert_eq!(v["spec"]["internalTrafficPolicy"], "Local");
        assert!(v["spec"].get("selector").is_none());
        assert_eq!(
            v["spec"]["ports"],
            json!([
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}
            ])
        );
    }

    #[test]
    fn slice_lists_this_nodes_resolver() {
        let addr: SocketAddr = "192.0.2.10:5353".parse().unwrap();
        let v = serde_json::to_value(dns_slice("node-a", addr, Some("u-1"))).unwrap();
        assert_eq!(v["apiVersion"], "discovery.k8s.io/v1");
        assert_eq!(v["kind"], "EndpointSlice");
        assert_eq!(v["metadata"]["name"], "kube-dns-node-a");
        assert_eq!(v["metadata"]["namespace"], "kube-system");
        assert_eq!(
            v["metadata"]["labels"]["kubernetes.io/service-name"],
            "kube-dns"
        );
        assert_eq!(
            v["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "keel-agent"
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(v["addressType"], "IPv4");
        assert_eq!(
            v["endpoints"],
            json!([{
                "addresses": ["192.0.2.10"],
                "nodeName": "node-a",
                "conditions": {"ready": true, "serving": true, "terminating": false}
            }])
        );
        assert_eq!(
            v["ports"],
            json!([
                {"name": "dns", "port": 5353, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 5353, "protocol": "TCP"}
            ])
        );
        let v = serde_json::to_value(dns_slice("node-a", addr, None)).unwrap();
        assert!(v["metadata"].get("ownerReferences").is_none());
    }
}
