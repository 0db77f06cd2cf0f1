//! Discovery documents: `/version`, aggregated discovery (apidiscovery.k8s.io/v2) and the legacy
//! `/api`, `/apis`, `/apis/<group>` and per-group-version lists, all built from [`super::resource`].

use serde_json::{json, Value};

use super::aggregator::Remote;
use super::crd::registry::Registry;
use super::resource::ResourceDef;

pub(crate) use super::version::{KUBE_GIT_VERSION, KUBE_MAJOR, KUBE_MINOR};

/// Content type of an aggregated discovery answer (client-go checks these parameters).
pub(crate) const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// The beta variant, for clients that only ask for it.
pub(crate) const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// The verbs of every resource collection keel serves.
pub(crate) const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of `r`'s collection: all of [`VERBS`], but Namespaces are not deleted as a collection
/// (upstream's namespace storage has no collection delete).
pub(crate) fn verbs(r: &ResourceDef) -> &'static [&'static str] {
    if r.group.is_empty() && r.plural == "namespaces" {
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    } else {
        VERBS
    }
}

/// The `/version` document.
pub(crate) fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": KUBE_GIT_VERSION,
        "gitCommit": env!("CARGO_PKG_VERSION"),
        "gitTreeState": "clean",
        "buildDate": "2026-12-02T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Which aggregated discovery version an Accept header asks for, if any.
pub(crate) fn wants_aggregated(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("g=apidiscovery.k8s.io") && p.contains("as=APIGroupDiscoveryList") {
            if p.contains("v=v2beta1") {
                return Some(AGGREGATED_V2BETA1);
            }
            if p.contains("v=v2") {
                return Some(AGGREGATED_V2);
            }
        }
    }
    None
}

fn scope(r: &ResourceDef) -> &'static str {
    if r.namespaced {
        "Namespaced"
    } else {
        "Cluster"
    }
}

fn aggregated_resource(r: &ResourceDef) -> Value {
    let mut subs = Vec::new();
    if r.scale {
        subs.push(json!({
            "subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"],
        }));
    }
    if r.group.is_empty() && r.kind == "Node" {
        subs.push(json!({
            "subresource": "proxy",
            "responseKind": {"group": "", "version": "v1", "kind": "NodeProxyOptions"},
            "verbs": ["get"],
        }));
    }
    if r.group.is_empty() && r.kind == "Pod" {
        subs.push(json!({
            "subresource": "binding",
            "responseKind": {"group": "", "version": "v1", "kind": "Binding"},
            "verbs": ["create"],
        }));
        subs.push(json!({
            "subresource": "eviction",
            "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "verbs": ["create"],
        }));
        subs.push(json!({
            "subresource": "log",
            "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
            "verbs": ["get"],
        }));
        for sub in ["attach", "exec", "portforward"] {
            subs.push(json!({
                "subresource": sub,
                "responseKind": {"group": "", "version": "v1", "kind": sub_kind(sub)},
                "verbs": ["create", "get"],
            }));
        }
    }
    if r.status {
        subs.push(json!({
            "subresource": "status",
            "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
            "verbs": ["get", "patch", "update"],
        }));
    }
    let mut v = json!({
        "resource": r.plural,
        "singularResource": r.singular,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": scope(r),
        "verbs": verbs(r),
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !subs.is_empty() {
        v["subresources"] = Value::Array(subs);
    }
    v
}

fn aggregated_group(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = reg
                .of_group_version(group, v)
                .iter()
                .map(|r| aggregated_resource(r))
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({
        "metadata": {"name": group, "creationTimestamp": null},
        "versions": versions,
    })
}

/// The aggregated document for `/api` (core) or `/apis` (every named group, then the groups of remote
/// APIServices).
pub(crate) fn aggregated(
    reg: &Registry,
    remote: &[Remote],
    core: bool,
    content_type: &str,
) -> Value {
    let version = if content_type == AGGREGATED_V2BETA1 {
        "apidiscovery.k8s.io/v2beta1"
    } else {
        "apidiscovery.k8s.io/v2"
    };
    let items: Vec<Value> = if core {
        vec![aggregated_group(reg, "", &["v1".to_string()])]
    } else {
        let mut items: Vec<Value> = reg
            .groups()
            .iter()
            .map(|(g, vs)| aggregated_group(reg, g, vs))
            .collect();
        items.extend(
            crate::authz::review::GROUPS
                .iter()
                .map(|g| crate::authz::review::aggregated_item(g)),
        );
        if !remote.iter().any(|r| r.group == crate::metrics_api::GROUP) {
            items.push(crate::metrics_api::aggregated_item());
        }
        items.extend(
            remote_groups(remote)
                .iter()
                .map(|(g, rs)| aggregated_remote(g, rs)),
        );
        items
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": version,
        "metadata": {},
        "items": items,
    })
}

/// Legacy `/api`.
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = gvs.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": gvs, "preferredVersion": preferred})
}

/// Legacy `/apis`.
pub(crate) fn api_group_list(reg: &Registry, remote: &[Remote]) -> Value {
    let mut groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    groups.extend(
        crate::authz::review::GROUPS
            .iter()
            .map(|g| crate::authz::review::group_doc(g)),
    );
    if !remote.iter().any(|r| r.group == crate::metrics_api::GROUP) {
        groups.push(crate::metrics_api::group_doc());
    }
    for (g, rs) in remote_groups(remote) {
        let versions: Vec<String> = rs.iter().map(|r| r.version.clone()).collect();
        groups.push(group_doc(&g, &versions));
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// Legacy `/apis/<group>`, if served.
pub(crate) fn api_group(reg: &Registry, remote: &[Remote], group: &str) -> Option<Value> {
    if let Some((g, rs)) = remote_groups(remote).into_iter().find(|(g, _)| g == group) {
        let versions: Vec<String> = rs.iter().map(|r| r.version.clone()).collect();
        let mut doc = group_doc(&g, &versions);
        doc["kind"] = json!("APIGroup");
        doc["apiVersion"] = json!("v1");
        return Some(doc);
    }
    if crate::authz::review::GROUPS.contains(&group) {
        let mut g = crate::authz::review::group_doc(group);
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        return Some(g);
    }
    if group == crate::metrics_api::GROUP {
        let mut g = crate::metrics_api::group_doc();
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        return Some(g);
    }
    let groups = reg.groups();
    let (_, versions) = groups.iter().find(|(g, _)| g == group)?;
    let mut g = group_doc(group, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// Legacy `/api/v1` or `/apis/<group>/<version>`, if served.
pub(crate) fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if let Some(list) = crate::authz::review::resource_list(group, version) {
        return Some(list);
    }
    let defs = reg.of_group_version(group, version);
    if defs.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in defs.iter() {
        let mut v = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs(r),
        });
        if !r.short_names.is_empty() {
            v["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            v["categories"] = json!(r.categories);
        }
        list.push(v);
        if r.scale {
            list.push(json!({
                "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
        if r.group.is_empty() && r.kind == "Node" {
            list.push(json!({
                "name": "nodes/proxy", "singularName": "", "namespaced": false,
                "kind": "NodeProxyOptions", "verbs": ["get"],
            }));
        }
        if r.group.is_empty() && r.kind == "Pod" {
            list.push(json!({
                "name": "pods/binding", "singularName": "", "namespaced": true,
                "kind": "Binding", "verbs": ["create"],
            }));
            // kubectl drain finds the Eviction's group-version here.
            list.push(json!({
                "name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"],
            }));
            list.push(json!({
                "name": "pods/log", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get"],
            }));
            for sub in ["attach", "exec", "portforward"] {
                list.push(json!({
                    "name": format!("pods/{sub}"), "singularName": "", "namespaced": true,
                    "kind": sub_kind(sub), "verbs": ["create", "get"],
                }));
            }
        }
        if r.status {
            list.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

/// Remote group-versions grouped by group, keeping [`crate::aggregator::Aggregator::remote`]'s order
/// (group priority, then version priority). Group-versions keel serves itself are left out.
fn remote_groups(remote: &[Remote]) -> Vec<(String, Vec<&Remote>)> {
    let mut out: Vec<(String, Vec<&Remote>)> = Vec::new();
    for r in remote {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, list)) => list.push(r),
            None => out.push((r.group.clone(), vec![r])),
        }
    }
    out
}

/// One remote group in aggregated discovery, its resources converted from the backend's APIResourceList
/// (`plural/sub` entries become subresources). A version whose check failed is listed `Stale`, without
/// resources, as upstream lists a group-version it could not fetch.
fn aggregated_remote(group: &str, versions: &[&Remote]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|r| {
            let Some(list) = &r.resources else {
                return json!({"version": r.version, "resources": [], "freshness": "Stale"});
            };
            let entries: Vec<&Value> = list
                .get("resources")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let text =
                |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let kind_of = |v: &Value| {
                let g = v.get("group").and_then(Value::as_str).unwrap_or(group);
                let ver = v
                    .get("version")
                    .and_then(Value::as_str)
                    .unwrap_or(&r.version);
                json!({"group": g, "version": ver, "kind": text(v, "kind")})
            };
            let mut resources = Vec::new();
            for e in entries.iter().filter(|e| !text(e, "name").contains('/')) {
                let name = text(e, "name");
                let namespaced = e
                    .get("namespaced")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let mut v = json!({
                    "resource": name,
                    "responseKind": kind_of(e),
                    "scope": if namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": text(e, "singularName"),
                    "verbs": e.get("verbs").cloned().unwrap_or_else(|| json!([])),
                });
                for k in ["shortNames", "categories"] {
                    if let Some(x) = e
                        .get(k)
                        .filter(|x| x.as_array().is_some_and(|a| !a.is_empty()))
                    {
                        v[k] = x.clone();
                    }
                }
                let subs: Vec<Value> = entries
                    .iter()
                    .filter_map(|s| {
                        let n = text(s, "name");
                        let (parent, sub) = n.split_once('/')?;
                        (parent == name).then(|| {
                            json!({"subresource": sub, "responseKind": kind_of(s),
                                   "verbs": s.get("verbs").cloned().unwrap_or_else(|| json!([]))})
                        })
                    })
                    .collect();
                if !subs.is_empty() {
                    v["subresources"] = Value::Array(subs);
                }
                resources.push(v);
            }
            json!({"version": r.version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({
        "metadata": {"name": group, "creationTimestamp": null},
        "versions": versions,
    })
}

/// The kind discovery names for a pod streaming subresource.
fn sub_kind(sub: &str) -> &'static str {
    match sub {
        "attach" => "PodAttachOptions",
        "exec" => "PodExecOptions",
        _ => "PodPortForwardOptions",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CRD with a served beta, a served storage v1 with status and scale, and an unserved alpha.
    fn crd() -> Value {
        serde_json::from_str(include_str!(
            "../../kube-registry/src/crd/testdata/widgets.json"
        ))
        .expect("the fixture is JSON")
    }

    #[test]
    fn custom_resources_are_discovered() {
        let r = Registry::default();
        r.load(&[crd()], 7);
        let agg = aggregated(&r, &[], false, AGGREGATED_V2);
        let group = agg["items"]
            .as_array()
            .and_then(|a| a.iter().find(|g| g["metadata"]["name"] == "example.com"))
            .cloned()
            .expect("group in aggregated discovery");
        assert_eq!(group["versions"][0]["version"], "v1");
        assert_eq!(group["versions"][1]["version"], "v1beta1");
        let res = &group["versions"][0]["resources"][0];
        assert_eq!(res["resource"], "widgets");
        assert_eq!(res["shortNames"], json!(["wd"]));
        assert_eq!(res["subresources"][0]["subresource"], "scale");
        let legacy = api_group(&r, &[], "example.com").expect("legacy group");
        assert_eq!(legacy["preferredVersion"]["version"], "v1");
        assert!(api_resource_list(&r, "example.com", "v1").is_some());
        r.load(&[], 8);
        assert!(api_group(&r, &[], "example.com").is_none());
    }

    #[test]
    fn aggregated_accept_is_recognised() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(kubectl), Some(AGGREGATED_V2));
        assert_eq!(wants_aggregated("application/json, */*"), None);
    }

    #[test]
    fn apps_group_lists_deployments_with_scale() {
        let reg = Registry::default();
        let doc = aggregated(&reg, &[], false, AGGREGATED_V2);
        let apps = doc["items"]
            .as_array()
            .and_then(|a| a.iter().find(|g| g["metadata"]["name"] == "apps"))
            .cloned()
            .expect("apps group");
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["resource"] == "deployments"))
            .cloned()
            .expect("deployments");
        assert_eq!(deploy["subresources"][0]["subresource"], "scale");
        assert_eq!(deploy["shortNames"][0], "deploy");
        let core = aggregated(&reg, &[], true, AGGREGATED_V2);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
    }
}
