//! POST `pods/{name}/binding` (a `v1` Binding): how a scheduler assigns a pod to a node. The pod's
//! `spec.nodeName` is set by a compare-and-set on the pod's mod revision, only while it is empty, so of two
//! schedulers racing (a leader failover) exactly one wins and the other gets 409. The Binding's annotations
//! are merged into the pod's and the pod's `PodScheduled` condition turns True. As upstream's BindingREST,
//! the write goes straight to storage: no strategy, no managedFields.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::Call;
use crate::body::{self, respond};
use crate::object::{self, path};
use crate::status::{ApiError, Cause, Target};
use crate::storage::WriteOutcome;

/// Tries of the conditional write when the pod changes between read and write.
const RETRIES: usize = 16;

/// What a Binding asks for, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The node the pod goes to (`target.name`).
    pub node: String,
    /// Annotations merged into the pod's.
    pub annotations: Map<String, Value>,
    /// Precondition: the pod's uid, when the Binding names one.
    pub uid: Option<String>,
    /// Precondition: the pod's resourceVersion, when the Binding names one.
    pub resource_version: Option<String>,
}

/// Reads and validates a Binding posted for the pod `name` (upstream's name check, then
/// ValidatePodBinding, whose aggregate error upstream answers as a bare 500).
pub fn parse(obj: &Value, name: &str) -> Result<Binding, ApiError> {
    if object::name(obj) != name {
        return Err(ApiError::BadRequest(
            "name in URL does not match name in Binding object".into(),
        ));
    }
    let kind = path(obj, "target.kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let node = path(obj, "target.name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        causes.push(Cause::not_supported(
            "target.kind",
            &json!(kind),
            &["Node", "<empty>"],
        ));
    }
    if node.is_empty() {
        causes.push(Cause::required("target.name"));
    }
    if !causes.is_empty() {
        let lines: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let message = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        return Err(ApiError::Unknown(message));
    }
    let annotations = path(obj, "metadata.annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let text = |p: &str| {
        path(obj, p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Ok(Binding {
        node: node.to_string(),
        annotations,
        uid: text("metadata.uid"),
        resource_version: text("metadata.resourceVersion"),
    })
}

fn conflict_on(resource: &str, pod: &str, detail: String) -> ApiError {
    ApiError::Conflict {
        target: Target::new("", resource, pod),
        detail,
    }
}

/// The pod as the binding leaves it, or upstream's refusal: a deleting pod, a pod already on a node, a
/// pod still gated, or a failed uid/resourceVersion precondition.
pub fn assign(pod: &Value, binding: &Binding) -> Result<Value, ApiError> {
    let name = object::name(pod);
    if let Some(uid) = &binding.uid {
        if uid != object::uid(pod) {
            return Err(conflict_on(
                "pods",
                name,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    object::uid(pod)
                ),
            ));
        }
    }
    if let Some(rv) = &binding.resource_version {
        let current = object::resource_version(pod).unwrap_or("");
        if rv != current {
            return Err(conflict_on(
                "pods",
                name,
                "the object has been modified; please apply your changes to the latest version and try again".into(),
            ));
        }
    }
    if object::is_deleting(pod) {
        return Err(conflict_on(
            "pods/binding",
            name,
            format!("pod {name} is being deleted, cannot be assigned to a host"),
        ));
    }
    let assigned = path(pod, "spec.nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !assigned.is_empty() {
        return Err(conflict_on(
            "pods/binding",
            name,
            format!("pod {name} is already assigned to node {assigned:?}"),
        ));
    }
    if path(pod, "spec.schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
    {
        return Err(conflict_on(
            "pods/binding",
            name,
            format!("pod {name} has non-empty .spec.schedulingGates"),
        ));
    }
    let mut next = pod.clone();
    let Some(root) = next.as_object_mut() else {
        return Err(ApiError::Internal("malformed Pod".into()));
    };
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if let Some(s) = spec.as_object_mut() {
        s.insert("nodeName".into(), json!(binding.node));
    }
    if !binding.annotations.is_empty() {
        let meta = object::meta_mut(&mut next);
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if !ann.is_object() {
            *ann = json!({});
        }
        if let Some(a) = ann.as_object_mut() {
            for (k, v) in &binding.annotations {
                a.insert(k.clone(), v.clone());
            }
        }
    }
    set_scheduled(&mut next);
    Ok(next)
}

/// Upstream's UpdatePodCondition with `PodScheduled=True`: the condition is replaced (reason and message
/// cleared); its transition time moves only when the status changes.
fn set_scheduled(pod: &mut Value) {
    let Some(root) = pod.as_object_mut() else {
        return;
    };
    let status = root.entry("status").or_insert_with(|| json!({}));
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    let now = object::now_rfc3339();
    let fresh = |since: Value| json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": since});
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        Some(c) => {
            let since = if c.get("status").and_then(Value::as_str) == Some("True") {
                c.get("lastTransitionTime").cloned().unwrap_or(json!(now))
            } else {
                json!(now)
            };
            *c = fresh(since);
        }
        None => list.push(fresh(json!(now))),
    }
}

/// POST `pods/{name}/binding`.
pub async fn bind(call: Call) -> Result<Response, ApiError> {
    let posted = body::decode(&call.headers, &call.body)?;
    let binding = parse(&posted, call.name())?;
    let dry_run = call.params.dry_run()?;
    let key = call.key();
    let target = Target::new("", "pods", call.name());
    for _ in 0..RETRIES {
        let pod = call
            .state
            .storage
            .get(&key, true)
            .await?
            .ok_or_else(|| ApiError::NotFound(target.clone()))?;
        let next = assign(&pod.object, &binding)?;
        if dry_run {
            break;
        }
        match call
            .state
            .storage
            .put_if(&key, &next, pod.mod_revision)
            .await?
        {
            WriteOutcome::Done(_) => {
                return Ok(success());
            }
            WriteOutcome::Lost(_) => continue,
        }
    }
    if dry_run {
        return Ok(success());
    }
    Err(conflict_on(
        "pods/binding",
        call.name(),
        "the pod kept changing; try again".into(),
    ))
}

fn success() -> Response {
    respond(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(name: &str, node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    }

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
               "spec": {"containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/1 nodes are available", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}})
    }

    #[test]
    fn the_name_must_match_the_url() {
        let e = parse(&binding("q", "n1"), "p").unwrap_err();
        assert_eq!(e.status()["code"], 400);
        assert_eq!(
            e.status()["message"],
            "name in URL does not match name in Binding object"
        );
    }

    #[test]
    fn the_target_is_a_named_node() {
        let e = parse(&binding("p", ""), "p").unwrap_err();
        assert_eq!(e.status()["code"], 500);
        assert_eq!(e.status()["message"], "target.name: Required value");
        let mut b = binding("p", "");
        b["target"]["kind"] = json!("Pod");
        let e = parse(&b, "p").unwrap_err();
        assert_eq!(
            e.status()["message"],
            "[target.kind: Unsupported value: \"Pod\": supported values: \"Node\", \"<empty>\", target.name: Required value]"
        );
        assert!(parse(&binding("p", "n1"), "p").is_ok());
    }

    #[test]
    fn binding_sets_the_node_the_annotations_and_the_condition() {
        let mut b = binding("p", "n1");
        b["metadata"]["annotations"] = json!({"why": "fits"});
        let out = assign(&pod(), &parse(&b, "p").unwrap()).unwrap();
        assert_eq!(out["spec"]["nodeName"], "n1");
        assert_eq!(out["metadata"]["annotations"]["why"], "fits");
        let conds = out["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0]["status"], "True");
        assert!(conds[0].get("reason").is_none());
        assert_ne!(conds[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }

    #[test]
    fn a_bound_pod_is_not_bound_again() {
        let mut p = pod();
        p["spec"]["nodeName"] = json!("n2");
        let e = assign(&p, &parse(&binding("p", "n1"), "p").unwrap()).unwrap_err();
        let s = e.status();
        assert_eq!(s["code"], 409);
        assert_eq!(s["reason"], "Conflict");
        assert_eq!(
            s["message"],
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n2\""
        );
    }

    #[test]
    fn deleting_gated_and_stale_pods_are_refused() {
        let b = parse(&binding("p", "n1"), "p").unwrap();
        let mut p = pod();
        p["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
        assert_eq!(
            assign(&p, &b).unwrap_err().status()["message"],
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is being deleted, cannot be assigned to a host"
        );
        let mut p = pod();
        p["spec"]["schedulingGates"] = json!([{"name": "wait"}]);
        assert_eq!(assign(&p, &b).unwrap_err().status()["code"], 409);
        let mut stale = binding("p", "n1");
        stale["metadata"]["uid"] = json!("other");
        let e = assign(&pod(), &parse(&stale, "p").unwrap()).unwrap_err();
        assert_eq!(e.status()["code"], 409);
    }
}
