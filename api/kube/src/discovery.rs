//! Discovery documents: `/version`, aggregated discovery (apidiscovery.k8s.io/v2) and the legacy
//! `/api`, `/apis`, `/apis/<group>` and per-group-version lists, all built from [`super::resource`].

use serde_json::{json, Value};

use super::crd::registry::Registry;
use super::resource::ResourceDef;

/// kube-apiserver version keel reports; kubectl's dispatcher picks its client from `minor`.
pub const KUBE_MAJOR: &str = "1";
/// See [`KUBE_MAJOR`].
pub const KUBE_MINOR: &str = "32";
/// The `gitVersion` field of `/version`.
pub const KUBE_GIT_VERSION: &str = "v1.32.0-keel";

/// Content type of an aggregated discovery answer (client-go checks these parameters).
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// The beta variant, for clients that only ask for it.
pub const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// The verbs of every resource collection keel serves.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The `/version` document.
pub fn version() -> Value {
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
pub fn wants_aggregated(accept: &str) -> Option<&'static str> {
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
        "verbs": VERBS,
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

/// The aggregated document for `/api` (core) or `/apis` (every named group).
pub fn aggregated(reg: &Registry, core: bool, content_type: &str) -> Value {
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
        items.push(crate::metrics_api::aggregated_item());
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
pub fn api_versions(server_address: &str) -> Value {
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
pub fn api_group_list(reg: &Registry) -> Value {
    let mut groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    groups.push(crate::metrics_api::group_doc());
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// Legacy `/apis/<group>`, if served.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
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
pub fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
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
            "verbs": VERBS,
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

    #[test]
    fn aggregated_accept_is_recognised() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(kubectl), Some(AGGREGATED_V2));
        assert_eq!(wants_aggregated("application/json, */*"), None);
    }

    #[test]
    fn apps_group_lists_deployments_with_scale() {
        let reg = Registry::default();
        let doc = aggregated(&reg, false, AGGREGATED_V2);
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
        let core = aggregated(&reg, true, AGGREGATED_V2);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
    }
}
