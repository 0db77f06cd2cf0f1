//! `autoscaling/v2` HorizontalPodAutoscalers (v1 objects arrive here converted): upstream's defaults
//! (one CPU target at 80 % when no metric is given, a minimum of 1, behavior filled in only when one is
//! given) and checks, with their messages.

use keel_client_kit::quantity::Quantity;
use serde_json::{json, Value};

use super::{list_at, set_status, str_at as s, Strategy, Subresource};
use crate::convert::hpa_v1::DEFAULT_CPU_UTILIZATION;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::names::{self, NameRule};
use crate::validation::validate;

pub(super) struct HorizontalPodAutoscaler;

/// The most a stabilization window may last (seconds).
const MAX_STABILIZATION_WINDOW: i64 = 3600;
/// The longest period a scaling policy may count over (seconds).
const MAX_POLICY_PERIOD: i64 = 1800;

const SOURCE_TYPES: [&str; 5] = [
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];

/// The member of a MetricSpec that goes with its `type`.
fn member_of(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "External" => "external",
        _ => return None,
    })
}

fn scale_up_defaults() -> Value {
    json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                     {"type": "Percent", "value": 100, "periodSeconds": 15}]})
}

/// Scale-down's window stays unset: the controller uses its own flag for it (5 minutes).
fn scale_down_defaults() -> Value {
    json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]})
}

/// Fills what a user left out of one direction's rules.
fn default_rules(rules: &mut Value, defaults: Value) {
    let Some(r) = rules.as_object_mut() else {
        *rules = defaults;
        return;
    };
    if let Value::Object(d) = defaults {
        for (k, v) in d {
            if r.get(&k).is_none_or(Value::is_null) {
                r.insert(k, v);
            }
        }
    }
}

fn positive_quantity(field: &str, v: Option<&Value>, causes: &mut Vec<Cause>) {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return;
    };
    match v.as_str().and_then(Quantity::parse) {
        Some(q) if !q.is_negative() && !q.is_zero() => {}
        Some(_) => causes.push(Cause::invalid(field, v, "must be positive")),
        None => causes.push(Cause::invalid(field, v, "must be a quantity")),
    }
}

fn present<'a>(o: &'a Value, p: &str) -> Option<&'a Value> {
    path(o, p).filter(|v| !v.is_null())
}

fn check_target(field: &str, t: &Value, causes: &mut Vec<Cause>) {
    match s(t, "type").unwrap_or("") {
        "" => causes.push(Cause::required_because(
            &format!("{field}.type"),
            "must specify a metric target type",
        )),
        "Utilization" | "Value" | "AverageValue" => {}
        other => causes.push(Cause::invalid(
            &format!("{field}.type"),
            &json!(other),
            "must be either Utilization, Value, or AverageValue",
        )),
    }
    positive_quantity(&format!("{field}.value"), t.get("value"), causes);
    positive_quantity(
        &format!("{field}.averageValue"),
        t.get("averageValue"),
        causes,
    );
    if let Some(u) = present(t, "averageUtilization") {
        if u.as_i64().is_none_or(|u| u < 1) {
            causes.push(Cause::invalid(
                &format!("{field}.averageUtilization"),
                u,
                "must be greater than 0",
            ));
        }
    }
}

fn check_path_segment(field: &str, v: &str, causes: &mut Vec<Cause>) {
    if let Err(e) = names::check(NameRule::PathSegment, v) {
        causes.push(Cause::invalid(field, &json!(v), &e));
    }
}

fn check_metric_id(field: &str, m: &Value, causes: &mut Vec<Cause>) {
    match s(m, "name").unwrap_or("") {
        "" => causes.push(Cause::required_because(
            &format!("{field}.name"),
            "must specify a metric name",
        )),
        n => check_path_segment(&format!("{field}.name"), n, causes),
    }
}

fn check_reference(field: &str, r: &Value, causes: &mut Vec<Cause>) {
    for key in ["kind", "name"] {
        match s(r, key).unwrap_or("") {
            "" => causes.push(Cause::required(&format!("{field}.{key}"))),
            v => check_path_segment(&format!("{field}.{key}"), v, causes),
        }
    }
}

/// A container resource is a standard one (`cpu`, `memory`, ...) or a qualified extended name.
fn check_container_resource_name(field: &str, name: &str, causes: &mut Vec<Cause>) {
    if name.contains('/') {
        if let Err(e) = names::check_qualified_name(name) {
            causes.push(Cause::invalid(field, &json!(name), &e));
        }
        return;
    }
    let standard =
        matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-");
    if !standard {
        causes.push(Cause::invalid(
            field,
            &json!(name),
            "must be a standard resource for containers",
        ));
    }
}

fn check_source(field: &str, ty: &str, src: &Value, causes: &mut Vec<Cause>) {
    let target = src.get("target").cloned().unwrap_or_default();
    let has = |k: &str| present(&target, k).is_some();
    match ty {
        "Object" => {
            check_reference(
                &format!("{field}.describedObject"),
                &src.get("describedObject").cloned().unwrap_or_default(),
                causes,
            );
            check_metric_id(
                &format!("{field}.metric"),
                &src.get("metric").cloned().unwrap_or_default(),
                causes,
            );
            check_target(&format!("{field}.target"), &target, causes);
            if !has("value") && !has("averageValue") {
                causes.push(Cause::required_because(
                    &format!("{field}.target.averageValue"),
                    "must set either a target value or averageValue",
                ));
            }
        }
        "External" => {
            check_metric_id(
                &format!("{field}.metric"),
                &src.get("metric").cloned().unwrap_or_default(),
                causes,
            );
            check_target(&format!("{field}.target"), &target, causes);
            match (has("value"), has("averageValue")) {
                (false, false) => causes.push(Cause::required_because(
                    &format!("{field}.target.averageValue"),
                    "must set either a target value for metric or a per-pod target",
                )),
                (true, true) => causes.push(Cause::forbidden(
                    &format!("{field}.target.value"),
                    "may not set both a target value for metric and a per-pod target",
                )),
                _ => {}
            }
        }
        "Pods" => {
            check_metric_id(
                &format!("{field}.metric"),
                &src.get("metric").cloned().unwrap_or_default(),
                causes,
            );
            check_target(&format!("{field}.target"), &target, causes);
            if !has("averageValue") {
                causes.push(Cause::required_because(
                    &format!("{field}.target.averageValue"),
                    "must specify a positive target averageValue",
                ));
            }
        }
        "Resource" | "ContainerResource" => {
            let name = s(src, "name").unwrap_or("");
            if name.is_empty() {
                causes.push(Cause::required_because(
                    &format!("{field}.name"),
                    "must specify a resource name",
                ));
            }
            if ty == "ContainerResource" {
                if !name.is_empty() {
                    check_container_resource_name(&format!("{field}.name"), name, causes);
                }
                match s(src, "container").unwrap_or("") {
                    "" => causes.push(Cause::required_because(
                        &format!("{field}.container"),
                        "must specify a container",
                    )),
                    c => {
                        if let Err(e) = names::check(NameRule::Label, c) {
                            causes.push(Cause::invalid(
                                &format!("{field}.container"),
                                &json!(c),
                                &e,
                            ));
                        }
                    }
                }
            }
            check_target(&format!("{field}.target"), &target, causes);
            match (has("averageUtilization"), has("averageValue")) {
                (false, false) => causes.push(Cause::required_because(
                    &format!("{field}.target.averageUtilization"),
                    "must set either a target raw value or a target utilization",
                )),
                (true, true) => causes.push(Cause::forbidden(
                    &format!("{field}.target.averageValue"),
                    "may not set both a target raw value and a target utilization",
                )),
                _ => {}
            }
        }
        _ => {}
    }
}

fn check_metric(field: &str, m: &Value, causes: &mut Vec<Cause>) {
    let ty = s(m, "type").unwrap_or("");
    if ty.is_empty() {
        causes.push(Cause::required_because(
            &format!("{field}.type"),
            "must specify a metric source type",
        ));
    } else if member_of(ty).is_none() {
        // Upstream reports an unknown type twice (its set check and its switch).
        for _ in 0..2 {
            causes.push(Cause::not_supported(
                &format!("{field}.type"),
                &json!(ty),
                &SOURCE_TYPES,
            ));
        }
    }
    let set: Vec<&str> = SOURCE_TYPES
        .iter()
        .filter_map(|t| member_of(t))
        .filter(|k| present(m, k).is_some())
        .collect();
    if let Some(own) = member_of(ty) {
        if !set.contains(&own) {
            causes.push(Cause::required_because(
                &format!("{field}.{own}"),
                "must populate information for the given metric source",
            ));
        }
    }
    for k in &set {
        if Some(*k) != member_of(ty) {
            causes.push(Cause::forbidden(
                &format!("{field}.{k}"),
                "must populate the given metric source only",
            ));
        }
    }
    if let Some(own) = member_of(ty) {
        if let Some(src) = present(m, own) {
            check_source(&format!("{field}.{own}"), ty, src, causes);
        }
    }
}

fn check_rules(field: &str, r: &Value, causes: &mut Vec<Cause>) {
    if let Some(w) = present(r, "stabilizationWindowSeconds") {
        match w.as_i64() {
            Some(w) if w < 0 => causes.push(Cause::invalid(
                &format!("{field}.stabilizationWindowSeconds"),
                &json!(w),
                "must be greater than or equal to zero",
            )),
            Some(w) if w > MAX_STABILIZATION_WINDOW => causes.push(Cause::invalid(
                &format!("{field}.stabilizationWindowSeconds"),
                &json!(w),
                &format!("must be less than or equal to {MAX_STABILIZATION_WINDOW}"),
            )),
            _ => {}
        }
    }
    if let Some(p) = present(r, "selectPolicy") {
        if !matches!(p.as_str(), Some("Max" | "Min" | "Disabled")) {
            causes.push(Cause::not_supported(
                &format!("{field}.selectPolicy"),
                p,
                &["Disabled", "Max", "Min"],
            ));
        }
    }
    let policies = list_at(r, "policies");
    if policies.is_empty() {
        causes.push(Cause::required_because(
            &format!("{field}.policies"),
            "must specify at least one Policy",
        ));
    }
    for (i, p) in policies.iter().enumerate() {
        let f = format!("{field}.policies[{i}]");
        let ty = p.get("type").cloned().unwrap_or(json!(""));
        if !matches!(ty.as_str(), Some("Pods" | "Percent")) {
            causes.push(Cause::not_supported(
                &format!("{f}.type"),
                &ty,
                &["Percent", "Pods"],
            ));
        }
        let v = p.get("value").and_then(Value::as_i64).unwrap_or(0);
        if v <= 0 {
            causes.push(Cause::invalid(
                &format!("{f}.value"),
                &json!(v),
                "must be greater than zero",
            ));
        }
        let period = p.get("periodSeconds").and_then(Value::as_i64).unwrap_or(0);
        if period <= 0 {
            causes.push(Cause::invalid(
                &format!("{f}.periodSeconds"),
                &json!(period),
                "must be greater than zero",
            ));
        } else if period > MAX_POLICY_PERIOD {
            causes.push(Cause::invalid(
                &format!("{f}.periodSeconds"),
                &json!(period),
                &format!("must be less than or equal to {MAX_POLICY_PERIOD}"),
            ));
        }
    }
}

/// The spec's checks; `min_allowed` is the lowest `minReplicas` (0 only for an object already at 0).
fn check_spec(obj: &Value, min_allowed: i64) -> Vec<Cause> {
    let mut causes = Vec::new();
    let min = present(obj, "spec.minReplicas").and_then(Value::as_i64);
    if let Some(m) = min {
        if m < min_allowed {
            causes.push(Cause::invalid(
                "spec.minReplicas",
                &json!(m),
                &format!("must be greater than or equal to {min_allowed}"),
            ));
        }
    }
    let max = path(obj, "spec.maxReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if max < 1 {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|m| max < m) {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    check_reference(
        "spec.scaleTargetRef",
        &path(obj, "spec.scaleTargetRef")
            .cloned()
            .unwrap_or_default(),
        &mut causes,
    );
    let metrics = list_at(obj, "spec.metrics");
    for (i, m) in metrics.iter().enumerate() {
        check_metric(&format!("spec.metrics[{i}]"), m, &mut causes);
    }
    if min == Some(0)
        && !metrics
            .iter()
            .any(|m| matches!(s(m, "type"), Some("Object" | "External")))
    {
        causes.push(Cause::forbidden(
            "spec.metrics",
            "must specify at least one Object or External metric to support scaling to zero replicas",
        ));
    }
    if let Some(b) = present(obj, "spec.behavior") {
        for dir in ["scaleUp", "scaleDown"] {
            if let Some(r) = present(b, dir) {
                check_rules(&format!("spec.behavior.{dir}"), r, &mut causes);
            }
        }
    }
    causes
}

fn check_status(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for key in ["currentReplicas", "desiredReplicas"] {
        if let Some(v) = path(obj, &format!("status.{key}")).and_then(Value::as_i64) {
            if v < 0 {
                causes.push(Cause::invalid(
                    &format!("status.{key}"),
                    &json!(v),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    causes
}

fn old_min_is_zero(old: &Value) -> bool {
    path(old, "spec.minReplicas").and_then(Value::as_i64) == Some(0)
}

impl Strategy for HorizontalPodAutoscaler {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if spec.get("minReplicas").is_none_or(Value::is_null) {
            spec.insert("minReplicas".into(), json!(1));
        }
        if spec
            .get("metrics")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            spec.insert(
                "metrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]),
            );
        }
        if let Some(b) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
            let up = b.entry("scaleUp").or_insert(Value::Null);
            default_rules(up, scale_up_defaults());
            let down = b.entry("scaleDown").or_insert(Value::Null);
            default_rules(down, scale_down_defaults());
        }
    }

    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        set_status(obj, json!({"desiredReplicas": 0}));
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        check_spec(obj, 1)
    }

    fn revalidates_on_update(&self) -> bool {
        false
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        // Scale-to-zero is off in 1.32 (its feature gate is alpha), but an object already at 0 may keep it.
        let min_allowed = if old_min_is_zero(old) { 0 } else { 1 };
        check_spec(new, min_allowed)
    }

    fn subresource(&self, name: &str) -> Option<&'static dyn Subresource> {
        match name {
            "status" => Some(&HpaStatus),
            _ => None,
        }
    }
}

/// `/status`: the stored object with the client's status, whose replica counts are checked.
struct HpaStatus;

impl Subresource for HpaStatus {
    fn prepare_for_update(&self, def: &ResourceDef, old: &Value, new: Value) -> Value {
        super::Status.prepare_for_update(def, old, new)
    }

    fn validate_update(&self, _def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        validate::check_meta(NameRule::Subdomain, new, &mut causes);
        causes.extend(check_status(new));
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> std::sync::Arc<ResourceDef> {
        crate::resource::find("autoscaling", "v2", "horizontalpodautoscalers").expect("served")
    }

    fn hpa(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn messages(c: &[Cause]) -> Vec<String> {
        c.iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn defaults_fill_metrics_min_and_a_given_behavior_only() {
        let mut o =
            hpa(json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}));
        HorizontalPodAutoscaler.set_defaults(&def(), &mut o);
        assert_eq!(o["spec"]["minReplicas"], 1);
        assert_eq!(
            o["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert!(o["spec"].get("behavior").is_none());
        o["spec"]["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": 10}});
        HorizontalPodAutoscaler.set_defaults(&def(), &mut o);
        assert_eq!(o["spec"]["behavior"]["scaleUp"], scale_up_defaults());
        assert_eq!(
            o["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
            10
        );
        assert_eq!(o["spec"]["behavior"]["scaleDown"]["selectPolicy"], "Max");
        let mut bare = hpa(json!({"behavior": {}}));
        HorizontalPodAutoscaler.set_defaults(&def(), &mut bare);
        assert!(bare["spec"]["behavior"]["scaleDown"]
            .get("stabilizationWindowSeconds")
            .is_none());
    }

    #[test]
    fn checks_read_as_upstream() {
        let o = hpa(
            json!({"scaleTargetRef": {"kind": "", "name": "a/b"}, "minReplicas": 3, "maxReplicas": 2,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}}},
                {"type": "Pods", "resource": {"name": "cpu"}},
                {"type": "Bogus"},
            ],
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 4000, "selectPolicy": "Max", "policies": []}}}),
        );
        let m = messages(&HorizontalPodAutoscaler.validate(&def(), &o));
        for want in [
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
            "spec.scaleTargetRef.kind: Required value",
            "spec.scaleTargetRef.name: Invalid value: \"a/b\": may not contain '/'",
            "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0",
            "spec.metrics[1].pods: Required value: must populate information for the given metric source",
            "spec.metrics[1].resource: Forbidden: must populate the given metric source only",
            "spec.metrics[2].type: Unsupported value: \"Bogus\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
            "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 4000: must be less than or equal to 3600",
            "spec.behavior.scaleUp.policies: Required value: must specify at least one Policy",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want}\n{m:#?}");
        }
        let ok = hpa(
            json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 2,
            "metrics": [{"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}]}),
        );
        assert!(HorizontalPodAutoscaler.validate(&def(), &ok).is_empty());
    }
}
