//! GET of one object and LIST of a collection: resourceVersion semantics, selectors, `limit`/`continue`
//! pages served at one revision, and Table answers for `kubectl get`.

use axum::http::{header, StatusCode};
use axum::response::Response;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{list_item, Call};
use crate::body::{accepts_json, respond, respond_as};
use crate::object;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::storage::{prefix_end, Stored};
use crate::table::{self, IncludeObject};

/// The continue token: the revision every page is read at and the key to resume from.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

fn encode_continue(rv: i64, start: &str) -> String {
    let t = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: start.to_string(),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&t).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<ContinueToken, ApiError> {
    let bad = || {
        ApiError::BadRequest("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into())
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| bad())?;
    let t: ContinueToken = serde_json::from_slice(&raw).map_err(|_| bad())?;
    if t.v != "meta.k8s.io/v1" || t.rv <= 0 || t.start.contains("..") {
        return Err(bad());
    }
    Ok(t)
}

/// The store revision a read must be served at (0 = this member's current state, after any barrier).
pub async fn read_revision(call: &Call) -> Result<i64, ApiError> {
    let rv = call.params.resource_version()?;
    let matching = call
        .params
        .get("resourceVersionMatch")
        .filter(|m| !m.is_empty());
    if matching.is_some() && rv.is_none() {
        return Err(ApiError::BadRequest(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
        ));
    }
    if let Some(m) = matching {
        if !["Exact", "NotOlderThan"].contains(&m) {
            return Err(ApiError::BadRequest(format!(
                "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\""
            )));
        }
    }
    let storage = &call.state.storage;
    match (rv, matching) {
        (None, _) => {
            storage.barrier().await?;
            Ok(0)
        }
        (Some(0), Some("Exact")) => Err(ApiError::BadRequest(
            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"".into(),
        )),
        (Some(0), _) => Ok(0),
        (Some(n), Some("Exact")) => Ok(n),
        (Some(n), _) => {
            if storage.revision() < n {
                storage.barrier().await?;
            }
            if storage.revision() < n {
                return Err(ApiError::Timeout(format!(
                    "Too large resource version: {n}, current: {}",
                    storage.revision()
                )));
            }
            Ok(0)
        }
    }
}

/// GET of one object (also `/status`).
pub async fn get(call: Call) -> Result<Response, ApiError> {
    let consistent = call.params.resource_version()? != Some(0);
    let stored = call
        .state
        .storage
        .get(&call.key(), consistent)
        .await?
        .ok_or_else(|| ApiError::NotFound(call.target()))?;
    let obj = super::versions::served_one(&call.state, &call.route.def, stored.object).await?;
    respond_object(&call, obj)
}

/// Answers one object as JSON or as a one-row Table.
pub fn respond_object(call: &Call, obj: Value) -> Result<Response, ApiError> {
    let accept = header_str(call, header::ACCEPT);
    if table::wants_table(&accept) {
        let include =
            IncludeObject::parse(call.params.get("includeObject")).map_err(ApiError::BadRequest)?;
        let rv = object::meta_str(&obj, "resourceVersion").to_string();
        let t = table::table(
            &call.route.def,
            &[obj],
            json!({"resourceVersion": rv}),
            include,
            true,
        );
        return Ok(respond_as(StatusCode::OK, &t, table::CONTENT_TYPE));
    }
    if !accepts_json(&call.headers) {
        return Err(not_acceptable());
    }
    Ok(respond(StatusCode::OK, &obj))
}

/// The 406 for an Accept header keel cannot satisfy.
pub fn not_acceptable() -> ApiError {
    ApiError::NotAcceptable(
        "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io".into(),
    )
}

/// A header as a string ("" when absent or not text).
pub fn header_str(call: &Call, name: header::HeaderName) -> String {
    call.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The result of a list: items (stored form), revision, continue token, remaining count.
pub struct Listed {
    pub items: Vec<Stored>,
    pub revision: i64,
    pub continue_token: Option<String>,
    pub remaining: Option<i64>,
}

/// Reads a collection with the request's selectors, revision and paging.
pub async fn list_objects(call: &Call) -> Result<Listed, ApiError> {
    let def = &call.route.def;
    let labels = LabelSelector::parse(call.params.get("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let fields = FieldSelector::parse(call.params.get("fieldSelector").unwrap_or(""), def)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let limit = call.params.int("limit")?.unwrap_or(0).max(0);
    let prefix = match call.ns() {
        Some(ns) => def.ns_prefix(ns),
        None => def.prefix(),
    };
    let end = prefix_end(prefix.as_bytes());
    let mut start = prefix.clone().into_bytes();
    let revision;
    if let Some(tok) = call.params.get("continue").filter(|c| !c.is_empty()) {
        let t = decode_continue(tok)?;
        start = format!("{prefix}{}", t.start).into_bytes();
        revision = t.rv;
        if revision < call.state.storage.compact_revision() {
            return Err(ApiError::Expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
            ));
        }
    } else {
        revision = read_revision(call).await?;
    }
    let storage = &call.state.storage;
    let filtered = !labels.is_empty() || !fields.is_empty();
    let mut items = Vec::new();
    let mut at_rev = revision;
    let mut next: Option<Vec<u8>> = None;
    let mut remaining = None;
    loop {
        let batch = if limit > 0 {
            limit.max(if filtered { 500 } else { 0 })
        } else {
            0
        };
        let page = storage.range(&start, &end, at_rev, batch)?;
        at_rev = page.revision;
        let mut last_key: Option<Vec<u8>> = None;
        for (key, st) in page.items {
            last_key = Some(key);
            let obj = &st.object;
            if !labels.matches(object::labels(obj)) || !fields.matches(obj) {
                continue;
            }
            items.push(st);
            if limit > 0 && items.len() as i64 == limit {
                break;
            }
        }
        let stopped_early = limit > 0 && items.len() as i64 == limit;
        if stopped_early || !page.more {
            if stopped_early {
                if let Some(k) = &last_key {
                    let mut after = k.clone();
                    after.push(0);
                    // Is anything left after the last returned key?
                    let probe = storage.range(&after, &end, at_rev, 1)?;
                    if !probe.items.is_empty() {
                        next = Some(after);
                        if !filtered {
                            remaining = Some(probe.remaining + 1);
                        }
                    }
                }
            }
            break;
        }
        match last_key {
            Some(mut k) => {
                k.push(0);
                start = k;
            }
            None => break,
        }
    }
    let continue_token = next.map(|k| {
        let suffix = String::from_utf8_lossy(&k[prefix.len()..]).to_string();
        encode_continue(at_rev, &suffix)
    });
    Ok(Listed {
        items,
        revision: at_rev,
        continue_token,
        remaining,
    })
}

/// LIST of a collection, as a `<Kind>List` or a Table.
pub async fn list(call: Call) -> Result<Response, ApiError> {
    let def = &call.route.def;
    let listed = list_objects(&call).await?;
    let mut meta = json!({"resourceVersion": listed.revision.to_string()});
    if let Some(c) = &listed.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(r) = listed.remaining {
        meta["remainingItemCount"] = json!(r);
    }
    let objects: Vec<Value> = super::versions::served(
        &call.state,
        def,
        listed.items.into_iter().map(|s| s.object).collect(),
    )
    .await?;
    let accept = header_str(&call, header::ACCEPT);
    if table::wants_table(&accept) {
        let include =
            IncludeObject::parse(call.params.get("includeObject")).map_err(ApiError::BadRequest)?;
        let t = table::table(def, &objects, meta, include, true);
        return Ok(respond_as(StatusCode::OK, &t, table::CONTENT_TYPE));
    }
    if !accepts_json(&call.headers) {
        return Err(not_acceptable());
    }
    let items: Vec<Value> = objects.into_iter().map(list_item).collect();
    let list = json!({
        "kind": def.list_kind(),
        "apiVersion": def.api_version(),
        "metadata": meta,
        "items": items,
    });
    Ok(respond(StatusCode::OK, &list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = encode_continue(42, "web-2\u{0}");
        let d = decode_continue(&t).expect("decode");
        assert_eq!(d.rv, 42);
        assert_eq!(d.start, "web-2\u{0}");
        assert!(decode_continue("not-base64!").is_err());
        assert!(decode_continue(&encode_continue(0, "x")).is_err());
    }
}
