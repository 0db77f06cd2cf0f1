//! Unique allocations of Services: ClusterIPs, NodePorts and health-check node ports (called from the
//! Service strategy), on create and on update, shaped like upstream's Service REST
//! (`pkg/registry/core/service/storage`: `allocateCreate`, `allocateUpdate`, `patchAllocatedValues`) and
//! its strategy's `dropTypeDependentFields`.
//!
//! Each allocated value is a claim key (`/keel/ranges/...`, holding the Service's key) written in the same
//! Txn as the Service (see [`Storage::put_claiming`] and [`Storage::update_claiming`]); the Txn fails if
//! a claim exists, so two members allocating at once cannot hand out the same value. An update deletes
//! the claims it gives up in that same Txn, and deleting the Service deletes its claims with it. Upstream
//! allocates in memory first and undoes it when the write fails; one Txn needs no undo, so a failed or
//! lost update can neither leak nor double-free.
//!
//! Invariant: the claims a stored Service holds are exactly [`claims`] of it, a function of its type and
//! fields alone; every path that writes a Service keeps it so.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rand::Rng;
use serde_json::{json, Map, Value};

use super::object::path;
use super::resource::ResourceDef;
use super::status::{go_strings, ApiError, Cause, Target};
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

/// How many random picks an allocation tries before calling the range full.
const PICKS: usize = 64;

/// What an update changes in the shared ranges: claim keys to take and claim keys to give back, both
/// written in the Txn that stores the object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reallocation {
    /// Claims that must not exist yet.
    pub take: Vec<String>,
    /// Claims this object held and no longer needs.
    pub release: Vec<String>,
}

fn in_net(ip: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - SERVICE_PREFIX);
    (u32::from(ip) & mask) == u32::from(SERVICE_NET)
}

fn ip_claim(ip: &str) -> Option<String> {
    ip.parse::<Ipv4Addr>()
        .ok()
        .map(|ip| format!("{IP_CLAIMS}{ip}"))
}

fn port_claim(port: i64) -> String {
    format!("{PORT_CLAIMS}{port}")
}

fn kind(obj: &Value) -> &str {
    path(obj, "spec.type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

fn spec_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("spec")
        .and_then(|s| s.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn spec_i64(obj: &Value, field: &str) -> i64 {
    obj.get("spec")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn cluster_ips(obj: &Value) -> Vec<String> {
    path(obj, "spec.clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Every type but ExternalName has a cluster IP (or is headless, "None").
pub fn needs_cluster_ip(obj: &Value) -> bool {
    kind(obj) != "ExternalName"
}

/// NodePort and LoadBalancer Services hold node ports.
pub fn needs_node_port(obj: &Value) -> bool {
    matches!(kind(obj), "NodePort" | "LoadBalancer")
}

/// Whether ports without a nodePort get one: always for NodePort, for LoadBalancer unless
/// `allocateLoadBalancerNodePorts` is false (a requested one is honoured either way).
fn allocates_node_ports(obj: &Value) -> bool {
    match kind(obj) {
        "NodePort" => true,
        "LoadBalancer" => path(obj, "spec.allocateLoadBalancerNodePorts") != Some(&json!(false)),
        _ => false,
    }
}

/// A LoadBalancer with `externalTrafficPolicy: Local` holds a health-check node port.
pub fn needs_health_check(obj: &Value) -> bool {
    kind(obj) == "LoadBalancer" && spec_str(obj, "externalTrafficPolicy") == "Local"
}

fn ports(obj: &Value) -> Vec<Value> {
    path(obj, "spec.ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn node_port_of(p: &Value) -> i64 {
    p.get("nodePort").and_then(Value::as_i64).unwrap_or(0)
}

/// The non-zero nodePorts of the object's ports, whatever its type.
fn node_ports(obj: &Value) -> Vec<i64> {
    let mut out: Vec<i64> = ports(obj)
        .iter()
        .map(node_port_of)
        .filter(|n| *n != 0)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn set_port_field(obj: &mut Value, i: usize, field: &str, value: Option<Value>) {
    let Some(p) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("ports"))
        .and_then(Value::as_array_mut)
        .and_then(|a| a.get_mut(i))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    match value {
        Some(v) => p.insert(field.into(), v),
        None => p.remove(field),
    };
}

fn spec_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.get_mut("spec").and_then(Value::as_object_mut)
}

/// Why a requested port cannot be had, worded as upstream's port allocator words it.
enum PortRefused {
    NotInRange,
    Allocated,
}

impl PortRefused {
    fn message(&self) -> String {
        match self {
            PortRefused::NotInRange => format!(
                "provided port is not in the valid range. The range of valid ports is {}-{}",
                NODE_PORTS.0, NODE_PORTS.1
            ),
            PortRefused::Allocated => "provided port is already allocated".into(),
        }
    }
}

/// One allocation pass over one Service: what it has claimed so far.
struct Pass<'a> {
    storage: &'a Storage,
    def: &'a ResourceDef,
    name: String,
    take: Vec<String>,
}

impl<'a> Pass<'a> {
    fn new(storage: &'a Storage, def: &'a ResourceDef, obj: &Value) -> Self {
        Pass {
            storage,
            def,
            name: super::object::name(obj).to_string(),
            take: Vec::new(),
        }
    }

    fn invalid(&self, cause: Cause) -> ApiError {
        ApiError::Invalid {
            target: Target::new(&self.def.group, &self.def.kind, &self.name),
            causes: vec![cause],
        }
    }

    /// Whether `key` is held, by anyone (stored) or by this pass.
    async fn held(&self, key: &str) -> Result<bool, ApiError> {
        Ok(self.take.iter().any(|k| k == key) || self.storage.get_raw(key).await?.is_some())
    }

    /// Claims one requested port.
    async fn claim_port(&mut self, port: i64) -> Result<Result<(), PortRefused>, ApiError> {
        if port < i64::from(NODE_PORTS.0) || port > i64::from(NODE_PORTS.1) {
            return Ok(Err(PortRefused::NotInRange));
        }
        let key = port_claim(port);
        if self.held(&key).await? {
            return Ok(Err(PortRefused::Allocated));
        }
        self.take.push(key);
        Ok(Ok(()))
    }

    /// Claims a free port picked at random, if one is found.
    async fn next_port(&mut self) -> Result<Option<i64>, ApiError> {
        for _ in 0..PICKS {
            let c = i64::from(rand::thread_rng().gen_range(NODE_PORTS.0..=NODE_PORTS.1));
            let key = port_claim(c);
            if !self.held(&key).await? {
                self.take.push(key);
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// Gives a Service that needs one its cluster IP: the requested one if free and in range, else a
    /// free one; "None" (headless) claims nothing. Sets `clusterIP`, `clusterIPs` and the family fields.
    async fn cluster_ip(&mut self, obj: &mut Value) -> Result<(), ApiError> {
        let mut given = spec_str(obj, "clusterIP").to_string();
        if given.is_empty() {
            given = cluster_ips(obj).into_iter().next().unwrap_or_default();
        }
        let ip = match given.as_str() {
            "None" => None,
            "" => {
                let size = 1u32 << (32 - SERVICE_PREFIX);
                let mut found = None;
                for _ in 0..PICKS {
                    let offset = rand::thread_rng().gen_range(2..size - 1);
                    let ip = Ipv4Addr::from(u32::from(SERVICE_NET) + offset);
                    if !self.held(&format!("{IP_CLAIMS}{ip}")).await? {
                        found = Some(ip);
                        break;
                    }
                }
                Some(found.ok_or_else(|| {
                    ApiError::Internal(
                        "Internal error occurred: failed to allocate a serviceIP: range is full"
                            .into(),
                    )
                })?)
            }
            s => {
                let ip: Ipv4Addr = s.parse().map_err(|_| {
                    self.invalid(Cause::invalid(
                        "spec.clusterIPs[0]",
                        &json!(s),
                        "must be a valid IP address",
                    ))
                })?;
                let printed = go_strings(&[s.to_string()]);
                if !in_net(ip) {
                    return Err(self.invalid(Cause::invalid_printed(
                        "spec.clusterIPs",
                        &printed,
                        &format!("failed to allocate IP {s}: the provided IP ({s}) is not in the valid range. The range of valid IPs is {SERVICE_NET}/{SERVICE_PREFIX}"),
                    )));
                }
                if self.held(&format!("{IP_CLAIMS}{ip}")).await? {
                    return Err(self.invalid(Cause::invalid_printed(
                        "spec.clusterIPs",
                        &printed,
                        &format!("failed to allocate IP {s}: provided IP is already allocated"),
                    )));
                }
                Some(ip)
            }
        };
        if let Some(spec) = spec_mut(obj) {
            match ip {
                Some(ip) => {
                    spec.insert("clusterIP".into(), json!(ip.to_string()));
                    spec.insert("clusterIPs".into(), json!([ip.to_string()]));
                    self.take.push(format!("{IP_CLAIMS}{ip}"));
                }
                None => {
                    spec.insert("clusterIP".into(), json!("None"));
                    spec.insert("clusterIPs".into(), json!(["None"]));
                }
            }
            spec.insert("ipFamilies".into(), json!(["IPv4"]));
            spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
        }
        Ok(())
    }

    fn port_refused(&self, i: usize, port: i64, why: &PortRefused) -> ApiError {
        self.invalid(Cause::invalid(
            &format!("spec.ports[{i}].nodePort"),
            &json!(port),
            &why.message(),
        ))
    }

    fn ports_full() -> ApiError {
        ApiError::Internal(
            "Internal error occurred: failed to allocate a nodePort: range is full".into(),
        )
    }

    /// Node ports of a new Service (upstream's `initNodePorts`): requested ones are claimed, the rest
    /// picked; ports with the same port number share one node port (one per number, whatever the
    /// protocol).
    async fn create_node_ports(&mut self, obj: &mut Value) -> Result<(), ApiError> {
        let list = ports(obj);
        let mut by_number: BTreeMap<i64, i64> = BTreeMap::new();
        for (i, p) in list.iter().enumerate() {
            let given = node_port_of(p);
            if given == 0 && !allocates_node_ports(obj) {
                continue;
            }
            let number = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            match by_number.get(&number).copied() {
                None => {
                    // A later port with the same number may carry the request.
                    let requested = if given != 0 {
                        given
                    } else {
                        list.iter()
                            .filter(|q| q.get("port").and_then(Value::as_i64) == Some(number))
                            .map(node_port_of)
                            .find(|n| *n != 0)
                            .unwrap_or(0)
                    };
                    let port = if requested != 0 {
                        if let Err(why) = self.claim_port(requested).await? {
                            return Err(self.port_refused(i, requested, &why));
                        }
                        requested
                    } else {
                        self.next_port().await?.ok_or_else(Self::ports_full)?
                    };
                    set_port_field(obj, i, "nodePort", Some(json!(port)));
                    by_number.insert(number, port);
                }
                Some(shared) if given == 0 => {
                    set_port_field(obj, i, "nodePort", Some(json!(shared)));
                }
                Some(shared) if given != shared => {
                    if let Err(why) = self.claim_port(given).await? {
                        return Err(self.port_refused(i, given, &why));
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Node ports of an updated Service that needs them (upstream's `updateNodePorts`): a port the
    /// Service already held is kept, a new requested one claimed, a missing one picked; returns the held
    /// ports no port uses any more.
    async fn update_node_ports(
        &mut self,
        obj: &mut Value,
        held: &[i64],
    ) -> Result<Vec<i64>, ApiError> {
        let list = ports(obj);
        let mut claimed_now: Vec<i64> = Vec::new();
        for (i, p) in list.iter().enumerate() {
            let given = node_port_of(p);
            if given == 0 && !allocates_node_ports(obj) {
                continue;
            }
            if given != 0 {
                if !held.contains(&given) && !claimed_now.contains(&given) {
                    if let Err(why) = self.claim_port(given).await? {
                        return Err(self.port_refused(i, given, &why));
                    }
                    claimed_now.push(given);
                }
            } else {
                let port = self.next_port().await?.ok_or_else(Self::ports_full)?;
                set_port_field(obj, i, "nodePort", Some(json!(port)));
            }
        }
        let now = node_ports(obj);
        Ok(held.iter().copied().filter(|p| !now.contains(p)).collect())
    }

    /// The health-check node port of a Service that starts needing one: the requested one, else a
    /// free one. Upstream answers these failures as internal errors, not as a field error.
    async fn health_check(&mut self, obj: &mut Value) -> Result<(), ApiError> {
        let requested = spec_i64(obj, "healthCheckNodePort");
        if requested != 0 {
            if let Err(why) = self.claim_port(requested).await? {
                return Err(ApiError::Internal(format!(
                    "Internal error occurred: failed to allocate requested HealthCheck NodePort {requested}: {}",
                    why.message()
                )));
            }
            return Ok(());
        }
        let port = self.next_port().await?.ok_or_else(|| {
            ApiError::Internal(
                "Internal error occurred: failed to allocate a HealthCheck NodePort 0: range is full"
                    .into(),
            )
        })?;
        if let Some(spec) = spec_mut(obj) {
            spec.insert("healthCheckNodePort".into(), json!(port));
        }
        Ok(())
    }
}

/// Allocates what the new Service `obj` needs and returns the claim keys to write with it (the Service
/// strategy's `allocate`; `def` names the object in errors).
pub async fn allocate(
    storage: &Storage,
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    let mut pass = Pass::new(storage, def, obj);
    if needs_cluster_ip(obj) {
        pass.cluster_ip(obj).await?;
    }
    if needs_node_port(obj) {
        pass.create_node_ports(obj).await?;
    }
    if needs_health_check(obj) {
        pass.health_check(obj).await?;
    }
    Ok(pass.take)
}

/// Allocates and releases what an update of the Service from `old` to `new` changes (the Service
/// strategy's `allocate_update`), and fills in and clears the fields that go with it, in upstream's
/// order: allocated values the client left out are carried over, clusterIP/clusterIPs made consistent,
/// allocations made for the new type, then the fields the new type no longer uses dropped when the
/// client left them unchanged. Validation runs afterwards, on the result.
pub async fn allocate_update(
    storage: &Storage,
    def: &ResourceDef,
    old: &Value,
    new: &mut Value,
) -> Result<Reallocation, ApiError> {
    patch_allocated_values(old, new);
    normalize_cluster_ips(old, new);
    let mut pass = Pass::new(storage, def, new);
    let mut release = Vec::new();

    // ExternalName in either direction is the only way the cluster IP changes; any other change is
    // refused by validation (may not change once set).
    if !needs_cluster_ip(old) && needs_cluster_ip(new) {
        pass.cluster_ip(new).await?;
    } else if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        release.extend(ip_claim(spec_str(old, "clusterIP")));
    }

    let held = if needs_node_port(old) {
        node_ports(old)
    } else {
        Vec::new()
    };
    if needs_node_port(new) {
        let unused = pass.update_node_ports(new, &held).await?;
        release.extend(unused.into_iter().map(port_claim));
    } else {
        release.extend(held.iter().map(|p| port_claim(*p)));
    }

    let (old_hc, new_hc) = (
        spec_i64(old, "healthCheckNodePort"),
        spec_i64(new, "healthCheckNodePort"),
    );
    match (needs_health_check(old), needs_health_check(new)) {
        (false, true) => pass.health_check(new).await?,
        (true, false) if old_hc != 0 => release.push(port_claim(old_hc)),
        // Upstream leaves a changed value to its repair loop; here claims follow the stored object
        // exactly, so the new value is claimed and the old one given back.
        (true, true) if old_hc != new_hc => {
            pass.health_check(new).await?;
            if old_hc != 0 {
                release.push(port_claim(old_hc));
            }
        }
        _ => {}
    }

    drop_type_dependent_fields(old, new);
    Ok(Reallocation {
        take: pass.take,
        release,
    })
}

/// Carries allocated values over when the client left them out, so resubmitting what it first sent
/// (an apply, a PUT of the original manifest) keeps them: the cluster IP, node ports by port name
/// (unless the value is used by another port of the new object), the health-check node port.
fn patch_allocated_values(old: &Value, new: &mut Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        let ip = spec_str(old, "clusterIP").to_string();
        let ips = cluster_ips(old);
        if let Some(spec) = spec_mut(new) {
            if spec
                .get("clusterIP")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
                && !ip.is_empty()
            {
                spec.insert("clusterIP".into(), json!(ip));
            }
            let empty = spec
                .get("clusterIPs")
                .and_then(Value::as_array)
                .is_none_or(|a| a.is_empty());
            if empty && !ips.is_empty() {
                spec.insert("clusterIPs".into(), json!(ips));
            }
        }
    }
    if needs_node_port(old) && needs_node_port(new) {
        let new_ports = node_ports(new);
        let used: Vec<i64> = node_ports(old)
            .into_iter()
            .filter(|p| new_ports.contains(p))
            .collect();
        let by_name: BTreeMap<String, i64> = ports(old)
            .iter()
            .map(|p| {
                let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                (name.to_string(), node_port_of(p))
            })
            .collect();
        for (i, p) in ports(new).iter().enumerate() {
            if node_port_of(p) != 0 {
                continue;
            }
            let name = p.get("name").and_then(Value::as_str).unwrap_or("");
            if let Some(&was) = by_name.get(name) {
                if was != 0 && !used.contains(&was) {
                    set_port_field(new, i, "nodePort", Some(json!(was)));
                }
            }
        }
    }
    if needs_health_check(old)
        && needs_health_check(new)
        && spec_i64(new, "healthCheckNodePort") == 0
    {
        let hc = spec_i64(old, "healthCheckNodePort");
        if let (true, Some(spec)) = (hc != 0, spec_mut(new)) {
            spec.insert("healthCheckNodePort".into(), json!(hc));
        }
    }
}

/// Keeps `clusterIPs` in step with a `clusterIP` an older client changed or cleared alone.
fn normalize_cluster_ips(old: &Value, new: &mut Value) {
    let (old_ip, new_ip) = (
        spec_str(old, "clusterIP").to_string(),
        spec_str(new, "clusterIP").to_string(),
    );
    let (old_ips, new_ips) = (cluster_ips(old), cluster_ips(new));
    let Some(spec) = spec_mut(new) else {
        return;
    };
    let mut new_ips = new_ips;
    if !old_ips.is_empty() && new_ips.is_empty() && old_ip == new_ip {
        spec.insert("clusterIPs".into(), json!(old_ips));
        new_ips = old_ips.clone();
    }
    if old_ip != new_ip && old_ips == new_ips {
        if !old_ip.is_empty() && new_ip.is_empty() {
            spec.remove("clusterIPs");
        } else {
            spec.insert("clusterIPs".into(), json!([new_ip]));
        }
    }
}

/// Clears what the new type does not use, when the client did not change it (a changed value is left
/// for validation to refuse): the cluster IP and family fields when going to ExternalName, node ports
/// when going to ClusterIP or ExternalName, the health-check node port when no longer needed, the
/// LoadBalancer-only fields, `externalTrafficPolicy` when nothing is external, and the load-balancer
/// status of a Service that is no longer one.
fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    let same = |field: &str, new: &Value| {
        let a = old.get("spec").and_then(|s| s.get(field));
        let b = new.get("spec").and_then(|s| s.get(field));
        a.filter(|v| !v.is_null()) == b.filter(|v| !v.is_null())
    };
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        let ips = same("clusterIP", new) && same("clusterIPs", new);
        let families = same("ipFamilies", new);
        let policy = same("ipFamilyPolicy", new);
        if let Some(spec) = spec_mut(new) {
            if ips {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            if families {
                spec.remove("ipFamilies");
            }
            if policy {
                spec.remove("ipFamilyPolicy");
            }
        }
    }
    if needs_node_port(old) && !needs_node_port(new) {
        let was = node_ports(old);
        if node_ports(new).iter().all(|p| was.contains(p)) {
            for i in 0..ports(new).len() {
                set_port_field(new, i, "nodePort", None);
            }
        }
    }
    if needs_health_check(old) && !needs_health_check(new) && same("healthCheckNodePort", new) {
        if let Some(spec) = spec_mut(new) {
            spec.remove("healthCheckNodePort");
        }
    }
    if kind(old) == "LoadBalancer" && kind(new) != "LoadBalancer" {
        let alloc = same("allocateLoadBalancerNodePorts", new);
        let class = same("loadBalancerClass", new);
        if let Some(spec) = spec_mut(new) {
            if alloc {
                spec.remove("allocateLoadBalancerNodePorts");
            }
            if class {
                spec.remove("loadBalancerClass");
            }
        }
    }
    if needs_node_port(old) && !needs_node_port(new) && same("externalTrafficPolicy", new) {
        if let Some(spec) = spec_mut(new) {
            spec.remove("externalTrafficPolicy");
        }
    }
    if kind(new) != "LoadBalancer" {
        if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
            if status.contains_key("loadBalancer") {
                status.insert("loadBalancer".into(), json!({}));
            }
        }
    }
}

/// The claim keys a stored Service holds: its cluster IP unless ExternalName, its node ports if its type
/// uses them, its health-check node port if it needs one. Going by type means a value the type does not
/// use (never claimed) is never released on another Service's behalf.
pub fn claims(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if needs_cluster_ip(obj) {
        out.extend(ip_claim(spec_str(obj, "clusterIP")));
    }
    if needs_node_port(obj) {
        out.extend(node_ports(obj).into_iter().map(port_claim));
    }
    let hc = spec_i64(obj, "healthCheckNodePort");
    if needs_health_check(obj) && hc != 0 {
        let key = port_claim(hc);
        if !out.contains(&key) {
            out.push(key);
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

    fn svc(spec: Value) -> Value {
        json!({"metadata": {"name": "s"}, "spec": spec})
    }

    #[test]
    fn claims_follow_the_type() {
        let np = svc(json!({"type": "NodePort", "clusterIP": "10.96.0.9",
            "ports": [{"port": 80, "nodePort": 30080}]}));
        assert_eq!(
            claims(&np),
            vec![
                "/keel/ranges/serviceips/10.96.0.9".to_string(),
                "/keel/ranges/servicenodeports/30080".to_string()
            ]
        );
        // Node ports an ExternalName Service still carries were never claimed by it.
        let ext = svc(
            json!({"type": "ExternalName", "externalName": "example.com",
            "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        assert!(claims(&ext).is_empty());
        let lb = svc(
            json!({"type": "LoadBalancer", "clusterIP": "None", "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 31000, "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        assert_eq!(
            claims(&lb),
            vec![
                "/keel/ranges/servicenodeports/30080".to_string(),
                "/keel/ranges/servicenodeports/31000".to_string()
            ]
        );
    }

    #[test]
    fn a_resubmitted_manifest_keeps_what_was_allocated() {
        let old = svc(
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"],
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
            "ports": [{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 81, "nodePort": 30081}]}),
        );
        let mut new = svc(
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30080}]}),
        );
        patch_allocated_values(&old, &mut new);
        assert_eq!(path(&new, "spec.clusterIP"), Some(&json!("10.96.0.9")));
        assert_eq!(path(&new, "spec.clusterIPs"), Some(&json!(["10.96.0.9"])));
        assert_eq!(path(&new, "spec.healthCheckNodePort"), Some(&json!(31000)));
        // "a"'s old value is now used by "b", so "a" is left for allocation.
        assert_eq!(node_port_of(&ports(&new)[0]), 0);
        assert_eq!(node_port_of(&ports(&new)[1]), 30080);
    }

    #[test]
    fn unchanged_type_dependent_fields_are_dropped() {
        let old = svc(
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "allocateLoadBalancerNodePorts": true,
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
            "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        let mut to_cluster_ip = old.clone();
        to_cluster_ip["spec"]["type"] = json!("ClusterIP");
        drop_type_dependent_fields(&old, &mut to_cluster_ip);
        let spec = &to_cluster_ip["spec"];
        assert_eq!(spec["ports"], json!([{"port": 80}]));
        for gone in [
            "healthCheckNodePort",
            "externalTrafficPolicy",
            "allocateLoadBalancerNodePorts",
        ] {
            assert!(spec.get(gone).is_none(), "{gone}: {spec}");
        }
        assert_eq!(spec["clusterIP"], json!("10.96.0.9"));

        let mut to_external = old.clone();
        to_external["spec"]["type"] = json!("ExternalName");
        drop_type_dependent_fields(&old, &mut to_external);
        for gone in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            assert!(to_external["spec"].get(gone).is_none(), "{gone}");
        }

        // A node port the client changed stays, for validation to refuse.
        let mut changed = old.clone();
        changed["spec"]["type"] = json!("ClusterIP");
        changed["spec"]["ports"][0]["nodePort"] = json!(30099);
        drop_type_dependent_fields(&old, &mut changed);
        assert_eq!(changed["spec"]["ports"][0]["nodePort"], json!(30099));
    }

    #[test]
    fn a_changed_cluster_ip_drags_cluster_ips_along() {
        let old = svc(json!({"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"]}));
        let mut new = svc(json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.9"]}));
        normalize_cluster_ips(&old, &mut new);
        assert_eq!(path(&new, "spec.clusterIPs"), Some(&json!(["10.96.0.10"])));
        let mut cleared = svc(json!({"clusterIPs": ["10.96.0.9"]}));
        normalize_cluster_ips(&old, &mut cleared);
        assert_eq!(path(&cleared, "spec.clusterIPs"), None);
        let mut old_client = svc(json!({"clusterIP": "10.96.0.9"}));
        normalize_cluster_ips(&old, &mut old_client);
        assert_eq!(
            path(&old_client, "spec.clusterIPs"),
            Some(&json!(["10.96.0.9"]))
        );
    }
}
