//! Services (upstream's `pkg/registry/core/service`): RFC 1035 label names, type and port defaults and
//! checks, an immutable `spec.clusterIP`; the ClusterIP and node ports are allocated on create as claims
//! written with the Service (see `alloc`) and released with it.

use serde_json::{json, Value};

use super::{Allocation, Strategy};
use crate::admission::defaults::{obj_mut, set_default};
use crate::admission::names::NameRule;
use crate::admission::validate::immutable;
use crate::alloc;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::storage::Storage;

pub(super) struct Service;

impl Strategy for Service {
    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035
    }

    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj_mut(obj, "spec") else {
            return;
        };
        set_default(spec, "type", json!("ClusterIP"));
        set_default(spec, "sessionAffinity", json!("None"));
        let external = spec.get("type") == Some(&json!("ExternalName"));
        if !external {
            set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        }
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                if let Some(pm) = p.as_object_mut() {
                    set_default(pm, "protocol", json!("TCP"));
                    if let Some(port) = pm.get("port").cloned() {
                        set_default(pm, "targetPort", port);
                    }
                }
            }
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        check_service(obj, &mut causes);
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        immutable(old, new, "spec.clusterIP", &mut causes);
        causes
    }

    fn allocate<'a>(
        &'a self,
        storage: &'a Storage,
        def: &'a ResourceDef,
        obj: &'a mut Value,
    ) -> Allocation<'a> {
        Box::pin(alloc::allocate(storage, def, obj))
    }

    fn forget(&self, obj: &mut Value) {
        alloc::forget(obj);
    }

    fn claims(&self, obj: &Value) -> Vec<String> {
        alloc::claims(obj)
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

fn check_service(obj: &Value, causes: &mut Vec<Cause>) {
    let kind = path(obj, "spec.type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let types = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !types.contains(&kind) {
        causes.push(Cause::not_supported("spec.type", &json!(kind), &types));
    }
    let ports = path(obj, "spec.ports").and_then(Value::as_array);
    let headless = path(obj, "spec.clusterIP").and_then(Value::as_str) == Some("None");
    if kind != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
        causes.push(Cause::required("spec.ports"));
    }
    if kind == "ExternalName"
        && path(obj, "spec.externalName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        causes.push(Cause::required("spec.externalName"));
    }
    let list = ports.cloned().unwrap_or_default();
    let mut names_seen = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            causes.push(Cause::invalid(
                &format!("spec.ports[{i}].port"),
                &json!(port),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if list.len() > 1 && name.is_empty() {
            causes.push(Cause::required(&format!("spec.ports[{i}].name")));
        } else if !name.is_empty() {
            if names_seen.contains(&name) {
                causes.push(Cause::duplicate(
                    &format!("spec.ports[{i}].name"),
                    &json!(name),
                ));
            }
            names_seen.push(name);
        }
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            causes.push(Cause::not_supported(
                &format!("spec.ports[{i}].protocol"),
                &json!(proto),
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if let Some(np) = p.get("nodePort").and_then(Value::as_i64) {
            if np != 0 && kind == "ClusterIP" {
                causes.push(Cause::forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
}
