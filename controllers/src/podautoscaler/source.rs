//! Where an HPA's numbers come from, through the API server like any client: `metrics.k8s.io` PodMetrics
//! (keel serves it from the node agents) for Resource and ContainerResource metrics,
//! `custom.metrics.k8s.io/v1beta2` for Pods and Object metrics and `external.metrics.k8s.io/v1beta1` for
//! External ones (served only when an adapter registers those APIs), and `/scale` of the target.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, MetricIdentifier};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use serde_json::Value;

use super::replicas::Sample;

/// The API of a target's kind, found through discovery (`apiVersion` without a version takes the
/// group's preferred one).
pub async fn target_api(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
) -> Result<Api<DynamicObject>, String> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None if api_version.is_empty() => ("", ""),
        None => ("", api_version),
    };
    let no_match = || format!("no matches for kind \"{kind}\" in group \"{group}\"");
    let ar = if version.is_empty() {
        let g = kube::discovery::group(client, group)
            .await
            .map_err(|_| no_match())?;
        g.recommended_kind(kind).ok_or_else(no_match)?.0
    } else {
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
            .await
            .map_err(|_| no_match())?
            .0
    };
    Ok(Api::namespaced_with(client.clone(), ns, &ar))
}

/// GET `/scale` of the target.
pub async fn get_scale(api: &Api<DynamicObject>, name: &str) -> Result<Scale, kube::Error> {
    api.get_scale(name).await
}

/// PUT `/scale` with `replicas` (guarded by the read's resourceVersion).
pub async fn set_scale(
    api: &Api<DynamicObject>,
    name: &str,
    mut scale: Scale,
    replicas: i32,
) -> Result<Scale, kube::Error> {
    scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
    api.replace_scale(name, &PostParams::default(), &scale)
        .await
}

/// A Go duration such as `10s`, `1m30s` or `500ms`.
fn go_duration(s: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(n * scale).ok()?;
    }
    Some(total)
}

fn timestamp(v: &Value) -> Timestamp {
    v.as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(Timestamp::now)
}

fn milli(v: Option<&Value>) -> Option<i64> {
    keel_client_kit::quantity::milli(v?.as_str()?)
}

/// Why a metrics API gave nothing usable (upstream's texts).
fn fetch_failed(api: &str, e: impl std::fmt::Display) -> String {
    format!("unable to fetch metrics from {api} API: {e}")
}

/// Each selected pod's usage of `resource` (summed over its containers, or one `container`), from
/// `metrics.k8s.io`. A pod reporting no container, or a container without the resource, is left out.
pub async fn pod_resource_samples(
    client: &Client,
    ns: &str,
    selector: &str,
    resource: &str,
    container: Option<&str>,
) -> Result<BTreeMap<String, Sample>, String> {
    let ar = ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| fetch_failed("resource metrics", e))?;
    if list.items.is_empty() {
        return Err("no metrics returned from resource metrics API".into());
    }
    let mut out = BTreeMap::new();
    for pm in &list.items {
        let name = pm.metadata.name.clone().unwrap_or_default();
        let containers = pm
            .data
            .get("containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut total = Some(0i64);
        let mut found = false;
        for c in &containers {
            if let Some(want) = container {
                if c.get("name").and_then(Value::as_str) != Some(want) {
                    continue;
                }
            }
            found = true;
            match milli(c.pointer(&format!("/usage/{resource}"))) {
                Some(m) => total = total.map(|t| t.saturating_add(m)),
                None => total = None,
            }
        }
        if let Some(want) = container {
            if !found {
                return Err(format!(
                    "container {want} not present in metrics for pod {ns}/{name}"
                ));
            }
        }
        let Some(total) = total.filter(|_| !containers.is_empty()) else {
            continue;
        };
        out.insert(
            name,
            Sample {
                milli: total,
                timestamp: timestamp(pm.data.get("timestamp").unwrap_or(&Value::Null)),
                window: pm
                    .data
                    .get("window")
                    .and_then(Value::as_str)
                    .and_then(go_duration)
                    .unwrap_or(Duration::from_secs(60)),
            },
        );
    }
    Ok(out)
}

fn query(pairs: &[(&str, String)]) -> String {
    let mut q = form_urlencoded_pairs(pairs);
    if !q.is_empty() {
        q.insert(0, '?');
    }
    q
}

/// `k=v&...` with each value percent-encoded.
fn form_urlencoded_pairs(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            let enc: String = v
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("{k}={enc}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A LabelSelector in its text form.
pub fn selector_text(sel: Option<&LabelSelector>) -> String {
    let Some(sel) = sel else {
        return String::new();
    };
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

async fn get_json(client: &Client, path: &str, api: &str) -> Result<Value, String> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| fetch_failed(api, e))?;
    client
        .request::<Value>(req)
        .await
        .map_err(|e| fetch_failed(api, e))
}

/// Each selected pod's value of a custom per-pod metric (`custom.metrics.k8s.io`).
pub async fn pods_metric_samples(
    client: &Client,
    ns: &str,
    selector: &str,
    metric: &MetricIdentifier,
) -> Result<BTreeMap<String, Sample>, String> {
    let path = format!(
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{}{}",
        metric.name,
        query(&[
            ("labelSelector", selector.to_string()),
            (
                "metricLabelSelector",
                selector_text(metric.selector.as_ref())
            ),
        ])
    );
    let list = get_json(client, &path, "custom metrics").await?;
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if items.is_empty() {
        return Err("no metrics returned from custom metrics API".into());
    }
    Ok(items
        .iter()
        .filter_map(|i| {
            let name = i.pointer("/describedObject/name")?.as_str()?.to_string();
            let window = i
                .get("windowSeconds")
                .and_then(Value::as_u64)
                .map_or(Duration::from_secs(60), Duration::from_secs);
            Some((
                name,
                Sample {
                    milli: milli(i.get("value"))?,
                    timestamp: timestamp(i.get("timestamp").unwrap_or(&Value::Null)),
                    window,
                },
            ))
        })
        .collect())
}

/// One object's value of a custom metric (`custom.metrics.k8s.io`), in milli-units.
pub async fn object_metric(
    client: &Client,
    ns: &str,
    described: &CrossVersionObjectReference,
    metric: &MetricIdentifier,
) -> Result<i64, String> {
    let api = target_api(
        client,
        ns,
        described.api_version.as_deref().unwrap_or(""),
        &described.kind,
    )
    .await
    .map_err(|e| fetch_failed("custom metrics", e))?;
    let plural = api
        .resource_url()
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    let scope = if described.kind == "Namespace" {
        format!("namespaces/{}", described.name)
    } else {
        format!("namespaces/{ns}/{plural}/{}", described.name)
    };
    let path = format!(
        "/apis/custom.metrics.k8s.io/v1beta2/{scope}/{}{}",
        metric.name,
        query(&[(
            "metricLabelSelector",
            selector_text(metric.selector.as_ref())
        )])
    );
    let v = get_json(client, &path, "custom metrics").await?;
    let item = match v.get("items").and_then(Value::as_array) {
        Some(items) => items.first().cloned(),
        None => Some(v),
    };
    item.and_then(|i| milli(i.get("value")))
        .ok_or_else(|| "no metrics returned from custom metrics API".to_string())
}

/// The sum of an external metric's series (`external.metrics.k8s.io`), in milli-units.
pub async fn external_metric(
    client: &Client,
    ns: &str,
    metric: &MetricIdentifier,
) -> Result<i64, String> {
    let path = format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{}{}",
        metric.name,
        query(&[("labelSelector", selector_text(metric.selector.as_ref()))])
    );
    let v = get_json(client, &path, "external metrics").await?;
    let items = v
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if items.is_empty() {
        return Err("no metrics returned from external metrics API".into());
    }
    Ok(items
        .iter()
        .filter_map(|i| milli(i.get("value")))
        .fold(0, i64::saturating_add))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("ten"), None);
    }

    #[test]
    fn queries_are_encoded() {
        assert_eq!(
            query(&[
                ("labelSelector", "app=web,t in (a)".into()),
                ("x", String::new())
            ]),
            "?labelSelector=app%3Dweb%2Ct%20in%20%28a%29"
        );
    }
}
