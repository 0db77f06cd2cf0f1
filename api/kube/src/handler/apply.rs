//! Server-side apply: PATCH with `application/apply-patch+yaml`. The configuration (YAML or JSON) is merged
//! into the live object for its field manager, then stored through the ordinary update path (defaulting,
//! validation, optimistic write); a missing object is created.

use axum::response::Response;
use serde_json::{json, Value};

use super::write::{
    check_field_manager, create_object, field_validation, guaranteed_update_tracked,
    respond_updated, with_warnings, Tracking, Updated,
};
use super::Call;
use crate::apply::diff;
use crate::apply::fieldset::FieldSet;
use crate::apply::managed::{self, ApplyOptions, Conflict, Owner};
use crate::apply::shape::Shape;
use crate::convert::storage_def;
use crate::status::{ApiError, Cause, Target};
use crate::validation::validate;
use crate::{convert, object};

/// The media type of an apply request.
pub const CONTENT_TYPE: &str = "application/apply-patch+yaml";

fn options_error(cause: Cause) -> ApiError {
    ApiError::Invalid {
        target: Target::new("meta.k8s.io", "PatchOptions", ""),
        causes: vec![cause],
    }
}

/// Client-side apply's annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager name whose applies take over from client-side apply, as upstream.
const KUBECTL: &str = "kubectl";

fn last_applied(obj: &Value) -> Option<&str> {
    object::path(obj, "metadata.annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Fields client-side apply last set that still hold the values it set: `kubectl apply --server-side` may
/// take them over without a conflict (upstream's upgrade path from client-side apply).
fn upgradable(live: &Value, shape: Shape) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(last_applied(live)?).ok()?;
    let set = diff::owned(&last, shape);
    let changed = diff::compare(&last, live, shape).changed;
    Some(set.difference(&changed))
}

/// Keeps client-side apply's annotation in step with what `kubectl` applies server-side.
fn sync_last_applied(merged: &mut Value, config: &Value) {
    let mut cfg = config.clone();
    if let Some(a) = object::meta_mut(&mut cfg)
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    let text = format!("{}\n", cfg);
    let meta = object::meta_mut(merged);
    let ann = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(a) = ann.as_object_mut() {
        a.insert(LAST_APPLIED.into(), Value::String(text));
    }
}

/// The 409 for conflicts with other managers.
fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    ApiError::ApplyConflict {
        message: managed::conflict_message(conflicts),
        causes: conflicts
            .iter()
            .map(|c| Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with {}", c.manager),
                field: c.path.clone(),
            })
            .collect(),
    }
}

/// Reads and checks the applied configuration against the URL.
fn configuration(call: &Call) -> Result<(Value, Vec<String>), ApiError> {
    let def = &call.route.def;
    let mut config: Value = serde_yaml_ng::from_slice(&call.body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    if !config.is_object() {
        return Err(ApiError::BadRequest(
            "error decoding YAML: the apply configuration is not an object".into(),
        ));
    }
    let av = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if av != def.api_version() {
        return Err(ApiError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {av}, expected: {}",
            def.api_version()
        )));
    }
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != def.kind {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind:?}) does not match the expected kind ({:?})",
            def.kind
        )));
    }
    if object::path(&config, "metadata.managedFields").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let name = object::name(&config);
    if name != call.name() {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            call.name()
        )));
    }
    let ns = object::namespace(&config);
    match call.ns() {
        Some(want) if !ns.is_empty() && ns != want => return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
        Some(want) => {
            object::meta_mut(&mut config).insert("namespace".into(), json!(want));
        }
        None => {
            object::meta_mut(&mut config).remove("namespace");
        }
    }
    let warnings = field_validation(call, def, &mut config)?;
    validate::shape(def, &mut config)?;
    Ok((convert::to_storage(def, config), warnings))
}

/// The apply options: `fieldManager` (required) and `force`.
pub fn options(call: &Call) -> Result<(String, bool), ApiError> {
    let manager = call.params.get("fieldManager").unwrap_or("");
    if manager.is_empty() {
        return Err(options_error(Cause {
            reason: "FieldValueRequired",
            message: "Required value: is required for apply patch".into(),
            field: "fieldManager".into(),
        }));
    }
    check_field_manager(manager, "PatchOptions")?;
    let force = call.params.flag("force");
    Ok((manager.to_string(), force))
}

/// Applies a configuration of the parent object for `owner` (the `/scale` subresource applies its
/// `spec.replicas` this way); the caller writes nothing when the object is missing.
pub async fn apply_to_parent(
    call: &Call,
    config: &Value,
    owner: &Owner,
    force: bool,
) -> Result<Updated, ApiError> {
    let dry_run = call.params.dry_run()?;
    let sdef = storage_def(&call.route.def);
    let shape = Shape::of_kind(&sdef.api_version(), &sdef.kind);
    guaranteed_update_tracked(call, dry_run, Tracking::Applied, |cur| {
        let opts = ApplyOptions {
            force,
            has_status: sdef.status,
            allowed: None,
        };
        let merged = managed::apply(&cur.object, config, shape, owner, opts)
            .map_err(|c| conflict_error(&c))?;
        Ok((merged, None))
    })
    .await
}

/// PATCH `application/apply-patch+yaml`.
pub async fn apply(call: Call) -> Result<Response, ApiError> {
    if super::versions::written_through_webhook(&call.route.def) {
        let def = &call.route.def;
        let storage_version = def
            .custom
            .as_ref()
            .map(|c| c.storage_version.clone())
            .unwrap_or_default();
        return Err(ApiError::BadRequest(format!(
            "server-side apply of {} in {} is not supported yet: its objects are stored in {storage_version} through a conversion webhook; apply in {storage_version}, or use a client-side apply or patch",
            def.qualified(),
            def.version
        )));
    }
    let (manager, force) = options(&call)?;
    let manager = manager.as_str();
    let dry_run = call.params.dry_run()?;
    let (config, warnings) = configuration(&call)?;
    let sdef = storage_def(&call.route.def);
    let shape = Shape::of_kind(&sdef.api_version(), &sdef.kind);
    let owner = Owner {
        manager: manager.to_string(),
        api_version: call.route.def.api_version(),
        subresource: call.route.subresource.clone().unwrap_or_default(),
    };
    let client_rv = object::resource_version(&config).map(str::to_string);
    tracing::debug!(manager, force, object = call.name(), "server-side apply");
    let updated = guaranteed_update_tracked(&call, dry_run, Tracking::Applied, |cur| {
        let kubectl_upgrade = manager == KUBECTL && last_applied(&cur.object).is_some();
        let allowed = if kubectl_upgrade {
            upgradable(&cur.object, shape)
        } else {
            None
        };
        let opts = ApplyOptions {
            force,
            has_status: sdef.status,
            allowed: allowed.as_ref(),
        };
        let mut merged = managed::apply(&cur.object, &config, shape, &owner, opts)
            .map_err(|c| conflict_error(&c))?;
        if kubectl_upgrade {
            sync_last_applied(&mut merged, &config);
        }
        Ok((merged, client_rv.clone()))
    })
    .await;
    match updated {
        Ok(u) => respond_updated(&call, u)
            .await
            .map(|r| with_warnings(r, &warnings)),
        Err(ApiError::NotFound(_)) if call.route.subresource.is_none() && client_rv.is_none() => {
            let opts = ApplyOptions {
                force,
                has_status: sdef.status,
                allowed: None,
            };
            let created = managed::apply(&json!({}), &config, shape, &owner, opts)
                .map_err(|c| conflict_error(&c))?;
            create_object(&call, created, &warnings, Tracking::Applied).await
        }
        Err(e) => Err(e),
    }
}
