//! What one object consumes, by kind, named as quota names it (upstream's evaluators in
//! `pkg/quota/v1/evaluator/core`): every namespaced object counts under `count/<resource>[.<group>]`;
//! pods also count their compute resources while they are not finished, services their load balancers
//! and node ports, and a few kinds under their legacy names (`configmaps`, `secrets`, ...).

use serde_json::Value;

use super::list::{add, from_value, max, ResourceList};
use crate::quantity::Quantity;

/// The resources whose per-container absence a quota on them refuses (upstream's `validationSet`).
pub const MUST_SPECIFY: [&str; 6] = [
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// The fixed names a pod's usage may hold (besides `hugepages-*` and extended `requests.*`): upstream's pod
/// object-count and compute quota resources, which are also the names a pod-scoped quota may limit.
pub const POD_RESOURCES: [&str; 11] = [
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// The object-count name of a resource: `count/pods`, `count/deployments.apps`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// Whether a quota on `name` is consumed by objects of `group`/`plural`.
pub fn tracks(group: &str, plural: &str, name: &str) -> bool {
    if name == count_name(group, plural) {
        return true;
    }
    match (group, plural) {
        ("", "pods") => {
            POD_RESOURCES.contains(&name)
                || name.starts_with("hugepages-")
                || name.starts_with("requests.hugepages-")
                || (name.starts_with("requests.") && extended(&name["requests.".len()..]))
        }
        ("", "services") => {
            matches!(
                name,
                "services" | "services.loadbalancers" | "services.nodeports"
            )
        }
        ("", "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas") => {
            name == plural
        }
        ("", "persistentvolumeclaims") => {
            matches!(name, "persistentvolumeclaims" | "requests.storage")
                || name.ends_with(CLASS_CLAIMS)
                || name.ends_with(CLASS_STORAGE)
        }
        _ => false,
    }
}

/// The suffixes of a claim's per-class quota names (`<class>.storageclass.storage.k8s.io/…`).
const CLASS_CLAIMS: &str = ".storageclass.storage.k8s.io/persistentvolumeclaims";
const CLASS_STORAGE: &str = ".storageclass.storage.k8s.io/requests.storage";

/// A claim's class for quota: the beta annotation, else `storageClassName`; empty for none.
fn claim_class(claim: &Value) -> &str {
    claim
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .or_else(|| claim.pointer("/spec/storageClassName"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A storage quantity rounded up to a whole byte.
fn whole_bytes(v: Option<&Value>) -> Option<Quantity> {
    let s = v?.as_str()?;
    let q = Quantity::parse(s)?;
    if q.is_whole() {
        Some(q)
    } else {
        crate::quantity::value(s).map(Quantity::count)
    }
}

/// What a claim holds: itself, and its storage request or, when a resize is under way, what was
/// allocated, if more (upstream's evaluator with RecoverVolumeExpansionFailure on, as in 1.32).
fn claim_usage(claim: &Value, out: &mut ResourceList) {
    out.insert("persistentvolumeclaims".into(), Quantity::count(1));
    let class = claim_class(claim);
    if !class.is_empty() {
        out.insert(format!("{class}{CLASS_CLAIMS}"), Quantity::count(1));
    }
    let requested = whole_bytes(claim.pointer("/spec/resources/requests/storage"));
    let allocated = whole_bytes(claim.pointer("/status/allocatedResources/storage"));
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) if a.milli() > r.milli() => Some(a),
        (Some(r), _) => Some(r),
        (None, a) => a,
    };
    if let Some(q) = storage {
        out.insert("requests.storage".into(), q);
        if !class.is_empty() {
            out.insert(format!("{class}{CLASS_STORAGE}"), q);
        }
    }
}

/// A resource name outside Kubernetes' own (`example.com/gpu`), counted only as `requests.<name>`.
fn extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// What `obj` (of `group`/`plural`) consumes; `now` is the Unix time in seconds (a pod whose deletion
/// grace period has run out no longer counts).
pub fn of(group: &str, plural: &str, obj: &Value, now: i64) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert(count_name(group, plural), Quantity::count(1));
    match (group, plural) {
        ("", "pods") if counts_compute(obj, now) => {
            out = add(&out, &pod_compute(obj));
        }
        ("", "services") => {
            out.insert("services".into(), Quantity::count(1));
            let spec = obj.get("spec");
            let kind = spec
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP");
            let ports = spec
                .and_then(|s| s.get("ports"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            match kind {
                "NodePort" => {
                    out.insert("services.nodeports".into(), count(ports.len()));
                }
                "LoadBalancer" => {
                    out.insert("services.loadbalancers".into(), Quantity::count(1));
                    let allocate = spec
                        .and_then(|s| s.get("allocateLoadBalancerNodePorts"))
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    let n = if allocate {
                        ports.len()
                    } else {
                        ports.iter().filter(|p| p.get("nodePort").is_some()).count()
                    };
                    out.insert("services.nodeports".into(), count(n));
                }
                _ => {}
            }
        }
        ("", "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas") => {
            out.insert(plural.to_string(), Quantity::count(1));
        }
        ("", "persistentvolumeclaims") => claim_usage(obj, &mut out),
        _ => {}
    }
    out
}

fn count(n: usize) -> Quantity {
    Quantity::count(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Whether a pod still holds its compute quota: not finished, and not past its deletion grace period.
pub fn counts_compute(pod: &Value, now: i64) -> bool {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    let deleted = pod
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    match (deleted, grace) {
        (Some(at), Some(grace)) => now <= at.as_second().saturating_add(grace),
        _ => true,
    }
}

/// The containers' requests or limits (`field`), upstream's pod sum: the containers and sidecars
/// together, or the largest init step if that is more, plus the pod's overhead.
pub fn pod_total(pod: &Value, field: &str) -> ResourceList {
    let spec = pod.get("spec");
    let list = |c: &Value| from_value(c.get("resources").and_then(|r| r.get(field)));
    let containers = |key: &str| {
        spec.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut total = ResourceList::new();
    for c in containers("containers") {
        total = add(&total, &list(&c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in containers("initContainers") {
        let own = list(&c);
        let sidecar = c.get("restartPolicy").and_then(Value::as_str) == Some("Always");
        let step = if sidecar {
            total = add(&total, &own);
            sidecars = add(&sidecars, &own);
            sidecars.clone()
        } else {
            add(&own, &sidecars)
        };
        init_peak = max(&init_peak, &step);
    }
    total = max(&total, &init_peak);
    add(&total, &from_value(spec.and_then(|s| s.get("overhead"))))
}

/// A pod's compute usage: `pods` and its requests and limits under quota's names.
fn pod_compute(pod: &Value) -> ResourceList {
    let mut out = compute_names(&pod_total(pod, "requests"), &pod_total(pod, "limits"));
    out.insert("pods".into(), Quantity::count(1));
    out
}

/// Requests and limits under the names quota tracks them by (`cpu` and `requests.cpu` for a cpu request).
pub fn compute_names(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for base in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(base) {
            out.insert(base.to_string(), *q);
            out.insert(format!("requests.{base}"), *q);
        }
        if let Some(q) = limits.get(base) {
            out.insert(format!("limits.{base}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            out.insert(name.clone(), *q);
            out.insert(format!("requests.{name}"), *q);
        } else if extended(name) {
            out.insert(format!("requests.{name}"), *q);
        }
    }
    out
}

/// Whether a pod is BestEffort: no container asks for or is limited in cpu or memory.
pub fn best_effort(pod: &Value) -> bool {
    let spec = pod.get("spec");
    let all = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|k| {
            spec.and_then(|s| s.get(k))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect::<Vec<_>>();
    !all.iter().any(|c| {
        ["requests", "limits"].into_iter().any(|f| {
            let l = from_value(c.get("resources").and_then(|r| r.get(f)));
            ["cpu", "memory"]
                .into_iter()
                .any(|r| l.get(r).is_some_and(|q| !q.is_zero()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::list::pretty;
    use serde_json::json;

    #[test]
    fn pods_count_compute_until_finished() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "300m"}}}
            ],
            "initContainers": [
                {"name": "i", "resources": {"requests": {"cpu": "1"}}},
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}
            ]
        }});
        assert_eq!(
            pretty(&of("", "pods", &pod, 0)),
            "count/pods=1,cpu=1,limits.cpu=200m,memory=64Mi,pods=1,requests.cpu=1,requests.memory=64Mi"
        );
        let mut done = pod.clone();
        done["status"] = json!({"phase": "Succeeded"});
        assert_eq!(pretty(&of("", "pods", &done, 0)), "count/pods=1");
        let mut deleting = pod.clone();
        deleting["metadata"] =
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30});
        let at = "2026-01-01T00:00:00Z"
            .parse::<jiff::Timestamp>()
            .expect("ts")
            .as_second();
        assert!(counts_compute(&deleting, at + 30));
        assert!(!counts_compute(&deleting, at + 31));
        assert!(!best_effort(&pod));
        assert!(best_effort(
            &json!({"spec": {"containers": [{"name": "x"}]}})
        ));
    }

    #[test]
    fn services_and_legacy_names() {
        let lb = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}});
        assert_eq!(
            pretty(&of("", "services", &lb, 0)),
            "count/services=1,services=1,services.loadbalancers=1,services.nodeports=2"
        );
        assert_eq!(
            pretty(&of("", "configmaps", &json!({}), 0)),
            "configmaps=1,count/configmaps=1"
        );
        assert_eq!(
            pretty(&of("apps", "deployments", &json!({}), 0)),
            "count/deployments.apps=1"
        );
        let claim = json!({"spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"allocatedResources": {"storage": "2Gi"}}});
        assert_eq!(
            pretty(&of("", "persistentvolumeclaims", &claim, 0)),
            "count/persistentvolumeclaims=1,fast.storageclass.storage.k8s.io/persistentvolumeclaims=1,fast.storageclass.storage.k8s.io/requests.storage=2Gi,persistentvolumeclaims=1,requests.storage=2Gi"
        );
        assert!(tracks(
            "",
            "persistentvolumeclaims",
            "gold.storageclass.storage.k8s.io/requests.storage"
        ));
        assert!(tracks("", "pods", "requests.example.com/gpu"));
        assert!(tracks("apps", "deployments", "count/deployments.apps"));
        assert!(!tracks("", "secrets", "configmaps"));
    }
}
