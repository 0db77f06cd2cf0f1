//! Which addresses a LoadBalancer Service's status lists: those of the Ready, schedulable nodes (each
//! node's ExternalIPs if it has any, else its InternalIPs), of the Service's IP families in their order,
//! sorted and deduplicated within each family. With `externalTrafficPolicy: Local` only nodes that run a
//! ready endpoint of the Service count, as k3s's ServiceLB does (netprog drops Local traffic on the others).

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

/// The label upstream's service controller reads to keep a node out of load balancers.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The EndpointSlice label naming the slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether the Service asks for a load balancer.
pub fn is_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// The Service's `spec.loadBalancerClass`, if set (another implementation owns its status then).
pub fn class(svc: &Service) -> Option<&str> {
    svc.spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref())
        .filter(|c| !c.is_empty())
}

/// Whether ServiceLB answers for the Service: a LoadBalancer without a class.
pub fn handled(svc: &Service) -> bool {
    is_load_balancer(svc) && class(svc).is_none()
}

/// Whether the Service keeps external traffic on the node it arrived at.
pub fn local_traffic(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local")
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// The addresses a node offers load balancers: `None` unless it is Ready, schedulable, not being deleted
/// and not excluded by [`EXCLUDE_LABEL`]; else its ExternalIPs if it has any, its InternalIPs if not
/// (addresses that do not parse are skipped).
pub fn offered(node: &Node) -> Option<Vec<IpAddr>> {
    let schedulable = node.spec.as_ref().and_then(|s| s.unschedulable) != Some(true);
    let excluded = node.labels().contains_key(EXCLUDE_LABEL);
    if !ready(node) || !schedulable || excluded || node.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let of = |ty: &str| -> Vec<IpAddr> {
        addresses
            .iter()
            .filter(|a| a.type_ == ty)
            .filter_map(|a| a.address.parse().ok())
            .collect()
    };
    let external = of("ExternalIP");
    Some(if external.is_empty() {
        of("InternalIP")
    } else {
        external
    })
}

/// The nodes running a ready endpoint of the Service (an endpoint without `ready` counts as ready, as
/// the EndpointSlice API says).
pub fn nodes_with_ready_endpoints(svc: &Service, slices: &[Arc<EndpointSlice>]) -> HashSet<String> {
    let (ns, name) = (svc.namespace(), svc.name_any());
    slices
        .iter()
        .filter(|s| s.namespace() == ns)
        .filter(|s| s.labels().get(SERVICE_NAME_LABEL) == Some(&name))
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| e.node_name.clone())
        .collect()
}

/// The Service's IP families in order (`spec.ipFamilies`, IPv4 when unset).
fn families(svc: &Service) -> Vec<&str> {
    let listed: Vec<&str> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.as_ref())
        .map(|f| f.iter().map(String::as_str).collect())
        .unwrap_or_default();
    if listed.is_empty() {
        vec!["IPv4"]
    } else {
        listed
    }
}

/// The ingress addresses the Service's status should list.
pub fn ingress(svc: &Service, nodes: &[Arc<Node>], slices: &[Arc<EndpointSlice>]) -> Vec<IpAddr> {
    let hosting = local_traffic(svc).then(|| nodes_with_ready_endpoints(svc, slices));
    let all: Vec<IpAddr> = nodes
        .iter()
        .filter(|n| hosting.as_ref().is_none_or(|h| h.contains(&n.name_any())))
        .filter_map(|n| offered(n))
        .flatten()
        .collect();
    let mut out = Vec::new();
    for family in families(svc) {
        let of_family: BTreeSet<IpAddr> = all
            .iter()
            .filter(|ip| match family {
                "IPv4" => ip.is_ipv4(),
                "IPv6" => ip.is_ipv6(),
                _ => false,
            })
            .copied()
            .collect();
        out.extend(of_family);
    }
    out
}

/// The Service's current ingress as `(ip, hostname)` pairs.
pub fn current(svc: &Service) -> Vec<(Option<String>, Option<String>)> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|list| {
            list.iter()
                .map(|i| (i.ip.clone(), i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the current ingress already lists exactly `want` (only the addresses count: the API server
/// may add `ipMode`).
pub fn up_to_date(svc: &Service, want: &[IpAddr]) -> bool {
    let want: Vec<(Option<String>, Option<String>)> =
        want.iter().map(|ip| (Some(ip.to_string()), None)).collect();
    current(svc) == want
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeCondition, NodeSpec, NodeStatus,
        ServiceSpec, ServiceStatus,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use kube::api::ObjectMeta;

    fn node(name: &str, ready: &str, addresses: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(ty, a)| NodeAddress {
                            type_: ty.to_string(),
                            address: a.to_string(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    fn svc(ty: &str, class: Option<&str>, policy: Option<&str>, families: &[&str]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(ty.into()),
                load_balancer_class: class.map(String::from),
                external_traffic_policy: policy.map(String::from),
                ip_families: (!families.is_empty())
                    .then(|| families.iter().map(|f| f.to_string()).collect()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn ips(list: &[IpAddr]) -> Vec<String> {
        list.iter().map(IpAddr::to_string).collect()
    }

    #[test]
    fn only_classless_load_balancers_are_handled() {
        assert!(handled(&svc("LoadBalancer", None, None, &[])));
        assert!(handled(&svc("LoadBalancer", Some(""), None, &[])));
        assert!(!handled(&svc(
            "LoadBalancer",
            Some("example.com/lb"),
            None,
            &[]
        )));
        assert!(!handled(&svc("ClusterIP", None, None, &[])));
        assert!(!handled(&Service::default()));
    }

    #[test]
    fn ready_schedulable_nodes_external_before_internal() {
        let a = node(
            "a",
            "True",
            &[("InternalIP", "192.0.2.10"), ("Hostname", "a")],
        );
        let b = node(
            "b",
            "True",
            &[("InternalIP", "192.0.2.2"), ("ExternalIP", "198.51.100.2")],
        );
        let c = node("c", "False", &[("InternalIP", "192.0.2.3")]);
        let d = node("d", "Unknown", &[("InternalIP", "192.0.2.4")]);
        let mut e = node("e", "True", &[("InternalIP", "192.0.2.5")]);
        e.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        let mut f = node("f", "True", &[("InternalIP", "192.0.2.6")]);
        f.metadata.labels = Some([(EXCLUDE_LABEL.to_string(), String::new())].into());
        // Sorted as addresses (.9 before .10), duplicates once, bad addresses skipped.
        let g = node(
            "g",
            "True",
            &[("InternalIP", "192.0.2.9"), ("InternalIP", "nope")],
        );
        let h = node("h", "True", &[("InternalIP", "192.0.2.9")]);
        let nodes: Vec<Arc<Node>> = [a, b, c, d, e, f, g, h].into_iter().map(Arc::new).collect();
        assert_eq!(
            ips(&ingress(&svc("LoadBalancer", None, None, &[]), &nodes, &[])),
            ["192.0.2.9", "192.0.2.10", "198.51.100.2"]
        );
        assert!(offered(&Node::default()).is_none());
    }

    #[test]
    fn families_in_the_services_order() {
        let nodes = vec![
            Arc::new(node(
                "a",
                "True",
                &[("InternalIP", "192.0.2.1"), ("InternalIP", "2001:db8::1")],
            )),
            Arc::new(node("b", "True", &[("InternalIP", "2001:db8::2")])),
        ];
        let v4 = svc("LoadBalancer", None, None, &["IPv4"]);
        assert_eq!(ips(&ingress(&v4, &nodes, &[])), ["192.0.2.1"]);
        let dual = svc("LoadBalancer", None, None, &["IPv6", "IPv4"]);
        assert_eq!(
            ips(&ingress(&dual, &nodes, &[])),
            ["2001:db8::1", "2001:db8::2", "192.0.2.1"]
        );
    }

    #[test]
    fn local_traffic_lists_only_nodes_with_a_ready_endpoint() {
        let nodes: Vec<Arc<Node>> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Arc::new(node(
                    n,
                    "True",
                    &[("InternalIP", &format!("192.0.2.{}", i + 1))],
                ))
            })
            .collect();
        let endpoint = |node: &str, ready: Option<bool>| Endpoint {
            addresses: vec!["10.42.0.5".into()],
            node_name: Some(node.into()),
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        };
        let slice = |svc_name: &str, ns: &str, endpoints: Vec<Endpoint>| {
            Arc::new(EndpointSlice {
                metadata: ObjectMeta {
                    namespace: Some(ns.into()),
                    labels: Some([(SERVICE_NAME_LABEL.to_string(), svc_name.to_string())].into()),
                    ..Default::default()
                },
                address_type: "IPv4".into(),
                endpoints,
                ports: None,
            })
        };
        let slices = vec![
            slice(
                "web",
                "ns",
                vec![endpoint("a", Some(true)), endpoint("b", Some(false))],
            ),
            slice("web", "ns", vec![endpoint("c", None)]),
            slice("web", "other", vec![endpoint("b", Some(true))]),
            slice("db", "ns", vec![endpoint("b", Some(true))]),
        ];
        let local = svc("LoadBalancer", None, Some("Local"), &[]);
        assert_eq!(
            ips(&ingress(&local, &nodes, &slices)),
            ["192.0.2.1", "192.0.2.3"]
        );
        let cluster = svc("LoadBalancer", None, Some("Cluster"), &[]);
        assert_eq!(
            ips(&ingress(&cluster, &nodes, &slices)),
            ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
        );
        assert!(ingress(&local, &nodes, &[]).is_empty());
    }

    #[test]
    fn up_to_date_compares_addresses_only() {
        let mut s = svc("LoadBalancer", None, None, &[]);
        let want: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap()];
        assert!(!up_to_date(&s, &want));
        assert!(up_to_date(&s, &[]));
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some("192.0.2.1".into()),
                    ip_mode: Some("VIP".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        assert!(up_to_date(&s, &want));
        assert!(!up_to_date(&s, &[]));
    }
}
