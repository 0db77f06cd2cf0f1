//! Pods (upstream's `pkg/registry/core/pod/strategy.go`): pod spec defaults, `Pending` status and QoS
//! class on create, a mostly immutable spec, graceful deletion of pods bound to a node.

use serde_json::{json, Value};

use keel_client_kit::qos;

use super::{set_status, start_generation, Strategy};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{pod_spec, service_account_alias, set_default};
use crate::validation::validate::check_containers;

pub(super) struct Pod;

impl Strategy for Pod {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec") {
            pod_spec(spec, "Always");
            requests_from_limits(spec);
            if let Some(m) = spec.as_object_mut() {
                service_account_alias(m);
                set_default(m, "enableServiceLinks", json!(true));
                // `priority` and `preemptionPolicy` are the Priority admission plugin's
                // (`crate::priority`), which must see whether the client set them.
            }
        }
    }

    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        start_generation(def, obj);
        if let Some(spec) = obj.get_mut("spec") {
            // The ServiceAccount admission plugin: a new pod runs as `default` unless it names one.
            if let Some(m) = spec.as_object_mut() {
                set_default(m, "serviceAccountName", json!("default"));
                service_account_alias(m);
            }
            default_toleration_seconds(spec);
        }
        let qos = qos_class(obj);
        set_status(obj, json!({"phase": "Pending", "qosClass": qos}));
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        match obj.get("spec") {
            Some(spec) => check_containers(spec, "spec", &mut causes),
            None => causes.push(Cause::required("spec.containers")),
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        pod_update(old, new, &mut causes);
        causes
    }

    fn graceful_delete(&self, obj: &Value, requested: Option<i64>) -> i64 {
        pod_grace(obj, requested)
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}

/// The seconds a pod stays on a not-ready or unreachable node before taint eviction (the
/// DefaultTolerationSeconds admission plugin's default).
const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// The DefaultTolerationSeconds admission plugin: a new pod that does not tolerate the
/// `node.kubernetes.io/not-ready` or `node.kubernetes.io/unreachable` NoExecute taint gets a toleration
/// of it for 300 s.
fn default_toleration_seconds(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    let list = m.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = list.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = list.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        });
        if !tolerated {
            list.push(json!({
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }));
        }
    }
    if list.is_empty() {
        m.remove("tolerations");
    }
}

/// A container's `resources.<key>` as `(name, quantity text)` (a YAML `cpu: 1` arrives as a number).
fn resource_list(c: &Value, key: &str) -> Vec<(String, String)> {
    c.get("resources")
        .and_then(|r| r.get(key))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| match q {
            Value::String(s) => Some((name.clone(), s.clone())),
            Value::Number(n) => Some((name.clone(), n.to_string())),
            _ => None,
        })
        .collect()
}

fn borrowed(list: &[(String, String)]) -> Vec<(&str, &str)> {
    list.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

/// The pod's QoS class by the one rule the node agent uses too (`keel_client_kit::qos`).
fn qos_class(pod: &Value) -> &'static str {
    let lists: Vec<_> = ["spec.initContainers", "spec.containers"]
        .iter()
        .filter_map(|p| object::path(pod, p).and_then(Value::as_array))
        .flatten()
        .map(|c| (resource_list(c, "requests"), resource_list(c, "limits")))
        .collect();
    qos::qos_class(lists.iter().map(|(r, l)| qos::ContainerResources {
        requests: borrowed(r),
        limits: borrowed(l),
    }))
    .as_str()
}

/// Limits stand in for missing requests, on pods only (upstream's `SetDefaults_Pod`; templates keep
/// what they say).
fn requests_from_limits(spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs {
            let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            let requests = res.entry("requests").or_insert_with(|| json!({}));
            if requests.is_null() {
                *requests = json!({});
            }
            if let Some(r) = requests.as_object_mut() {
                for (k, v) in limits {
                    r.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// Pods allow only images, activeDeadlineSeconds, tolerations (additions) and a few others to change.
fn pod_update(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    let strip = |v: &Value| -> Value {
        let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(m) = s.as_object_mut() {
            m.remove("activeDeadlineSeconds");
            m.remove("tolerations");
            m.remove("terminationGracePeriodSeconds");
            for list in ["containers", "initContainers"] {
                if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        if let Some(cm) = c.as_object_mut() {
                            cm.remove("image");
                        }
                    }
                }
            }
            // The scheduler binds through the binding subresource; an unset node may be set once.
            if m.get("nodeName")
                .is_some_and(|n| n.as_str().unwrap_or("").is_empty())
            {
                m.remove("nodeName");
            }
        }
        s
    };
    let (mut a, b) = (strip(old), strip(new));
    if path(old, "spec.nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        if let (Some(am), Some(n)) = (a.as_object_mut(), b.get("nodeName")) {
            am.insert("nodeName".into(), n.clone());
        }
    }
    if a != b {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

fn pod_grace(obj: &Value, requested: Option<i64>) -> i64 {
    let node = object::path(obj, "spec.nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let phase = object::path(obj, "status.phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    requested
        .or_else(|| object::path(obj, "spec.terminationGracePeriodSeconds").and_then(Value::as_i64))
        .unwrap_or(30)
        .max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_tolerate_not_ready_and_unreachable_for_300s_unless_they_say_otherwise() {
        let mut spec = json!({"containers": []});
        default_toleration_seconds(&mut spec);
        let t = spec["tolerations"].as_array().cloned().unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["key"], "node.kubernetes.io/not-ready");
        assert_eq!(t[1]["tolerationSeconds"], 300);
        let mut own = json!({"tolerations": [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
        ]});
        default_toleration_seconds(&mut own);
        let t = own["tolerations"].as_array().cloned().unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["tolerationSeconds"], 5);
        assert_eq!(t[1]["key"], "node.kubernetes.io/not-ready");
        let mut all = json!({"tolerations": [{"operator": "Exists"}]});
        default_toleration_seconds(&mut all);
        assert_eq!(all["tolerations"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn unscheduled_pods_go_at_once() {
        let pod = json!({"spec": {"terminationGracePeriodSeconds": 10}});
        assert_eq!(pod_grace(&pod, None), 0);
        let bound = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 10}});
        assert_eq!(pod_grace(&bound, None), 10);
        assert_eq!(pod_grace(&bound, Some(0)), 0);
        let done = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(pod_grace(&done, None), 0);
    }

    #[test]
    fn qos_compares_quantities_and_defaults_requests_from_limits() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "resources": {
            "requests": {"cpu": "1", "memory": "64Mi"},
            "limits": {"cpu": "1000m", "memory": "64Mi"}}}]}});
        assert_eq!(qos_class(&pod), "Guaranteed");
        pod["spec"]["initContainers"] = json!([{"name": "i"}]);
        assert_eq!(qos_class(&pod), "Burstable");
        let mut limits_only = json!({"containers": [{"name": "a", "resources": {
            "limits": {"cpu": "250m", "memory": 134217728}}}]});
        requests_from_limits(&mut limits_only);
        assert_eq!(
            limits_only["containers"][0]["resources"]["requests"],
            json!({"cpu": "250m", "memory": 134217728})
        );
        assert_eq!(qos_class(&json!({"spec": limits_only})), "Guaranteed");
    }
}
