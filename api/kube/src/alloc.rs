//! Unique allocations made at create time: Service ClusterIPs and NodePorts (called from the Service
//! strategy).
//!
//! Each allocated value is a claim key written in the same Txn as the Service (see
//! [`Storage::put_claiming`]); the Txn fails if the claim exists, so two members allocating at once cannot
//! hand out the same address. Deleting the Service deletes its claims in the same Txn.

use std::net::Ipv4Addr;

use rand::Rng;
use serde_json::{json, Value};

use super::object::path;
use super::resource::ResourceDef;
use super::status::{ApiError, Cause, Target};
use super::storage::Storage;

/// The service CIDR: 10.96.0.0/16 (kubeadm's default network; `.1` is the `kubernetes` Service).
pub const SERVICE_NET: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 0);
/// Prefix length of [`SERVICE_NET`].
pub const SERVICE_PREFIX: u32 = 16;
/// The first address, reserved for `default/kubernetes`.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
/// NodePort range, inclusive.
pub const NODE_PORTS: (u16, u16) = (30000, 32767);

const IP_CLAIMS: &str = "/keel/ranges/serviceips/";
const PORT_CLAIMS: &str = "/keel/ranges/servicenodeports/";

fn in_net(ip: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - SERVICE_PREFIX);
    (u32::from(ip) & mask) == u32::from(SERVICE_NET)
}

async fn claimed(storage: &Storage, key: &str) -> Result<bool, ApiError> {
    Ok(storage.get_raw(key).await?.is_some())
}

fn taken(def: &ResourceDef, name: &str, field: &str, value: Value, what: &str) -> ApiError {
    ApiError::Invalid {
        target: Target::new(&def.group, &def.kind, name),
        causes: vec![Cause::invalid(
            field,
            &value,
            &format!("provided {what} is already allocated"),
        )],
    }
}

/// Allocates what the Service `obj` needs and returns the claim keys to write with it (the Service
/// strategy's `allocate`; `def` names the object in errors).
pub async fn allocate(
    storage: &Storage,
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    let name = super::object::name(obj).to_string();
    let kind = path(obj, "spec.type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    let mut claims = Vec::new();
    if kind != "ExternalName" {
        let given = path(obj, "spec.clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let ip = match given.as_str() {
            "None" => None,
            "" => {
                let size = 1u32 << (32 - SERVICE_PREFIX);
                let mut found = None;
                for _ in 0..64 {
                    let offset = rand::thread_rng().gen_range(2..size - 1);
                    let ip = Ipv4Addr::from(u32::from(SERVICE_NET) + offset);
                    if !claimed(storage, &format!("{IP_CLAIMS}{ip}")).await? {
                        found = Some(ip);
                        break;
                    }
                }
                Some(found.ok_or_else(|| {
                    ApiError::Internal("failed to allocate a service IP: range is full".into())
                })?)
            }
            s => {
                let ip: Ipv4Addr = s.parse().map_err(|_| ApiError::Invalid {
                    target: Target::new(&def.group, &def.kind, &name),
                    causes: vec![Cause::invalid(
                        "spec.clusterIPs[0]",
                        &json!(s),
                        "must be a valid IP address",
                    )],
                })?;
                if !in_net(ip) {
                    return Err(ApiError::Invalid {
                        target: Target::new(&def.group, &def.kind, &name),
                        causes: vec![Cause::invalid(
                            "spec.clusterIPs",
                            &json!([s]),
                            &format!("failed to allocate IP {s}: the provided IP ({s}) is not in the valid range. The range of valid IPs is {SERVICE_NET}/{SERVICE_PREFIX}"),
                        )],
                    });
                }
                if claimed(storage, &format!("{IP_CLAIMS}{ip}")).await? {
                    return Err(taken(def, &name, "spec.clusterIPs", json!([s]), "IP"));
                }
                Some(ip)
            }
        };
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            match ip {
                Some(ip) => {
                    spec.insert("clusterIP".into(), json!(ip.to_string()));
                    spec.insert("clusterIPs".into(), json!([ip.to_string()]));
                    claims.push(format!("{IP_CLAIMS}{ip}"));
                }
                None => {
                    spec.insert("clusterIPs".into(), json!(["None"]));
                }
            }
            spec.insert("ipFamilies".into(), json!(["IPv4"]));
            spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
        }
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        let mut used: Vec<i64> = Vec::new();
        let ports = path(obj, "spec.ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        for (i, mut p) in ports.into_iter().enumerate() {
            let given = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
            let port = if given != 0 {
                if given < NODE_PORTS.0 as i64 || given > NODE_PORTS.1 as i64 {
                    return Err(ApiError::Invalid {
                        target: Target::new(&def.group, &def.kind, &name),
                        causes: vec![Cause::invalid(
                            &format!("spec.ports[{i}].nodePort"),
                            &json!(given),
                            &format!("provided port is not in the valid range. The range of valid ports is {}-{}", NODE_PORTS.0, NODE_PORTS.1),
                        )],
                    });
                }
                if used.contains(&given)
                    || claimed(storage, &format!("{PORT_CLAIMS}{given}")).await?
                {
                    return Err(taken(
                        def,
                        &name,
                        &format!("spec.ports[{i}].nodePort"),
                        json!(given),
                        "port",
                    ));
                }
                given
            } else {
                let mut found = None;
                for _ in 0..64 {
                    let c = rand::thread_rng().gen_range(NODE_PORTS.0..=NODE_PORTS.1) as i64;
                    if !used.contains(&c) && !claimed(storage, &format!("{PORT_CLAIMS}{c}")).await?
                    {
                        found = Some(c);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    ApiError::Internal("failed to allocate a node port: range is full".into())
                })?
            };
            used.push(port);
            claims.push(format!("{PORT_CLAIMS}{port}"));
            if let Some(m) = p.as_object_mut() {
                m.insert("nodePort".into(), json!(port));
            }
            out.push(p);
        }
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("ports".into(), Value::Array(out));
            // Defaulted as upstream does, never overriding the client's choice (Local).
            spec.entry("externalTrafficPolicy")
                .or_insert_with(|| json!("Cluster"));
        }
    }
    Ok(claims)
}

/// Clears a Service's allocations after a lost race so the next attempt allocates afresh.
pub fn forget(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
    }
}

/// The claim keys a stored object of `def` holds (released when it is deleted): its strategy's.
pub fn claims_of(def: &ResourceDef, obj: &Value) -> Vec<String> {
    super::strategy::of(def).claims(obj)
}

/// The claim keys a stored Service holds.
pub fn claims(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(ip) = path(obj, "spec.clusterIP").and_then(Value::as_str) {
        if ip.parse::<Ipv4Addr>().is_ok() {
            out.push(format!("{IP_CLAIMS}{ip}"));
        }
    }
    for p in path(obj, "spec.ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        if let Some(np) = p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
            out.push(format!("{PORT_CLAIMS}{np}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_membership() {
        assert!(in_net(Ipv4Addr::new(10, 96, 3, 4)));
        assert!(!in_net(Ipv4Addr::new(10, 97, 0, 1)));
    }
}
