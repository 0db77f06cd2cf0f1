//! POST (create), PUT (update, `/status`, `/finalize`) and PATCH (JSON patch, merge patch): admission
//! (defaulting, the Priority plugin, validation), optimistic concurrency on the key's mod revision,
//! server-owned metadata. What differs by kind
//! (status resets, generation bumps, allocations, subresource rules) is the kind's strategy's.

use axum::http::StatusCode;
use axum::response::Response;
use keel_kube_registry::generic::{self, Admission, Admitted, Step, Write};
use serde_json::{json, Value};

use super::read::respond_object;
use super::Call;
use crate::admission::chain;
use crate::apply::managed::Owner;
use crate::body::{self, media_type};
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Target};
use crate::storage::Stored;
use crate::validation::validate;
use crate::{convert, strategy};

pub use generic::{Tracking, Updated};

/// Checks `apiVersion`/`kind` of a body against the URL (missing ones are filled in).
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    let want_av = def.api_version();
    let av = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !kind.is_empty() && kind != def.kind {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind:?}) does not match the expected kind ({:?})",
            def.kind
        )));
    }
    if !av.is_empty() && av != want_av {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({want_av})"
        )));
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(want_av));
        m.insert("kind".into(), json!(def.kind));
    }
    Ok(())
}

/// Drops unknown fields as upstream's decoder does; `fieldValidation=Strict` refuses them, `Warn` (the
/// default) returns one warning per field.
pub fn field_validation(
    call: &Call,
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    field_validation_with(call, def, obj, &[])
}

/// [`field_validation`] for a JSON body: duplicate keys count as problems too.
fn field_validation_body(
    call: &Call,
    def: &ResourceDef,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    let ct = media_type(call.headers.get(axum::http::header::CONTENT_TYPE));
    let dups = if matches!(ct.as_str(), "" | "application/json") {
        crate::validation::prune::duplicate_fields(&call.body)
    } else {
        Vec::new()
    };
    field_validation_with(call, def, obj, &dups)
}

fn field_validation_with(
    call: &Call,
    def: &ResourceDef,
    obj: &mut Value,
    duplicates: &[String],
) -> Result<Vec<String>, ApiError> {
    let mode = call.params.get("fieldValidation").unwrap_or("Warn");
    if !["Strict", "Warn", "Ignore"].contains(&mode) {
        return Err(ApiError::BadRequest(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    let unknown = strategy::of(def).prune_unknown(def, obj);
    let mut msgs: Vec<String> = duplicates
        .iter()
        .map(|f| format!("duplicate field \"{f}\""))
        .collect();
    msgs.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
    match mode {
        "Strict" if !msgs.is_empty() => Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            def.kind,
            def.version,
            def.kind,
            msgs.join(", ")
        ))),
        "Warn" => Ok(msgs),
        _ => Ok(Vec::new()),
    }
}

/// Adds `Warning: 299 - "..."` headers, as kubectl prints them.
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

/// Decodes and type-checks a create/update body (still in the requested version: the caller converts it
/// once, through `versions::stored`), with its warnings.
fn incoming(call: &Call) -> Result<(Value, Vec<String>), ApiError> {
    let def = &call.route.def;
    let mut obj = body::decode(&call.headers, &call.body)?;
    check_type(def, &mut obj)?;
    let warnings = field_validation_body(call, def, &mut obj)?;
    validate::shape(def, &mut obj)?;
    let body_ns = object::namespace(&obj).to_string();
    match call.ns() {
        Some(ns) => {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            object::meta_mut(&mut obj).insert("namespace".into(), json!(ns));
        }
        None => {
            object::meta_mut(&mut obj).remove("namespace");
        }
    }
    Ok((obj, warnings))
}

/// The field manager of a non-apply write: `fieldManager`, else the User-Agent up to its first `/`.
/// `options` names the options kind in the 422 (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
pub fn owner(call: &Call, options: &str) -> Result<Owner, ApiError> {
    let name = match call.params.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => {
            check_field_manager(m, options)?;
            m.to_string()
        }
        None => {
            let ua = call
                .headers
                .get(axum::http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let prefix: String = ua
                .split('/')
                .next()
                .unwrap_or("")
                .chars()
                .take(128)
                .collect();
            if prefix.is_empty() {
                "unknown".to_string()
            } else {
                prefix
            }
        }
    };
    Ok(Owner {
        manager: name,
        api_version: call.route.def.api_version(),
        subresource: call.route.subresource.clone().unwrap_or_default(),
    })
}

/// Upstream's limits on `fieldManager`: at most 128 bytes, printable characters only.
pub fn check_field_manager(m: &str, options: &str) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if m.len() > 128 {
        causes.push(crate::status::Cause {
            reason: "FieldValueTooLong",
            message: "Too long: may not be more than 128 bytes".into(),
            field: "fieldManager".into(),
        });
    }
    if let Some((i, c)) = m.char_indices().find(|(_, c)| c.is_control()) {
        causes.push(crate::status::Cause::invalid(
            "fieldManager",
            &json!(m),
            &format!("invalid character U+{:04X} (at position {i})", c as u32),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            target: Target::new("meta.k8s.io", options, ""),
            causes,
        })
    }
}

/// POST: create an object.
pub async fn create(call: Call) -> Result<Response, ApiError> {
    let tracking = Tracking::Update(owner(&call, "CreateOptions")?);
    let (obj, warnings) = incoming(&call)?;
    let obj = super::versions::stored(&call.state, &call.route.def, obj).await?;
    create_object(&call, obj, &warnings, tracking).await
}

/// The admission this server runs on a request's writes (the generic store calls it at its places): the
/// admission chain, and the CSR signer's completion step.
struct Admitting<'a> {
    call: &'a Call,
    /// Warnings of the mutating phase (webhooks), returned with the validating phase's.
    warnings: std::sync::Mutex<Vec<String>>,
}

impl<'c> Admitting<'c> {
    fn new(call: &'c Call) -> Self {
        Admitting {
            call,
            warnings: std::sync::Mutex::default(),
        }
    }

    /// The admission chain's view of the request at one step.
    fn attributes<'a>(&'a self, a: &'a Admitted<'a>) -> chain::Attributes<'a> {
        let state = &self.call.state;
        chain::Attributes {
            write: a,
            storage: &state.storage,
            authz: &state.authz,
            identity: &self.call.identity,
            sa_key: &state.sa_key,
            ca_pem: &state.ca_pem,
            webhooks: &state.webhooks,
            registry: &state.registry,
            warnings: &self.warnings,
        }
    }
}

impl Admission for Admitting<'_> {
    fn mutate<'a>(&'a self, a: &'a Admitted<'a>, obj: &'a mut Value) -> Step<'a, ()> {
        Box::pin(async move { chain::mutate(&self.attributes(a), obj).await })
    }

    fn complete<'a>(&'a self, a: &'a Admitted<'a>, obj: &'a mut Value) -> Step<'a, ()> {
        let state = &self.call.state;
        Box::pin(crate::csr::complete(
            &state.storage,
            &state.authz,
            &self.call.identity,
            (&state.ca_pem, &state.ca_key_pem),
            a,
            obj,
        ))
    }

    fn validate<'a>(&'a self, a: &'a Admitted<'a>, obj: &'a Value) -> Step<'a, Vec<String>> {
        Box::pin(async move {
            let mut warnings =
                std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|e| e.into_inner()));
            warnings.extend(chain::validate(&self.attributes(a), obj).await?);
            Ok(warnings)
        })
    }
}

/// The generic store's view of `call`'s write.
fn write<'a>(call: &'a Call, dry_run: bool, admission: &'a Admitting<'a>) -> Write<'a> {
    Write {
        storage: &call.state.storage,
        def: &call.route.def,
        namespace: call.ns(),
        name: call.name(),
        subresource: call.route.subresource.as_deref(),
        dry_run,
        event_ttl: call.state.event_ttl,
        admission,
    }
}

/// Creates a decoded object (from a POST, a PUT to a missing object, or an apply that creates).
pub async fn create_object(
    call: &Call,
    obj: Value,
    warnings: &[String],
    tracking: Tracking,
) -> Result<Response, ApiError> {
    let dry_run = call.params.dry_run()?;
    let admission = Admitting::new(call);
    let (stored, raised) =
        generic::create(&write(call, dry_run, &admission), obj, tracking).await?;
    let mut warnings = warnings.to_vec();
    warnings.extend(raised);
    let out = super::versions::served_one(&call.state, &call.route.def, stored).await?;
    respond_created(call, out).map(|r| with_warnings(r, &warnings))
}

fn respond_created(call: &Call, obj: Value) -> Result<Response, ApiError> {
    let name = crate::audit::CreatedName(object::name(&obj).to_string());
    let mut r = respond_object(call, obj)?;
    *r.status_mut() = StatusCode::CREATED;
    // A create's URL names no object; the audit log takes the name from here.
    r.extensions_mut().insert(name);
    Ok(r)
}

/// Applies `change` to the current object and writes it, retrying lost races unless the client pinned a
/// resourceVersion. `change` gets the stored object and returns the client's new version of it.
pub async fn guaranteed_update<F>(
    call: &Call,
    dry_run: bool,
    change: F,
) -> Result<Updated, ApiError>
where
    F: FnMut(&Stored) -> Result<(Value, Option<String>), ApiError>,
{
    let tracking = Tracking::Update(owner(call, "UpdateOptions").unwrap_or_else(|_| Owner {
        manager: "unknown".into(),
        api_version: call.route.def.api_version(),
        subresource: call.route.subresource.clone().unwrap_or_default(),
    }));
    guaranteed_update_tracked(call, dry_run, tracking, change).await
}

/// [`guaranteed_update`] with an explicit way of recording field ownership. The warnings validating
/// admission raised wait in the call for the answer.
pub async fn guaranteed_update_tracked<F>(
    call: &Call,
    dry_run: bool,
    tracking: Tracking,
    change: F,
) -> Result<Updated, ApiError>
where
    F: FnMut(&Stored) -> Result<(Value, Option<String>), ApiError>,
{
    let admission = Admitting::new(call);
    let (updated, raised) =
        generic::update(&write(call, dry_run, &admission), tracking, change).await?;
    if !raised.is_empty() {
        let mut kept = call.warnings.lock().unwrap_or_else(|e| e.into_inner());
        for w in raised {
            if !kept.contains(&w) {
                kept.push(w);
            }
        }
    }
    Ok(updated)
}

pub async fn respond_updated(call: &Call, u: Updated) -> Result<Response, ApiError> {
    let obj = match u {
        Updated::Object(o) | Updated::Deleted(o) => o,
    };
    let obj = super::versions::served_one(&call.state, &call.route.def, obj).await?;
    let warnings = std::mem::take(&mut *call.warnings.lock().unwrap_or_else(|e| e.into_inner()));
    respond_object(call, obj).map(|r| with_warnings(r, &warnings))
}

/// PUT: replace an object (or its status, or a namespace's finalizers).
pub async fn update(call: Call) -> Result<Response, ApiError> {
    let tracking = Tracking::Update(owner(&call, "UpdateOptions")?);
    let dry_run = call.params.dry_run()?;
    let (new, warnings) = incoming(&call)?;
    let new = super::versions::stored(&call.state, &call.route.def, new).await?;
    let body_name = object::name(&new).to_string();
    if body_name != call.name() {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            call.name()
        )));
    }
    let client_rv = object::resource_version(&new).map(str::to_string);
    let updated = guaranteed_update_tracked(&call, dry_run, tracking, |_| {
        Ok((new.clone(), client_rv.clone()))
    })
    .await;
    match updated {
        Ok(u) => respond_updated(&call, u)
            .await
            .map(|r| with_warnings(r, &warnings)),
        Err(ApiError::NotFound(_))
            if call.route.def.create_on_update && call.route.subresource.is_none() =>
        {
            let tracking = Tracking::Update(owner(&call, "CreateOptions")?);
            create_object(&call, new, &warnings, tracking).await
        }
        Err(e) => Err(e),
    }
}

/// The patched object in the request's version, the resourceVersion the client pinned (if it differs
/// from the stored one) and the field validation warnings.
fn patched(
    call: &Call,
    ct: &str,
    patch_body: &[u8],
    current: Value,
    stored: &Value,
) -> Result<(Value, Option<String>, Vec<String>), ApiError> {
    let def = &call.route.def;
    let mut patched = apply_patch(ct, current, patch_body, def)?;
    let client_rv = object::resource_version(&patched)
        .filter(|rv| *rv != object::meta_str(stored, "resourceVersion"))
        .map(str::to_string);
    check_type(def, &mut patched)?;
    let warnings = field_validation(call, def, &mut patched)?;
    validate::shape(def, &mut patched)?;
    if object::name(&patched) != object::name(stored) {
        return Err(ApiError::BadRequest(
            "metadata.name: the name of the object cannot be changed by a patch".into(),
        ));
    }
    // A patch that carries a stale resourceVersion is a conflict; otherwise the current one is kept.
    Ok((patched, client_rv, warnings))
}

/// What a PATCH of a CRD converted by webhook returns when the object changed between its conversion
/// and its write: the patch starts again from the new state.
const CONVERTED_STALE: &str = "the object changed while its conversion webhook ran";

/// PATCH of a CRD whose conversion is a webhook: the stored object is converted to the request's
/// version, patched, and converted back before the write, which only goes ahead if nothing changed
/// meanwhile (the webhook is not called inside the store's retry loop).
async fn patch_through_webhook(call: &Call, ct: &str, dry_run: bool) -> Result<Response, ApiError> {
    let def = &call.route.def;
    for _ in 0..8 {
        let cur = call
            .state
            .storage
            .get(&call.key(), true)
            .await?
            .ok_or_else(|| ApiError::NotFound(call.target()))?;
        let current = super::versions::served_one(&call.state, def, cur.object.clone()).await?;
        let (patched, client_rv, warnings) = patched(call, ct, &call.body, current, &cur.object)?;
        let stored = super::versions::stored(&call.state, def, patched).await?;
        let tracking = Tracking::Update(owner(call, "PatchOptions")?);
        let seen = cur.mod_revision;
        let written = guaranteed_update_tracked(call, dry_run, tracking, |now| {
            if now.mod_revision != seen {
                return Err(ApiError::Conflict {
                    target: call.target(),
                    detail: CONVERTED_STALE.into(),
                });
            }
            Ok((stored.clone(), client_rv.clone()))
        })
        .await;
        match written {
            Ok(u) => {
                return respond_updated(call, u)
                    .await
                    .map(|r| with_warnings(r, &warnings))
            }
            Err(ApiError::Conflict { detail, .. }) if detail == CONVERTED_STALE => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::Conflict {
        target: call.target(),
        detail: CONVERTED_STALE.into(),
    })
}

/// PATCH with `application/json-patch+json`, `application/merge-patch+json` or
/// `application/strategic-merge-patch+json` (server-side apply is [`super::apply`]'s).
pub async fn patch(call: Call) -> Result<Response, ApiError> {
    let ct = media_type(call.headers.get(axum::http::header::CONTENT_TYPE));
    if call.params.get("force").is_some() {
        return Err(ApiError::Invalid {
            target: Target::new("meta.k8s.io", "PatchOptions", ""),
            causes: vec![crate::status::Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            )],
        });
    }
    let dry_run = call.params.dry_run()?;
    let def = &call.route.def;
    if super::versions::by_webhook(def).is_some() {
        return patch_through_webhook(&call, &ct, dry_run).await;
    }
    let tracking = Tracking::Update(owner(&call, "PatchOptions")?);
    let patch_body = call.body.clone();
    let mut warnings = Vec::new();
    let u = guaranteed_update_tracked(&call, dry_run, tracking, |cur| {
        let current = convert::from_storage(def, cur.object.clone());
        let (patched, client_rv, w) = patched(&call, &ct, &patch_body, current, &cur.object)?;
        warnings = w;
        Ok((convert::to_storage(def, patched), client_rv))
    })
    .await?;
    respond_updated(&call, u)
        .await
        .map(|r| with_warnings(r, &warnings))
}

/// Applies one patch document of a given media type.
pub fn apply_patch(
    ct: &str,
    mut current: Value,
    body: &[u8],
    def: &ResourceDef,
) -> Result<Value, ApiError> {
    match ct {
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("the server rejected our request due to an error in our request: {e}")))?;
            json_patch::patch(&mut current, &ops).map_err(|e| ApiError::Invalid {
                target: Target::new(&def.group, &def.kind, object::name(&current)),
                causes: vec![crate::status::Cause {
                    reason: "FieldValueInvalid",
                    message: format!("the server rejected our request due to an error in our request: {e}"),
                    field: String::new(),
                }],
            })?;
            Ok(current)
        }
        "application/merge-patch+json" => {
            let p = body::json(body)?;
            if !p.is_object() {
                return Err(ApiError::BadRequest("a merge patch must be a JSON object".into()));
            }
            json_patch::merge(&mut current, &p);
            Ok(current)
        }
        "application/strategic-merge-patch+json" => {
            strategy::of(def).strategic_merge(def, current, body)
        }
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, \
             application/apply-patch+yaml (got {other:?})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn merge_and_json_patches() {
        let def = &resource::find("", "v1", "configmaps").expect("cm");
        let cur = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}});
        let p = apply_patch(
            "application/merge-patch+json",
            cur.clone(),
            br#"{"metadata":{"labels":{"x":null,"y":"2"}}}"#,
            def,
        )
        .expect("merge");
        assert_eq!(p["metadata"]["labels"], json!({"y": "2"}));
        let j = apply_patch(
            "application/json-patch+json",
            cur.clone(),
            br#"[{"op":"replace","path":"/data/k","value":"w"}]"#,
            def,
        )
        .expect("json patch");
        assert_eq!(j["data"]["k"], "w");
        let bad = apply_patch(
            "application/json-patch+json",
            cur,
            br#"[{"op":"test","path":"/data/k","value":"no"}]"#,
            def,
        );
        assert!(matches!(bad, Err(ApiError::Invalid { .. })));
    }
}
