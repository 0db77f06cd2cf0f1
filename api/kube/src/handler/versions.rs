//! Objects of CRDs whose conversion strategy is `Webhook`, between their stored version and the one a
//! request names: reads convert what is stored in another version through the webhook (one review for a
//! whole list), writes convert what the client sent to the storage version. Every other kind converts in
//! the registry alone (`convert`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookConversion;
use serde_json::Value;

use super::KubeState;
use crate::convert;
use crate::resource::ResourceDef;
use crate::status::ApiError;

/// The CRD's conversion webhook, if `def` is served through one.
pub fn by_webhook(def: &ResourceDef) -> Option<&WebhookConversion> {
    def.custom.as_ref()?.conversion_webhook.as_ref()
}

/// Stored objects as `def` serves them.
pub async fn served(
    state: &KubeState,
    def: &ResourceDef,
    mut objs: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    if let Some(w) = by_webhook(def) {
        let want = def.api_version();
        let other: Vec<usize> = objs
            .iter()
            .enumerate()
            .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(want.as_str()))
            .map(|(i, _)| i)
            .collect();
        if !other.is_empty() {
            let sent = other.iter().map(|&i| objs[i].clone()).collect();
            let converted = state
                .webhooks
                .convert(&state.storage, w, sent, &want)
                .await?;
            for (i, c) in other.into_iter().zip(converted) {
                objs[i] = c;
            }
        }
    }
    Ok(objs
        .into_iter()
        .map(|o| convert::from_storage(def, o))
        .collect())
}

/// One stored object as `def` serves it.
pub async fn served_one(
    state: &KubeState,
    def: &ResourceDef,
    obj: Value,
) -> Result<Value, ApiError> {
    served(state, def, vec![obj])
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
}

/// An object as the client wrote it, in its stored form.
pub async fn stored(state: &KubeState, def: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
    let obj = convert::to_storage(def, obj);
    let (Some(w), Some(c)) = (by_webhook(def), def.custom.as_ref()) else {
        return Ok(obj);
    };
    let want = format!("{}/{}", def.group, c.storage_version);
    if obj.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()) {
        return Ok(obj);
    }
    state
        .webhooks
        .convert(&state.storage, w, vec![obj], &want)
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
}

/// Whether writes of `def` need the webhook to reach the storage version (server-side apply does not
/// take that path yet).
pub fn written_through_webhook(def: &ResourceDef) -> bool {
    match (by_webhook(def), def.custom.as_ref()) {
        (Some(_), Some(c)) => c.storage_version != def.version,
        _ => false,
    }
}
