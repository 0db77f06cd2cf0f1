//! Columns and cells of HorizontalPodAutoscalers, as upstream's printer computes them (from the v2
//! form; a v1 object is read through its conversion).

use serde_json::{json, Value};

use super::column::{col, Column, AGE, NAME};
use crate::age::since;
use crate::convert::hpa_v1;
use crate::object::path;

/// How many metrics TARGETS spells out before `+ N more...`.
const SHOWN_METRICS: usize = 2;

/// The columns.
pub fn columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Reference",
            "string",
            0,
            "The kind and name of the scaled resource.",
        ),
        col(
            "Targets",
            "string",
            0,
            "Each metric's current value against its target.",
        ),
        col("MinPods", "string", 0, "The lower limit of replicas."),
        col("MaxPods", "integer", 0, "The upper limit of replicas."),
        col(
            "Replicas",
            "integer",
            0,
            "The replicas the autoscaler last saw.",
        ),
        AGE,
    ]
}

fn text<'a>(o: &'a Value, p: &str) -> Option<&'a str> {
    path(o, p).and_then(Value::as_str)
}

/// One metric's `current/target` text; `current` is the same metric's entry in `status.currentMetrics`.
fn metric_text(spec: &Value, current: Option<&Value>) -> String {
    let unknown = "<unknown>".to_string();
    let cur = |p: &str| {
        current
            .and_then(|c| path(c, p))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| unknown.clone())
    };
    let target = |p: &str| text(spec, p).unwrap_or("").to_string();
    match text(spec, "type").unwrap_or("") {
        "Pods" => format!(
            "{}/{}",
            cur("pods.current.averageValue"),
            target("pods.target.averageValue")
        ),
        src @ ("Object" | "External") => {
            let key = if src == "Object" {
                "object"
            } else {
                "external"
            };
            if path(spec, &format!("{key}.target.averageValue")).is_some_and(|v| !v.is_null()) {
                format!(
                    "{}/{} (avg)",
                    cur(&format!("{key}.current.averageValue")),
                    target(&format!("{key}.target.averageValue"))
                )
            } else {
                format!(
                    "{}/{}",
                    cur(&format!("{key}.current.value")),
                    target(&format!("{key}.target.value"))
                )
            }
        }
        src @ ("Resource" | "ContainerResource") => {
            let key = if src == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let name = target(&format!("{key}.name"));
            if path(spec, &format!("{key}.target.averageValue")).is_some_and(|v| !v.is_null()) {
                return format!(
                    "{name}: {}/{}",
                    cur(&format!("{key}.current.averageValue")),
                    target(&format!("{key}.target.averageValue"))
                );
            }
            let current = current
                .and_then(|c| path(c, &format!("{key}.current.averageUtilization")))
                .and_then(Value::as_i64)
                .map_or(unknown, |u| format!("{u}%"));
            let goal = path(spec, &format!("{key}.target.averageUtilization"))
                .and_then(Value::as_i64)
                .map_or("<auto>".to_string(), |u| format!("{u}%"));
            format!("{name}: {current}/{goal}")
        }
        _ => "<unknown type>".to_string(),
    }
}

/// The TARGETS cell: the first two metrics, then how many more.
fn targets(o: &Value) -> String {
    let specs = path(o, "spec.metrics")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if specs.is_empty() {
        return "<none>".into();
    }
    let current = path(o, "status.currentMetrics")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let shown: Vec<String> = specs
        .iter()
        .take(SHOWN_METRICS)
        .enumerate()
        .map(|(i, s)| metric_text(s, current.get(i)))
        .collect();
    let joined = shown.join(", ");
    if specs.len() > SHOWN_METRICS {
        format!("{joined} + {} more...", specs.len() - SHOWN_METRICS)
    } else {
        joined
    }
}

/// The cells of one HorizontalPodAutoscaler.
pub fn cells(o: &Value) -> Vec<Value> {
    let converted;
    let o = if text(o, "apiVersion") == Some("autoscaling/v1") {
        converted = hpa_v1::from_v1(o.clone());
        &converted
    } else {
        o
    };
    let reference = format!(
        "{}/{}",
        text(o, "spec.scaleTargetRef.kind").unwrap_or(""),
        text(o, "spec.scaleTargetRef.name").unwrap_or("")
    );
    let min = path(o, "spec.minReplicas")
        .and_then(Value::as_i64)
        .map_or("<unset>".to_string(), |m| m.to_string());
    vec![
        json!(path(o, "metadata.name")
            .and_then(Value::as_str)
            .unwrap_or("")),
        json!(reference),
        json!(targets(o)),
        json!(min),
        json!(path(o, "spec.maxReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0)),
        json!(path(o, "status.currentReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0)),
        json!(since(path(o, "metadata.creationTimestamp"))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(target: i64) -> Value {
        json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}})
    }

    #[test]
    fn targets_read_as_kubectl_prints_them() {
        let mut hpa = json!({"metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5, "metrics": [cpu(50)]},
            "status": {"currentReplicas": 2}});
        let c = cells(&hpa);
        assert_eq!(c[1], "Deployment/web");
        assert_eq!(c[2], "cpu: <unknown>/50%");
        assert_eq!(c[3], "<unset>");
        assert_eq!(c[5], 2);
        hpa["status"]["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 12, "averageValue": "12m"}}}]);
        assert_eq!(cells(&hpa)[2], "cpu: 12%/50%");
        hpa["spec"]["metrics"] = json!([
            cpu(50),
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
            {"type": "External", "external": {"metric": {"name": "q"}, "target": {"type": "AverageValue", "averageValue": "3"}}},
        ]);
        assert_eq!(
            cells(&hpa)[2],
            "cpu: 12%/50%, memory: <unknown>/500Mi + 1 more..."
        );
        hpa["spec"]["metrics"] = json!([]);
        assert_eq!(cells(&hpa)[2], "<none>");
    }

    #[test]
    fn a_v1_object_prints_its_cpu_target() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "metadata": {"name": "w"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "w"}, "minReplicas": 1, "maxReplicas": 4,
                     "targetCPUUtilizationPercentage": 60},
            "status": {"currentReplicas": 1, "desiredReplicas": 1, "currentCPUUtilizationPercentage": 30}});
        let c = cells(&v1);
        assert_eq!(c[2], "cpu: 30%/60%");
        assert_eq!(c[3], "1");
    }
}
