//! What a resource request asks for: the route parsed from the URL path and the query parameters.

use std::collections::HashMap;
use std::sync::Arc;

use super::crd::registry::Registry;
use super::resource::ResourceDef;
use super::status::ApiError;

/// The object or collection a URL names.
#[derive(Debug, Clone)]
pub struct Route {
    /// The resource.
    pub def: Arc<ResourceDef>,
    /// Namespace from the path (None for cluster-scoped resources or all-namespace lists).
    pub namespace: Option<String>,
    /// Object name, if the path names one.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, ...).
    pub subresource: Option<String>,
    /// A legacy `/watch/` path.
    pub legacy_watch: bool,
    /// For `nodes/{name}/proxy/...`: the path on the node's agent (`/` and what follows `proxy`).
    pub proxy_path: Option<String>,
}

/// Parses the segments after `/api/v1/` or `/apis/<group>/<version>/`.
pub fn parse_route(
    registry: &Registry,
    group: &str,
    version: &str,
    segments: &[&str],
) -> Result<Route, ApiError> {
    let mut segs: Vec<&str> = segments.iter().copied().filter(|s| !s.is_empty()).collect();
    let mut legacy_watch = false;
    if segs.first() == Some(&"watch") {
        legacy_watch = true;
        segs.remove(0);
    }
    let (namespace, rest): (Option<String>, &[&str]) = match segs.as_slice() {
        ["namespaces", ns, plural, rest @ ..] if !matches!(*plural, "status" | "finalize") => {
            (Some((*ns).to_string()), {
                // `rest` starts after the plural; re-slice to include it.
                let idx = segs.len() - rest.len() - 1;
                &segs[idx..]
            })
        }
        _ => (None, &segs[..]),
    };
    let mut proxy_path = None;
    let (plural, name, sub) = match rest {
        // `nodes/{name}/proxy/<path on the agent>`: the only subresource with a path of its own.
        ["nodes", name, "proxy", tail @ ..] => {
            proxy_path = Some(format!("/{}", tail.join("/")));
            ("nodes", Some(*name), Some("proxy"))
        }
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return Err(ApiError::NoRoute),
    };
    let def = registry
        .find(group, version, plural)
        .ok_or(ApiError::NoRoute)?;
    if namespace.is_some() && !def.namespaced {
        return Err(ApiError::NoRoute);
    }
    if let Some(s) = sub {
        let served = match s {
            "status" => def.status,
            "scale" => def.scale,
            "eviction" | "binding" | "log" | "exec" | "attach" | "portforward" => {
                def.group.is_empty() && def.kind == "Pod"
            }
            "proxy" => def.group.is_empty() && def.kind == "Node",
            other => super::strategy::of(&def).subresource(other).is_some(),
        };
        if !served {
            return Err(ApiError::NoRoute);
        }
    }
    if legacy_watch && sub.is_some() {
        return Err(ApiError::NoRoute);
    }
    Ok(Route {
        def,
        namespace,
        name: name.map(str::to_string),
        subresource: sub.map(str::to_string),
        legacy_watch,
        proxy_path,
    })
}

/// Query parameters of a resource request.
#[derive(Debug, Clone, Default)]
pub struct Params {
    raw: HashMap<String, String>,
}

impl Params {
    /// Parses a query string (`a=b&c=d`, percent-decoded).
    pub fn parse(query: Option<&str>) -> Self {
        let mut raw = HashMap::new();
        if let Some(q) = query {
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                raw.insert(k.into_owned(), v.into_owned());
            }
        }
        Params { raw }
    }

    /// The parameters as a query string again (order not kept).
    pub fn encoded(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        let mut pairs: Vec<(&String, &String)> = self.raw.iter().collect();
        pairs.sort();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
        q.finish()
    }

    /// A parameter's value, if present.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.raw.get(k).map(String::as_str)
    }

    /// Drops the parameters of paging and watching (a watch's initial list is one unpaged read).
    pub fn remove_paging(&mut self) {
        for k in ["limit", "continue", "watch"] {
            self.raw.remove(k);
        }
    }

    /// A boolean parameter as upstream's query decoding reads every one (`watch`, `force`,
    /// `allowWatchBookmarks`, ...): absent is false, otherwise [`Params::opt_flag`].
    pub fn flag(&self, k: &str) -> bool {
        self.opt_flag(k).unwrap_or(false)
    }

    /// A boolean parameter if present: `0` and `false` in any case are false, any other value (the
    /// empty string, `True`, `t`, `yes`) is true. Upstream never refuses a boolean's value.
    pub fn opt_flag(&self, k: &str) -> Option<bool> {
        self.get(k)
            .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
    }

    /// An integer parameter; malformed is a 400.
    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.get(k) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("invalid value for {k}: {v:?} is not an integer"))
            }),
        }
    }

    /// `dryRun=All`; any other value is a 400.
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(v) => Err(ApiError::BadRequest(format!(
                "Invalid dryRun value: unsupported value {v:?}, supported values: \"All\""
            ))),
        }
    }

    /// `resourceVersion` as a revision: None when unset, Some(0) for "0"; malformed is a 400.
    pub fn resource_version(&self) -> Result<Option<i64>, ApiError> {
        match self.get("resourceVersion") {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|r| *r >= 0)
                .map(Some)
                .ok_or_else(|| ApiError::BadRequest(format!("invalid resource version: {v:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_read_as_upstream_does() {
        let p = Params::parse(Some("a=True&b=1&c=t&d=&e=yes&f=0&g=FALSE&h=false&i=False"));
        for k in ["a", "b", "c", "d", "e"] {
            assert!(p.flag(k), "{k}");
        }
        for k in ["f", "g", "h", "i", "absent"] {
            assert!(!p.flag(k), "{k}");
        }
        assert_eq!(p.opt_flag("absent"), None);
        assert_eq!(p.opt_flag("f"), Some(false));
    }

    #[test]
    fn routes() {
        let reg = Registry::default();
        let parse_route = |g, v, s: &[&str]| super::parse_route(&reg, g, v, s);
        let r = parse_route(
            "",
            "v1",
            &["namespaces", "default", "pods", "web", "status"],
        )
        .expect("pod status");
        assert_eq!(r.def.plural, "pods");
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let ns = parse_route("", "v1", &["namespaces", "default"]).expect("namespace");
        assert_eq!(ns.def.plural, "namespaces");
        assert_eq!(ns.name.as_deref(), Some("default"));
        let fin = parse_route("", "v1", &["namespaces", "x", "finalize"]).expect("finalize");
        assert_eq!(fin.subresource.as_deref(), Some("finalize"));
        let all = parse_route("apps", "v1", &["deployments"]).expect("all deployments");
        assert!(all.namespace.is_none() && all.name.is_none());
        let w = parse_route("", "v1", &["watch", "namespaces", "d", "pods"]).expect("legacy watch");
        assert!(w.legacy_watch);
        assert!(parse_route("", "v1", &["bogus"]).is_err());
        assert!(parse_route("", "v1", &["namespaces", "d", "nodes"]).is_err());
        assert!(parse_route("", "v1", &["namespaces", "d", "configmaps", "x", "scale"]).is_err());
    }
}
