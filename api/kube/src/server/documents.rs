//! Discovery and OpenAPI answers: content negotiation (JSON or protobuf) and ETag revalidation.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::body::respond;
use crate::crd::registry::Registry;
use crate::discovery;
use crate::openapi;
use crate::status::ApiError;

/// The protobuf media type of `/openapi/v2` (gnostic's `openapi.v2.Document`), the one upstream answers with.
pub(super) const OPENAPI_V2_PROTOBUF: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether an Accept header gets `/openapi/v2` as protobuf (`Some(true)`), JSON (`Some(false)`) or neither.
/// As upstream: clauses by decreasing quality, then concrete before wildcard; the first that matches JSON,
/// the older protobuf name (`...spec.v2@v1.0+protobuf`, which client-go still sends) or the current one wins.
pub(super) fn openapi_v2_protobuf(accept: &str) -> Option<bool> {
    let accept = if accept.trim().is_empty() {
        "*/*"
    } else {
        accept
    };
    let mut clauses: Vec<(f32, &str, &str)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let (ty, sub) = parts.next()?.trim().split_once('/')?;
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            Some((q, ty.trim(), sub.trim()))
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then((a.1 == "*").cmp(&(b.1 == "*")))
            .then((a.2 == "*").cmp(&(b.2 == "*")))
    });
    const SERVED: [(&str, bool); 3] = [
        ("json", false),
        ("com.github.proto-openapi.spec.v2@v1.0+protobuf", true),
        ("com.github.proto-openapi.spec.v2.v1.0+protobuf", true),
    ];
    clauses.iter().find_map(|(_, ty, sub)| {
        if *ty != "application" && *ty != "*" {
            return None;
        }
        SERVED
            .iter()
            .find(|(s, _)| sub == s || *sub == "*")
            .map(|(_, protobuf)| *protobuf)
    })
}

/// Whether `If-None-Match` names `etag` (weakly compared, as Go's file server does).
pub(super) fn etag_matches(headers: &header::HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
            })
        })
}

/// `/openapi/v2` in JSON or protobuf, with the JSON's SHA-512 as ETag for both (a 304 when it matches).
pub(super) fn openapi_v2(
    reg: &Registry,
    headers: &header::HeaderMap,
    accept: &str,
) -> Result<Response, ApiError> {
    let protobuf = openapi_v2_protobuf(accept).ok_or_else(|| {
        ApiError::NotAcceptable(format!(
            "/openapi/v2 is served as application/json or {OPENAPI_V2_PROTOBUF}"
        ))
    })?;
    let doc = openapi::v2(reg);
    let etag = format!("\"{}\"", doc.hash);
    let not_modified = etag_matches(headers, &etag);
    let mut r = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else if protobuf {
        (StatusCode::OK, doc.protobuf).into_response()
    } else {
        (StatusCode::OK, doc.json).into_response()
    };
    let h = r.headers_mut();
    if !not_modified {
        let ct = if protobuf {
            OPENAPI_V2_PROTOBUF
        } else {
            "application/json"
        };
        h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ct));
    }
    if let Ok(v) = header::HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
    Ok(r)
}

/// 406 unless `accept` allows JSON (OpenAPI v3 is served as JSON only).
pub(super) fn json_only(accept: &str, what: &str) -> Result<(), ApiError> {
    if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
        return Err(ApiError::NotAcceptable(format!(
            "only application/json is served for {what}"
        )));
    }
    Ok(())
}

pub(super) fn openapi_v3(
    reg: &Registry,
    gv: &str,
    query: Option<&str>,
    accept: &str,
) -> Result<Response, ApiError> {
    let doc = openapi::v3_document(reg, gv).ok_or(ApiError::NoRoute)?;
    json_only(accept, "/openapi/v3")?;
    let asked = query
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "hash"))
        .map(|(_, v)| v.into_owned());
    let mut r = match &asked {
        Some(h) if *h != doc.hash => {
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(loc) =
                header::HeaderValue::from_str(&format!("/openapi/v3/{gv}?hash={}", doc.hash))
            {
                r.headers_mut().insert(header::LOCATION, loc);
            }
            return Ok(r);
        }
        _ => (StatusCode::OK, doc.body.clone()).into_response(),
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if let Ok(etag) = header::HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        h.insert(header::ETAG, etag);
    }
    if asked.is_some() {
        h.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("public, immutable"),
        );
    } else {
        h.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache, private"),
        );
    }
    h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
    Ok(r)
}

/// Legacy or aggregated discovery. Aggregated answers carry an ETag (the document's SHA-512, as upstream)
/// and answer 304 to a matching `If-None-Match`, so a client's HTTP cache revalidates cheaply and sees a
/// CRD's resources appear and disappear.
pub(super) fn discovery_answer(
    reg: &Registry,
    remote: &[crate::aggregator::Remote],
    headers: &header::HeaderMap,
    accept: &str,
    core: bool,
    legacy: impl FnOnce() -> serde_json::Value,
) -> Response {
    match discovery::wants_aggregated(accept) {
        Some(ct) => {
            let doc = discovery::aggregated(reg, remote, core, ct);
            let body = serde_json::to_vec(&doc).unwrap_or_default();
            let digest = ring::digest::digest(&ring::digest::SHA512, &body);
            let hex: String = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
            let etag = format!("\"{hex}\"");
            let matches = etag_matches(headers, &etag);
            let mut r = if matches {
                StatusCode::NOT_MODIFIED.into_response()
            } else {
                (StatusCode::OK, body).into_response()
            };
            let h = r.headers_mut();
            if let (false, Ok(v)) = (matches, header::HeaderValue::from_str(ct)) {
                h.insert(header::CONTENT_TYPE, v);
            }
            if let Ok(v) = header::HeaderValue::from_str(&etag) {
                h.insert(header::ETAG, v);
            }
            h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
            r
        }
        None => respond(StatusCode::OK, &legacy()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_discovery_revalidates_by_etag() {
        let reg = Registry::default();
        let mut h = header::HeaderMap::new();
        let first = discovery_answer(&reg, &[], &h, discovery::AGGREGATED_V2, false, || {
            serde_json::json!({})
        });
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers().get(header::ETAG).cloned().expect("etag");
        h.insert(header::IF_NONE_MATCH, etag.clone());
        let again = discovery_answer(&reg, &[], &h, discovery::AGGREGATED_V2, false, || {
            serde_json::json!({})
        });
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        // A new CRD changes the document, so the old ETag no longer matches.
        reg.load(
            &[serde_json::json!({"metadata": {"name": "ws.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                         "names": {"plural": "ws", "kind": "W"},
                         "versions": [{"name": "v1", "served": true, "storage": true}]}})],
            2,
        );
        let changed = discovery_answer(&reg, &[], &h, discovery::AGGREGATED_V2, false, || {
            serde_json::json!({})
        });
        assert_eq!(changed.status(), StatusCode::OK);
        assert_ne!(changed.headers().get(header::ETAG), Some(&etag));
    }

    #[test]
    fn openapi_v2_negotiates_protobuf_and_revalidates() {
        let pb = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        assert_eq!(openapi_v2_protobuf(pb), Some(true));
        assert_eq!(openapi_v2_protobuf(OPENAPI_V2_PROTOBUF), Some(true));
        assert_eq!(openapi_v2_protobuf(""), Some(false));
        assert_eq!(openapi_v2_protobuf("application/json, */*"), Some(false));
        assert_eq!(
            openapi_v2_protobuf(&format!("application/json;q=0.5, {pb}")),
            Some(true)
        );
        assert_eq!(openapi_v2_protobuf(&format!("*/*, {pb}")), Some(true));
        assert_eq!(openapi_v2_protobuf("text/html"), None);
        assert_eq!(openapi_v2_protobuf("application/json;q=0"), None);

        let reg = Registry::default();
        let mut h = header::HeaderMap::new();
        let first = openapi_v2(&reg, &h, pb).expect("protobuf answer");
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(
            first
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(OPENAPI_V2_PROTOBUF.as_bytes())
        );
        let etag = first.headers().get(header::ETAG).cloned().expect("etag");
        let json = openapi_v2(&reg, &h, "application/json").expect("json answer");
        assert_eq!(json.headers().get(header::ETAG), Some(&etag));
        h.insert(header::IF_NONE_MATCH, etag);
        let again = openapi_v2(&reg, &h, pb).expect("revalidation");
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(matches!(
            openapi_v2(&reg, &h, "text/html"),
            Err(ApiError::NotAcceptable(_))
        ));
    }
}
