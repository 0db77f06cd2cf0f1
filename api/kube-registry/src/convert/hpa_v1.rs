//! autoscaling/v1 HorizontalPodAutoscalers as a view of the stored autoscaling/v2 objects.
//!
//! v1 has one field for a CPU utilization target; everything else v2 holds (other metrics, their
//! current values, conditions, behavior) rides in upstream's four round-trip annotations, in the old
//! (v2beta1) shapes, so a v1 client that reads, edits and writes back loses nothing. The annotations
//! exist only in the v1 view: they are read and dropped on the way in and rebuilt on the way out.

use serde_json::{json, Map, Value};

/// Metric specs v1 cannot express.
pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// Every current metric value.
pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// The status conditions.
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// The scaling behavior, with Go field names (upstream marshals its internal type, which has no tags).
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

const ROUND_TRIP: [&str; 4] = [METRICS, CURRENT_METRICS, CONDITIONS, BEHAVIOR];

/// The CPU target every HPA without metrics gets (upstream's `DefaultCPUUtilization`).
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// Whether a v2 MetricSpec is a CPU utilization target (what v1's one field holds).
fn is_cpu_target(m: &Value) -> bool {
    m.get("type").and_then(Value::as_str) == Some("Resource")
        && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && m.pointer("/resource/target/averageUtilization")
            .is_some_and(|u| !u.is_null())
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(v) = v.filter(|v| !v.is_null()) {
        m.insert(key.into(), v.clone());
    }
}

fn annotations_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()?
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

/// Removes the round-trip annotations (and an annotation map they leave empty); returns them.
fn take_round_trip(obj: &mut Value) -> Map<String, Value> {
    let mut taken = Map::new();
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return taken;
    };
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        for k in ROUND_TRIP {
            if let Some(v) = a.remove(k) {
                taken.insert(k.into(), v);
            }
        }
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
    taken
}

/// An annotation's JSON, if it parses.
fn parsed(taken: &Map<String, Value>, key: &str) -> Option<Value> {
    serde_json::from_str(taken.get(key)?.as_str()?).ok()
}

/// One metric source's fields in v1's annotation shape: (v1 key, path in the v2 member, written as "0"
/// when absent because v1's field is not optional).
type Fields = &'static [(&'static str, &'static str, bool)];

/// How each source of a MetricSpec maps between the versions (the member keeps its name).
const SPEC_FIELDS: &[(&str, &str, Fields)] = &[
    (
        "Object",
        "object",
        &[
            ("target", "describedObject", false),
            ("metricName", "metric/name", false),
            ("targetValue", "target/value", true),
            ("selector", "metric/selector", false),
            ("averageValue", "target/averageValue", false),
        ],
    ),
    (
        "Pods",
        "pods",
        &[
            ("metricName", "metric/name", false),
            ("targetAverageValue", "target/averageValue", true),
            ("selector", "metric/selector", false),
        ],
    ),
    (
        "Resource",
        "resource",
        &[
            ("name", "name", false),
            (
                "targetAverageUtilization",
                "target/averageUtilization",
                false,
            ),
            ("targetAverageValue", "target/averageValue", false),
        ],
    ),
    (
        "ContainerResource",
        "containerResource",
        &[
            ("name", "name", false),
            (
                "targetAverageUtilization",
                "target/averageUtilization",
                false,
            ),
            ("targetAverageValue", "target/averageValue", false),
            ("container", "container", false),
        ],
    ),
    (
        "External",
        "external",
        &[
            ("metricName", "metric/name", false),
            ("metricSelector", "metric/selector", false),
            ("targetValue", "target/value", false),
            ("targetAverageValue", "target/averageValue", false),
        ],
    ),
];

/// The same for a MetricStatus.
const STATUS_FIELDS: &[(&str, &str, Fields)] = &[
    (
        "Object",
        "object",
        &[
            ("target", "describedObject", false),
            ("metricName", "metric/name", false),
            ("currentValue", "current/value", true),
            ("selector", "metric/selector", false),
            ("averageValue", "current/averageValue", false),
        ],
    ),
    (
        "Pods",
        "pods",
        &[
            ("metricName", "metric/name", false),
            ("currentAverageValue", "current/averageValue", true),
            ("selector", "metric/selector", false),
        ],
    ),
    (
        "Resource",
        "resource",
        &[
            ("name", "name", false),
            (
                "currentAverageUtilization",
                "current/averageUtilization",
                false,
            ),
            ("currentAverageValue", "current/averageValue", true),
        ],
    ),
    (
        "ContainerResource",
        "containerResource",
        &[
            ("name", "name", false),
            (
                "currentAverageUtilization",
                "current/averageUtilization",
                false,
            ),
            ("currentAverageValue", "current/averageValue", true),
            ("container", "container", false),
        ],
    ),
    (
        "External",
        "external",
        &[
            ("metricName", "metric/name", false),
            ("metricSelector", "metric/selector", false),
            ("currentValue", "current/value", true),
            ("currentAverageValue", "current/averageValue", false),
        ],
    ),
];

/// The row of `table` for a metric's type, if it has one.
fn row(
    table: &'static [(&str, &str, Fields)],
    m: &Value,
) -> (Value, Option<(&'static str, Fields)>) {
    let ty = m.get("type").cloned().unwrap_or(json!(""));
    let found = table
        .iter()
        .find(|(t, _, _)| ty.as_str() == Some(*t))
        .map(|(_, member, fields)| (*member, *fields));
    (ty, found)
}

/// A v2 metric (spec or status) in v1's annotation shape.
fn metric_to_v1(table: &'static [(&str, &str, Fields)], m: &Value) -> Value {
    let (ty, found) = row(table, m);
    let mut out = Map::new();
    out.insert("type".into(), ty);
    if let Some((member, fields)) = found {
        let zero = json!("0");
        let mut o = Map::new();
        for (v1, v2, required) in fields {
            let v = m.pointer(&format!("/{member}/{v2}"));
            put(&mut o, v1, v.or(required.then_some(&zero)));
        }
        out.insert(member.into(), Value::Object(o));
    }
    Value::Object(out)
}

/// Sets `path` (`a/b`) in `m`, making the maps on the way.
fn set_in(m: &mut Map<String, Value>, path: &str, v: Value) {
    match path.split_once('/') {
        Some((head, rest)) => {
            if let Some(inner) = m
                .entry(head.to_string())
                .or_insert_with(|| json!({}))
                .as_object_mut()
            {
                set_in(inner, rest, v);
            }
        }
        None => {
            m.insert(path.into(), v);
        }
    }
}

/// A v1 annotation metric (spec or status) as v2's; `always` names the parts v2 requires even empty.
fn metric_from_v1(
    table: &'static [(&str, &str, Fields)],
    m: &Value,
    always: &[&str],
) -> (Map<String, Value>, Option<&'static str>) {
    let (ty, found) = row(table, m);
    let mut out = Map::new();
    out.insert("type".into(), ty);
    let Some((member, fields)) = found else {
        return (out, None);
    };
    let src = m.get(member).cloned().unwrap_or_default();
    let mut s = Map::new();
    for part in always {
        s.insert((*part).into(), json!({}));
    }
    for (v1, v2, _) in fields {
        if let Some(v) = src.get(*v1).filter(|v| !v.is_null()) {
            set_in(&mut s, v2, v.clone());
        }
    }
    out.insert(member.into(), Value::Object(s));
    (out, Some(member))
}

/// A v2 MetricSpec in v1's annotation shape.
fn spec_to_v1(m: &Value) -> Value {
    metric_to_v1(SPEC_FIELDS, m)
}

/// A v1 annotation MetricSpec as v2's, its target's type inferred as upstream's conversion does.
fn spec_from_v1(m: &Value) -> Value {
    let (mut out, member) = metric_from_v1(SPEC_FIELDS, m, &["target"]);
    if let Some(member) = member {
        let has = |p: &str| {
            out.get(member)
                .and_then(|s| s.pointer(p))
                .is_some_and(|v| !v.is_null())
        };
        let kind = match member {
            "pods" => "AverageValue",
            "resource" | "containerResource" if has("/target/averageUtilization") => "Utilization",
            "resource" | "containerResource" => "AverageValue",
            _ if has("/target/averageValue") => "AverageValue",
            _ => "Value",
        };
        if !matches!(member, "resource" | "containerResource") && !has("/metric") {
            set_in(&mut out, &format!("{member}/metric"), json!({}));
        }
        set_in(&mut out, &format!("{member}/target/type"), json!(kind));
    }
    Value::Object(out)
}

/// A v2 MetricStatus in v1's annotation shape.
fn status_to_v1(m: &Value) -> Value {
    metric_to_v1(STATUS_FIELDS, m)
}

/// A v1 annotation MetricStatus as v2's.
fn status_from_v1(m: &Value) -> Value {
    let (mut out, member) = metric_from_v1(STATUS_FIELDS, m, &["current"]);
    if let Some(member) = member {
        if !matches!(member, "resource" | "containerResource")
            && out.get(member).and_then(|s| s.get("metric")).is_none()
        {
            set_in(&mut out, &format!("{member}/metric"), json!({}));
        }
    }
    Value::Object(out)
}

/// Scaling rules (`scaleUp` or `scaleDown`) with Go's field names, as the behavior annotation holds them.
fn rules_to_go(r: Option<&Value>) -> Value {
    let Some(r) = r.filter(|r| !r.is_null()) else {
        return Value::Null;
    };
    let policies: Vec<Value> = r
        .get("policies")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    json!({
                        "Type": p.get("type").cloned().unwrap_or(json!("")),
                        "Value": p.get("value").cloned().unwrap_or(json!(0)),
                        "PeriodSeconds": p.get("periodSeconds").cloned().unwrap_or(json!(0)),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "StabilizationWindowSeconds": r.get("stabilizationWindowSeconds").cloned().unwrap_or(Value::Null),
        "SelectPolicy": r.get("selectPolicy").cloned().unwrap_or(Value::Null),
        "Policies": if policies.is_empty() && r.get("policies").is_none() { Value::Null } else { json!(policies) },
    })
}

/// The behavior annotation's scaling rules back in the API's shape.
fn rules_from_go(r: Option<&Value>) -> Option<Value> {
    let r = r.filter(|r| r.is_object())?;
    let mut out = Map::new();
    put(
        &mut out,
        "stabilizationWindowSeconds",
        r.get("StabilizationWindowSeconds"),
    );
    put(&mut out, "selectPolicy", r.get("SelectPolicy"));
    if let Some(ps) = r.get("Policies").and_then(Value::as_array) {
        let policies: Vec<Value> = ps
            .iter()
            .map(|p| {
                json!({
                    "type": p.get("Type").cloned().unwrap_or(json!("")),
                    "value": p.get("Value").cloned().unwrap_or(json!(0)),
                    "periodSeconds": p.get("PeriodSeconds").cloned().unwrap_or(json!(0)),
                })
            })
            .collect();
        out.insert("policies".into(), json!(policies));
    }
    Some(Value::Object(out))
}

/// The v1 view of a stored autoscaling/v2 HorizontalPodAutoscaler.
pub fn to_v1(mut obj: Value) -> Value {
    take_round_trip(&mut obj);
    let spec = obj.get("spec").cloned().unwrap_or_default();
    let status = obj.get("status").cloned().unwrap_or_default();
    let metrics: &[Value] = spec
        .get("metrics")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let cpu = metrics.iter().position(is_cpu_target);
    let mut v1_spec = Map::new();
    put(&mut v1_spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    put(&mut v1_spec, "minReplicas", spec.get("minReplicas"));
    put(&mut v1_spec, "maxReplicas", spec.get("maxReplicas"));
    if let Some(i) = cpu {
        put(
            &mut v1_spec,
            "targetCPUUtilizationPercentage",
            metrics[i].pointer("/resource/target/averageUtilization"),
        );
    }
    let others: Vec<Value> = metrics
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != cpu)
        .map(|(_, m)| spec_to_v1(m))
        .collect();

    let current: &[Value] = status
        .get("currentMetrics")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut v1_status = Map::new();
    put(
        &mut v1_status,
        "observedGeneration",
        status.get("observedGeneration"),
    );
    put(&mut v1_status, "lastScaleTime", status.get("lastScaleTime"));
    v1_status.insert(
        "currentReplicas".into(),
        status.get("currentReplicas").cloned().unwrap_or(json!(0)),
    );
    v1_status.insert(
        "desiredReplicas".into(),
        status.get("desiredReplicas").cloned().unwrap_or(json!(0)),
    );
    if let Some(u) = current.iter().find_map(|m| {
        (m.get("type").and_then(Value::as_str) == Some("Resource")
            && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu"))
        .then(|| m.pointer("/resource/current/averageUtilization"))
        .flatten()
        .filter(|u| !u.is_null())
    }) {
        v1_status.insert("currentCPUUtilizationPercentage".into(), u.clone());
    }

    let mut notes: Vec<(&str, Value)> = Vec::new();
    if !others.is_empty() {
        notes.push((METRICS, json!(others)));
    }
    if !current.is_empty() {
        let v1: Vec<Value> = current.iter().map(status_to_v1).collect();
        notes.push((CURRENT_METRICS, json!(v1)));
    }
    if let Some(c) = status
        .get("conditions")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
    {
        notes.push((CONDITIONS, json!(c)));
    }
    if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
        notes.push((
            BEHAVIOR,
            json!({"ScaleUp": rules_to_go(b.get("scaleUp")), "ScaleDown": rules_to_go(b.get("scaleDown"))}),
        ));
    }
    if !notes.is_empty() {
        if let Some(a) = annotations_mut(&mut obj) {
            for (k, v) in notes {
                a.insert(k.into(), Value::String(v.to_string()));
            }
        }
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!("autoscaling/v1"));
        m.insert("spec".into(), Value::Object(v1_spec));
        m.insert("status".into(), Value::Object(v1_status));
    }
    obj
}

/// The stored autoscaling/v2 form of an object a client sent as autoscaling/v1.
pub fn from_v1(mut obj: Value) -> Value {
    let taken = take_round_trip(&mut obj);
    let spec = obj.get("spec").cloned().unwrap_or_default();
    let mut v2_spec = Map::new();
    put(&mut v2_spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    put(&mut v2_spec, "minReplicas", spec.get("minReplicas"));
    put(&mut v2_spec, "maxReplicas", spec.get("maxReplicas"));
    let mut metrics: Vec<Value> = parsed(&taken, METRICS)
        .as_ref()
        .and_then(Value::as_array)
        .map(|ms| ms.iter().map(spec_from_v1).collect())
        .unwrap_or_default();
    let cpu_target = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|t| !t.is_null());
    if let Some(t) = cpu_target {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": t}}}));
    }
    if metrics.is_empty() {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}));
    }
    v2_spec.insert("metrics".into(), json!(metrics));
    if let Some(b) = parsed(&taken, BEHAVIOR) {
        let up = rules_from_go(b.get("ScaleUp"));
        let down = rules_from_go(b.get("ScaleDown"));
        if up.is_some() || down.is_some() {
            let mut behavior = Map::new();
            put(&mut behavior, "scaleUp", up.as_ref());
            put(&mut behavior, "scaleDown", down.as_ref());
            v2_spec.insert("behavior".into(), Value::Object(behavior));
        }
    }

    let status = obj.get("status").cloned();
    let v2_status = status.filter(Value::is_object).map(|status| {
        let mut s = Map::new();
        put(
            &mut s,
            "observedGeneration",
            status.get("observedGeneration"),
        );
        put(&mut s, "lastScaleTime", status.get("lastScaleTime"));
        put(&mut s, "currentReplicas", status.get("currentReplicas"));
        s.insert(
            "desiredReplicas".into(),
            status.get("desiredReplicas").cloned().unwrap_or(json!(0)),
        );
        let current: Option<Vec<Value>> = match parsed(&taken, CURRENT_METRICS) {
            Some(Value::Array(ms)) => Some(ms.iter().map(status_from_v1).collect()),
            _ => status
                .get("currentCPUUtilizationPercentage")
                .filter(|u| !u.is_null())
                .map(|u| {
                    vec![json!({"type": "Resource", "resource": {"name": "cpu",
                        "current": {"averageUtilization": u}}})]
                }),
        };
        if let Some(c) = current {
            s.insert("currentMetrics".into(), json!(c));
        }
        if let Some(Value::Array(c)) = parsed(&taken, CONDITIONS) {
            s.insert("conditions".into(), json!(c));
        }
        Value::Object(s)
    });
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!("autoscaling/v2"));
        m.insert("spec".into(), Value::Object(v2_spec));
        match v2_status {
            Some(s) => {
                m.insert("status".into(), s);
            }
            None => {
                m.remove("status");
            }
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"keep": "me"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "a"}}},
                        "target": {"type": "Value", "value": "30"}}},
                    {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"},
                        "metric": {"name": "hits"}, "target": {"type": "AverageValue", "averageValue": "2"}}},
                ],
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]},
                    "scaleDown": {"selectPolicy": "Min", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
                },
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 12, "averageValue": "12m"}}},
                ],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "message": "m",
                    "lastTransitionTime": "2026-12-08T00:00:00Z"}],
            },
        })
    }

    #[test]
    fn v1_holds_the_cpu_target_and_annotations_hold_the_rest() {
        let v1 = to_v1(v2());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 12);
        assert_eq!(v1["metadata"]["annotations"]["keep"], "me");
        let metrics: Value =
            serde_json::from_str(v1["metadata"]["annotations"][METRICS].as_str().unwrap()).unwrap();
        assert_eq!(metrics.as_array().unwrap().len(), 4);
        assert_eq!(metrics[0]["resource"]["targetAverageValue"], "500Mi");
        assert_eq!(metrics[1]["pods"]["metricName"], "qps");
        let behavior: Value =
            serde_json::from_str(v1["metadata"]["annotations"][BEHAVIOR].as_str().unwrap())
                .unwrap();
        assert_eq!(behavior["ScaleUp"]["Policies"][0]["PeriodSeconds"], 15);
        assert_eq!(
            behavior["ScaleDown"]["StabilizationWindowSeconds"],
            Value::Null
        );
    }

    #[test]
    fn v2_survives_a_round_trip_through_v1() {
        let back = from_v1(to_v1(v2()));
        let want = v2();
        assert_eq!(back["metadata"], want["metadata"]);
        assert_eq!(back["spec"]["behavior"], want["spec"]["behavior"]);
        assert_eq!(back["status"]["conditions"], want["status"]["conditions"]);
        assert_eq!(
            back["status"]["currentMetrics"],
            want["status"]["currentMetrics"]
        );
        // The CPU target comes back last, as upstream appends it after the annotation's metrics.
        let ms = back["spec"]["metrics"].as_array().unwrap();
        assert_eq!(ms.len(), 5);
        assert_eq!(ms[4], want["spec"]["metrics"][1]);
        assert_eq!(ms[0], want["spec"]["metrics"][0]);
        assert_eq!(ms[2], want["spec"]["metrics"][3]);
        // v1's object target value is not optional: it comes back as "0", as upstream's does.
        let mut object = want["spec"]["metrics"][4].clone();
        object["object"]["target"]["value"] = json!("0");
        assert_eq!(ms[3], object);
    }

    #[test]
    fn a_v1_object_without_target_gets_the_default_cpu_target() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "w", "annotations": {METRICS: "not json"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "w"}, "maxReplicas": 3}});
        let v2 = from_v1(v1);
        assert_eq!(
            v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert!(v2["metadata"].get("annotations").is_none());
        assert!(v2.get("status").is_none());
    }
}
