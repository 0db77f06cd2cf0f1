//! Services (upstream's `pkg/registry/core/service`): RFC 1035 label names, type and port defaults and
//! checks, cluster IPs that may not change once set (except to and from ExternalName); the cluster IP,
//! node ports and health-check node port are claims written with the Service (see `alloc`), taken and
//! released by updates in the Txn that writes them, and released with it.

use serde_json::{json, Value};

use super::{Allocation, Strategy, UpdateAllocation};
use crate::alloc;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::{go_strings, Cause};
use crate::storage::Storage;
use crate::validation::defaults::{obj_mut, set_default};
use crate::validation::names::NameRule;

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
        let kind = spec.get("type").cloned();
        if kind != Some(json!("ExternalName")) {
            set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        }
        // Upstream's v1 defaults, never overriding the client's choice.
        if kind == Some(json!("NodePort")) || kind == Some(json!("LoadBalancer")) {
            set_default(spec, "externalTrafficPolicy", json!("Cluster"));
        }
        if kind == Some(json!("LoadBalancer")) {
            set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
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
        cluster_ips_kept(old, new, &mut causes);
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

    fn allocate_update<'a>(
        &'a self,
        storage: &'a Storage,
        def: &'a ResourceDef,
        old: &'a Value,
        new: &'a mut Value,
    ) -> UpdateAllocation<'a> {
        Box::pin(alloc::allocate_update(storage, def, old, new))
    }

    fn claims(&self, obj: &Value) -> Vec<String> {
        alloc::claims(obj)
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

fn str_list(obj: &Value, field: &str) -> Vec<String> {
    crate::object::strings(path(obj, field))
}

/// Cluster IPs may not change once set (upstream's validateUpgradeDowngradeClusterIPs, single-stack):
/// only a change of type to or from ExternalName moves them, and a headless Service stays headless.
fn cluster_ips_kept(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    let kind = |o: &Value| {
        path(o, "spec.type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string()
    };
    if kind(old) == "ExternalName" || kind(new) == "ExternalName" {
        return;
    }
    let (was, now) = (
        str_list(old, "spec.clusterIPs"),
        str_list(new, "spec.clusterIPs"),
    );
    let headless = |ips: &[String]| ips.first().is_some_and(|ip| ip == "None");
    if headless(&was) && headless(&now) {
        return;
    }
    // Go prints the absent list upstream holds here as a nil slice.
    let printed = if now.is_empty() {
        "[]string(nil)".to_string()
    } else {
        go_strings(&now)
    };
    if was.len() == now.len() {
        for (i, ip) in was.iter().enumerate() {
            if Some(ip) != now.get(i) {
                causes.push(Cause::invalid_printed(
                    &format!("spec.clusterIPs[{i}]"),
                    &printed,
                    "may not change once set",
                ));
            }
        }
    } else if was.len() > now.len() {
        if now.is_empty() {
            causes.push(Cause::invalid_printed(
                "spec.clusterIPs[0]",
                &printed,
                "primary clusterIP can not be unset",
            ));
        } else if was.first() != now.first() {
            causes.push(Cause::invalid_printed(
                "spec.clusterIPs[0]",
                &printed,
                "may not change once set",
            ));
        }
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
    // One node port per protocol: the same number may serve TCP and UDP.
    let mut node_ports: Vec<(&str, i64)> = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let np = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if np == 0 {
            continue;
        }
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if node_ports.contains(&(proto, np)) {
            causes.push(Cause::duplicate(
                &format!("spec.ports[{i}].nodePort"),
                &json!(np),
            ));
        }
        node_ports.push((proto, np));
    }
    if kind == "ExternalName" {
        let ip = path(obj, "spec.clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !ip.is_empty() || !str_list(obj, "spec.clusterIPs").is_empty() {
            causes.push(Cause::forbidden(
                "spec.clusterIPs",
                "may not be set for ExternalName services",
            ));
        }
        for f in ["ipFamilies", "ipFamilyPolicy"] {
            let set =
                path(obj, &format!("spec.{f}")).is_some_and(|v| !v.is_null() && v != &json!([]));
            if set {
                causes.push(Cause::forbidden(
                    &format!("spec.{f}"),
                    "may not be set for ExternalName services",
                ));
            }
        }
    }
    let external_ips = path(obj, "spec.externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let accessible =
        matches!(kind, "NodePort" | "LoadBalancer") || (kind == "ClusterIP" && external_ips);
    match path(obj, "spec.externalTrafficPolicy").and_then(Value::as_str) {
        Some(etp) if !etp.is_empty() && !accessible => causes.push(Cause::invalid(
            "spec.externalTrafficPolicy",
            &json!(etp),
            "may only be set for externally-accessible services",
        )),
        Some(etp) if !etp.is_empty() && etp != "Cluster" && etp != "Local" => {
            causes.push(Cause::not_supported(
                "spec.externalTrafficPolicy",
                &json!(etp),
                &["Cluster", "Local"],
            ))
        }
        _ => {}
    }
    let hc = path(obj, "spec.healthCheckNodePort")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let needs_hc = kind == "LoadBalancer"
        && path(obj, "spec.externalTrafficPolicy").and_then(Value::as_str) == Some("Local");
    if hc != 0 && !needs_hc {
        causes.push(Cause::invalid(
            "spec.healthCheckNodePort",
            &json!(hc),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(spec: Value) -> Value {
        json!({"metadata": {"name": "s"}, "spec": spec})
    }

    fn lines(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn cluster_ips_may_not_change_except_through_external_name() {
        let old = svc(
            json!({"type": "ClusterIP", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"]}),
        );
        let mut causes = Vec::new();
        cluster_ips_kept(
            &old,
            &svc(
                json!({"type": "ClusterIP", "clusterIP": "10.96.0.8", "clusterIPs": ["10.96.0.8"]}),
            ),
            &mut causes,
        );
        assert_eq!(
            lines(&causes),
            [
                r#"spec.clusterIPs[0]: Invalid value: []string{"10.96.0.8"}: may not change once set"#
            ]
        );
        causes.clear();
        cluster_ips_kept(&old, &svc(json!({"type": "ClusterIP"})), &mut causes);
        assert_eq!(
            lines(&causes),
            ["spec.clusterIPs[0]: Invalid value: []string(nil): primary clusterIP can not be unset"]
        );
        causes.clear();
        cluster_ips_kept(
            &old,
            &svc(json!({"type": "ExternalName", "externalName": "example.com"})),
            &mut causes,
        );
        cluster_ips_kept(&old, &old, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
    }

    #[test]
    fn type_dependent_fields_are_checked() {
        let mut causes = Vec::new();
        check_service(
            &svc(
                json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": "10.96.0.9"}),
            ),
            &mut causes,
        );
        check_service(
            &svc(
                json!({"type": "ClusterIP", "externalTrafficPolicy": "Cluster", "healthCheckNodePort": 31000,
                "ports": [{"port": 80}]}),
            ),
            &mut causes,
        );
        check_service(
            &svc(json!({"type": "NodePort", "ports": [
                {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30080},
                {"name": "b", "port": 81, "protocol": "UDP", "nodePort": 30080},
                {"name": "c", "port": 82, "protocol": "TCP", "nodePort": 30080}]})),
            &mut causes,
        );
        assert_eq!(
            lines(&causes),
            [
                "spec.clusterIPs: Forbidden: may not be set for ExternalName services",
                r#"spec.externalTrafficPolicy: Invalid value: "Cluster": may only be set for externally-accessible services"#,
                "spec.healthCheckNodePort: Invalid value: 31000: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
                "spec.ports[2].nodePort: Duplicate value: 30080",
            ]
        );
    }
}
