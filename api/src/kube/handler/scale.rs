//! The `/scale` subresource: an `autoscaling/v1` Scale view of `spec.replicas`, `status.replicas` and the
//! selector, for deployments, replicasets and statefulsets (`kubectl scale`).

use axum::response::Response;
use serde_json::{json, Value};

use super::read::respond_object;
use super::write::{apply_patch, guaranteed_update, Updated};
use super::Call;
use crate::kube::apply::managed::Owner;
use crate::kube::body::{self, media_type};
use crate::kube::object::{self, path};
use crate::kube::selector::LabelSelector;
use crate::kube::status::{ApiError, Cause, Target};

/// The Scale view of a workload.
pub fn scale_of(obj: &Value) -> Value {
    let selector = path(obj, "spec.selector")
        .map(|s| LabelSelector::from_object(s).to_query())
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": object::name(obj),
            "namespace": object::namespace(obj),
            "uid": object::uid(obj),
            "resourceVersion": object::meta_str(obj, "resourceVersion"),
            "creationTimestamp": object::meta_str(obj, "creationTimestamp"),
        },
        "spec": {"replicas": path(obj, "spec.replicas").and_then(Value::as_i64).unwrap_or(0)},
        "status": {
            "replicas": path(obj, "status.replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector,
        },
    })
}

/// GET `/scale`.
pub async fn get(call: Call) -> Result<Response, ApiError> {
    let st = call
        .state
        .storage
        .get(&call.key(), true)
        .await?
        .ok_or_else(|| ApiError::NotFound(call.target()))?;
    respond_object(&call, scale_of(&st.object))
}

fn replicas_of(call: &Call, scale: &Value) -> Result<i64, ApiError> {
    let r = path(scale, "spec.replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if r < 0 {
        return Err(ApiError::Invalid {
            target: Target::new("autoscaling", "Scale", call.name()),
            causes: vec![Cause::invalid(
                "spec.replicas",
                &json!(r),
                "must be greater than or equal to 0",
            )],
        });
    }
    Ok(r)
}

async fn write(
    call: &Call,
    scale_fn: impl Fn(&Value) -> Result<(Value, Option<String>), ApiError>,
) -> Result<Response, ApiError> {
    let dry_run = call.params.dry_run()?;
    let u = guaranteed_update(call, dry_run, |cur| {
        let (scale, rv) = scale_fn(&scale_of(&cur.object))?;
        let replicas = replicas_of(call, &scale)?;
        let mut obj = cur.object.clone();
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("replicas".into(), json!(replicas));
        }
        Ok((obj, rv))
    })
    .await?;
    let obj = match u {
        Updated::Object(o) | Updated::Deleted(o) => o,
    };
    respond_object(call, scale_of(&obj))
}

/// PUT `/scale` (kubectl sends it without a Content-Type; that means JSON).
pub async fn update(call: Call) -> Result<Response, ApiError> {
    let scale = body::decode(&call.headers, &call.body)?;
    let rv = object::resource_version(&scale).map(str::to_string);
    write(&call, |_| Ok((scale.clone(), rv.clone()))).await
}

/// PATCH `/scale` with `application/apply-patch+yaml`: an autoscaling/v1 Scale whose `spec.replicas` the
/// manager applies to the parent (owned with `subresource: scale`).
async fn apply(call: Call) -> Result<Response, ApiError> {
    let (manager, force) = super::apply::options(&call)?;
    let scale: Value = serde_yaml_ng::from_slice(&call.body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    let av = scale
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = scale.get("kind").and_then(Value::as_str).unwrap_or("");
    if av != "autoscaling/v1" || kind != "Scale" {
        return Err(ApiError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {av}, expected: autoscaling/v1"
        )));
    }
    if object::name(&scale) != call.name() {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            object::name(&scale),
            call.name()
        )));
    }
    let def = call.route.def;
    let mut parent = json!({"apiVersion": def.api_version(), "kind": def.kind,
                            "metadata": {"name": call.name()}});
    if let Some(r) = path(&scale, "spec.replicas") {
        replicas_of(&call, &scale)?;
        parent["spec"] = json!({"replicas": r});
    }
    let owner = Owner {
        manager,
        api_version: def.api_version(),
        subresource: "scale".into(),
    };
    let obj = match super::apply::apply_to_parent(&call, &parent, &owner, force).await? {
        Updated::Object(o) | Updated::Deleted(o) => o,
    };
    respond_object(&call, scale_of(&obj))
}

/// PATCH `/scale` (merge or JSON patch of the Scale object, or an apply).
pub async fn patch(call: Call) -> Result<Response, ApiError> {
    let ct = media_type(call.headers.get(axum::http::header::CONTENT_TYPE));
    if ct == super::apply::CONTENT_TYPE {
        return apply(call).await;
    }
    let def = call.route.def;
    let body = call.body.clone();
    write(&call, |current| {
        let patched = apply_patch(&ct, current.clone(), &body, def)?;
        let rv = object::resource_version(&patched)
            .filter(|rv| *rv != object::meta_str(current, "resourceVersion"))
            .map(str::to_string);
        Ok((patched, rv))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_view() {
        let d = json!({"metadata": {"name": "web", "namespace": "d", "resourceVersion": "7"},
                       "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
                       "status": {"replicas": 2}});
        let s = scale_of(&d);
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["status"]["selector"], "app=web");
        assert_eq!(s["metadata"]["resourceVersion"], "7");
    }
}
