//! Chain and set names, formed as kube-proxy's nftables mode forms them: a prefix saying what the
//! chain is, eight base32 characters of a sha256 of the rest (so two names never collide after
//! truncation), then the readable `namespace/service/protocol/port` (and `__ip/port` for an endpoint).
//! Any name holding a `/` is a per-service object; the fixed chains and maps never hold one.

use std::net::Ipv4Addr;

use crate::model::PortKey;

/// nft's limit on a name's length.
const MAX_NAME: usize = 256;

/// The first eight characters of the RFC 4648 base32 encoding of sha256(`s`).
fn hash8(s: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    // Eight base32 characters are exactly the first 40 bits.
    let bits = digest
        .as_ref()
        .iter()
        .take(5)
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    (0..8)
        .map(|i| ALPHABET[((bits >> (35 - 5 * i)) & 31) as usize] as char)
        .collect()
}

fn name(prefix: &str, rest: &str) -> String {
    let mut n = format!("{prefix}-{}-{rest}", hash8(rest));
    if n.len() > MAX_NAME {
        // Only ASCII reaches here (Kubernetes names and IPs), so any byte index is a boundary.
        n.truncate(MAX_NAME);
    }
    n
}

/// The chain that checks traffic into (`in`) or out of (`out`) the pod `namespace/name` against
/// the NetworkPolicies that isolate it.
pub fn policy_chain(direction: &str, pod_key: &str) -> String {
    name(&format!("policy-{direction}"), pod_key)
}

/// The chain that load-balances ClusterIP traffic of a Service port over its endpoints.
pub fn service_chain(key: &PortKey) -> String {
    name("service", &key.to_string())
}

/// The chain for traffic from outside (NodePort, LoadBalancer, external IPs).
pub fn external_chain(key: &PortKey) -> String {
    name("external", &key.to_string())
}

/// The chain that load-balances over this node's endpoints only (Local traffic policies).
pub fn local_chain(key: &PortKey) -> String {
    name("local", &key.to_string())
}

fn endpoint_rest(key: &PortKey, ip: Ipv4Addr, port: u16) -> String {
    format!("{key}__{ip}/{port}")
}

/// The chain that DNATs to one endpoint.
pub fn endpoint_chain(key: &PortKey, ip: Ipv4Addr, port: u16) -> String {
    name("endpoint", &endpoint_rest(key, ip, port))
}

/// The set of clients stuck to one endpoint (ClientIP session affinity).
pub fn affinity_set(key: &PortKey, ip: Ipv4Addr, port: u16) -> String {
    name("affinity", &endpoint_rest(key, ip, port))
}

/// The chain that DNATs a pod's `hostPort` to the pod (`namespace/pod/protocol/port`).
pub fn host_port_chain(pod: &str, protocol: crate::model::Protocol, port: u16) -> String {
    name("hostport", &format!("{pod}/{protocol}/{port}"))
}

/// Whether `name` is a per-service chain or set (one netprog made and may delete).
pub fn is_per_service(name: &str) -> bool {
    name.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;

    fn key() -> PortKey {
        PortKey {
            namespace: "default".into(),
            service: "web".into(),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
        }
    }

    #[test]
    fn names_carry_a_hash_and_the_port() {
        let n = service_chain(&key());
        assert!(n.starts_with("service-"), "{n}");
        assert!(n.ends_with("-default/web/tcp/http"), "{n}");
        let hash = &n["service-".len().."service-".len() + 8];
        assert!(hash
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b)));
        assert!(is_per_service(&n));
        assert!(!is_per_service("services"));
    }

    #[test]
    fn base32_matches_rfc4648() {
        // sha256("") starts e3 b0 c4 42 98: base32 "4OYMIQUY".
        assert_eq!(hash8(""), "4OYMIQUY");
    }

    #[test]
    fn endpoint_names_differ_by_address_and_are_bounded() {
        let a = endpoint_chain(&key(), Ipv4Addr::new(10, 42, 0, 2), 80);
        let b = endpoint_chain(&key(), Ipv4Addr::new(10, 42, 0, 3), 80);
        assert_ne!(a, b);
        assert!(a.ends_with("__10.42.0.2/80"));
        let long = PortKey {
            namespace: "n".repeat(63),
            service: "s".repeat(63),
            port_name: "p".repeat(15),
            protocol: Protocol::Udp,
        };
        let n = affinity_set(&long, Ipv4Addr::new(10, 42, 200, 200), 65535);
        assert!(n.len() <= MAX_NAME);
    }
}
