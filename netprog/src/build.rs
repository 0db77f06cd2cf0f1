//! Services and EndpointSlices turned into the [`model`](crate::model): which ports exist, which
//! endpoints back each, and the policies that pick among them. Objects that cannot be programmed
//! (ExternalName Services, IPv6 addresses, unknown protocols) are skipped, never an error: one odd
//! object must not stop the node's other Services.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{
    Endpoint, HostPort, NodeView, PortKey, Protocol, ProxyState, ServicePort, TrafficPolicy,
};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Upstream's default ClientIP affinity timeout (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

fn policy(p: Option<&str>) -> TrafficPolicy {
    match p {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    }
}

/// The node's view: its name, its IPv4 InternalIP and ExternalIP addresses, the cluster CIDR.
pub fn node_view(name: &str, node: Option<&Node>, cluster_cidr: Ipv4Net) -> NodeView {
    let mut addresses: Vec<Ipv4Addr> = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    addresses.sort();
    addresses.dedup();
    NodeView {
        name: name.to_string(),
        addresses,
        cluster_cidr,
    }
}

/// The endpoints `slices` list for the port named `port_name` with `protocol`.
fn endpoints_for(slices: &[&EndpointSlice], port_name: &str, protocol: Protocol) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let Some(port) = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port_name
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        }) else {
            continue;
        };
        let Some(number) = port
            .port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue;
        };
        for e in &slice.endpoints {
            let conditions = e.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            let serving = conditions.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            // An endpoint lists one address per family; the first is the one kube-proxy uses.
            let Some(ip) = e.addresses.first().and_then(|a| a.parse::<Ipv4Addr>().ok()) else {
                continue;
            };
            out.push(Endpoint {
                ip,
                port: number,
                ready,
                serving,
                terminating,
                node: e.node_name.clone(),
            });
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
    out
}

/// The ports of one Service, with their endpoints from `slices` (those labelled for it).
pub fn service_ports(svc: &Service, slices: &[&EndpointSlice]) -> Vec<ServicePort> {
    let (Some(namespace), Some(name), Some(spec)) = (
        svc.metadata.namespace.as_deref(),
        svc.metadata.name.as_deref(),
        svc.spec.as_ref(),
    ) else {
        return vec![];
    };
    let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
    if kind == "ExternalName" {
        return vec![];
    }
    let cluster_ip = spec
        .cluster_ip
        .as_deref()
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
    let external_ips: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
    });
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            continue;
        };
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let port_name = p.name.clone().unwrap_or_default();
        let node_port = p
            .node_port
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n != 0 && kind != "ClusterIP");
        let sp = ServicePort {
            endpoints: endpoints_for(slices, &port_name, protocol),
            key: PortKey {
                namespace: namespace.to_string(),
                service: name.to_string(),
                port_name,
                protocol,
            },
            cluster_ip,
            port,
            node_port,
            external_ips: external_ips.clone(),
            load_balancer: kind == "LoadBalancer",
            affinity_timeout,
            external_policy: policy(spec.external_traffic_policy.as_deref()),
            internal_policy: policy(spec.internal_traffic_policy.as_deref()),
        };
        if sp.cluster_ip.is_some() || sp.has_external() {
            out.push(sp);
        }
    }
    out
}

/// The whole state: every Service's ports, each with the slices labelled for its Service.
pub fn proxy_state<'a>(
    node: NodeView,
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> ProxyState {
    let mut by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        let (Some(ns), Some(svc)) = (
            s.metadata.namespace.as_deref(),
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL)),
        ) else {
            continue;
        };
        by_service
            .entry((ns.to_string(), svc.clone()))
            .or_default()
            .push(s);
    }
    let mut ports = BTreeMap::new();
    for svc in services {
        let key = (
            svc.metadata.namespace.clone().unwrap_or_default(),
            svc.metadata.name.clone().unwrap_or_default(),
        );
        let slices = by_service.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        for p in service_ports(svc, slices) {
            ports.insert(p.key.clone(), p);
        }
    }
    ProxyState {
        node,
        ports,
        host_ports: Vec::new(),
    }
}

/// The `hostPort`s of the running pods bound to `node` that have an address. Two pods asking for the
/// same port get it in creation order (the scheduler keeps them apart; a pod forced onto the node
/// does not take a port from one already holding it).
pub fn host_ports<'a>(node: &str, pods: impl IntoIterator<Item = &'a Pod>) -> Vec<HostPort> {
    let mut mine: Vec<&Pod> = pods
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            ) && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    mine.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    let mut taken = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for p in mine {
        let Some(pod_ip) = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        else {
            continue;
        };
        let spec = p.spec.as_ref();
        if spec.and_then(|s| s.host_network) == Some(true) {
            continue;
        }
        let key = format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default()
        );
        for c in spec.map(|s| s.containers.as_slice()).unwrap_or(&[]) {
            for cp in c.ports.iter().flatten() {
                let Some(host_port) = cp
                    .host_port
                    .and_then(|h| u16::try_from(h).ok())
                    .filter(|h| *h > 0)
                else {
                    continue;
                };
                let Ok(container_port) = u16::try_from(cp.container_port) else {
                    continue;
                };
                let Some(protocol) = Protocol::parse(cp.protocol.as_deref()) else {
                    continue;
                };
                let host_ip = cp
                    .host_ip
                    .as_deref()
                    .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
                    .filter(|ip| !ip.is_unspecified());
                if !taken.insert((protocol, host_port)) {
                    continue;
                }
                out.push(HostPort {
                    pod: key.clone(),
                    protocol,
                    host_ip,
                    host_port,
                    pod_ip,
                    container_port,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn services_meet_their_slices_by_label_and_port_name() {
        let s = svc(json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.20", "sessionAffinity": "ClientIP",
                     "externalTrafficPolicy": "Local",
                     "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                               {"name": "dns", "port": 53, "protocol": "UDP"}]}
        }));
        let sl = slice(json!({
            "metadata": {"namespace": "default", "name": "web-abc",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.42.0.2"], "conditions": {"ready": true}, "nodeName": "a"},
                {"addresses": ["10.42.1.2"], "conditions": {"ready": false, "serving": true, "terminating": true}}
            ]
        }));
        let other = slice(json!({
            "metadata": {"namespace": "default", "name": "x",
                         "labels": {"kubernetes.io/service-name": "other"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 9999, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.42.9.9"]}]
        }));
        let node = node_view("a", None, "10.42.0.0/16".parse().unwrap());
        let st = proxy_state(node, [&s], [&sl, &other]);
        assert_eq!(st.ports.len(), 2);
        let http = st
            .ports
            .values()
            .find(|p| p.key.port_name == "http")
            .unwrap();
        assert_eq!(http.node_port, Some(30080));
        assert_eq!(http.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
        assert_eq!(http.external_policy, TrafficPolicy::Local);
        assert_eq!(http.endpoints.len(), 2);
        assert_eq!(http.endpoints[0].port, 8080);
        assert!(http.endpoints[1].terminating && !http.endpoints[1].ready);
        let dns = st
            .ports
            .values()
            .find(|p| p.key.port_name == "dns")
            .unwrap();
        assert_eq!(dns.key.protocol, Protocol::Udp);
        assert!(dns.endpoints.is_empty(), "the slice has no dns port");
    }

    #[test]
    fn external_names_and_headless_services_get_no_rules() {
        let ext = svc(json!({"metadata": {"namespace": "d", "name": "e"},
            "spec": {"type": "ExternalName", "externalName": "example.org"}}));
        let headless = svc(json!({"metadata": {"namespace": "d", "name": "h"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}));
        assert!(service_ports(&ext, &[]).is_empty());
        assert!(service_ports(&headless, &[]).is_empty());
    }

    #[test]
    fn host_ports_of_this_nodes_live_pods_first_come_first_served() {
        let pod = |name: &str,
                   node: &str,
                   ip: Option<&str>,
                   phase: &str,
                   created: &str,
                   ports: serde_json::Value| {
            serde_json::from_value::<Pod>(json!({
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
                "spec": {"nodeName": node, "containers": [{"name": "c", "ports": ports}]},
                "status": {"phase": phase, "podIP": ip}
            }))
            .unwrap()
        };
        let web = json!([{"containerPort": 8080, "hostPort": 18080},
                         {"containerPort": 53, "hostPort": 1053, "protocol": "UDP", "hostIP": "192.0.2.7"},
                         {"containerPort": 9000}]);
        let pods = [
            pod(
                "second",
                "a",
                Some("10.42.0.6"),
                "Running",
                "2026-01-02T00:00:00Z",
                json!([{"containerPort": 80, "hostPort": 18080}]),
            ),
            pod(
                "web",
                "a",
                Some("10.42.0.5"),
                "Running",
                "2026-01-01T00:00:00Z",
                web,
            ),
            pod(
                "elsewhere",
                "b",
                Some("10.42.1.5"),
                "Running",
                "2026-01-01T00:00:00Z",
                json!([{"containerPort": 80, "hostPort": 80}]),
            ),
            pod(
                "done",
                "a",
                Some("10.42.0.7"),
                "Succeeded",
                "2026-01-01T00:00:00Z",
                json!([{"containerPort": 80, "hostPort": 81}]),
            ),
            pod(
                "no-ip",
                "a",
                None,
                "Pending",
                "2026-01-01T00:00:00Z",
                json!([{"containerPort": 80, "hostPort": 82}]),
            ),
        ];
        let hp = host_ports("a", pods.iter());
        assert_eq!(
            hp,
            [
                HostPort {
                    pod: "ns/web".into(),
                    protocol: Protocol::Tcp,
                    host_ip: None,
                    host_port: 18080,
                    pod_ip: "10.42.0.5".parse().unwrap(),
                    container_port: 8080,
                },
                HostPort {
                    pod: "ns/web".into(),
                    protocol: Protocol::Udp,
                    host_ip: Some("192.0.2.7".parse().unwrap()),
                    host_port: 1053,
                    pod_ip: "10.42.0.5".parse().unwrap(),
                    container_port: 53,
                },
            ]
        );
    }
}
