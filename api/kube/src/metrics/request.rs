//! How a request is labelled: upstream's RequestInfo after `CleanScope`, `CanonicalVerb` and `cleanVerb`.

use std::borrow::Cow;

use axum::http::{header, HeaderMap, Method};
use prometheus_client::encoding::EncodeLabelSet;

use crate::crd::registry::Registry as Served;
use crate::request::parse_route;
use crate::resource::Str;

/// Upstream's `component` label of resource requests.
const APISERVER: &str = "apiserver";

/// Subresources upstream reports as CONNECT.
const CONNECT_SUBRESOURCES: [&str; 5] = ["log", "exec", "portforward", "attach", "proxy"];

/// Subresources of long-running requests (upstream's `BasicLongRunningRequestCheck` for kube-apiserver).
const LONG_RUNNING_SUBRESOURCES: [&str; 5] = ["attach", "exec", "proxy", "log", "portforward"];

/// Verbs upstream reports; anything else is `other`.
const VALID_VERBS: [&str; 14] = [
    "APPLY",
    "CONNECT",
    "CREATE",
    "DELETE",
    "DELETECOLLECTION",
    "GET",
    "LIST",
    "PATCH",
    "POST",
    "PROXY",
    "PUT",
    "UPDATE",
    "WATCH",
    "WATCHLIST",
];

pub(super) use crate::exposition::label;

/// `apiserver_request_duration_seconds` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub(super) verb: &'static str,
    pub(super) dry_run: &'static str,
    pub(super) group: Str,
    pub(super) version: Str,
    pub(super) resource: Str,
    pub(super) subresource: Str,
    pub(super) scope: &'static str,
    pub(super) component: &'static str,
}

/// How a request is measured: its labels (upstream's RequestInfo after `CleanScope` and
/// `cleanVerb`) and whether it is long-running.
#[derive(Debug, Clone)]
pub struct RequestMeasure {
    pub(super) labels: RequestLabels,
    pub(super) long_running: bool,
}

impl RequestMeasure {
    /// Labels a request; None for paths that are neither a served resource nor one of the non-resource
    /// paths upstream instruments (`/healthz`, `/livez`, `/readyz`, `/api`, `/apis`).
    pub fn of(
        served: &Served,
        info: &crate::request_info::RequestInfo,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<Self> {
        let path = info.path.as_str();
        let query = info.query.as_deref().unwrap_or("");
        let watch_param = info.watch_param;
        let component = match path {
            "/healthz" | "/livez" | "/readyz" => Some(""),
            "/api" | "/apis" => Some(APISERVER),
            _ => None,
        };
        if let Some(component) = component {
            let verb = clean_verb(
                canonical_verb(method, ""),
                watch_param,
                false,
                None,
                headers,
            );
            return Some(RequestMeasure {
                labels: RequestLabels {
                    verb,
                    dry_run: dry_run(query),
                    group: Cow::Borrowed(""),
                    version: Cow::Borrowed(""),
                    resource: Cow::Borrowed(""),
                    subresource: Cow::Owned(path.to_string()),
                    scope: "",
                    component,
                },
                long_running: false,
            });
        }
        let segs: Vec<&str> = info.segments.iter().map(String::as_str).collect();
        let (group, version, rest) = match segs.as_slice() {
            ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
            _ => return None,
        };
        let route = parse_route(served, group, version, rest).ok()?;
        let create = *method == Method::POST && route.name.is_none();
        let scope = if route.name.is_some() || create {
            "resource"
        } else if route.namespace.is_some() {
            "namespace"
        } else {
            "cluster"
        };
        let sub = route.subresource.as_deref();
        let verb = clean_verb(
            canonical_verb(method, scope),
            watch_param,
            route.legacy_watch,
            sub,
            headers,
        );
        let long_running =
            verb == "WATCH" || sub.is_some_and(|s| LONG_RUNNING_SUBRESOURCES.contains(&s));
        let def = &route.def;
        Some(RequestMeasure {
            labels: RequestLabels {
                verb,
                dry_run: dry_run(query),
                group: label(def.group.clone()),
                version: label(def.version.clone()),
                resource: label(def.plural.clone()),
                subresource: label(subresource(sub)),
                scope,
                component: APISERVER,
            },
            long_running,
        })
    }

    /// A watch or a stream: upstream counts these apart from the in-flight limit.
    pub fn long_running(&self) -> bool {
        self.long_running
    }

    /// The reported verb (`GET`, `LIST`, `WATCH`, `APPLY`, ...).
    pub fn verb(&self) -> &'static str {
        self.labels.verb
    }
}

/// Subresource names as static strings where they are the usual ones (no allocation per request).
fn subresource(sub: Option<&str>) -> Str {
    const KNOWN: [&str; 11] = [
        "status",
        "scale",
        "log",
        "exec",
        "attach",
        "portforward",
        "proxy",
        "eviction",
        "binding",
        "finalize",
        "ephemeralcontainers",
    ];
    match sub {
        None => Cow::Borrowed(""),
        Some(s) => match KNOWN.iter().find(|k| **k == s) {
            Some(k) => Cow::Borrowed(k),
            None => Cow::Owned(s.to_string()),
        },
    }
}

/// Upstream's `CanonicalVerb`: a GET (or HEAD) of a collection is a LIST.
fn canonical_verb(method: &Method, scope: &str) -> &'static str {
    match *method {
        Method::GET | Method::HEAD if scope != "resource" && !scope.is_empty() => "LIST",
        Method::GET | Method::HEAD => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// Upstream's `cleanVerb`: WATCH, APPLY and CONNECT, and `other` for what is not a known verb.
fn clean_verb(
    verb: &'static str,
    watch_param: bool,
    legacy_watch: bool,
    sub: Option<&str>,
    headers: &HeaderMap,
) -> &'static str {
    if legacy_watch || watch_param {
        return "WATCH";
    }
    let apply = verb == "PATCH"
        && headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|ct| ct.trim() == "application/apply-patch+yaml");
    let reported = if apply {
        "APPLY"
    } else if sub.is_some_and(|s| CONNECT_SUBRESOURCES.contains(&s)) {
        "CONNECT"
    } else {
        verb
    };
    if VALID_VERBS.contains(&reported) {
        reported
    } else {
        "other"
    }
}

/// Upstream's `cleanDryRun`: "" without `dryRun`, `All`, or `invalid` for any other value.
fn dry_run(query: &str) -> &'static str {
    if !query.contains("dryRun") {
        return "";
    }
    let mut any = false;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "dryRun" {
            if v != "All" {
                return "invalid";
            }
            any = true;
        }
    }
    if any {
        "All"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, uri: &str, ct: Option<&str>) -> Option<RequestMeasure> {
        let served = Served::default();
        let mut h = HeaderMap::new();
        if let Some(ct) = ct {
            h.insert(header::CONTENT_TYPE, ct.parse().expect("header"));
        }
        let uri: axum::http::Uri = uri.parse().expect("uri");
        let parsed = crate::request_info::RequestInfo::of(&method, &uri);
        RequestMeasure::of(&served, &parsed, &method, &h)
    }

    fn labels(method: Method, uri: &str) -> (&'static str, &'static str, String) {
        let i = info(method, uri, None).expect("recorded");
        (
            i.labels.verb,
            i.labels.scope,
            i.labels.subresource.to_string(),
        )
    }

    #[test]
    fn verbs_and_scopes_as_upstream_reports_them() {
        let ns = "/api/v1/namespaces/d/configmaps";
        assert_eq!(labels(Method::GET, ns), ("LIST", "namespace", "".into()));
        assert_eq!(
            labels(Method::GET, &format!("{ns}/c")),
            ("GET", "resource", "".into())
        );
        assert_eq!(
            labels(Method::GET, &format!("{ns}?watch=true")),
            ("WATCH", "namespace", "".into())
        );
        assert_eq!(
            labels(Method::GET, &format!("{ns}?watch=0")),
            ("LIST", "namespace", "".into())
        );
        assert_eq!(
            labels(Method::GET, "/api/v1/watch/namespaces/d/configmaps"),
            ("WATCH", "namespace", "".into())
        );
        assert_eq!(labels(Method::POST, ns), ("POST", "resource", "".into()));
        assert_eq!(
            labels(Method::PUT, &format!("{ns}/c")),
            ("PUT", "resource", "".into())
        );
        assert_eq!(
            labels(Method::DELETE, ns),
            ("DELETE", "namespace", "".into())
        );
        assert_eq!(
            labels(Method::GET, "/apis/apps/v1/deployments"),
            ("LIST", "cluster", "".into())
        );
        assert_eq!(
            labels(Method::GET, "/api/v1/nodes/n1"),
            ("GET", "resource", "".into())
        );
        assert_eq!(
            labels(Method::GET, "/api/v1/namespaces/d/pods/p/log"),
            ("CONNECT", "resource", "log".into())
        );
        assert_eq!(
            labels(Method::POST, "/api/v1/namespaces/d/pods/p/exec"),
            ("CONNECT", "resource", "exec".into())
        );
        assert_eq!(
            labels(
                Method::PUT,
                "/apis/apps/v1/namespaces/d/deployments/w/status"
            ),
            ("PUT", "resource", "status".into())
        );
        assert_eq!(
            labels(Method::OPTIONS, &format!("{ns}/c")),
            ("other", "resource", "".into())
        );
        let apply = info(
            Method::PATCH,
            &format!("{ns}/c?fieldManager=x"),
            Some("application/apply-patch+yaml"),
        )
        .expect("apply");
        assert_eq!(apply.verb(), "APPLY");
        let merge = info(
            Method::PATCH,
            &format!("{ns}/c"),
            Some("application/merge-patch+json"),
        )
        .expect("patch");
        assert_eq!(merge.verb(), "PATCH");
        assert!(info(Method::GET, &format!("{ns}?watch=1"), None)
            .expect("watch")
            .long_running());
        assert!(info(Method::GET, "/api/v1/namespaces/d/pods/p/log", None)
            .expect("log")
            .long_running());
        assert!(!info(Method::GET, ns, None).expect("list").long_running());
    }

    #[test]
    fn only_served_resources_and_fixed_paths_are_recorded() {
        assert!(info(Method::GET, "/api/v1/bogus", None).is_none());
        assert!(info(Method::GET, "/apis/made.up/v1/things", None).is_none());
        assert!(info(Method::GET, "/metrics", None).is_none());
        assert!(info(Method::GET, "/apis/apps/v1", None).is_none());
        let h = info(Method::GET, "/healthz", None).expect("healthz");
        assert_eq!(
            (h.labels.verb, h.labels.scope, h.labels.component),
            ("GET", "", "")
        );
        assert_eq!(h.labels.subresource, "/healthz");
        let apis = info(Method::GET, "/apis", None).expect("apis");
        assert_eq!(apis.labels.component, "apiserver");
    }

    #[test]
    fn dry_run_values() {
        assert_eq!(dry_run(""), "");
        assert_eq!(dry_run("dryRun=All"), "All");
        assert_eq!(dry_run("a=b&dryRun=All&dryRun=All"), "All");
        assert_eq!(dry_run("dryRun=Some"), "invalid");
        assert_eq!(dry_run("dryRun="), "invalid");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label(Cow::Borrowed("pods")), "pods");
        assert_eq!(label(Cow::Borrowed("a\"b\\c\nd")), "a\\\"b\\\\c\\nd");
    }
}
