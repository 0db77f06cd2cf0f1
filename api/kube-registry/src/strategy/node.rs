//! Nodes (upstream's `pkg/registry/core/node` and the v1 conversion of `NodeSpec`): `spec.podCIDRs` is the
//! truth and `spec.podCIDR` its first entry (a client that sets only `podCIDR` gets the list made from
//! it); every pod CIDR is a valid CIDR, at most one per IP family; and once set the pod CIDRs never change
//! (the node-ipam controller may set them on a Node that has none). A Node keeps the status it is created
//! with (a kubelet registers with its capacity and conditions in one POST), unlike most kinds.

use std::net::IpAddr;

use serde_json::{json, Value};

use super::Strategy;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct Node;

/// Upstream's message for a changed pod CIDR (`ValidateNodeUpdate`).
const POD_CIDR_CHANGE: &str = "node updates may not change podCIDR except from \"\" to valid";

/// The node's `spec.podCIDRs`.
fn pod_cidrs(obj: &Value) -> Vec<Value> {
    path(obj, "spec.podCIDRs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The IP family of a CIDR written `address/prefix`, if it is one.
fn cidr_family(s: &str) -> Option<&'static str> {
    let (addr, prefix) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u32 = prefix.parse().ok()?;
    match addr {
        IpAddr::V4(_) if prefix <= 32 => Some("IPv4"),
        IpAddr::V6(_) if prefix <= 128 => Some("IPv6"),
        _ => None,
    }
}

impl Strategy for Node {
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        // Upstream lets every field of a Node be set on create, status included.
        super::start_generation(def, obj);
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let single = spec
            .get("podCIDR")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(String::from);
        let first = spec
            .get("podCIDRs")
            .and_then(Value::as_array)
            .and_then(|l| l.first())
            .cloned();
        match (first, single) {
            (Some(first), _) => {
                spec.insert("podCIDR".into(), first);
            }
            (None, Some(single)) => {
                spec.insert("podCIDRs".into(), json!([single]));
            }
            (None, None) => {}
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let cidrs = pod_cidrs(obj);
        let mut families = Vec::new();
        for (i, c) in cidrs.iter().enumerate() {
            match c.as_str().and_then(cidr_family) {
                Some(f) => families.push(f),
                None => causes.push(Cause::invalid(
                    &format!("spec.podCIDRs[{i}]"),
                    c,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                )),
            }
        }
        let dual_stack = families.len() == 2 && families[0] != families[1];
        if cidrs.len() > 1 && families.len() == cidrs.len() && !dual_stack {
            causes.push(Cause::invalid(
                "spec.podCIDRs",
                &Value::Array(cidrs),
                "may specify no more than one CIDR for each IP family",
            ));
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let before = pod_cidrs(old);
        if !before.is_empty() && before != pod_cidrs(new) {
            return vec![Cause::forbidden("spec.podCIDRs", POD_CIDR_CHANGE)];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn def() -> std::sync::Arc<ResourceDef> {
        resource::find("", "v1", "nodes").expect("nodes")
    }

    fn defaulted(mut v: Value) -> Value {
        Node.set_defaults(&def(), &mut v);
        v
    }

    #[test]
    fn create_keeps_the_status() {
        let mut v = json!({"metadata": {"name": "n"}, "status": {"capacity": {"pods": "110"}}});
        Node.prepare_for_create(&def(), &mut v);
        assert_eq!(v["status"]["capacity"]["pods"], "110");
    }

    #[test]
    fn pod_cidrs_is_the_truth_and_pod_cidr_its_first() {
        let v = defaulted(json!({"spec": {"podCIDR": "10.42.1.0/24"}}));
        assert_eq!(v["spec"]["podCIDRs"], json!(["10.42.1.0/24"]));
        let v = defaulted(json!({"spec": {"podCIDRs": ["10.42.2.0/24", "fd00::/64"]}}));
        assert_eq!(v["spec"]["podCIDR"], "10.42.2.0/24");
        let v =
            defaulted(json!({"spec": {"podCIDR": "10.42.9.0/24", "podCIDRs": ["10.42.2.0/24"]}}));
        assert_eq!(v["spec"]["podCIDR"], "10.42.2.0/24");
        assert_eq!(defaulted(json!({"spec": {}})), json!({"spec": {}}));
        assert_eq!(defaulted(json!({"metadata": {}})), json!({"metadata": {}}));
    }

    #[test]
    fn pod_cidrs_are_valid_and_one_per_family() {
        let check = |v: Value| Node.validate(&def(), &v);
        assert!(check(json!({"spec": {"podCIDRs": ["10.42.1.0/24"]}})).is_empty());
        assert!(check(json!({"spec": {"podCIDRs": ["10.42.1.0/24", "fd00::/64"]}})).is_empty());
        let bad = check(json!({"spec": {"podCIDRs": ["10.42.1.0"]}}));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].field, "spec.podCIDRs[0]");
        assert_eq!(
            check(json!({"spec": {"podCIDRs": ["10.42.1.0/33"]}})).len(),
            1
        );
        let two = check(json!({"spec": {"podCIDRs": ["10.42.1.0/24", "10.42.2.0/24"]}}));
        assert_eq!(two.len(), 1);
        assert_eq!(two[0].field, "spec.podCIDRs");
        assert!(check(json!({"spec": {}})).is_empty());
    }

    #[test]
    fn pod_cidrs_only_go_from_empty_to_set() {
        let update = |old: Value, new: Value| Node.validate_update(&def(), &old, &new);
        let none = json!({"spec": {}});
        let a = json!({"spec": {"podCIDR": "10.42.1.0/24", "podCIDRs": ["10.42.1.0/24"]}});
        let b = json!({"spec": {"podCIDR": "10.42.2.0/24", "podCIDRs": ["10.42.2.0/24"]}});
        assert!(update(none.clone(), a.clone()).is_empty());
        assert!(update(a.clone(), a.clone()).is_empty());
        let changed = update(a.clone(), b);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].field, "spec.podCIDRs");
        assert_eq!(changed[0].message, format!("Forbidden: {POD_CIDR_CHANGE}"));
        assert_eq!(update(a, none).len(), 1);
    }
}
