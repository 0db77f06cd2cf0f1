//! NetworkPolicy (networking.k8s.io/v1) compiled for the pods of one node.
//!
//! Model: a pod selected by some policy whose `policyTypes` include Ingress (Egress) is isolated in
//! that direction, and then only what one of those policies' rules allows gets through; a pod no
//! policy selects is not isolated. Rules are resolved here, against the pods and namespaces the
//! caller observed, into plain addresses, CIDRs and port ranges ([`Allow`]), so that rendering
//! (in [`render`](crate::render)) only writes them out. Connections already established are never
//! cut: the table accepts `ct state established,related` before any policy chain.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use keel_client_kit::labels::matches;

use crate::model::Protocol;

/// A pod as policies see it: where it is, its labels, its address and its named ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its IPv4 address.
    pub ip: Ipv4Addr,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The node it runs on.
    pub node: Option<String>,
    /// Its containers' named ports: (name, protocol) → number.
    pub named_ports: BTreeMap<(String, Protocol), u16>,
}

impl PolicyPod {
    /// The pod's view from the API object; None when it has no IPv4 address yet or has finished.
    pub fn from_pod(pod: &Pod) -> Option<PolicyPod> {
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let spec = pod.spec.as_ref()?;
        // A hostNetwork pod has the node's address: policies cannot tell it from the node.
        if spec.host_network == Some(true) {
            return None;
        }
        let ip = status.pod_ip.as_deref()?.parse().ok()?;
        let mut named_ports = BTreeMap::new();
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            for p in c.ports.iter().flatten() {
                let (Some(name), Some(proto), Ok(number)) = (
                    p.name.as_ref(),
                    Protocol::parse(p.protocol.as_deref()),
                    u16::try_from(p.container_port),
                ) else {
                    continue;
                };
                named_ports.insert((name.clone(), proto), number);
            }
        }
        Some(PolicyPod {
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            ip,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            node: spec.node_name.clone(),
            named_ports,
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Which ports a rule opens: one protocol, and all its ports or an inclusive range.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortMatch {
    /// The protocol.
    pub protocol: Protocol,
    /// `(first, last)`, or None for every port.
    pub range: Option<(u16, u16)>,
}

/// Who a rule lets in (or out to).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    /// Anyone (a rule without `from`/`to`).
    Any,
    /// These pod addresses (from pod and namespace selectors).
    Addrs(BTreeSet<Ipv4Addr>),
    /// A CIDR, minus some parts of it.
    Block {
        /// The range.
        cidr: Ipv4Net,
        /// Ranges inside it that are not allowed.
        except: Vec<Ipv4Net>,
    },
}

/// One allowing rule: any of `peers`, on any of `ports`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allow {
    /// The peers (never empty: [`Peer::Any`] stands for "everyone").
    pub peers: Vec<Peer>,
    /// The ports (empty: every port).
    pub ports: Vec<PortMatch>,
}

/// What isolates one pod of this node, per direction (None: not isolated that way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRules {
    /// `namespace/name`.
    pub key: String,
    /// The pod's address.
    pub ip: Ipv4Addr,
    /// The rules that let traffic in, when some policy isolates it for ingress.
    pub ingress: Option<Vec<Allow>>,
    /// The rules that let traffic out, when some policy isolates it for egress.
    pub egress: Option<Vec<Allow>>,
}

/// The policies' directions: `policyTypes`, or as upstream defaults it (Ingress always, Egress
/// when the policy has egress rules).
fn directions(spec: &NetworkPolicySpec) -> (bool, bool) {
    match &spec.policy_types {
        Some(t) if !t.is_empty() => (
            t.iter().any(|d| d == "Ingress"),
            t.iter().any(|d| d == "Egress"),
        ),
        _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
    }
}

/// What the resolver needs to know about the cluster.
struct World<'a> {
    pods: &'a [PolicyPod],
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
}

impl World<'_> {
    /// The pods a peer's selectors pick, for a policy in `ns`.
    fn selected(&self, peer: &NetworkPolicyPeer, ns: &str) -> Vec<&PolicyPod> {
        let in_namespace = |p: &PolicyPod| match &peer.namespace_selector {
            Some(sel) => matches(sel, self.namespaces.get(&p.namespace)),
            None => p.namespace == ns,
        };
        let everyone = LabelSelector::default();
        let pod_sel = peer.pod_selector.as_ref().unwrap_or(&everyone);
        self.pods
            .iter()
            .filter(|p| in_namespace(p) && matches(pod_sel, Some(&p.labels)))
            .collect()
    }
}

/// The ports of a rule, resolved against the pods the numbers apply to (`targets`): a named port
/// becomes each target's number for it; a name no target has opens nothing.
fn ports(ports: Option<&Vec<NetworkPolicyPort>>, targets: &[&PolicyPod]) -> Option<Vec<PortMatch>> {
    let Some(list) = ports.filter(|l| !l.is_empty()) else {
        return Some(vec![]);
    };
    let mut out = BTreeSet::new();
    for p in list {
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            continue;
        };
        match &p.port {
            None => {
                out.insert(PortMatch {
                    protocol,
                    range: None,
                });
            }
            Some(IntOrString::Int(n)) => {
                let Ok(first) = u16::try_from(*n) else {
                    continue;
                };
                let last = p
                    .end_port
                    .and_then(|e| u16::try_from(e).ok())
                    .filter(|e| *e >= first)
                    .unwrap_or(first);
                out.insert(PortMatch {
                    protocol,
                    range: Some((first, last)),
                });
            }
            Some(IntOrString::String(name)) => {
                for t in targets {
                    if let Some(n) = t.named_ports.get(&(name.clone(), protocol)) {
                        out.insert(PortMatch {
                            protocol,
                            range: Some((*n, *n)),
                        });
                    }
                }
            }
        }
    }
    // Every listed port was a name nobody has: the rule allows nothing.
    (!out.is_empty()).then(|| out.into_iter().collect())
}

fn has_named(ports: Option<&Vec<NetworkPolicyPort>>) -> bool {
    ports
        .into_iter()
        .flatten()
        .any(|p| matches!(p.port, Some(IntOrString::String(_))))
}

/// The peers of a rule; an empty `from`/`to` is everyone.
fn peers(world: &World<'_>, list: Option<&Vec<NetworkPolicyPeer>>, ns: &str) -> Vec<Peer> {
    let Some(list) = list.filter(|l| !l.is_empty()) else {
        return vec![Peer::Any];
    };
    let mut out = Vec::new();
    for peer in list {
        if let Some(block) = &peer.ip_block {
            // IPv6 blocks do not apply to an IPv4 table.
            if let Ok(cidr) = block.cidr.parse::<Ipv4Net>() {
                let except = block
                    .except
                    .iter()
                    .flatten()
                    .filter_map(|e| e.parse::<Ipv4Net>().ok())
                    .collect();
                out.push(Peer::Block { cidr, except });
            }
            continue;
        }
        let addrs: BTreeSet<Ipv4Addr> = world.selected(peer, ns).iter().map(|p| p.ip).collect();
        out.push(Peer::Addrs(addrs));
    }
    out
}

/// Whether `ip` is one of `peer`'s.
fn peer_has(peer: &Peer, ip: Ipv4Addr) -> bool {
    match peer {
        Peer::Any => true,
        Peer::Addrs(a) => a.contains(&ip),
        Peer::Block { cidr, except } => {
            cidr.contains(&ip) && !except.iter().any(|e| e.contains(&ip))
        }
    }
}

/// The egress rule's allows: with a named port, the name is looked up on each destination pod,
/// and the rule becomes one allow per (pod, number).
fn egress_allows(
    world: &World<'_>,
    rule_ports: Option<&Vec<NetworkPolicyPort>>,
    rule_peers: Vec<Peer>,
) -> Vec<Allow> {
    if !has_named(rule_ports) {
        return match ports(rule_ports, &[]) {
            Some(p) => vec![Allow {
                peers: rule_peers,
                ports: p,
            }],
            None => vec![],
        };
    }
    let numbered: Vec<NetworkPolicyPort> = rule_ports
        .into_iter()
        .flatten()
        .filter(|p| !matches!(p.port, Some(IntOrString::String(_))))
        .cloned()
        .collect();
    let named: Vec<NetworkPolicyPort> = rule_ports
        .into_iter()
        .flatten()
        .filter(|p| matches!(p.port, Some(IntOrString::String(_))))
        .cloned()
        .collect();
    let mut out = Vec::new();
    if !numbered.is_empty() {
        if let Some(p) = ports(Some(&numbered), &[]) {
            out.push(Allow {
                peers: rule_peers.clone(),
                ports: p,
            });
        }
    }
    for pod in world.pods {
        if !rule_peers.iter().any(|peer| peer_has(peer, pod.ip)) {
            continue;
        }
        if let Some(p) = ports(Some(&named), &[pod]) {
            out.push(Allow {
                peers: vec![Peer::Addrs(BTreeSet::from([pod.ip]))],
                ports: p,
            });
        }
    }
    out
}

/// The isolation of every pod on `node`, from all `policies`.
pub fn compile<'a>(
    node: &str,
    pods: &[PolicyPod],
    namespaces: impl IntoIterator<Item = &'a Namespace>,
    policies: impl IntoIterator<Item = &'a NetworkPolicy>,
) -> Vec<PodRules> {
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = namespaces
        .into_iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let mut labels = n.metadata.labels.clone().unwrap_or_default();
            // Upstream sets this label on every namespace; selectors written against it must work
            // even where it was not stored.
            labels
                .entry("kubernetes.io/metadata.name".into())
                .or_insert_with(|| name.clone());
            Some((name, labels))
        })
        .collect();
    let world = World {
        pods,
        namespaces: &namespaces,
    };
    let policies: Vec<&NetworkPolicy> = policies.into_iter().collect();
    let mut out = Vec::new();
    for pod in pods.iter().filter(|p| p.node.as_deref() == Some(node)) {
        let mut ingress: Option<Vec<Allow>> = None;
        let mut egress: Option<Vec<Allow>> = None;
        for policy in &policies {
            let (Some(ns), Some(spec)) =
                (policy.metadata.namespace.as_deref(), policy.spec.as_ref())
            else {
                continue;
            };
            let everyone = LabelSelector::default();
            let selector = spec.pod_selector.as_ref().unwrap_or(&everyone);
            if ns != pod.namespace || !matches(selector, Some(&pod.labels)) {
                continue;
            }
            let (is_ingress, is_egress) = directions(spec);
            if is_ingress {
                let allows = ingress.get_or_insert_with(Vec::new);
                for rule in spec.ingress.iter().flatten() {
                    if let Some(p) = ports(rule.ports.as_ref(), &[pod]) {
                        allows.push(Allow {
                            peers: peers(&world, rule.from.as_ref(), ns),
                            ports: p,
                        });
                    }
                }
            }
            if is_egress {
                let allows = egress.get_or_insert_with(Vec::new);
                for rule in spec.egress.iter().flatten() {
                    let rule_peers = peers(&world, rule.to.as_ref(), ns);
                    allows.extend(egress_allows(&world, rule.ports.as_ref(), rule_peers));
                }
            }
        }
        if ingress.is_some() || egress.is_some() {
            for a in ingress.iter_mut().chain(egress.iter_mut()) {
                a.sort();
                a.dedup();
            }
            out.push(PodRules {
                key: pod.key(),
                ip: pod.ip,
                ingress,
                egress,
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The nft rules of one direction's chain: each allow `return`s to the caller (the other direction
/// is still checked), and what no rule allows is dropped. `field` is `saddr` (ingress: who sent
/// it) or `daddr` (egress: where it goes).
pub fn chain_rules(allows: &[Allow], field: &str) -> Vec<String> {
    let mut rules = Vec::new();
    for allow in allows {
        let port_parts: Vec<String> = if allow.ports.is_empty() {
            vec![String::new()]
        } else {
            allow
                .ports
                .iter()
                .map(|p| match p.range {
                    None => format!(" meta l4proto {}", p.protocol),
                    Some((a, b)) if a == b => format!(" meta l4proto {} th dport {a}", p.protocol),
                    Some((a, b)) => format!(" meta l4proto {} th dport {a}-{b}", p.protocol),
                })
                .collect()
        };
        for peer in &allow.peers {
            let peer_part = match peer {
                Peer::Any => String::new(),
                // Nobody matches: nothing to write (nft refuses an empty anonymous set).
                Peer::Addrs(a) if a.is_empty() => continue,
                Peer::Addrs(a) => {
                    let list: Vec<String> = a.iter().map(|ip| ip.to_string()).collect();
                    format!(" ip {field} {{ {} }}", list.join(", "))
                }
                Peer::Block { cidr, except } if except.is_empty() => format!(" ip {field} {cidr}"),
                Peer::Block { cidr, except } => {
                    let list: Vec<String> = except.iter().map(|e| e.to_string()).collect();
                    format!(" ip {field} {cidr} ip {field} != {{ {} }}", list.join(", "))
                }
            };
            for port_part in &port_parts {
                let rule = format!("{peer_part}{port_part} return");
                rules.push(rule.trim_start().to_string());
            }
        }
    }
    rules.push("drop".into());
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, ip: &str, labels: &[(&str, &str)], node: &str) -> PolicyPod {
        PolicyPod {
            namespace: ns.into(),
            name: name.into(),
            ip: ip.parse().unwrap(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            node: Some(node.into()),
            named_ports: BTreeMap::from([(("http".to_string(), Protocol::Tcp), 8080)]),
        }
    }

    fn policy(v: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(v).unwrap()
    }

    fn ns(name: &str, labels: serde_json::Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    fn world() -> (Vec<PolicyPod>, Vec<Namespace>) {
        (
            vec![
                pod("app", "db", "10.42.1.5", &[("role", "db")], "a"),
                pod("app", "web", "10.42.2.6", &[("role", "web")], "b"),
                pod("other", "tool", "10.42.2.7", &[("role", "web")], "b"),
            ],
            vec![
                ns("app", json!({"team": "x"})),
                ns("other", json!({"team": "y"})),
            ],
        )
    }

    #[test]
    fn pods_no_policy_selects_are_not_isolated() {
        let (pods, nss) = world();
        let p = policy(json!({"metadata": {"name": "p", "namespace": "app"},
            "spec": {"podSelector": {"matchLabels": {"role": "db"}}}}));
        assert!(compile("b", &pods, &nss, [&p]).is_empty());
        let rules = compile("a", &pods, &nss, [&p]);
        assert_eq!(rules.len(), 1);
        // Default deny: isolated for ingress with no allow; egress untouched.
        assert_eq!(rules[0].ingress, Some(vec![]));
        assert_eq!(rules[0].egress, None);
        assert_eq!(chain_rules(&[], "saddr"), vec!["drop".to_string()]);
    }

    #[test]
    fn selectors_named_ports_and_namespaces_resolve_to_addresses() {
        let (pods, nss) = world();
        let p = policy(json!({"metadata": {"name": "p", "namespace": "app"},
        "spec": {"podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"role": "web"}}}],
                 "ports": [{"port": "http"}]},
                {"from": [{"namespaceSelector": {"matchLabels": {"team": "y"}}}],
                 "ports": [{"port": 5000, "endPort": 5010, "protocol": "UDP"}]},
                {"from": [{"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.1.0/24"]}}]}
            ]}}));
        let rules = compile("a", &pods, &nss, [&p]);
        let ingress = rules[0].ingress.clone().unwrap();
        let text = chain_rules(&ingress, "saddr");
        assert!(
            text.contains(
                &"ip saddr { 10.42.2.6 } meta l4proto tcp th dport 8080 return".to_string()
            ),
            "{text:?}"
        );
        assert!(
            text.contains(
                &"ip saddr { 10.42.2.7 } meta l4proto udp th dport 5000-5010 return".to_string()
            ),
            "{text:?}"
        );
        assert!(
            text.contains(
                &"ip saddr 192.168.0.0/16 ip saddr != { 192.168.1.0/24 } return".to_string()
            ),
            "{text:?}"
        );
        assert_eq!(text.last().map(String::as_str), Some("drop"));
    }

    #[test]
    fn egress_isolation_follows_policy_types_and_named_ports_use_the_destination() {
        let (pods, nss) = world();
        let p = policy(json!({"metadata": {"name": "p", "namespace": "app"},
            "spec": {"podSelector": {"matchLabels": {"role": "web"}}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": {"matchLabels": {"role": "db"}}}], "ports": [{"port": "http"}]}]}}));
        let rules = compile("b", &pods, &nss, [&p]);
        assert_eq!(rules.len(), 1, "only app/web is selected: {rules:?}");
        assert_eq!(rules[0].ingress, None);
        let text = chain_rules(rules[0].egress.as_ref().unwrap(), "daddr");
        assert_eq!(
            text[0],
            "ip daddr { 10.42.1.5 } meta l4proto tcp th dport 8080 return"
        );
    }

    #[test]
    fn a_name_no_pod_has_opens_nothing_and_empty_peers_write_no_rule() {
        let (pods, nss) = world();
        let p = policy(json!({"metadata": {"name": "p", "namespace": "app"},
            "spec": {"podSelector": {},
                "ingress": [{"ports": [{"port": "nope"}]},
                            {"from": [{"podSelector": {"matchLabels": {"role": "absent"}}}]}]}}));
        let rules = compile("a", &pods, &nss, [&p]);
        let text = chain_rules(rules[0].ingress.as_ref().unwrap(), "saddr");
        assert_eq!(text, vec!["drop".to_string()]);
    }
}
