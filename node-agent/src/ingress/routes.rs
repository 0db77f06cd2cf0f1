//! The routing table of the built-in Ingress controller, built from the Ingresses of its class and the
//! Services and EndpointSlices they name: where a request for (host, path) goes, as the Ingress spec
//! says.
//!
//! - Hosts: an exact host first, then a `*.` wildcard (one label: `*.example.com` matches
//!   `a.example.com`, not `a.b.example.com` or `example.com`), then the rules without a host.
//! - Paths within the chosen host: an `Exact` path equal to the request's wins; else the longest `Prefix`
//!   (`ImplementationSpecific` is a prefix here) that matches by whole path elements (`/foo` matches
//!   `/foo`, `/foo/` and `/foo/bar`, not `/foobar`).
//! - Where Ingresses overlap, the older one wins (then namespace/name order).
//! - Nothing matched: the oldest `defaultBackend`, else 404.
//! - A backend resolves to the ready endpoints of its Service port; terminating endpoints take no new
//!   request (connections already open go on).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};

/// A Service port an Ingress names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortRef {
    /// By its number.
    Number(i32),
    /// By its name.
    Name(String),
}

/// Where matched requests go: a Service port in the Ingress's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend {
    /// The Ingress's (and the Service's) namespace.
    pub namespace: String,
    /// The Service.
    pub service: String,
    /// Its port.
    pub port: PortRef,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.port {
            PortRef::Number(n) => write!(f, "{}/{}:{n}", self.namespace, self.service),
            PortRef::Name(n) => write!(f, "{}/{}:{n}", self.namespace, self.service),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathKind {
    Exact,
    Prefix,
}

/// One path of one rule, with the age of the Ingress it came from.
#[derive(Debug, Clone)]
struct PathRule {
    kind: PathKind,
    /// For prefixes: without trailing slashes ("" matches everything).
    path: String,
    backend: Backend,
    /// The Ingress's (creation time, namespace/name), for precedence.
    order: (String, String),
    /// The Ingress it came from (`namespace/name`), for metrics.
    ingress: String,
}

/// What a request matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<'a> {
    /// The backend it goes to.
    pub backend: &'a Backend,
    /// The Ingress that routed it (`namespace/name`).
    pub ingress: &'a str,
}

/// The whole table, rebuilt on every change of what it is built from.
#[derive(Debug, Default)]
pub struct RouteTable {
    exact: HashMap<String, Vec<PathRule>>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, Vec<PathRule>>,
    any: Vec<PathRule>,
    default: Option<(Backend, String)>,
    endpoints: HashMap<Backend, Vec<SocketAddr>>,
}

fn backend_of(namespace: &str, b: &IngressBackend) -> Option<Backend> {
    let svc = b.service.as_ref()?;
    let port = svc.port.as_ref()?;
    let port = match (&port.name, port.number) {
        (Some(n), _) if !n.is_empty() => PortRef::Name(n.clone()),
        (_, Some(n)) if n != 0 => PortRef::Number(n),
        _ => return None,
    };
    Some(Backend {
        namespace: namespace.to_string(),
        service: svc.name.clone(),
        port,
    })
}

fn order_of(ing: &Ingress) -> (String, String) {
    let created = ing
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    (created, key_of(ing))
}

fn key_of(ing: &Ingress) -> String {
    format!(
        "{}/{}",
        ing.metadata.namespace.as_deref().unwrap_or_default(),
        ing.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether a request path falls under a prefix rule's path (trailing slashes dropped).
fn prefix_matches(rule: &str, path: &str) -> bool {
    rule.is_empty()
        || path == rule
        || (path.starts_with(rule) && path.as_bytes().get(rule.len()) == Some(&b'/'))
}

/// The best of `rules` for `path`: an equal `Exact`, else the longest matching prefix; older first.
fn best<'a>(rules: &'a [PathRule], path: &str) -> Option<&'a PathRule> {
    let exact = rules
        .iter()
        .filter(|r| r.kind == PathKind::Exact && r.path == path)
        .min_by(|a, b| a.order.cmp(&b.order));
    exact.or_else(|| {
        rules
            .iter()
            .filter(|r| r.kind == PathKind::Prefix && prefix_matches(&r.path, path))
            .min_by(|a, b| {
                b.path
                    .len()
                    .cmp(&a.path.len())
                    .then_with(|| a.order.cmp(&b.order))
            })
    })
}

impl RouteTable {
    /// The table for `ingresses` (those of this controller's class), resolving backends through
    /// `services` and `slices`.
    pub fn build<'a>(
        ingresses: impl IntoIterator<Item = &'a Ingress>,
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ) -> RouteTable {
        let mut t = RouteTable::default();
        let mut defaults: Vec<((String, String), Backend, String)> = Vec::new();
        for ing in ingresses {
            let ns = ing.metadata.namespace.as_deref().unwrap_or_default();
            let order = order_of(ing);
            let Some(spec) = &ing.spec else { continue };
            if let Some(b) = spec
                .default_backend
                .as_ref()
                .and_then(|b| backend_of(ns, b))
            {
                defaults.push((order.clone(), b, key_of(ing)));
            }
            for rule in spec.rules.iter().flatten() {
                let Some(http) = &rule.http else { continue };
                let paths = http.paths.iter().filter_map(|p| {
                    let backend = backend_of(ns, &p.backend)?;
                    let raw = p.path.as_deref().unwrap_or("/");
                    let (kind, path) = match p.path_type.as_str() {
                        "Exact" => (PathKind::Exact, raw.to_string()),
                        _ => (PathKind::Prefix, raw.trim_end_matches('/').to_string()),
                    };
                    Some(PathRule {
                        kind,
                        path,
                        backend,
                        order: order.clone(),
                        ingress: key_of(ing),
                    })
                });
                let host = rule
                    .host
                    .as_deref()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                let list = if host.is_empty() {
                    &mut t.any
                } else if let Some(rest) = host.strip_prefix("*.") {
                    t.wildcard.entry(rest.to_string()).or_default()
                } else {
                    t.exact.entry(host).or_default()
                };
                list.extend(paths);
            }
        }
        defaults.sort_by(|a, b| a.0.cmp(&b.0));
        t.default = defaults.into_iter().next().map(|(_, b, i)| (b, i));
        t.endpoints = resolve(&t.backends(), services, slices);
        t
    }

    /// Every backend the table names.
    fn backends(&self) -> Vec<Backend> {
        let mut all: Vec<Backend> = self
            .exact
            .values()
            .chain(self.wildcard.values())
            .chain(std::iter::once(&self.any))
            .flatten()
            .map(|r| r.backend.clone())
            .chain(self.default.iter().map(|(b, _)| b.clone()))
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// Where a request for `host` (any `:port` dropped) and `path` goes; None: 404.
    pub fn route(&self, host: &str, path: &str) -> Option<Route<'_>> {
        let host = host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let host = host.to_ascii_lowercase();
        let rules = self
            .exact
            .get(&host)
            .or_else(|| {
                let (_, rest) = host.split_once('.')?;
                self.wildcard.get(rest)
            })
            .unwrap_or(&self.any);
        match best(rules, path) {
            Some(r) => Some(Route {
                backend: &r.backend,
                ingress: &r.ingress,
            }),
            None => self.default.as_ref().map(|(b, i)| Route {
                backend: b,
                ingress: i,
            }),
        }
    }

    /// The ready endpoints of `backend` (empty: 503).
    pub fn endpoints(&self, backend: &Backend) -> &[SocketAddr] {
        self.endpoints.get(backend).map_or(&[], Vec::as_slice)
    }

    /// How many host rules and backends it holds (for logs and metrics).
    pub fn size(&self) -> (usize, usize) {
        (
            self.exact.len() + self.wildcard.len() + usize::from(!self.any.is_empty()),
            self.endpoints.len(),
        )
    }
}

/// Each backend's ready endpoint addresses: the Service port it names, then that port (by name) in the
/// Service's EndpointSlices.
fn resolve<'a>(
    backends: &[Backend],
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> HashMap<Backend, Vec<SocketAddr>> {
    let services: BTreeMap<(&str, &str), &Service> = services
        .into_iter()
        .filter_map(|s| {
            Some((
                (
                    s.metadata.namespace.as_deref()?,
                    s.metadata.name.as_deref()?,
                ),
                s,
            ))
        })
        .collect();
    let mut by_service: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        let ns = s.metadata.namespace.as_deref().unwrap_or_default();
        let svc = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
            .map(String::as_str);
        if let Some(svc) = svc {
            by_service.entry((ns, svc)).or_default().push(s);
        }
    }
    let mut out = HashMap::new();
    for b in backends {
        let key = (b.namespace.as_str(), b.service.as_str());
        let Some(svc) = services.get(&key) else {
            continue;
        };
        let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
        let port = ports.into_iter().flatten().find(|p| match &b.port {
            PortRef::Number(n) => p.port == *n,
            PortRef::Name(n) => p.name.as_deref() == Some(n),
        });
        let Some(port) = port else { continue };
        let port_name = port.name.clone().unwrap_or_default();
        let mut addrs = Vec::new();
        for slice in by_service.get(&key).into_iter().flatten() {
            if slice.address_type != "IPv4" {
                continue;
            }
            let target = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.clone().unwrap_or_default() == port_name)
                .and_then(|p| p.port);
            let Some(target) = target.and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            for e in &slice.endpoints {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !ready {
                    continue;
                }
                for a in &e.addresses {
                    if let Ok(ip) = a.parse::<std::net::Ipv4Addr>() {
                        addrs.push(SocketAddr::from((ip, target)));
                    }
                }
            }
        }
        addrs.sort();
        addrs.dedup();
        out.insert(b.clone(), addrs);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(name: &str, created: &str, spec: serde_json::Value) -> Ingress {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": spec
        }))
        .expect("ingress")
    }

    fn path(kind: &str, p: &str, svc: &str) -> serde_json::Value {
        json!({"path": p, "pathType": kind, "backend": {"service": {"name": svc, "port": {"number": 80}}}})
    }

    fn table(ings: &[Ingress]) -> RouteTable {
        RouteTable::build(ings, &[], &[])
    }

    fn to(t: &RouteTable, host: &str, p: &str) -> Option<String> {
        t.route(host, p).map(|r| r.backend.service.clone())
    }

    #[test]
    fn hosts_exact_then_wildcard_then_any() {
        let t = table(&[ingress(
            "i",
            "2026-01-01T00:00:00Z",
            json!({"rules": [
                {"host": "a.example.com", "http": {"paths": [path("Prefix", "/", "a")]}},
                {"host": "*.example.com", "http": {"paths": [path("Prefix", "/", "wild")]}},
                {"http": {"paths": [path("Prefix", "/", "any")]}}]}),
        )]);
        assert_eq!(to(&t, "a.example.com", "/x").as_deref(), Some("a"));
        assert_eq!(to(&t, "A.Example.com:8080", "/x").as_deref(), Some("a"));
        assert_eq!(to(&t, "b.example.com", "/").as_deref(), Some("wild"));
        assert_eq!(
            to(&t, "c.b.example.com", "/").as_deref(),
            Some("any"),
            "one label only"
        );
        assert_eq!(to(&t, "example.com", "/").as_deref(), Some("any"));
    }

    #[test]
    fn exact_beats_prefix_and_longest_prefix_wins_by_element() {
        let t = table(&[ingress(
            "i",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"host": "h", "http": {"paths": [
                path("Prefix", "/", "root"),
                path("Prefix", "/foo/", "foo"),
                path("Exact", "/foo", "exact"),
                path("ImplementationSpecific", "/foo/bar", "bar")]}}]}),
        )]);
        assert_eq!(to(&t, "h", "/foo").as_deref(), Some("exact"));
        assert_eq!(to(&t, "h", "/foo/").as_deref(), Some("foo"));
        assert_eq!(to(&t, "h", "/foo/baz").as_deref(), Some("foo"));
        assert_eq!(
            to(&t, "h", "/foobar").as_deref(),
            Some("root"),
            "whole elements only"
        );
        assert_eq!(to(&t, "h", "/foo/bar/x").as_deref(), Some("bar"));
        assert_eq!(to(&t, "other", "/"), None, "no rule and no default: 404");
    }

    #[test]
    fn the_older_ingress_wins_and_the_default_backend_catches_the_rest() {
        let old = ingress(
            "old",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"host": "h", "http": {"paths": [path("Prefix", "/", "old")]}}]}),
        );
        let new = ingress(
            "new",
            "2026-02-01T00:00:00Z",
            json!({"defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
                   "rules": [{"host": "h", "http": {"paths": [path("Prefix", "/", "new"), path("Exact", "/only", "only")]}}]}),
        );
        let t = table(&[new, old]);
        assert_eq!(to(&t, "h", "/").as_deref(), Some("old"));
        assert_eq!(to(&t, "h", "/only").as_deref(), Some("only"));
        assert_eq!(to(&t, "elsewhere", "/").as_deref(), Some("fallback"));
        assert_eq!(t.route("h", "/").map(|r| r.ingress), Some("ns/old"));
    }

    #[test]
    fn backends_resolve_to_ready_endpoints_of_the_named_port() {
        let ing = ingress(
            "i",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"host": "h", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}),
        );
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
        }))
        .expect("svc");
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.42.0.5"], "conditions": {"ready": true}},
                {"addresses": ["10.42.0.6"], "conditions": {"ready": false, "serving": true, "terminating": true}}]
        }))
        .expect("slice");
        let t = RouteTable::build([&ing], [&svc], [&slice]);
        let route = t.route("h", "/").expect("route");
        assert_eq!(
            t.endpoints(route.backend),
            ["10.42.0.5:8080".parse::<SocketAddr>().expect("addr")]
        );
    }
}
