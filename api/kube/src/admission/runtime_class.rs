//! The RuntimeClass plugin: a new pod naming a RuntimeClass must name one that exists; it takes the
//! class's fixed overhead and its scheduling constraints (node selector, tolerations), and a pod that
//! declares an overhead must declare the class's.

use serde_json::{json, Map, Value};

use crate::object::path;
use crate::status::{ApiError, Target};
use crate::storage::Storage;

fn refuse(name: &str, why: &str) -> ApiError {
    ApiError::Forbidden {
        target: Target::new("", "pods", name),
        message: format!("pods {name:?} is forbidden: {why}"),
    }
}

fn class_name(pod: &Value) -> Option<&str> {
    path(pod, "spec.runtimeClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

async fn class(storage: &Storage, pod_name: &str, name: &str) -> Result<Value, ApiError> {
    match storage
        .get(&format!("/registry/runtimeclasses/{name}"), false)
        .await?
    {
        Some(st) => Ok(st.object),
        None => Err(refuse(
            pod_name,
            &format!("pod rejected: RuntimeClass {name:?} not found"),
        )),
    }
}

fn non_empty(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object).filter(|m| !m.is_empty())
}

/// Mutating: the class's overhead and scheduling constraints onto a new pod.
pub async fn admit_create(storage: &Storage, name: &str, pod: &mut Value) -> Result<(), ApiError> {
    let Some(rc) = class_name(pod).map(str::to_string) else {
        return Ok(());
    };
    let class = class(storage, name, &rc).await?;
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(fixed) = non_empty(path(&class, "overhead.podFixed")) {
        match non_empty(spec.get("overhead")) {
            Some(have) if have != fixed => {
                return Err(refuse(
                    name,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
                ))
            }
            _ => {
                spec.insert("overhead".into(), Value::Object(fixed.clone()));
            }
        }
    }
    if let Some(sel) = non_empty(path(&class, "scheduling.nodeSelector")) {
        let pod_sel = spec.entry("nodeSelector").or_insert_with(|| json!({}));
        if let Some(pod_sel) = pod_sel.as_object_mut() {
            for (k, v) in sel {
                match pod_sel.get(k) {
                    Some(have) if have != v => {
                        return Err(refuse(
                            name,
                            &format!(
                                "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                                v.as_str().unwrap_or(""),
                                have.as_str().unwrap_or("")
                            ),
                        ))
                    }
                    _ => {
                        pod_sel.insert(k.clone(), v.clone());
                    }
                }
            }
        }
    }
    if let Some(tols) = path(&class, "scheduling.tolerations").and_then(Value::as_array) {
        let list = spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            for t in tols {
                if !list.contains(t) {
                    list.push(t.clone());
                }
            }
        }
    }
    Ok(())
}

/// Validating: a pod that declares an overhead declares its class's.
pub async fn validate_create(storage: &Storage, name: &str, pod: &Value) -> Result<(), ApiError> {
    let Some(have) = non_empty(path(pod, "spec.overhead")) else {
        return Ok(());
    };
    let fixed = match class_name(pod) {
        Some(rc) => {
            let class = class(storage, name, rc).await?;
            non_empty(path(&class, "overhead.podFixed")).cloned()
        }
        None => None,
    };
    match fixed {
        None => Err(refuse(
            name,
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        )),
        Some(f) if &f != have => Err(refuse(
            name,
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        )),
        Some(_) => Ok(()),
    }
}
