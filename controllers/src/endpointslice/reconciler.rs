//! The packing of a Service's endpoints into slices (upstream's reconcileByPortMapping, simplified):
//! endpoints are grouped by address family and resolved port set; existing slices of a group are kept
//! and updated first, then filled, and new slices are made only for what does not fit; slices of groups
//! that no longer exist are deleted.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};

/// One group: the slices of an address family with the same ports.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// `IPv4` or `IPv6`.
    pub family: String,
    /// The ports every endpoint of the group has.
    pub ports: Vec<EndpointPort>,
    /// The endpoints, in order.
    pub endpoints: Vec<Endpoint>,
}

/// What to write.
#[derive(Debug, Default)]
pub struct Plan {
    /// New slices (without names: they are made with generateName).
    pub create: Vec<EndpointSlice>,
    /// Changed existing slices (with their resourceVersion, for a conditional update).
    pub update: Vec<EndpointSlice>,
    /// Slices to delete.
    pub delete: Vec<Arc<EndpointSlice>>,
}

fn key(family: &str, ports: &[EndpointPort]) -> String {
    format!(
        "{family}/{}",
        serde_json::to_string(ports).unwrap_or_default()
    )
}

fn address(e: &Endpoint) -> String {
    e.addresses.first().cloned().unwrap_or_default()
}

/// Plans the slices for `groups` given the `existing` managed slices; `template` gives new slices their
/// metadata (labels, owner) and `max` is the endpoints per slice. When no endpoint exists at all one
/// empty slice stays (upstream's placeholder) in `placeholder_family`.
pub fn plan(
    groups: Vec<Group>,
    existing: &[Arc<EndpointSlice>],
    template: &EndpointSlice,
    max: usize,
    placeholder_family: &str,
) -> Plan {
    let mut plan = Plan::default();
    let total: usize = groups.iter().map(|g| g.endpoints.len()).sum();
    let mut existing: Vec<Arc<EndpointSlice>> = existing.to_vec();
    existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let relabel = |s: &EndpointSlice| -> EndpointSlice {
        let mut s = s.clone();
        s.metadata.labels = template.metadata.labels.clone();
        s.metadata.owner_references = template.metadata.owner_references.clone();
        s
    };
    if total == 0 {
        // Keep one empty slice: the first existing one, emptied, or a new one.
        let mut rest = existing.into_iter();
        match rest.next() {
            Some(first) => {
                let mut s = relabel(&first);
                s.address_type = placeholder_family.to_string();
                s.endpoints.clear();
                s.ports = None;
                if s != *first {
                    plan.update.push(s);
                }
            }
            None => {
                let mut s = template.clone();
                s.address_type = placeholder_family.to_string();
                plan.create.push(s);
            }
        }
        plan.delete.extend(rest);
        return plan;
    }
    let wanted: HashSet<String> = groups.iter().map(|g| key(&g.family, &g.ports)).collect();
    let mut by_group: BTreeMap<String, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for s in existing {
        let k = key(&s.address_type, s.ports.as_deref().unwrap_or(&[]));
        if wanted.contains(&k) {
            by_group.entry(k).or_default().push(s);
        } else {
            plan.delete.push(s);
        }
    }
    for g in groups {
        let k = key(&g.family, &g.ports);
        let slices = by_group.remove(&k).unwrap_or_default();
        let mut desired: BTreeMap<String, Endpoint> = g
            .endpoints
            .iter()
            .map(|e| (address(e), e.clone()))
            .collect();
        // Pass 1: each existing slice keeps the endpoints still wanted, in their current form.
        let mut kept: Vec<(Arc<EndpointSlice>, EndpointSlice)> = Vec::new();
        for old in slices {
            let mut s = relabel(&old);
            s.endpoints = old
                .endpoints
                .iter()
                .filter_map(|e| desired.remove(&address(e)))
                .collect();
            kept.push((old, s));
        }
        let mut remaining: Vec<Endpoint> = g
            .endpoints
            .iter()
            .filter(|e| desired.contains_key(&address(e)))
            .cloned()
            .collect();
        // Pass 2: slices that change anyway take new endpoints first.
        for (old, s) in kept.iter_mut() {
            if **old != *s && !s.endpoints.is_empty() {
                while s.endpoints.len() < max && !remaining.is_empty() {
                    s.endpoints.push(remaining.remove(0));
                }
            }
        }
        // Pass 3: the fullest unchanged slice that can take all that is left takes it.
        if !remaining.is_empty() {
            let fit = kept
                .iter_mut()
                .filter(|(old, s)| **old == *s && s.endpoints.len() + remaining.len() <= max)
                .max_by_key(|(_, s)| s.endpoints.len());
            if let Some((_, s)) = fit {
                s.endpoints.append(&mut remaining);
            }
        }
        for (old, s) in kept {
            if s.endpoints.is_empty() {
                plan.delete.push(old);
            } else if *old != s {
                plan.update.push(s);
            }
        }
        // Pass 4: new slices for the rest.
        for chunk in remaining.chunks(max.max(1)) {
            let mut s = template.clone();
            s.address_type = g.family.clone();
            s.ports = Some(g.ports.clone());
            s.endpoints = chunk.to_vec();
            plan.create.push(s);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ep(ip: &str) -> Endpoint {
        Endpoint {
            addresses: vec![ip.into()],
            ..Default::default()
        }
    }

    fn group(n: usize) -> Group {
        Group {
            family: "IPv4".into(),
            ports: vec![EndpointPort {
                port: Some(80),
                ..Default::default()
            }],
            endpoints: (0..n)
                .map(|i| ep(&format!("10.0.{}.{}", i / 250, i % 250)))
                .collect(),
        }
    }

    fn existing(name: &str, g: &Group, range: std::ops::Range<usize>) -> Arc<EndpointSlice> {
        Arc::new(EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            address_type: g.family.clone(),
            ports: Some(g.ports.clone()),
            endpoints: g.endpoints[range].to_vec(),
        })
    }

    #[test]
    fn new_endpoints_are_cut_into_slices_of_max() {
        let p = plan(
            vec![group(250)],
            &[],
            &EndpointSlice::default(),
            100,
            "IPv4",
        );
        let sizes: Vec<usize> = p.create.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        assert!(p.update.is_empty() && p.delete.is_empty());
    }

    #[test]
    fn existing_slices_are_filled_before_new_ones_are_made() {
        let g = group(120);
        let old = existing("a", &g, 0..90);
        let p = plan(vec![g], &[old], &EndpointSlice::default(), 100, "IPv4");
        // 30 more do not fit into "a" (90 + 30 > 100): a new slice, "a" unchanged.
        assert_eq!(p.create.len(), 1);
        assert_eq!(p.create[0].endpoints.len(), 30);
        let g = group(95);
        let old = existing("a", &g, 0..90);
        let p = plan(vec![g], &[old], &EndpointSlice::default(), 100, "IPv4");
        assert!(p.create.is_empty());
        assert_eq!(p.update.len(), 1);
        assert_eq!(p.update[0].endpoints.len(), 95);
    }

    #[test]
    fn gone_endpoints_leave_and_empty_slices_are_deleted() {
        let g = group(10);
        let a = existing("a", &g, 0..5);
        let b = existing("b", &g, 5..10);
        let mut smaller = g.clone();
        smaller.endpoints.truncate(5);
        let p = plan(
            vec![smaller],
            &[a, b],
            &EndpointSlice::default(),
            100,
            "IPv4",
        );
        assert!(p.create.is_empty() && p.update.is_empty());
        assert_eq!(p.delete.len(), 1);
        assert_eq!(p.delete[0].metadata.name.as_deref(), Some("b"));
    }

    #[test]
    fn no_endpoints_leave_one_placeholder() {
        let g = group(10);
        let a = existing("a", &g, 0..5);
        let b = existing("b", &g, 5..10);
        let p = plan(vec![], &[a, b], &EndpointSlice::default(), 100, "IPv4");
        assert_eq!(p.update.len(), 1);
        assert!(p.update[0].endpoints.is_empty());
        assert_eq!(p.delete.len(), 1);
    }
}
