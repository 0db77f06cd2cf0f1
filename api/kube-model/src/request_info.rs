//! What a request asks to do, read once from its method, path and query when it arrives, as
//! upstream's `RequestInfoFactory` reads it (from the URL alone, no lookup of the served
//! resources: an unknown resource is authorized like any other, then answered 404).
//! Authorization, impersonation, audit, request metrics and the router all read this one value.

use axum::http::{Method, Uri};

/// A resource request's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// API group ("" for core).
    pub group: String,
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    pub subresource: Option<String>,
    /// "" for cluster scope (and all-namespace lists).
    pub namespace: String,
    /// The object name (or the `metadata.name` a list or watch is restricted to).
    pub name: Option<String>,
}

/// One request, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The raw path (what non-resource rules and the router match).
    pub path: String,
    /// The raw query, if any.
    pub query: Option<String>,
    /// The path's non-empty segments, percent-decoded.
    pub segments: Vec<String>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for
    /// non-resource requests the lowercase HTTP method.
    pub verb: String,
    /// None for a non-resource request (`/healthz`, `/api`, `/metrics`, ...).
    pub resource: Option<ResourceAttributes>,
    /// A GET with a true `watch` parameter (Go's ParseBool rules, as the rest of the API reads it).
    pub watch_param: bool,
}

/// Subresources whose streams are authorized as `create` whatever the method (upstream authorizes the
/// WebSocket GET of exec, attach and portforward as `create` too).
const STREAM_SUBRESOURCES: [&str; 3] = ["exec", "attach", "portforward"];

impl RequestInfo {
    /// Reads what `method` on `uri` asks for.
    pub fn of(method: &Method, uri: &Uri) -> RequestInfo {
        RequestInfo::parse(method, uri.path(), uri.query())
    }

    /// [`RequestInfo::of`] from a path and query.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .collect();
        let (watch, selected) = list_options(query);
        let (verb, resource) = target(method, &segments, watch, selected);
        RequestInfo {
            path: path.to_string(),
            query: query.map(str::to_string),
            segments,
            verb,
            resource,
            watch_param: *method == Method::GET && watch,
        }
    }
}

/// The authorization verb and the resource of a request's segments.
fn target(
    method: &Method,
    segments: &[String],
    watch: bool,
    selected: Option<String>,
) -> (String, Option<ResourceAttributes>) {
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return (method.as_str().to_ascii_lowercase(), None),
    };
    let mut verb = match *method {
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut parts: &[&str] = rest;
    if parts.first() == Some(&"watch") && verb == "get" {
        verb = "watch";
        parts = &parts[1..];
    }
    let mut namespace = String::new();
    if parts.first() == Some(&"namespaces") {
        if let Some(ns) = parts.get(1) {
            namespace = (*ns).to_string();
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts = &parts[2..];
            }
        }
    }
    let resource = parts.first().map(|s| (*s).to_string()).unwrap_or_default();
    let mut name = parts.get(1).map(|s| (*s).to_string());
    let subresource = parts.get(2).map(|s| (*s).to_string());
    if name.is_none() && verb == "get" {
        verb = if watch { "watch" } else { "list" };
        name = selected;
    }
    if name.is_none() && verb == "delete" {
        verb = "deletecollection";
    }
    if subresource
        .as_deref()
        .is_some_and(|s| group.is_empty() && resource == "pods" && STREAM_SUBRESOURCES.contains(&s))
    {
        verb = "create";
    }
    let attributes = ResourceAttributes {
        group: group.to_string(),
        version: version.to_string(),
        resource,
        subresource,
        namespace,
        name,
    };
    (verb.to_string(), Some(attributes))
}

/// `watch` (Go's ParseBool rules) and the name an exact `metadata.name` field selector restricts
/// a list to.
fn list_options(query: Option<&str>) -> (bool, Option<String>) {
    let mut watch = false;
    let mut name = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "watch" => watch = !(v == "0" || v.eq_ignore_ascii_case("false")),
            "fieldSelector" => {
                for term in v.split(',') {
                    let term = term.trim();
                    let value = term
                        .strip_prefix("metadata.name==")
                        .or_else(|| term.strip_prefix("metadata.name="));
                    if let Some(n) = value {
                        if !n.is_empty()
                            && !n.contains('/')
                            && n != "."
                            && n != ".."
                            && !n.contains('%')
                        {
                            name = Some(n.to_string());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    (watch, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::parse(&method, path, query)
    }

    #[test]
    fn verbs_and_targets_as_upstream_reads_them() {
        let a = of(Method::GET, "/api/v1/namespaces/default/pods", None);
        assert_eq!(a.verb, "list");
        let r = a.resource.expect("resource");
        assert_eq!(
            (r.resource.as_str(), r.namespace.as_str()),
            ("pods", "default")
        );
        let a = of(Method::GET, "/api/v1/pods", Some("watch=true"));
        assert_eq!(a.verb, "watch");
        assert!(a.watch_param);
        let a = of(
            Method::GET,
            "/api/v1/namespaces/d/secrets",
            Some("fieldSelector=metadata.name%3Ds1&watch=1"),
        );
        assert_eq!(a.verb, "watch");
        assert_eq!(a.resource.expect("r").name.as_deref(), Some("s1"));
        let a = of(
            Method::DELETE,
            "/apis/apps/v1/namespaces/d/deployments",
            None,
        );
        assert_eq!(a.verb, "deletecollection");
        let a = of(Method::GET, "/api/v1/namespaces/kube-system", None);
        let r = a.resource.expect("ns");
        assert_eq!(
            (r.resource.as_str(), r.namespace.as_str(), r.name.as_deref()),
            ("namespaces", "kube-system", Some("kube-system"))
        );
        let a = of(Method::PUT, "/api/v1/namespaces/x/finalize", None);
        let r = a.resource.expect("finalize");
        assert_eq!(
            (r.resource.as_str(), r.subresource.as_deref()),
            ("namespaces", Some("finalize"))
        );
        let a = of(
            Method::GET,
            "/api/v1/namespaces/d/pods/p/exec",
            Some("command=sh"),
        );
        assert_eq!(a.verb, "create");
        let a = of(Method::GET, "/api/v1/nodes/n1/proxy/stats/summary", None);
        assert_eq!(
            a.resource.expect("proxy").subresource.as_deref(),
            Some("proxy")
        );
        let a = of(Method::GET, "/api/v1/watch/namespaces/d/pods", None);
        assert_eq!(a.verb, "watch");
        assert!(!a.watch_param);
        let a = of(Method::GET, "/apis/apps/v1", None);
        assert!(a.resource.is_none());
        assert_eq!(a.verb, "get");
        let a = of(
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            None,
        );
        assert_eq!(a.verb, "create");
    }

    #[test]
    fn segments_are_decoded_once() {
        let a = of(Method::GET, "/api/v1/namespaces/d/configmaps/a%3Ab//", None);
        assert_eq!(
            a.segments,
            ["api", "v1", "namespaces", "d", "configmaps", "a:b"]
        );
        assert_eq!(a.resource.expect("cm").name.as_deref(), Some("a:b"));
        assert!(!of(Method::POST, "/api/v1/pods", Some("watch=true")).watch_param);
    }
}
