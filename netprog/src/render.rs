//! The model rendered as one nft transaction for `table ip keel`.
//!
//! The layout follows kube-proxy's nftables mode: base chains at the priorities it uses (filters at
//! dstnat − 10 so they see the destination before DNAT, DNAT at dstnat, SNAT at srcnat; written as
//! numbers because nft 1.0.6 accepts the names only on some hooks), dispatch through verdict maps
//! (O(1) per packet whatever the number of Services), one chain per Service port and per endpoint.
//!
//! The transaction flushes the table's rules and maps and refills them, so the table always equals the
//! model; connections already NATed live on in conntrack. The per-endpoint affinity sets are declared
//! but never flushed, so ClientIP affinity survives a resync. Per-service chains and sets that exist
//! but are no longer wanted are deleted in the same transaction. Rendering the same state twice gives
//! the same text.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::model::{Endpoint, HostPort, ProxyState, ServicePort, TrafficPolicy};
use crate::names;
use crate::policy::{self, PodRules};

/// The table's family and name.
pub const TABLE: &str = "ip keel";

/// The mark bit that asks `nat-postrouting` to masquerade (kube-proxy's 0x4000).
const MASQ_MARK: &str = "0x4000";

/// The fixed chains' definitions (name, hook line).
const BASE_CHAINS: &[(&str, &str)] = &[
    // Before DNAT and before routing: the service CIDR's `unreachable` route would refuse a
    // forwarded packet for a Service without endpoints before any forward hook saw it.
    (
        "filter-prerouting",
        "type filter hook prerouting priority -110; policy accept;",
    ),
    (
        "filter-output",
        "type filter hook output priority -110; policy accept;",
    ),
    // NetworkPolicy, after DNAT (the destination is the pod) and after the Service filters.
    (
        "policy-forward",
        "type filter hook forward priority 0; policy accept;",
    ),
    (
        "policy-input",
        "type filter hook input priority 0; policy accept;",
    ),
    (
        "nat-prerouting",
        "type nat hook prerouting priority -100; policy accept;",
    ),
    (
        "nat-output",
        "type nat hook output priority -100; policy accept;",
    ),
    (
        "nat-postrouting",
        "type nat hook postrouting priority 100; policy accept;",
    ),
];

/// The verdict maps (name, key type).
const MAPS: &[(&str, &str)] = &[
    ("service-ips", "ipv4_addr . inet_proto . inet_service"),
    ("service-nodeports", "inet_proto . inet_service"),
    (
        "no-endpoint-services",
        "ipv4_addr . inet_proto . inet_service",
    ),
    ("no-endpoint-nodeports", "inet_proto . inet_service"),
    ("host-ports", "inet_proto . inet_service"),
    ("host-ip-ports", "ipv4_addr . inet_proto . inet_service"),
    ("policy-ingress", "ipv4_addr"),
    ("policy-egress", "ipv4_addr"),
];

/// A rendered table: the transaction's text and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    /// The nft script (`nft -f -`).
    pub text: String,
    /// The per-service chains it defines.
    pub chains: BTreeSet<String>,
    /// The affinity sets it defines.
    pub sets: BTreeSet<String>,
    /// How many Service ports have endpoints in it.
    pub services: usize,
    /// How many endpoint chains it holds.
    pub endpoints: usize,
}

/// What the table holds now (per-service names only), so stale ones can be deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Existing {
    /// Per-service chains.
    pub chains: BTreeSet<String>,
    /// Affinity sets.
    pub sets: BTreeSet<String>,
}

/// Map elements and per-service chains, collected before they are written out.
#[derive(Default)]
struct Parts {
    service_ips: Vec<String>,
    nodeports: Vec<String>,
    noep_services: Vec<String>,
    noep_nodeports: Vec<String>,
    host_ports: Vec<String>,
    host_ip_ports: Vec<String>,
    policy_ingress: Vec<String>,
    policy_egress: Vec<String>,
    /// (name, rules).
    chains: Vec<(String, Vec<String>)>,
    /// (name, timeout seconds).
    sets: Vec<(String, u32)>,
    services: usize,
}

/// Renders `state`; `existing` is what the table holds now (empty when it does not exist).
pub fn render(state: &ProxyState, existing: &Existing) -> Ruleset {
    render_with_policy(state, &[], existing)
}

/// Renders `state` and the NetworkPolicy isolation of this node's pods.
pub fn render_with_policy(state: &ProxyState, policy: &[PodRules], existing: &Existing) -> Ruleset {
    let mut parts = Parts::default();
    for port in state.ports.values() {
        service_port(state, port, &mut parts);
    }
    for hp in &state.host_ports {
        host_port(hp, &mut parts);
    }
    for pod in policy {
        for (direction, allows, field, map) in [
            ("in", &pod.ingress, "saddr", &mut parts.policy_ingress),
            ("out", &pod.egress, "daddr", &mut parts.policy_egress),
        ] {
            if let Some(allows) = allows {
                let chain = names::policy_chain(direction, &pod.key);
                map.push(format!("{} : jump {chain}", pod.ip));
                parts
                    .chains
                    .push((chain, policy::chain_rules(allows, field)));
            }
        }
    }
    let cluster = state.node.cluster_cidr;

    let mut t = String::new();
    let _ = writeln!(t, "add table {TABLE}");
    let _ = writeln!(t, "flush table {TABLE}");
    for (name, key) in MAPS {
        let _ = writeln!(t, "add map {TABLE} {name} {{ type {key} : verdict; }}");
        let _ = writeln!(t, "flush map {TABLE} {name}");
    }
    let _ = writeln!(t, "table {TABLE} {{");
    for (name, hook) in BASE_CHAINS {
        let _ = writeln!(t, "\tchain {name} {{");
        let _ = writeln!(t, "\t\t{hook}");
        for rule in base_rules(name, &cluster.to_string()) {
            let _ = writeln!(t, "\t\t{rule}");
        }
        let _ = writeln!(t, "\t}}");
    }
    let fixed: [(&str, Vec<String>); 5] = [
        (
            "services",
            vec![
                "ip daddr . meta l4proto . th dport vmap @service-ips".into(),
                // Pods' hostPorts, before NodePorts: to a named node address, or to any of them
                // (loopback excepted, as for NodePorts: it is not routed to pods).
                "fib daddr type local ip daddr . meta l4proto . th dport vmap @host-ip-ports".into(),
                "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @host-ports".into(),
                "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports".into(),
            ],
        ),
        (
            "endpoints-check",
            vec![
                "ip daddr . meta l4proto . th dport vmap @no-endpoint-services".into(),
                "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports".into(),
            ],
        ),
        ("reject-chain", vec!["reject".into()]),
        (
            "mark-for-masquerade",
            vec![format!("meta mark set meta mark | {MASQ_MARK}")],
        ),
        (
            "masquerading",
            vec![
                format!("meta mark & {MASQ_MARK} == 0 return"),
                format!("meta mark set meta mark ^ {MASQ_MARK}"),
                "masquerade fully-random".into(),
            ],
        ),
    ];
    for (name, rules) in &fixed {
        chain_block(&mut t, name, rules);
    }
    for (name, elements) in [
        ("service-ips", &parts.service_ips),
        ("service-nodeports", &parts.nodeports),
        ("no-endpoint-services", &parts.noep_services),
        ("no-endpoint-nodeports", &parts.noep_nodeports),
        ("host-ports", &parts.host_ports),
        ("host-ip-ports", &parts.host_ip_ports),
        ("policy-ingress", &parts.policy_ingress),
        ("policy-egress", &parts.policy_egress),
    ] {
        if elements.is_empty() {
            continue;
        }
        let key = MAPS.iter().find(|(n, _)| *n == name).map_or("", |(_, k)| k);
        let _ = writeln!(t, "\tmap {name} {{");
        let _ = writeln!(t, "\t\ttype {key} : verdict;");
        let _ = writeln!(t, "\t\telements = {{");
        for e in elements {
            let _ = writeln!(t, "\t\t\t{e},");
        }
        let _ = writeln!(t, "\t\t}}");
        let _ = writeln!(t, "\t}}");
    }
    for (name, timeout) in &parts.sets {
        let _ = writeln!(
            t,
            "\tset {name} {{ type ipv4_addr; flags dynamic,timeout; timeout {timeout}s; }}"
        );
    }
    for (name, rules) in &parts.chains {
        chain_block(&mut t, name, rules);
    }
    let _ = writeln!(t, "}}");

    let chains: BTreeSet<String> = parts.chains.iter().map(|(n, _)| n.clone()).collect();
    let sets: BTreeSet<String> = parts.sets.iter().map(|(n, _)| n.clone()).collect();
    // Stale chains are empty by now (the table was flushed) and no map points at them any more.
    for stale in existing.chains.difference(&chains) {
        let _ = writeln!(t, "delete chain {TABLE} {stale}");
    }
    for stale in existing.sets.difference(&sets) {
        let _ = writeln!(t, "delete set {TABLE} {stale}");
    }
    let endpoints = chains.iter().filter(|c| c.starts_with("endpoint-")).count();
    Ruleset {
        text: t,
        chains,
        sets,
        services: parts.services,
        endpoints,
    }
}

/// The text that removes the table (and nothing else); safe when it does not exist.
pub fn removal() -> String {
    format!("add table {TABLE}\ndelete table {TABLE}\n")
}

fn chain_block(t: &mut String, name: &str, rules: &[String]) {
    let _ = writeln!(t, "\tchain {name} {{");
    for rule in rules {
        let _ = writeln!(t, "\t\t{rule}");
    }
    let _ = writeln!(t, "\t}}");
}

fn base_rules(name: &str, cluster: &str) -> Vec<String> {
    match name {
        "filter-prerouting" | "filter-output" => {
            vec!["ct state new jump endpoints-check".into()]
        }
        "nat-prerouting" | "nat-output" => vec!["jump services".into()],
        // Replies and the rest of admitted connections pass; a new one from a pod meets its
        // egress chain, then (forwarded) the destination pod's ingress chain.
        "policy-forward" => vec![
            "ct state established,related accept".into(),
            "ip saddr vmap @policy-egress".into(),
            "ip daddr vmap @policy-ingress".into(),
        ],
        "policy-input" => vec![
            "ct state established,related accept".into(),
            "ip saddr vmap @policy-egress".into(),
        ],
        "nat-postrouting" => vec![
            "jump masquerading".into(),
            // Pods leaving the cluster's range (to the node's LAN or beyond) leave as the node: the
            // CNI bridge does not masquerade (`ipMasq: false`), netprog does it here.
            format!("ip saddr {cluster} ip daddr != {cluster} masquerade"),
        ],
        _ => vec![],
    }
}

/// A pod's `hostPort`: its map element and the chain that DNATs to the pod. A pod reaching its own
/// hostPort (hairpin) is masqueraded, so the reply comes back through the node.
fn host_port(hp: &HostPort, parts: &mut Parts) {
    let proto = hp.protocol.nft();
    let chain = names::host_port_chain(&hp.pod, hp.protocol, hp.host_port);
    match hp.host_ip {
        Some(ip) => parts
            .host_ip_ports
            .push(format!("{ip} . {proto} . {} : goto {chain}", hp.host_port)),
        None => parts
            .host_ports
            .push(format!("{proto} . {} : goto {chain}", hp.host_port)),
    }
    let rules = vec![
        format!("ip saddr {} jump mark-for-masquerade", hp.pod_ip),
        format!(
            "meta l4proto {proto} dnat to {}:{}",
            hp.pod_ip, hp.container_port
        ),
    ];
    parts.chains.push((chain, rules));
}

/// The rules that spread a new connection over `eps`: the affinity checks first (when on), then a
/// random pick.
fn balance(port: &ServicePort, eps: &[&Endpoint]) -> Vec<String> {
    let mut rules = Vec::new();
    if port.affinity_timeout.is_some() {
        for e in eps {
            rules.push(format!(
                "ip saddr @{} goto {}",
                names::affinity_set(&port.key, e.ip, e.port),
                names::endpoint_chain(&port.key, e.ip, e.port)
            ));
        }
    }
    // iptables' cascade rather than kube-proxy's `numgen … vmap { … }`: endpoint i of n is taken with
    // probability 1/(n-i) when reached, which is 1/n overall. Each vmap is an anonymous map, and
    // thousands of them make the kernel's transaction many times slower (docs/benchmarks.md).
    for (i, e) in eps.iter().enumerate() {
        let chain = names::endpoint_chain(&port.key, e.ip, e.port);
        let remaining = eps.len() - i;
        if remaining > 1 {
            rules.push(format!("numgen random mod {remaining} 0 goto {chain}"));
        } else {
            rules.push(format!("goto {chain}"));
        }
    }
    rules
}

fn service_port(state: &ProxyState, port: &ServicePort, parts: &mut Parts) {
    let node = &state.node;
    let cluster = node.cluster_cidr;
    let proto = port.key.protocol.nft();
    let all = port.cluster_endpoints();
    let local = port.local_endpoints(&node.name);
    let internal = match port.internal_policy {
        TrafficPolicy::Cluster => &all,
        TrafficPolicy::Local => &local,
    };
    let external = match port.external_policy {
        TrafficPolicy::Cluster => &all,
        TrafficPolicy::Local => &local,
    };
    // Without any endpoint a client is refused at once; with endpoints elsewhere only (a Local
    // policy), its packets are dropped, as upstream does.
    let refusal = |wanted: &Vec<&Endpoint>| {
        if all.is_empty() {
            Some("goto reject-chain")
        } else if wanted.is_empty() {
            Some("drop")
        } else {
            None
        }
    };

    let service = names::service_chain(&port.key);
    let mut used: BTreeSet<&Endpoint> = BTreeSet::new();
    if let Some(ip) = port.cluster_ip {
        let element = format!("{ip} . {proto} . {}", port.port);
        match refusal(internal) {
            Some(verdict) => parts.noep_services.push(format!("{element} : {verdict}")),
            None => {
                parts
                    .service_ips
                    .push(format!("{element} : goto {service}"));
                let mut rules = vec![format!(
                    "ip daddr {ip} ip saddr != {cluster} jump mark-for-masquerade"
                )];
                rules.extend(balance(port, internal));
                parts.chains.push((service.clone(), rules));
                used.extend(internal.iter().copied());
            }
        }
    }

    if port.has_external() {
        let mut elements = Vec::new();
        let mut addresses: Vec<std::net::Ipv4Addr> = port.external_ips.clone();
        if port.load_balancer {
            addresses.extend(node.addresses.iter().copied());
        }
        addresses.sort();
        addresses.dedup();
        for a in &addresses {
            elements.push((false, format!("{a} . {proto} . {}", port.port)));
        }
        if let Some(np) = port.node_port {
            elements.push((true, format!("{proto} . {np}")));
        }
        match refusal(external) {
            Some(verdict) => {
                for (nodeport, e) in elements {
                    let list = if nodeport {
                        &mut parts.noep_nodeports
                    } else {
                        &mut parts.noep_services
                    };
                    list.push(format!("{e} : {verdict}"));
                }
            }
            None => {
                let chain = names::external_chain(&port.key);
                for (nodeport, e) in elements {
                    let list = if nodeport {
                        &mut parts.nodeports
                    } else {
                        &mut parts.service_ips
                    };
                    list.push(format!("{e} : goto {chain}"));
                }
                let mut rules = Vec::new();
                match port.external_policy {
                    TrafficPolicy::Cluster => rules.push("jump mark-for-masquerade".into()),
                    TrafficPolicy::Local => {
                        // The client's address is kept, except for traffic from the node itself
                        // (masqueraded) and from pods, which both may use any endpoint.
                        if parts.chains.iter().any(|(n, _)| *n == service) {
                            rules.push("fib saddr type local jump mark-for-masquerade".into());
                            rules.push(format!("fib saddr type local goto {service}"));
                            rules.push(format!("ip saddr {cluster} goto {service}"));
                        }
                    }
                }
                rules.extend(balance(port, external));
                parts.chains.push((chain, rules));
                used.extend(external.iter().copied());
            }
        }
    }

    if !used.is_empty() {
        parts.services += 1;
    }
    for e in used {
        let mut rules = vec![format!("ip saddr {} jump mark-for-masquerade", e.ip)];
        if let Some(timeout) = port.affinity_timeout {
            let set = names::affinity_set(&port.key, e.ip, e.port);
            rules.push(format!("update @{set} {{ ip saddr }}"));
            parts.sets.push((set, timeout));
        }
        rules.push(format!("meta l4proto {proto} dnat to {}:{}", e.ip, e.port));
        parts
            .chains
            .push((names::endpoint_chain(&port.key, e.ip, e.port), rules));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeView, PortKey, Protocol};
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    fn ep(last: u8, node: &str) -> Endpoint {
        Endpoint {
            ip: Ipv4Addr::new(10, 42, 0, last),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node: Some(node.into()),
        }
    }

    fn port(name: &str, endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            key: PortKey {
                namespace: "default".into(),
                service: name.into(),
                port_name: "http".into(),
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

    fn state(ports: Vec<ServicePort>) -> ProxyState {
        ProxyState {
            host_ports: Vec::new(),
            node: NodeView {
                name: "a".into(),
                addresses: vec![Ipv4Addr::new(198, 18, 0, 11)],
                cluster_cidr: "10.42.0.0/16".parse().unwrap(),
            },
            ports: ports
                .into_iter()
                .map(|p| (p.key.clone(), p))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn a_cluster_ip_spreads_over_its_endpoints() {
        let r = render(
            &state(vec![port("web", vec![ep(2, "a"), ep(3, "b")])]),
            &Existing::default(),
        );
        let svc = names::service_chain(&port("web", vec![]).key);
        assert!(
            r.text
                .contains(&format!("10.96.0.20 . tcp . 80 : goto {svc}")),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("numgen random mod 2 0 goto endpoint-"),
            "{}",
            r.text
        );
        assert!(r.text.contains("meta l4proto tcp dnat to 10.42.0.2:8080"));
        assert!(r
            .text
            .contains("ip daddr 10.96.0.20 ip saddr != 10.42.0.0/16 jump mark-for-masquerade"));
        assert_eq!((r.services, r.endpoints), (1, 2));
        assert!(!r.text.contains("delete"), "nothing stale: {}", r.text);
    }

    #[test]
    fn no_endpoints_means_reject_and_local_without_local_means_drop() {
        let mut lonely = port("lonely", vec![]);
        lonely.node_port = Some(30080);
        let mut far = port("far", vec![ep(3, "b")]);
        far.cluster_ip = Some(Ipv4Addr::new(10, 96, 0, 21));
        far.node_port = Some(30081);
        far.external_policy = TrafficPolicy::Local;
        let r = render(&state(vec![lonely, far]), &Existing::default());
        assert!(
            r.text.contains("10.96.0.20 . tcp . 80 : goto reject-chain"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("tcp . 30080 : goto reject-chain"),
            "{}",
            r.text
        );
        assert!(r.text.contains("tcp . 30081 : drop"), "{}", r.text);
        // The ClusterIP of "far" still works: its internal policy is Cluster.
        assert!(
            r.text.contains("10.96.0.21 . tcp . 80 : goto service-"),
            "{}",
            r.text
        );
    }

    #[test]
    fn load_balancers_listen_on_the_node_and_affinity_has_sets() {
        let mut lb = port("lb", vec![ep(2, "a")]);
        lb.node_port = Some(31000);
        lb.load_balancer = true;
        lb.affinity_timeout = Some(10800);
        let r = render(&state(vec![lb.clone()]), &Existing::default());
        let ext = names::external_chain(&lb.key);
        assert!(
            r.text
                .contains(&format!("198.18.0.11 . tcp . 80 : goto {ext}")),
            "{}",
            r.text
        );
        assert!(
            r.text.contains(&format!("tcp . 31000 : goto {ext}")),
            "{}",
            r.text
        );
        let set = names::affinity_set(&lb.key, Ipv4Addr::new(10, 42, 0, 2), 8080);
        assert!(r.text.contains(&format!(
            "set {set} {{ type ipv4_addr; flags dynamic,timeout; timeout 10800s; }}"
        )));
        assert!(r.text.contains(&format!("update @{set} {{ ip saddr }}")));
        assert_eq!(r.sets.len(), 1);
    }

    #[test]
    fn stale_chains_and_sets_are_deleted_and_rendering_is_stable() {
        let s = state(vec![port("web", vec![ep(2, "a")])]);
        let first = render(&s, &Existing::default());
        assert_eq!(first, render(&s, &Existing::default()));
        let existing = Existing {
            chains: first
                .chains
                .iter()
                .cloned()
                .chain(["service-OLD-default/gone/tcp/http".to_string()])
                .collect(),
            sets: ["affinity-OLD-default/gone/tcp/http__10.42.0.9/80".to_string()].into(),
        };
        let again = render(&s, &existing);
        assert!(again
            .text
            .contains("delete chain ip keel service-OLD-default/gone/tcp/http"));
        assert!(again
            .text
            .contains("delete set ip keel affinity-OLD-default/gone/tcp/http__10.42.0.9/80"));
        assert_eq!(again.text.matches("delete ").count(), 2);
    }

    #[test]
    fn host_ports_dnat_to_the_pod() {
        let mut s = state(vec![]);
        s.host_ports = vec![
            HostPort {
                pod: "ns/web".into(),
                protocol: Protocol::Tcp,
                host_ip: None,
                host_port: 18080,
                pod_ip: Ipv4Addr::new(10, 42, 0, 5),
                container_port: 8080,
            },
            HostPort {
                pod: "ns/dns".into(),
                protocol: Protocol::Udp,
                host_ip: Some(Ipv4Addr::new(192, 0, 2, 7)),
                host_port: 1053,
                pod_ip: Ipv4Addr::new(10, 42, 0, 6),
                container_port: 53,
            },
        ];
        let r = render(&s, &Existing::default());
        let web = names::host_port_chain("ns/web", Protocol::Tcp, 18080);
        assert!(
            r.text.contains(&format!("tcp . 18080 : goto {web}")),
            "{}",
            r.text
        );
        assert!(r.text.contains("meta l4proto tcp dnat to 10.42.0.5:8080"));
        assert!(r
            .text
            .contains("ip saddr 10.42.0.5 jump mark-for-masquerade"));
        let dns = names::host_port_chain("ns/dns", Protocol::Udp, 1053);
        assert!(r
            .text
            .contains(&format!("192.0.2.7 . udp . 1053 : goto {dns}")));
        assert!(r.chains.contains(&web) && names::is_per_service(&web));
    }
}
