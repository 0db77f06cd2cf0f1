//! Endpoints (upstream's `pkg/registry/core/endpoint` and the v1 defaults): a port's protocol is TCP
//! unless given, and the subsets are repacked into their canonical form on every write (upstream's
//! `RepackSubsets`): one subset per distinct set of addresses, each address once (by IP and target
//! uid), not-ready winning over ready for the same port, addresses sorted by IP then target uid,
//! addresses without ports kept in a subset without ports, and subsets without addresses gone.
//!
//! Upstream orders several ports of one subset, and several subsets, by a hash of their Go
//! representation; keel keeps them in the order they were first given.

use serde_json::{json, Map, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::validation::defaults::set_default;

pub(super) struct Endpoints;

/// An address's identity: its IP and its target's uid.
fn address_key(a: &Value) -> (String, String) {
    let ip = a
        .get("ip")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let uid = a
        .get("targetRef")
        .and_then(|t| t.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    (ip, uid)
}

/// Upstream's LessEndpointAddress: IP bytes, then an address without a target first, then target uid.
fn address_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    let (ia, ib) = (
        a.get("ip").and_then(Value::as_str).unwrap_or(""),
        b.get("ip").and_then(Value::as_str).unwrap_or(""),
    );
    ia.as_bytes().cmp(ib.as_bytes()).then_with(|| {
        let target = |v: &Value| v.get("targetRef").filter(|t| !t.is_null()).cloned();
        match (target(a), target(b)) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(_), Some(_)) => address_key(a).1.cmp(&address_key(b).1),
        }
    })
}

/// Which addresses (by index) offer a port, and whether each is ready there.
type Offering = Vec<(usize, bool)>;

/// The canonical subsets of `subsets`.
fn repack(subsets: &[Value]) -> Vec<Value> {
    // Every address once, as first given.
    let mut addresses: Vec<((String, String), Value)> = Vec::new();
    // Each port with the readiness of each address offering it, in the order ports were first given.
    let mut ports: Vec<(Value, Offering)> = Vec::new();
    for subset in subsets {
        let list = |field: &str| -> Vec<Value> {
            subset
                .get(field)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (ready, not_ready) = (list("addresses"), list("notReadyAddresses"));
        let mut offered_ports = list("ports");
        if offered_ports.is_empty() {
            // Addresses without ports are kept (upstream's sentinel port): `null` stands for it.
            offered_ports.push(Value::Null);
        }
        for port in offered_ports {
            let p = match ports.iter().position(|(q, _)| *q == port) {
                Some(p) => p,
                None => {
                    ports.push((port, Vec::new()));
                    ports.len() - 1
                }
            };
            let offered = ready
                .iter()
                .map(|a| (a, true))
                .chain(not_ready.iter().map(|a| (a, false)));
            for (addr, is_ready) in offered {
                let key = address_key(addr);
                let a = match addresses.iter().position(|(k, _)| *k == key) {
                    Some(a) => a,
                    None => {
                        addresses.push((key, addr.clone()));
                        addresses.len() - 1
                    }
                };
                let set = &mut ports[p].1;
                match set.iter_mut().find(|(i, _)| *i == a) {
                    // Not ready wins over ready.
                    Some(entry) => entry.1 = entry.1 && is_ready,
                    None => set.push((a, is_ready)),
                }
            }
        }
    }
    // Ports offered by the same addresses with the same readiness share a subset.
    let mut groups: Vec<(Offering, Vec<Value>)> = Vec::new();
    for (port, mut set) in ports {
        set.sort();
        let port: Vec<Value> = Some(port).filter(|p| !p.is_null()).into_iter().collect();
        match groups.iter_mut().find(|(s, _)| *s == set) {
            Some(g) => g.1.extend(port),
            None => groups.push((set, port)),
        }
    }
    groups
        .into_iter()
        .filter(|(set, _)| !set.is_empty())
        .map(|(set, ports)| {
            let pick = |ready: bool| {
                let mut l: Vec<Value> = set
                    .iter()
                    .filter(|(_, r)| *r == ready)
                    .map(|(i, _)| addresses[*i].1.clone())
                    .collect();
                l.sort_by(address_order);
                l
            };
            let mut subset = Map::new();
            let (ready, not_ready) = (pick(true), pick(false));
            if !ready.is_empty() {
                subset.insert("addresses".into(), Value::Array(ready));
            }
            if !not_ready.is_empty() {
                subset.insert("notReadyAddresses".into(), Value::Array(not_ready));
            }
            if !ports.is_empty() {
                subset.insert("ports".into(), Value::Array(ports));
            }
            Value::Object(subset)
        })
        .collect()
}

impl Strategy for Endpoints {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let subsets = obj.get_mut("subsets").and_then(Value::as_array_mut);
        for subset in subsets.into_iter().flatten() {
            let ports = subset.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten() {
                if let Some(p) = port.as_object_mut() {
                    set_default(p, "protocol", json!("TCP"));
                }
            }
        }
    }

    fn canonicalize(&self, obj: &mut Value) {
        let Some(m) = obj.as_object_mut() else {
            return;
        };
        let Some(Value::Array(subsets)) = m.get("subsets") else {
            return;
        };
        let packed = repack(subsets);
        if packed.is_empty() {
            m.remove("subsets");
        } else {
            m.insert("subsets".into(), Value::Array(packed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_are_repacked_as_upstream() {
        let p80 = json!({"port": 80, "protocol": "TCP"});
        let p443 = json!({"name": "tls", "port": 443, "protocol": "TCP"});
        let got = repack(&[
            json!({"addresses": [{"ip": "10.0.0.2"}, {"ip": "10.0.0.1"}], "ports": [p80]}),
            json!({"addresses": [{"ip": "10.0.0.1"}], "notReadyAddresses": [{"ip": "10.0.0.2"}], "ports": [p443]}),
            json!({"addresses": [{"ip": "10.0.0.9"}]}),
            json!({"ports": [{"port": 8080, "protocol": "TCP"}]}),
        ]);
        assert_eq!(
            got,
            vec![
                json!({"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [p80]}),
                json!({"addresses": [{"ip": "10.0.0.1"}], "notReadyAddresses": [{"ip": "10.0.0.2"}], "ports": [p443]}),
                json!({"addresses": [{"ip": "10.0.0.9"}]}),
            ]
        );
        // The same addresses for two ports: one subset; an address given twice: once, not ready winning.
        let got = repack(&[
            json!({"addresses": [{"ip": "10.0.0.1"}], "ports": [p80]}),
            json!({"addresses": [{"ip": "10.0.0.1"}], "ports": [p443]}),
        ]);
        assert_eq!(
            got,
            vec![json!({"addresses": [{"ip": "10.0.0.1"}], "ports": [p80, p443]})]
        );
        let got = repack(&[
            json!({"addresses": [{"ip": "10.0.0.1"}], "notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [p80]}),
        ]);
        assert_eq!(
            got,
            vec![json!({"notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [p80]})]
        );
    }
}
