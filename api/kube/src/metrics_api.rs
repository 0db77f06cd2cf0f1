//! The resource metrics API, `metrics.k8s.io/v1beta1` (what `kubectl top` reads), served by every member
//! without metrics-server: a request reads the node agents' `/stats/summary` (through the same TLS and
//! kubelet-client certificate as `kubectl logs`) and answers NodeMetrics and PodMetrics from them. Nothing
//! is stored; a node whose agent does not answer is left out, as metrics-server leaves out what it could
//! not scrape.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::dial::{agent_address, get_from_agent};
use crate::selector::LabelSelector;
use crate::status::{ApiError, Target};
use crate::storage::Storage;

/// The group.
pub(crate) const GROUP: &str = "metrics.k8s.io";
/// Its one version.
pub(crate) const VERSION: &str = "v1beta1";
/// How long one agent may take to answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// The window the figures stand for (the agents' rates are over their last two readings).
const WINDOW: &str = "10s";

/// `(plural, kind, namespaced)` of the served resources.
const RESOURCES: [(&str, &str, bool); 2] = [
    ("nodes", "NodeMetrics", false),
    ("pods", "PodMetrics", true),
];

/// `/apis` entry of the group.
pub(crate) fn group_doc() -> Value {
    let gv = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({"name": GROUP, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis/metrics.k8s.io/v1beta1`.
pub(crate) fn resource_list() -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(|(plural, kind, ns)| {
            json!({"name": plural, "singularName": "", "namespaced": ns, "kind": kind, "verbs": ["get", "list"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"), "resources": resources})
}

/// The group in aggregated discovery.
pub(crate) fn aggregated_item() -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(|(plural, kind, ns)| {
            json!({
                "resource": plural,
                "responseKind": {"group": GROUP, "version": VERSION, "kind": kind},
                "scope": if *ns { "Namespaced" } else { "Cluster" },
                "verbs": ["get", "list"],
            })
        })
        .collect();
    json!({
        "metadata": {"name": GROUP, "creationTimestamp": null},
        "versions": [{"version": VERSION, "resources": resources, "freshness": "Current"}],
    })
}

fn objects(storage: &Storage, prefix: &str) -> Result<Vec<Value>, ApiError> {
    Ok(storage
        .list_raw(prefix.as_bytes())?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice::<Value>(&v).ok())
        .collect())
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The summary of each node's agent that answered, by node name.
async fn summaries(
    kubelet_tls: Option<Arc<rustls::ClientConfig>>,
    nodes: &[Value],
) -> Vec<(String, Value)> {
    let Some(tls) = kubelet_tls else {
        return Vec::new();
    };
    let scrapes = nodes.iter().filter_map(|n| {
        let (host, port) = agent_address(n)?;
        let name = name_of(n).to_string();
        let tls = tls.clone();
        Some(async move {
            let got = tokio::time::timeout(SCRAPE_TIMEOUT, async {
                let r = get_from_agent(tls, &host, port, "/stats/summary")
                    .await
                    .ok()?;
                if r.status() != StatusCode::OK {
                    return None;
                }
                let body = r.into_body().collect().await.ok()?.to_bytes();
                serde_json::from_slice::<Value>(&body).ok()
            })
            .await
            .ok()
            .flatten();
            got.map(|s| (name, s))
        })
    });
    futures::future::join_all(scrapes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn quantity_cpu(nano: u64) -> String {
    format!("{nano}n")
}

fn quantity_mem(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) {
        format!("{}Ki", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

fn usage(v: &Value) -> Value {
    let cpu = v
        .pointer("/cpu/usageNanoCores")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mem = v
        .pointer("/memory/workingSetBytes")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    json!({"cpu": quantity_cpu(cpu), "memory": quantity_mem(mem)})
}

fn stamp(v: &Value) -> Value {
    v.pointer("/cpu/time")
        .cloned()
        .unwrap_or_else(|| json!(jiff::Timestamp::now().to_string()))
}

fn node_metrics(name: &str, labels: Option<&Value>, summary: &Value) -> Value {
    let n = summary.get("node").cloned().unwrap_or_default();
    json!({
        "metadata": {"name": name, "creationTimestamp": jiff::Timestamp::now().to_string(), "labels": labels.cloned().unwrap_or_else(|| json!({}))},
        "timestamp": stamp(&n),
        "window": WINDOW,
        "usage": usage(&n),
    })
}

fn pod_metrics(p: &Value, labels: &Value) -> Value {
    let containers: Vec<Value> = p
        .get("containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| json!({"name": c.get("name").cloned().unwrap_or_default(), "usage": usage(c)}))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "metadata": {
            "name": p.pointer("/podRef/name").cloned().unwrap_or_default(),
            "namespace": p.pointer("/podRef/namespace").cloned().unwrap_or_default(),
            "creationTimestamp": jiff::Timestamp::now().to_string(),
            "labels": labels,
        },
        "timestamp": stamp(p),
        "window": WINDOW,
        "containers": containers,
    })
}

fn respond(v: &Value) -> Response {
    crate::body::respond(StatusCode::OK, v)
}

/// The pods' labels by (namespace, name), for PodMetrics' labels and label selectors.
fn pod_labels(
    storage: &Storage,
    ns: Option<&str>,
) -> Result<HashMap<(String, String), Value>, ApiError> {
    let prefix = match ns {
        Some(ns) => format!("/registry/pods/{ns}/"),
        None => "/registry/pods/".to_string(),
    };
    Ok(objects(storage, &prefix)?
        .into_iter()
        .map(|p| {
            let key = (
                p.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name_of(&p).to_string(),
            );
            let labels = p
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or_else(|| json!({}));
            (key, labels)
        })
        .collect())
}

/// Serves `rest` (the path after `/apis/metrics.k8s.io/v1beta1/`); a list takes `labelSelector`, matched
/// against the pods' (or nodes') labels, as metrics-server does.
pub(crate) async fn serve(
    storage: &Storage,
    kubelet_tls: Option<Arc<rustls::ClientConfig>>,
    rest: &[&str],
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let selector = query
        .and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "labelSelector")
                .map(|(_, v)| v.into_owned())
        })
        .unwrap_or_default();
    let selector =
        LabelSelector::parse(&selector).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let list = |kind: &str, items: Vec<Value>| json!({"kind": format!("{kind}List"), "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": {}, "items": items});
    let with_kind = |kind: &str, mut v: Value| {
        if let Some(m) = v.as_object_mut() {
            m.insert("kind".into(), json!(kind));
            m.insert("apiVersion".into(), json!(format!("{GROUP}/{VERSION}")));
        }
        v
    };
    match rest {
        [] => Ok(respond(&resource_list())),
        ["nodes"] | ["nodes", _] => {
            let mut nodes = objects(storage, "/registry/minions/")?;
            if let ["nodes", name] = rest {
                nodes.retain(|n| name_of(n) == *name);
                if nodes.is_empty() {
                    return Err(ApiError::NotFound(Target::new(GROUP, "nodes", name)));
                }
            }
            let sums = summaries(kubelet_tls.clone(), &nodes).await;
            let items: Vec<Value> = nodes
                .iter()
                .filter(|n| {
                    selector.matches(n.pointer("/metadata/labels").and_then(Value::as_object))
                })
                .filter_map(|n| {
                    let (_, s) = sums.iter().find(|(name, _)| name == name_of(n))?;
                    Some(node_metrics(name_of(n), n.pointer("/metadata/labels"), s))
                })
                .collect();
            match rest {
                ["nodes", name] => items
                    .into_iter()
                    .next()
                    .map(|v| respond(&with_kind("NodeMetrics", v)))
                    .ok_or_else(|| ApiError::NotFound(Target::new(GROUP, "nodes", name))),
                _ => Ok(respond(&list("NodeMetrics", items))),
            }
        }
        ["pods"] | ["namespaces", _, "pods"] | ["namespaces", _, "pods", _] => {
            let ns = match rest {
                ["namespaces", ns, ..] => Some(*ns),
                _ => None,
            };
            let one = match rest {
                ["namespaces", _, "pods", name] => Some(*name),
                _ => None,
            };
            let labels = pod_labels(storage, ns)?;
            let nodes = objects(storage, "/registry/minions/")?;
            let sums = summaries(kubelet_tls.clone(), &nodes).await;
            let items: Vec<Value> = sums
                .iter()
                .flat_map(|(_, s)| {
                    s.get("pods")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .filter(|p| {
                    ns.is_none_or(|n| {
                        p.pointer("/podRef/namespace").and_then(Value::as_str) == Some(n)
                    })
                })
                .filter(|p| {
                    one.is_none_or(|n| p.pointer("/podRef/name").and_then(Value::as_str) == Some(n))
                })
                .filter_map(|p| {
                    let key = (
                        p.pointer("/podRef/namespace")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        p.pointer("/podRef/name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    );
                    // A pod the agent still reports but the API no longer has is left out.
                    let labels = labels.get(&key)?;
                    selector
                        .matches(labels.as_object())
                        .then(|| pod_metrics(&p, labels))
                })
                .collect();
            match one {
                Some(name) => items
                    .into_iter()
                    .next()
                    .map(|v| respond(&with_kind("PodMetrics", v)))
                    .ok_or_else(|| ApiError::NotFound(Target::new(GROUP, "pods", name))),
                None => Ok(respond(&list("PodMetrics", items))),
            }
        }
        _ => Err(ApiError::NoRoute),
    }
}
