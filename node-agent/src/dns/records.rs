//! The record table: what the cluster domain contains, built from Services and EndpointSlices.
//!
//! Model: [`RecordTable::build`] turns the reflectors' contents into an index by (namespace, Service),
//! and [`RecordTable::lookup`] answers one question from that index alone. Both are pure: no I/O,
//! no clock, no API calls, so the names a cluster publishes can be tested with hand-built objects.
//!
//! The names follow the Kubernetes DNS specification as CoreDNS's `kubernetes` plugin serves it:
//! - `<svc>.<ns>.svc.<domain>`: the ClusterIP; for a headless Service every ready endpoint;
//!   for an ExternalName Service a CNAME to its external name;
//! - `<ep>.<svc>.<ns>.svc.<domain>`: one endpoint of a headless Service, `<ep>` being its
//!   `hostname` (StatefulSet pods) or its address with dashes;
//! - `_<port>._<proto>.<svc>.<ns>.svc.<domain>` SRV: the named ports;
//! - `<a-b-c-d>.<ns>.pod.<domain>`: the address written in the name ("pods insecure");
//! - `ns.dns.<domain>` and the apex's SOA and NS, so that the zone looks like a zone.
//!
//! Invariants: a name under the domain is never left to the upstream resolvers; a name that exists
//! but has no record of the asked type answers NOERROR with no records (NODATA), a name that does
//! not exist answers NXDOMAIN, both with the SOA for negative caching; every record has [`TTL`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;

use hickory_proto::rr::rdata::{A, CNAME, NS, PTR, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::error::{Error, Result};

/// The TTL of every record, and the SOA's negative-caching TTL (CoreDNS's default).
pub const TTL: u32 = 5;

/// The label an EndpointSlice names its Service with.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The cluster domain: the apex every in-cluster name ends with.
#[derive(Debug, Clone)]
pub struct Zone {
    /// The apex's labels, lower case, outermost last (`["cluster", "local"]`).
    labels: Vec<String>,
    /// The apex as a fully qualified name.
    apex: Name,
    /// The text of the apex without its trailing dot, for building names below it.
    text: String,
}

impl Zone {
    /// The zone for `domain` (`cluster.local`, with or without a trailing dot).
    pub fn new(domain: &str) -> Result<Zone> {
        let text = domain.trim().trim_end_matches('.').to_ascii_lowercase();
        let labels: Vec<String> = text.split('.').map(str::to_string).collect();
        if text.is_empty() || labels.iter().any(|l| l.is_empty()) {
            return Err(Error::Config(format!(
                "cluster domain {domain:?} is not a domain name"
            )));
        }
        let apex = Name::from_ascii(format!("{text}."))
            .map_err(|e| Error::Config(format!("cluster domain {domain:?}: {e}")))?;
        Ok(Zone { labels, apex, text })
    }

    /// The apex, fully qualified.
    pub fn apex(&self) -> &Name {
        &self.apex
    }

    /// True when `name` is the apex or below it.
    pub fn contains(&self, name: &Name) -> bool {
        self.relative(name).is_some()
    }

    /// The labels of `name` below the apex, lower case, nearest the apex first
    /// (`web.default.svc.cluster.local` gives `["svc", "default", "web"]`); `None` outside the zone.
    fn relative(&self, name: &Name) -> Option<Vec<String>> {
        let labels: Vec<String> = name
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
            .collect();
        let below = labels.len().checked_sub(self.labels.len())?;
        if labels[below..] != self.labels[..] {
            return None;
        }
        Some(labels[..below].iter().rev().cloned().collect())
    }

    /// The fully qualified name `<prefix>.<apex>`.
    fn name(&self, prefix: &str) -> Option<Name> {
        Name::from_ascii(format!("{prefix}.{}.", self.text)).ok()
    }

    /// The zone's SOA record (CoreDNS's timers; the minimum is the negative-caching TTL).
    fn soa(&self, serial: u32) -> Record {
        let mname = self.name("ns.dns").unwrap_or_else(|| self.apex.clone());
        let rname = self.name("hostmaster").unwrap_or_else(|| self.apex.clone());
        let soa = SOA::new(mname, rname, serial, 7200, 1800, 86400, TTL);
        Record::from_rdata(self.apex.clone(), TTL, RData::SOA(soa))
    }
}

/// One port of a Service or of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Port {
    /// The port's name (`""` when unnamed), lower case.
    name: String,
    /// `tcp`, `udp` or `sctp`.
    protocol: String,
    port: u16,
}

impl Port {
    fn new(name: Option<&str>, protocol: Option<&str>, port: i32) -> Option<Port> {
        Some(Port {
            name: name.unwrap_or("").to_ascii_lowercase(),
            protocol: protocol.unwrap_or("TCP").to_ascii_lowercase(),
            port: u16::try_from(port).ok().filter(|p| *p != 0)?,
        })
    }

    /// Whether `_<name>._<proto>` (as labels, underscores included) names this port.
    fn matches(&self, name_label: &str, proto_label: &str) -> bool {
        !self.name.is_empty()
            && name_label.strip_prefix('_') == Some(self.name.as_str())
            && proto_label.strip_prefix('_') == Some(self.protocol.as_str())
    }
}

/// One address of a headless Service.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// The label it is published under: its hostname, or its address with dashes.
    label: String,
    ip: Ipv4Addr,
    /// The ports of the EndpointSlices it was found in.
    ports: Vec<Port>,
}

/// What a Service's name resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A ClusterIP Service (or NodePort, LoadBalancer); `None` while it has no IPv4 address.
    Cluster(Option<Ipv4Addr>),
    /// `clusterIP: None`: the ready endpoints themselves.
    Headless,
    /// A CNAME to this name.
    External(Name),
    /// An ExternalName Service whose name is unusable: the name exists, with no records.
    Nothing,
}

#[derive(Debug, Clone)]
struct ServiceEntry {
    kind: Kind,
    /// The Service's own ports.
    ports: Vec<Port>,
    /// The ready endpoints, for headless Services only, sorted by label then address.
    endpoints: Vec<Endpoint>,
}

impl ServiceEntry {
    /// Whether some port of the Service or of its endpoints is `_<name>._<proto>`.
    fn has_port(&self, name_label: &str, proto_label: &str) -> bool {
        self.ports
            .iter()
            .chain(self.endpoints.iter().flat_map(|e| e.ports.iter()))
            .any(|p| p.matches(name_label, proto_label))
    }

    /// Whether some port uses the protocol of label `_<proto>`.
    fn has_protocol(&self, proto_label: &str) -> bool {
        self.ports
            .iter()
            .chain(self.endpoints.iter().flat_map(|e| e.ports.iter()))
            .any(|p| proto_label.strip_prefix('_') == Some(p.protocol.as_str()))
    }
}

/// The answer the table gives to one question.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The name is not the table's to answer (outside the domain, or a reverse name it does not
    /// know): forward it.
    Outside,
    /// The name has records of the asked type: `answers`, and `additionals` for the additional section.
    Found {
        /// The answer section.
        answers: Vec<Record>,
        /// The additional section (the addresses of SRV and NS targets).
        additionals: Vec<Record>,
    },
    /// The name exists but has no record of the asked type: NOERROR, no answer, the SOA.
    NoData {
        /// The zone's SOA, for the authority section.
        soa: Record,
    },
    /// The name does not exist: NXDOMAIN with the SOA.
    NxDomain {
        /// The zone's SOA, for the authority section.
        soa: Record,
    },
}

/// Every name the cluster domain holds, indexed for lookup.
#[derive(Debug, Clone)]
pub struct RecordTable {
    zone: Zone,
    /// False until built from synced caches: until then in-zone questions get SERVFAIL, not a
    /// cached NXDOMAIN for a Service that exists.
    synced: bool,
    serial: u32,
    services: HashMap<(String, String), ServiceEntry>,
    namespaces: HashSet<String>,
    /// Address -> name, for PTR questions about ClusterIPs and headless endpoints.
    reverse: HashMap<Ipv4Addr, Name>,
}

impl RecordTable {
    /// A table that knows the zone but not its contents yet (caches not synced).
    pub fn unsynced(zone: Zone) -> RecordTable {
        RecordTable {
            zone,
            synced: false,
            serial: 0,
            services: HashMap::new(),
            namespaces: HashSet::new(),
            reverse: HashMap::new(),
        }
    }

    /// The table for these Services and EndpointSlices; `serial` goes into the SOA.
    pub fn build<'a>(
        zone: Zone,
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
        serial: u32,
    ) -> RecordTable {
        // The slices of each Service, by (namespace, service-name label).
        let mut by_service: HashMap<(String, String), Vec<&EndpointSlice>> = HashMap::new();
        for slice in slices {
            let ns = slice.metadata.namespace.clone().unwrap_or_default();
            let Some(svc) = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
            else {
                continue;
            };
            by_service.entry((ns, svc.clone())).or_default().push(slice);
        }
        let mut table = RecordTable {
            synced: true,
            serial,
            ..RecordTable::unsynced(zone)
        };
        for svc in services {
            let (Some(name), Some(ns)) = (&svc.metadata.name, &svc.metadata.namespace) else {
                continue;
            };
            if svc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = (ns.to_ascii_lowercase(), name.to_ascii_lowercase());
            let entry = service_entry(svc, by_service.get(&(ns.clone(), name.clone())));
            if let Some(fqdn) = table.zone.name(&format!("{}.{}.svc", key.1, key.0)) {
                if let Kind::Cluster(Some(ip)) = entry.kind {
                    table.reverse.entry(ip).or_insert_with(|| fqdn.clone());
                }
                for ep in &entry.endpoints {
                    if let Ok(n) = Name::from_ascii(&ep.label).and_then(|l| l.append_domain(&fqdn))
                    {
                        table.reverse.entry(ep.ip).or_insert(n);
                    }
                }
            }
            table.namespaces.insert(key.0.clone());
            table.services.insert(key, entry);
        }
        table
    }

    /// The zone this table answers for.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// Whether the table was built from synced caches.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The number of Services in the table.
    pub fn services(&self) -> usize {
        self.services.len()
    }

    /// The zone's SOA record.
    pub fn soa(&self) -> Record {
        self.zone.soa(self.serial)
    }

    /// Answers `name`/`qtype` (class IN) from the table. Names may be written in any case, with or
    /// without their trailing dot; answers are owned by `name` as asked.
    pub fn lookup(&self, name: &Name, qtype: RecordType) -> Lookup {
        let Some(rel) = self.zone.relative(name) else {
            return self.reverse(name, qtype);
        };
        let mut owner = name.clone();
        owner.set_fqdn(true);
        let rel: Vec<&str> = rel.iter().map(String::as_str).collect();
        match rel.as_slice() {
            [] => self.apex(&owner, qtype),
            ["svc"] | ["pod"] | ["dns"] | ["pod", _] => self.nodata(),
            ["dns", "ns"] => match (qtype, self.dns_service_ip()) {
                (RecordType::A | RecordType::ANY, Some(ip)) => found(vec![a(&owner, ip)], vec![]),
                _ => self.nodata(),
            },
            ["svc", ns] => {
                if self.namespaces.contains(*ns) {
                    self.nodata()
                } else {
                    self.nxdomain()
                }
            }
            ["svc", ns, svc] => match self.service(ns, svc) {
                Some(entry) => self.service_name(&owner, ns, svc, entry, qtype),
                None => self.nxdomain(),
            },
            ["svc", ns, svc, proto] if proto.starts_with('_') => match self.service(ns, svc) {
                Some(entry) if entry.has_protocol(proto) => self.nodata(),
                _ => self.nxdomain(),
            },
            ["svc", ns, svc, ep] => match self.service(ns, svc) {
                Some(entry) if entry.kind == Kind::Headless => {
                    let ips: Vec<Ipv4Addr> = entry
                        .endpoints
                        .iter()
                        .filter(|e| e.label == *ep)
                        .map(|e| e.ip)
                        .collect();
                    if ips.is_empty() {
                        self.nxdomain()
                    } else if matches!(qtype, RecordType::A | RecordType::ANY) {
                        found(addresses(&owner, &ips), vec![])
                    } else {
                        self.nodata()
                    }
                }
                _ => self.nxdomain(),
            },
            ["svc", ns, svc, proto, port] if proto.starts_with('_') && port.starts_with('_') => {
                match self.service(ns, svc) {
                    Some(entry) if entry.has_port(port, proto) => {
                        if qtype == RecordType::SRV {
                            self.srv(&owner, ns, svc, entry, Some((port, proto)))
                        } else {
                            self.nodata()
                        }
                    }
                    _ => self.nxdomain(),
                }
            }
            ["pod", _ns, dashed] => match parse_dashed(dashed) {
                Some(ip) if matches!(qtype, RecordType::A | RecordType::ANY) => {
                    found(vec![a(&owner, ip)], vec![])
                }
                Some(_) => self.nodata(),
                None => self.nxdomain(),
            },
            _ => self.nxdomain(),
        }
    }

    fn service(&self, ns: &str, svc: &str) -> Option<&ServiceEntry> {
        self.services.get(&(ns.to_string(), svc.to_string()))
    }

    fn nodata(&self) -> Lookup {
        Lookup::NoData { soa: self.soa() }
    }

    fn nxdomain(&self) -> Lookup {
        Lookup::NxDomain { soa: self.soa() }
    }

    /// The ClusterIP of `kube-system/kube-dns`, the address `ns.dns.<domain>` stands for.
    fn dns_service_ip(&self) -> Option<Ipv4Addr> {
        match self.service("kube-system", "kube-dns")?.kind {
            Kind::Cluster(ip) => ip,
            _ => None,
        }
    }

    fn apex(&self, owner: &Name, qtype: RecordType) -> Lookup {
        match qtype {
            RecordType::SOA => found(vec![self.soa()], vec![]),
            RecordType::NS => {
                let Some(ns) = self.zone.name("ns.dns") else {
                    return self.nodata();
                };
                let extra = self
                    .dns_service_ip()
                    .map(|ip| vec![a(&ns, ip)])
                    .unwrap_or_default();
                let rec = Record::from_rdata(owner.clone(), TTL, RData::NS(NS(ns)));
                found(vec![rec], extra)
            }
            _ => self.nodata(),
        }
    }

    /// `<svc>.<ns>.svc.<domain>` itself.
    fn service_name(
        &self,
        owner: &Name,
        ns: &str,
        svc: &str,
        entry: &ServiceEntry,
        qtype: RecordType,
    ) -> Lookup {
        if let Kind::External(target) = &entry.kind {
            // A CNAME answers every type at its owner; the resolver chases the target.
            let rec = Record::from_rdata(owner.clone(), TTL, RData::CNAME(CNAME(target.clone())));
            return found(vec![rec], vec![]);
        }
        match qtype {
            RecordType::A | RecordType::ANY => {
                let ips: Vec<Ipv4Addr> = match entry.kind {
                    Kind::Cluster(Some(ip)) => vec![ip],
                    Kind::Headless => {
                        let mut ips: Vec<Ipv4Addr> = entry.endpoints.iter().map(|e| e.ip).collect();
                        ips.sort();
                        ips.dedup();
                        ips
                    }
                    _ => vec![],
                };
                if ips.is_empty() {
                    self.nodata()
                } else {
                    found(addresses(owner, &ips), vec![])
                }
            }
            RecordType::SRV => self.srv(owner, ns, svc, entry, None),
            _ => self.nodata(),
        }
    }

    /// SRV records of a Service: of the port `_<name>._<proto>` when given, else of every port.
    fn srv(
        &self,
        owner: &Name,
        ns: &str,
        svc: &str,
        entry: &ServiceEntry,
        port: Option<(&str, &str)>,
    ) -> Lookup {
        let Some(svc_name) = self.zone.name(&format!("{svc}.{ns}.svc")) else {
            return self.nodata();
        };
        let wanted = |p: &Port| port.is_none_or(|(name, proto)| p.matches(name, proto));
        // (port, target, target's address)
        let mut targets: Vec<(u16, Name, Ipv4Addr)> = Vec::new();
        match entry.kind {
            Kind::Cluster(Some(ip)) => {
                for p in entry.ports.iter().filter(|p| wanted(p)) {
                    targets.push((p.port, svc_name.clone(), ip));
                }
            }
            Kind::Headless => {
                for ep in &entry.endpoints {
                    let Ok(target) =
                        Name::from_ascii(&ep.label).and_then(|l| l.append_domain(&svc_name))
                    else {
                        continue;
                    };
                    for p in ep.ports.iter().filter(|p| wanted(p)) {
                        targets.push((p.port, target.clone(), ep.ip));
                    }
                }
            }
            _ => {}
        }
        if targets.is_empty() {
            return self.nodata();
        }
        // CoreDNS shares a weight of 100 among the records of one priority.
        let weight = u16::try_from(100 / targets.len()).unwrap_or(1).max(1);
        let answers = targets
            .iter()
            .map(|(port, target, _)| {
                let srv = SRV::new(0, weight, *port, target.clone());
                Record::from_rdata(owner.clone(), TTL, RData::SRV(srv))
            })
            .collect();
        let mut extra: BTreeMap<(String, Ipv4Addr), Record> = BTreeMap::new();
        for (_, target, ip) in &targets {
            extra
                .entry((target.to_ascii(), *ip))
                .or_insert_with(|| a(target, *ip));
        }
        found(answers, extra.into_values().collect())
    }

    /// PTR questions for addresses the table knows; everything else in the reverse tree is forwarded.
    fn reverse(&self, name: &Name, qtype: RecordType) -> Lookup {
        if qtype != RecordType::PTR {
            return Lookup::Outside;
        }
        let labels: Vec<String> = name
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
            .collect();
        let [d, c, b, a_, arpa1, arpa2] = labels.as_slice() else {
            return Lookup::Outside;
        };
        if arpa1 != "in-addr" || arpa2 != "arpa" {
            return Lookup::Outside;
        }
        let Ok(ip) = format!("{a_}.{b}.{c}.{d}").parse::<Ipv4Addr>() else {
            return Lookup::Outside;
        };
        match self.reverse.get(&ip) {
            Some(target) => {
                let mut owner = name.clone();
                owner.set_fqdn(true);
                let rec = Record::from_rdata(owner, TTL, RData::PTR(PTR(target.clone())));
                found(vec![rec], vec![])
            }
            None => Lookup::Outside,
        }
    }
}

fn found(answers: Vec<Record>, additionals: Vec<Record>) -> Lookup {
    Lookup::Found {
        answers,
        additionals,
    }
}

fn a(owner: &Name, ip: Ipv4Addr) -> Record {
    Record::from_rdata(owner.clone(), TTL, RData::A(A(ip)))
}

fn addresses(owner: &Name, ips: &[Ipv4Addr]) -> Vec<Record> {
    ips.iter().map(|ip| a(owner, *ip)).collect()
}

/// `10-42-0-5` -> 10.42.0.5.
fn parse_dashed(label: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = label.split('-').collect();
    if parts.len() != 4 || parts.iter().any(|p| p.is_empty() || p.len() > 3) {
        return None;
    }
    parts.join(".").parse().ok()
}

/// 10.42.0.5 -> `10-42-0-5`.
fn dashed(ip: Ipv4Addr) -> String {
    ip.to_string().replace('.', "-")
}

/// Whether `s` can be one label of a host name (RFC 1123).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The first IPv4 address of a Service's `clusterIPs` (or `clusterIP`).
fn cluster_ipv4(svc: &Service) -> Option<Ipv4Addr> {
    let spec = svc.spec.as_ref()?;
    spec.cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .find_map(|ip| ip.parse::<Ipv4Addr>().ok())
}

fn service_entry(svc: &Service, slices: Option<&Vec<&EndpointSlice>>) -> ServiceEntry {
    let spec = svc.spec.as_ref();
    let ports: Vec<Port> = spec
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| Port::new(p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    let kind = if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
        spec.and_then(|s| s.external_name.as_deref())
            .map(|n| n.trim().trim_end_matches('.'))
            .filter(|n| !n.is_empty())
            .and_then(|n| Name::from_ascii(format!("{n}.")).ok())
            .map_or(Kind::Nothing, Kind::External)
    } else if spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        Kind::Headless
    } else {
        Kind::Cluster(cluster_ipv4(svc))
    };
    let endpoints = if kind == Kind::Headless {
        let publish_not_ready = spec
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false);
        headless_endpoints(slices.map(Vec::as_slice).unwrap_or(&[]), publish_not_ready)
    } else {
        Vec::new()
    };
    ServiceEntry {
        kind,
        ports,
        endpoints,
    }
}

/// The ready IPv4 endpoints of a headless Service's slices, merged across slices.
fn headless_endpoints(slices: &[&EndpointSlice], publish_not_ready: bool) -> Vec<Endpoint> {
    let mut merged: BTreeMap<(String, Ipv4Addr), Vec<Port>> = BTreeMap::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let ports: Vec<Port> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| Port::new(p.name.as_deref(), p.protocol.as_deref(), p.port?))
            .collect();
        for ep in &slice.endpoints {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready) != Some(false);
            if !ready && !publish_not_ready {
                continue;
            }
            let hostname = ep
                .hostname
                .as_deref()
                .map(str::to_ascii_lowercase)
                .filter(|h| is_dns_label(h));
            for addr in &ep.addresses {
                let Ok(ip) = addr.parse::<Ipv4Addr>() else {
                    continue;
                };
                let label = hostname.clone().unwrap_or_else(|| dashed(ip));
                let known = merged.entry((label, ip)).or_default();
                for p in &ports {
                    if !known.contains(p) {
                        known.push(p.clone());
                    }
                }
            }
        }
    }
    merged
        .into_iter()
        .map(|((label, ip), mut ports)| {
            ports.sort();
            Endpoint { label, ip, ports }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    /// A cluster with a ClusterIP Service, a headless one (StatefulSet-like), an ExternalName one.
    fn table() -> RecordTable {
        let services = [
            svc(json!({
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                   {"name": "dns", "port": 53, "protocol": "UDP"},
                                   {"port": 8080}]}
            })),
            svc(json!({
                "metadata": {"name": "db", "namespace": "data"},
                "spec": {"clusterIP": "None",
                         "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}
            })),
            svc(json!({
                "metadata": {"name": "ext", "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": "example.org"}
            })),
            svc(json!({
                "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                "spec": {"clusterIP": "10.96.0.10",
                         "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
            })),
        ];
        let slices = [
            slice(json!({
                "metadata": {"name": "db-abc", "namespace": "data",
                             "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                    {"addresses": ["10.42.1.6"], "hostname": "db-1"},
                    {"addresses": ["10.42.2.7"], "hostname": "db-2", "conditions": {"ready": false}},
                    {"addresses": ["10.42.3.8"], "conditions": {"ready": true}}
                ]
            })),
            // A slice of another Service and an IPv6 slice of this one must not leak in.
            slice(json!({
                "metadata": {"name": "other-x", "namespace": "data",
                             "labels": {"kubernetes.io/service-name": "other"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.42.9.9"]}]
            })),
            slice(json!({
                "metadata": {"name": "db-v6", "namespace": "data",
                             "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv6",
                "endpoints": [{"addresses": ["fd00::1"]}]
            })),
        ];
        RecordTable::build(
            Zone::new("cluster.local").unwrap(),
            services.iter(),
            slices.iter(),
            7,
        )
    }

    fn answers(l: Lookup) -> (Vec<Record>, Vec<Record>) {
        match l {
            Lookup::Found {
                answers,
                additionals,
            } => (answers, additionals),
            other => panic!("expected records, got {other:?}"),
        }
    }

    fn ips(records: &[Record]) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = records
            .iter()
            .map(|r| match &r.data {
                RData::A(a) => a.0,
                other => panic!("not an A record: {other:?}"),
            })
            .collect();
        v.sort();
        v
    }

    fn srvs(records: &[Record]) -> Vec<(u16, u16, u16, String)> {
        let mut v: Vec<_> = records
            .iter()
            .map(|r| match &r.data {
                RData::SRV(s) => (s.priority, s.weight, s.port, s.target.to_ascii()),
                other => panic!("not an SRV record: {other:?}"),
            })
            .collect();
        v.sort();
        v
    }

    fn assert_soa(soa: &Record) {
        assert_eq!(soa.name, name("cluster.local."));
        assert_eq!(soa.ttl, TTL);
        match &soa.data {
            RData::SOA(s) => {
                assert_eq!(s.mname, name("ns.dns.cluster.local."));
                assert_eq!(s.serial, 7);
                assert_eq!(s.minimum, TTL);
            }
            other => panic!("not an SOA: {other:?}"),
        }
    }

    fn assert_nx(l: Lookup) {
        match l {
            Lookup::NxDomain { soa } => assert_soa(&soa),
            other => panic!("expected NXDOMAIN, got {other:?}"),
        }
    }

    fn assert_nodata(l: Lookup) {
        match l {
            Lookup::NoData { soa } => assert_soa(&soa),
            other => panic!("expected NODATA, got {other:?}"),
        }
    }

    #[test]
    fn cluster_ip_service_has_its_address() {
        let t = table();
        let (ans, extra) =
            answers(t.lookup(&name("web.default.svc.cluster.local."), RecordType::A));
        assert_eq!(ips(&ans), vec!["10.96.0.20".parse::<Ipv4Addr>().unwrap()]);
        assert!(extra.is_empty());
        assert_eq!(ans[0].ttl, TTL);
        assert_eq!(ans[0].name, name("web.default.svc.cluster.local."));
    }

    #[test]
    fn names_match_in_any_case_and_with_or_without_the_trailing_dot() {
        let t = table();
        for q in [
            "web.default.svc.cluster.local",
            "WEB.Default.SVC.cluster.LOCAL.",
            "Web.default.svc.Cluster.local",
        ] {
            let (ans, _) = answers(t.lookup(&name(q), RecordType::A));
            assert_eq!(
                ips(&ans),
                vec!["10.96.0.20".parse::<Ipv4Addr>().unwrap()],
                "{q}"
            );
            // The answer is owned by the name as asked, fully qualified.
            assert!(ans[0].name.is_fqdn());
            assert_eq!(
                ans[0].name.to_ascii().trim_end_matches('.'),
                q.trim_end_matches('.')
            );
        }
        // The configured domain may carry its trailing dot and capitals too.
        let services = [svc(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.20"}
        }))];
        let t = RecordTable::build(Zone::new("Cluster.Local.").unwrap(), services.iter(), [], 1);
        answers(t.lookup(&name("web.default.svc.cluster.local"), RecordType::A));
    }

    #[test]
    fn headless_service_lists_ready_endpoints_only() {
        let t = table();
        let (ans, _) = answers(t.lookup(&name("db.data.svc.cluster.local."), RecordType::A));
        let want: Vec<Ipv4Addr> = ["10.42.0.5", "10.42.1.6", "10.42.3.8"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(ips(&ans), want);
    }

    #[test]
    fn headless_endpoints_have_their_own_names() {
        let t = table();
        let (ans, _) = answers(t.lookup(&name("db-0.db.data.svc.cluster.local."), RecordType::A));
        assert_eq!(ips(&ans), vec!["10.42.0.5".parse::<Ipv4Addr>().unwrap()]);
        // Without a hostname the endpoint is named by its address.
        let (ans, _) =
            answers(t.lookup(&name("10-42-3-8.db.data.svc.cluster.local."), RecordType::A));
        assert_eq!(ips(&ans), vec!["10.42.3.8".parse::<Ipv4Addr>().unwrap()]);
        // The unready one has no name; a named endpoint is not also reachable by its address.
        assert_nx(t.lookup(&name("db-2.db.data.svc.cluster.local."), RecordType::A));
        assert_nx(t.lookup(&name("10-42-0-5.db.data.svc.cluster.local."), RecordType::A));
        // Endpoint names exist for headless Services only.
        assert_nx(t.lookup(&name("x.web.default.svc.cluster.local."), RecordType::A));
        // An existing endpoint asked for another type.
        assert_nodata(t.lookup(&name("db-0.db.data.svc.cluster.local."), RecordType::AAAA));
    }

    #[test]
    fn srv_of_a_named_port_of_a_cluster_ip_service() {
        let t = table();
        let (ans, extra) = answers(t.lookup(
            &name("_http._tcp.web.default.svc.cluster.local."),
            RecordType::SRV,
        ));
        assert_eq!(
            srvs(&ans),
            vec![(0, 100, 80, "web.default.svc.cluster.local.".to_string())]
        );
        assert_eq!(extra.len(), 1);
        assert_eq!(extra[0].name, name("web.default.svc.cluster.local."));
        assert_eq!(ips(&extra), vec!["10.96.0.20".parse::<Ipv4Addr>().unwrap()]);
        // The protocol is part of the name.
        let (ans, _) = answers(t.lookup(
            &name("_dns._udp.web.default.svc.cluster.local."),
            RecordType::SRV,
        ));
        assert_eq!(srvs(&ans)[0].2, 53);
        assert_nx(t.lookup(
            &name("_dns._tcp.web.default.svc.cluster.local."),
            RecordType::SRV,
        ));
        assert_nx(t.lookup(
            &name("_nope._tcp.web.default.svc.cluster.local."),
            RecordType::SRV,
        ));
        // The port name exists; it just has no A record.
        assert_nodata(t.lookup(
            &name("_http._tcp.web.default.svc.cluster.local."),
            RecordType::A,
        ));
        assert_nodata(t.lookup(
            &name("_tcp.web.default.svc.cluster.local."),
            RecordType::SRV,
        ));
        // SRV at the Service's own name: every port, named or not.
        let (ans, _) = answers(t.lookup(&name("web.default.svc.cluster.local."), RecordType::SRV));
        let ports: Vec<u16> = srvs(&ans).iter().map(|s| s.2).collect();
        assert_eq!(ports, vec![53, 80, 8080]);
    }

    #[test]
    fn srv_of_a_headless_service_has_one_record_per_endpoint() {
        let t = table();
        let (ans, extra) = answers(t.lookup(
            &name("_pg._tcp.db.data.svc.cluster.local."),
            RecordType::SRV,
        ));
        assert_eq!(
            srvs(&ans),
            vec![
                (
                    0,
                    33,
                    5432,
                    "10-42-3-8.db.data.svc.cluster.local.".to_string()
                ),
                (0, 33, 5432, "db-0.db.data.svc.cluster.local.".to_string()),
                (0, 33, 5432, "db-1.db.data.svc.cluster.local.".to_string()),
            ]
        );
        assert_eq!(extra.len(), 3);
        let target = extra
            .iter()
            .find(|r| r.name == name("db-1.db.data.svc.cluster.local."))
            .unwrap();
        assert_eq!(
            ips(std::slice::from_ref(target)),
            vec!["10.42.1.6".parse::<Ipv4Addr>().unwrap()]
        );
    }

    #[test]
    fn pod_names_carry_their_address() {
        let t = table();
        let (ans, _) = answers(t.lookup(&name("10-42-0-9.any.pod.cluster.local."), RecordType::A));
        assert_eq!(ips(&ans), vec!["10.42.0.9".parse::<Ipv4Addr>().unwrap()]);
        assert_nx(t.lookup(&name("10-42-0-999.any.pod.cluster.local."), RecordType::A));
        assert_nx(t.lookup(&name("foo.any.pod.cluster.local."), RecordType::A));
        assert_nodata(t.lookup(&name("10-42-0-9.any.pod.cluster.local."), RecordType::AAAA));
    }

    #[test]
    fn missing_names_are_nxdomain_and_empty_ones_nodata() {
        let t = table();
        assert_nx(t.lookup(&name("nope.default.svc.cluster.local."), RecordType::A));
        assert_nx(t.lookup(&name("web.nons.svc.cluster.local."), RecordType::A));
        assert_nx(t.lookup(&name("nons.svc.cluster.local."), RecordType::A));
        assert_nx(t.lookup(&name("foo.cluster.local."), RecordType::A));
        assert_nx(t.lookup(&name("a.b.c.d.e.f.svc.cluster.local."), RecordType::A));
        // What a pod's search path produces for an outside name stays inside.
        assert_nx(t.lookup(
            &name("example.org.default.svc.cluster.local."),
            RecordType::A,
        ));
        // Names that exist without records of the type.
        assert_nodata(t.lookup(&name("web.default.svc.cluster.local."), RecordType::AAAA));
        assert_nodata(t.lookup(&name("default.svc.cluster.local."), RecordType::A));
        assert_nodata(t.lookup(&name("svc.cluster.local."), RecordType::A));
        assert_nodata(t.lookup(&name("cluster.local."), RecordType::A));
    }

    #[test]
    fn apex_has_soa_and_ns() {
        let t = table();
        let (ans, _) = answers(t.lookup(&name("cluster.local."), RecordType::SOA));
        assert_soa(&ans[0]);
        let (ans, extra) = answers(t.lookup(&name("cluster.local."), RecordType::NS));
        assert!(matches!(&ans[0].data, RData::NS(ns) if ns.0 == name("ns.dns.cluster.local.")));
        assert_eq!(ips(&extra), vec!["10.96.0.10".parse::<Ipv4Addr>().unwrap()]);
    }

    #[test]
    fn external_name_is_a_cname() {
        let t = table();
        for qtype in [RecordType::A, RecordType::AAAA, RecordType::CNAME] {
            let (ans, _) = answers(t.lookup(&name("ext.default.svc.cluster.local."), qtype));
            assert_eq!(ans.len(), 1);
            match &ans[0].data {
                RData::CNAME(c) => assert_eq!(c.0, name("example.org.")),
                other => panic!("not a CNAME: {other:?}"),
            }
        }
    }

    #[test]
    fn outside_names_are_not_the_tables() {
        let t = table();
        assert_eq!(
            t.lookup(&name("example.org."), RecordType::A),
            Lookup::Outside
        );
        assert_eq!(t.lookup(&name("local."), RecordType::A), Lookup::Outside);
        // A domain that merely ends with the same letters is another domain.
        assert_eq!(
            t.lookup(&name("mycluster.local."), RecordType::A),
            Lookup::Outside
        );
    }

    #[test]
    fn reverse_names_of_known_addresses() {
        let t = table();
        let (ans, _) = answers(t.lookup(&name("20.0.96.10.in-addr.arpa."), RecordType::PTR));
        assert!(
            matches!(&ans[0].data, RData::PTR(p) if p.0 == name("web.default.svc.cluster.local."))
        );
        let (ans, _) = answers(t.lookup(&name("5.0.42.10.in-addr.arpa."), RecordType::PTR));
        assert!(
            matches!(&ans[0].data, RData::PTR(p) if p.0 == name("db-0.db.data.svc.cluster.local."))
        );
        assert_eq!(
            t.lookup(&name("1.1.168.192.in-addr.arpa."), RecordType::PTR),
            Lookup::Outside
        );
    }

    #[test]
    fn headless_service_without_ready_endpoints_exists_without_records() {
        let services = [svc(json!({
            "metadata": {"name": "db", "namespace": "data"},
            "spec": {"clusterIP": "None"}
        }))];
        let t = RecordTable::build(Zone::new("cluster.local").unwrap(), services.iter(), [], 7);
        assert_nodata(t.lookup(&name("db.data.svc.cluster.local."), RecordType::A));
    }

    #[test]
    fn bad_domains_are_refused() {
        assert!(Zone::new("").is_err());
        assert!(Zone::new("a..b").is_err());
        assert!(Zone::new(".").is_err());
    }
}
