//! What the node's table is made of, free of API types: one [`ServicePort`] per (Service, port), each
//! with the endpoints its EndpointSlices list, and the [`NodeView`] of the node the rules are for.
//! Everything is kept in sorted collections so that the same state always renders the same text.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// A transport protocol a Service port may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// Parses a Service's `protocol` (absent means TCP, as the API defaults it).
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// nft's name for it (`tcp`, `udp`, `sctp`).
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nft())
    }
}

/// Identifies a Service port: namespace, Service name, port name and protocol.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortKey {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The port's name (`""` for a single unnamed port).
    pub port_name: String,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl fmt::Display for PortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.namespace, self.service, self.protocol, self.port_name
        )
    }
}

/// One backend of a Service port, as an EndpointSlice lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// The pod's address.
    pub ip: Ipv4Addr,
    /// The port on the pod.
    pub port: u16,
    /// `conditions.ready` (absent counts as ready).
    pub ready: bool,
    /// `conditions.serving` (absent: as ready).
    pub serving: bool,
    /// `conditions.terminating` (absent: false).
    pub terminating: bool,
    /// The node the endpoint runs on, when the slice says.
    pub node: Option<String>,
}

/// How traffic arriving at a node from outside (NodePort, LoadBalancer, external IPs) is spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficPolicy {
    /// To every endpoint in the cluster; the client's address is masqueraded.
    Cluster,
    /// Only to endpoints on this node; the client's address is kept.
    Local,
}

/// One port of one Service and what the rules for it need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Which port of which Service.
    pub key: PortKey,
    /// The Service's IPv4 ClusterIP (None for headless Services and IPv6-only ones).
    pub cluster_ip: Option<Ipv4Addr>,
    /// The Service port.
    pub port: u16,
    /// The NodePort (NodePort and LoadBalancer Services).
    pub node_port: Option<u16>,
    /// `spec.externalIPs` (IPv4 ones).
    pub external_ips: Vec<Ipv4Addr>,
    /// `type: LoadBalancer`: served on every node address at `port`, as k3s's ServiceLB does.
    pub load_balancer: bool,
    /// ClientIP session affinity's timeout in seconds (None: no affinity).
    pub affinity_timeout: Option<u32>,
    /// `externalTrafficPolicy`.
    pub external_policy: TrafficPolicy,
    /// `internalTrafficPolicy`.
    pub internal_policy: TrafficPolicy,
    /// The endpoints, sorted and without duplicates.
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// Whether traffic from outside the Service's ClusterIP reaches it (NodePort, LB, external IPs).
    pub fn has_external(&self) -> bool {
        self.node_port.is_some() || self.load_balancer || !self.external_ips.is_empty()
    }

    /// The endpoints ClusterIP traffic may use: ready ones, or, when none is ready, those that are
    /// serving while terminating (upstream's ProxyTerminatingEndpoints).
    pub fn cluster_endpoints(&self) -> Vec<&Endpoint> {
        usable(self.endpoints.iter())
    }

    /// The same choice among the endpoints on `node`.
    pub fn local_endpoints(&self, node: &str) -> Vec<&Endpoint> {
        usable(
            self.endpoints
                .iter()
                .filter(|e| e.node.as_deref() == Some(node)),
        )
    }
}

fn usable<'a>(eps: impl Iterator<Item = &'a Endpoint> + Clone) -> Vec<&'a Endpoint> {
    let ready: Vec<&Endpoint> = eps.clone().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    eps.filter(|e| e.serving && e.terminating).collect()
}

/// The node the rules are written for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// The node's name (for Local traffic policies).
    pub name: String,
    /// The node's IPv4 addresses (LoadBalancer Services are served on them).
    pub addresses: Vec<Ipv4Addr>,
    /// The cluster's pod range: traffic from outside it is masqueraded on its way to a Service.
    pub cluster_cidr: Ipv4Net,
}

/// A container port published on the node (`hostPort`), as the CNI portmap plugin publishes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// TCP, UDP or SCTP.
    pub protocol: Protocol,
    /// Only traffic to this node address (`hostIP`); None for any of the node's addresses.
    pub host_ip: Option<Ipv4Addr>,
    /// The node's port.
    pub host_port: u16,
    /// The pod's address.
    pub pod_ip: Ipv4Addr,
    /// The container's port.
    pub container_port: u16,
}

/// Everything the table is rendered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyState {
    /// The node.
    pub node: NodeView,
    /// Every Service port, by key.
    pub ports: BTreeMap<PortKey, ServicePort>,
    /// The `hostPort`s of this node's pods.
    pub host_ports: Vec<HostPort>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(last: u8, ready: bool, serving: bool, terminating: bool, node: &str) -> Endpoint {
        Endpoint {
            ip: Ipv4Addr::new(10, 42, 0, last),
            port: 80,
            ready,
            serving,
            terminating,
            node: Some(node.into()),
        }
    }

    fn port(endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            key: PortKey {
                namespace: "default".into(),
                service: "web".into(),
                port_name: String::new(),
                protocol: Protocol::Tcp,
            },
            cluster_ip: Some(Ipv4Addr::new(10, 96, 0, 20)),
            port: 80,
            node_port: None,
            external_ips: vec![],
            load_balancer: false,
            affinity_timeout: None,
            external_policy: TrafficPolicy::Cluster,
            internal_policy: TrafficPolicy::Cluster,
            endpoints,
        }
    }

    #[test]
    fn ready_endpoints_win_over_terminating_ones() {
        let p = port(vec![
            ep(2, true, true, false, "a"),
            ep(3, false, true, true, "b"),
        ]);
        let ips: Vec<u8> = p
            .cluster_endpoints()
            .iter()
            .map(|e| e.ip.octets()[3])
            .collect();
        assert_eq!(ips, vec![2]);
    }

    #[test]
    fn serving_terminating_endpoints_are_the_fallback() {
        let p = port(vec![
            ep(2, false, false, true, "a"),
            ep(3, false, true, true, "b"),
            ep(4, false, false, false, "b"),
        ]);
        let ips: Vec<u8> = p
            .cluster_endpoints()
            .iter()
            .map(|e| e.ip.octets()[3])
            .collect();
        assert_eq!(ips, vec![3]);
        assert!(p.local_endpoints("a").is_empty());
        assert_eq!(p.local_endpoints("b").len(), 1);
    }

    #[test]
    fn port_keys_print_as_chain_suffixes() {
        let p = port(vec![]);
        assert_eq!(p.key.to_string(), "default/web/tcp/");
    }
}
