//! The LimitRanger admission plugin: a new pod's containers get the defaults of its namespace's
//! LimitRanges (`default` limits, `defaultRequest` requests, noted in the `kubernetes.io/limit-ranger`
//! annotation), then must stay within their `min`, `max` and `maxLimitRequestRatio`, per container and
//! per pod. A refusal is a 403 with upstream's wording (`maximum cpu usage per Container is 1, but limit
//! is 2`).

use keel_client_kit::quantity::Quantity;
use keel_client_kit::quota::list::{from_value, to_value, ResourceList};
use keel_client_kit::quota::usage::pod_total;
use serde_json::{Map, Value};

use crate::object;
use crate::resource::{self, ResourceDef};
use crate::status::{ApiError, Target};
use crate::storage::{prefix_end, Storage};

const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The LimitRanges of `ns`.
async fn ranges(storage: &Storage, ns: &str) -> Result<Vec<Value>, ApiError> {
    let Some(def) = resource::find("", "v1", "limitranges") else {
        return Ok(Vec::new());
    };
    let prefix = def.ns_prefix(ns);
    let page = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    Ok(page.items.into_iter().map(|(_, s)| s.object).collect())
}

fn is_pod(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.kind == "Pod"
}

/// Applies the defaults and checks the limits of every LimitRange of the pod's namespace to a pod being
/// created (`name` is its name, or its generateName, for the message).
pub async fn admit_create(
    storage: &Storage,
    def: &ResourceDef,
    name: &str,
    pod: &mut Value,
) -> Result<(), ApiError> {
    if !is_pod(def) {
        return Ok(());
    }
    let ns = object::namespace(pod).to_string();
    let ranges = ranges(storage, &ns).await?;
    for range in &ranges {
        set_defaults(range, pod);
    }
    for range in &ranges {
        if let Err(why) = check(range, pod) {
            return Err(ApiError::Forbidden {
                target: Target::new("", "pods", name),
                message: format!("pods {name:?} is forbidden: {why}"),
            });
        }
    }
    Ok(())
}

/// The `default` and `defaultRequest` of a range's Container limits.
fn defaults(range: &Value) -> (ResourceList, ResourceList) {
    let (mut limits, mut requests) = (ResourceList::new(), ResourceList::new());
    for l in items(range).filter(|l| kind(l) == "Container") {
        limits.extend(from_value(l.get("default")));
        requests.extend(from_value(l.get("defaultRequest")));
    }
    (limits, requests)
}

fn items(range: &Value) -> impl Iterator<Item = &Value> {
    range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn kind(limit: &Value) -> &str {
    limit.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Fills what each container leaves out from the range's defaults and notes it in the annotation.
fn set_defaults(range: &Value, pod: &mut Value) {
    let (limits, requests) = defaults(range);
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (key, what) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(list) = pod
            .pointer_mut(&format!("/spec/{key}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in list {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let Some(c) = c.as_object_mut() else {
                continue;
            };
            let res = c
                .entry("resources")
                .or_insert_with(|| Value::Object(Map::new()));
            let Some(res) = res.as_object_mut() else {
                continue;
            };
            let set_requests = fill(res, "requests", &requests);
            let set_limits = fill(res, "limits", &limits);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {what} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if !notes.is_empty() {
        let annotations = object::meta_mut(pod)
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(
                ANNOTATION.into(),
                Value::String(format!("LimitRanger plugin set: {}", notes.join("; "))),
            );
        }
    }
}

/// Adds the entries of `defaults` that `res[field]` lacks; returns their names, sorted.
fn fill(res: &mut Map<String, Value>, field: &str, defaults: &ResourceList) -> Vec<String> {
    let mut have = from_value(res.get(field));
    let mut set = Vec::new();
    let present: Vec<String> = res
        .get(field)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for (k, q) in defaults {
        if !present.contains(k) {
            have.insert(k.clone(), *q);
            set.push(k.clone());
        }
    }
    if !set.is_empty() {
        let mut merged = res
            .get(field)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Value::Object(added) = to_value(&have) {
            for k in &set {
                if let Some(v) = added.get(k) {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
        res.insert(field.into(), Value::Object(merged));
    }
    set
}

/// Checks a pod against one range: every error, joined as upstream's aggregate (`[a, b]` for several).
fn check(range: &Value, pod: &Value) -> Result<(), String> {
    let mut errs = Vec::new();
    for l in items(range) {
        let limit_type = kind(l);
        let min = from_value(l.get("min"));
        let max = from_value(l.get("max"));
        let ratio = from_value(l.get("maxLimitRequestRatio"));
        let mut apply = |requests: &ResourceList, limits: &ResourceList| {
            for (k, q) in &min {
                errs.extend(min_constraint(limit_type, k, *q, requests, limits));
            }
            for (k, q) in &max {
                errs.extend(max_constraint(limit_type, k, *q, requests, limits));
            }
            for (k, q) in &ratio {
                errs.extend(ratio_constraint(limit_type, k, *q, requests, limits));
            }
        };
        match limit_type {
            "Container" => {
                for key in ["containers", "initContainers"] {
                    let list = pod
                        .pointer(&format!("/spec/{key}"))
                        .and_then(Value::as_array);
                    for c in list.into_iter().flatten() {
                        let res = c.get("resources");
                        apply(
                            &from_value(res.and_then(|r| r.get("requests"))),
                            &from_value(res.and_then(|r| r.get("limits"))),
                        );
                    }
                }
            }
            "Pod" => apply(&pod_total(pod, "requests"), &pod_total(pod, "limits")),
            _ => {}
        }
    }
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

fn min_constraint(
    t: &str,
    k: &str,
    enforced: Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let Some(req) = requests.get(k) else {
        return Some(format!(
            "minimum {k} usage per {t} is {enforced}.  No request is specified"
        ));
    };
    if req.milli() < enforced.milli() {
        return Some(format!(
            "minimum {k} usage per {t} is {enforced}, but request is {req}"
        ));
    }
    match limits.get(k) {
        Some(lim) if lim.milli() < enforced.milli() => Some(format!(
            "minimum {k} usage per {t} is {enforced}, but limit is {lim}"
        )),
        _ => None,
    }
}

fn max_constraint(
    t: &str,
    k: &str,
    enforced: Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let Some(lim) = limits.get(k) else {
        return Some(format!(
            "maximum {k} usage per {t} is {enforced}.  No limit is specified"
        ));
    };
    if lim.milli() > enforced.milli() {
        return Some(format!(
            "maximum {k} usage per {t} is {enforced}, but limit is {lim}"
        ));
    }
    match requests.get(k) {
        Some(req) if req.milli() > enforced.milli() => Some(format!(
            "maximum {k} usage per {t} is {enforced}, but request is {req}"
        )),
        _ => None,
    }
}

fn ratio_constraint(
    t: &str,
    k: &str,
    enforced: Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let req = requests.get(k).map_or(0, Quantity::milli);
    if req == 0 {
        return Some(format!(
            "{k} max limit to request ratio per {t} is {enforced}, but no request is specified or request is 0"
        ));
    }
    let lim = limits.get(k).map_or(0, Quantity::milli);
    if lim == 0 {
        return Some(format!(
            "{k} max limit to request ratio per {t} is {enforced}, but no limit is specified or limit is 0"
        ));
    }
    let observed = lim as f64 / req as f64;
    if observed * 1000.0 > enforced.milli() as f64 {
        return Some(format!(
            "{k} max limit to request ratio per {t} is {enforced}, but provided ratio is {observed:.6}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn range() -> Value {
        json!({"spec": {"limits": [
            {"type": "Container", "default": {"cpu": "500m", "memory": "128Mi"},
             "defaultRequest": {"cpu": "100m", "memory": "64Mi"}, "max": {"cpu": "1"}, "min": {"cpu": "50m"}},
            {"type": "Pod", "max": {"memory": "1Gi"}}
        ]}})
    }

    #[test]
    fn defaults_fill_gaps_and_are_annotated() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "800m"}}},
            {"name": "b"}
        ]}});
        set_defaults(&range(), &mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "800m", "memory": "128Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}})
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; memory limit for container a; cpu, memory request for container b; cpu, memory limit for container b"
        );
        assert_eq!(check(&range(), &pod), Ok(()));
    }

    #[test]
    fn limits_checked_with_upstream_messages() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "10m"}}}
        ]}});
        set_defaults(&range(), &mut pod);
        assert_eq!(
            check(&range(), &pod),
            Err("[minimum cpu usage per Container is 50m, but request is 10m, maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Pod is 1Gi, but limit is 2Gi]".into())
        );
        let ratio = json!({"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}});
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "500m"}}}]}});
        assert_eq!(
            check(&ratio, &pod),
            Err(
                "cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000"
                    .into()
            )
        );
    }
}
