//! The `/scale` subresource: an `autoscaling/v1` Scale view of `spec.replicas`, `status.replicas` and the
//! selector, for deployments, replicasets and statefulsets (`kubectl scale`), and for custom resources
//! at the paths their CRD names (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`; see the
//! strategy's `scale_paths`).

use axum::response::Response;
use serde_json::{json, Value};

use super::read::respond_object;
use super::write::{apply_patch, guaranteed_update, Updated};
use super::Call;
use crate::apply::managed::Owner;
use crate::body::{self, media_type};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::selector::LabelSelector;
use crate::status::{ApiError, Cause, Target};
use crate::strategy::{self, ScalePaths, SelectorForm};

/// Where a resource keeps its replicas and selector: its strategy's.
fn paths_of(def: &ResourceDef) -> ScalePaths {
    strategy::of(def).scale_paths(def)
}

/// Sets a dotted path, creating the objects on the way.
fn set_path(obj: &mut Value, dotted: &str, v: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = dotted.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        let Some(m) = cur.as_object_mut() else { return };
        if i + 1 == parts.len() {
            m.insert((*p).to_string(), v);
            return;
        }
        cur = m.entry((*p).to_string()).or_insert_with(|| json!({}));
    }
}

/// The Scale view of a workload.
pub fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let p = paths_of(def);
    let selector = match (&p.selector, p.selector_form) {
        (Some(sp), SelectorForm::Text) => path(obj, sp)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        (Some(sp), SelectorForm::Map) => path(obj, sp)
            .map(|m| LabelSelector::from_map(m).to_query())
            .unwrap_or_default(),
        (Some(sp), SelectorForm::Object) => path(obj, sp)
            .map(|s| LabelSelector::from_object(s).to_query())
            .unwrap_or_default(),
        (None, _) => String::new(),
    };
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
        "spec": {"replicas": path(obj, &p.spec).and_then(Value::as_i64).unwrap_or(0)},
        "status": {
            "replicas": path(obj, &p.status).and_then(Value::as_i64).unwrap_or(0),
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
    respond_object(&call, scale_of(&call.route.def, &st.object))
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
        let (scale, rv) = scale_fn(&scale_of(&call.route.def, &cur.object))?;
        let replicas = replicas_of(call, &scale)?;
        let mut obj = cur.object.clone();
        let spec_path = paths_of(&call.route.def).spec;
        set_path(&mut obj, &spec_path, json!(replicas));
        Ok((obj, rv))
    })
    .await?;
    let obj = match u {
        Updated::Object(o) | Updated::Deleted(o) => o,
    };
    respond_object(call, scale_of(&call.route.def, &obj))
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
    let def = &call.route.def;
    let mut parent = json!({"apiVersion": def.api_version(), "kind": def.kind,
                            "metadata": {"name": call.name()}});
    if let Some(r) = path(&scale, "spec.replicas") {
        replicas_of(&call, &scale)?;
        // Custom resources keep replicas where their CRD's specReplicasPath says.
        set_path(&mut parent, &paths_of(def).spec, r.clone());
    }
    let owner = Owner {
        manager,
        api_version: def.api_version(),
        subresource: "scale".into(),
    };
    let obj = match super::apply::apply_to_parent(&call, &parent, &owner, force).await? {
        Updated::Object(o) | Updated::Deleted(o) => o,
    };
    respond_object(&call, scale_of(def, &obj))
}

/// PATCH `/scale` (merge or JSON patch of the Scale object, or an apply).
pub async fn patch(call: Call) -> Result<Response, ApiError> {
    let ct = media_type(call.headers.get(axum::http::header::CONTENT_TYPE));
    if ct == super::apply::CONTENT_TYPE {
        return apply(call).await;
    }
    let def = &call.route.def;
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
        let def = crate::resource::find("apps", "v1", "deployments").expect("deploy");
        let s = scale_of(&def, &d);
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["status"]["selector"], "app=web");
        assert_eq!(s["metadata"]["resourceVersion"], "7");
    }
}
