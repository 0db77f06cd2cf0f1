//! Request bodies in (JSON, YAML, protobuf) and response media types out (JSON, Table).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::protobuf;
use super::status::ApiError;

/// Largest request body accepted (upstream's 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The media type of a header value, without parameters, lowercased.
pub fn media_type(v: Option<&HeaderValue>) -> String {
    v.and_then(|v| v.to_str().ok())
        .and_then(|s| s.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Decodes a create/update body by its Content-Type (empty means JSON, as upstream).
pub fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = media_type(headers.get(header::CONTENT_TYPE));
    let v = match ct.as_str() {
        "" | "application/json" | "*/*" => json(body)?,
        "application/yaml" => yaml(body)?,
        protobuf::CONTENT_TYPE => protobuf::decode_body(body)?,
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json, application/yaml, application/vnd.kubernetes.protobuf (got {other:?})"
            )))
        }
    };
    if !v.is_object() {
        return Err(ApiError::BadRequest(
            "couldn't get version/kind; json parse error: the body is not a JSON object".into(),
        ));
    }
    Ok(v)
}

/// Parses a JSON body.
pub fn json(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::BadRequest(
            "couldn't get version/kind; json parse error: unexpected end of JSON input".into(),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// Parses a YAML body.
pub fn yaml(body: &[u8]) -> Result<Value, ApiError> {
    serde_yaml_ng::from_slice::<Value>(body)
        .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))
}

/// Whether the Accept header allows JSON (kubectl's typed clients list protobuf first, then JSON).
pub fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|p| {
        let m = p.split(';').next().unwrap_or("").trim();
        matches!(m, "application/json" | "*/*" | "application/*" | "")
    })
}

/// A JSON response with a status code.
pub fn respond(code: StatusCode, v: &Value) -> Response {
    respond_as(code, v, "application/json")
}

/// A JSON response with an explicit content type, written as upstream's encoder writes it.
pub fn respond_as(code: StatusCode, v: &Value, content_type: &str) -> Response {
    let body = crate::encode::to_vec(v);
    let mut r = (code, body).into_response();
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    r
}

/// Refuses a body whose `kind` is not `kind` (a missing one is taken as it), for the kinds that are answered
/// rather than stored (reviews, token requests).
pub fn expect_kind(body: &Value, kind: &str) -> Result<(), ApiError> {
    match body.get("kind").and_then(Value::as_str) {
        Some(sent) if sent != kind => Err(ApiError::BadRequest(format!(
            "the kind in the data ({sent}) does not match the expected kind ({kind})"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let mut h = HeaderMap::new();
        assert!(decode(&h, br#"{"a":1}"#).is_ok());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/yaml"),
        );
        assert_eq!(decode(&h, b"a: 1\n").expect("yaml")["a"], 1);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(matches!(
            decode(&h, b"x"),
            Err(ApiError::UnsupportedMediaType(_))
        ));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(matches!(decode(&h, b"{"), Err(ApiError::BadRequest(_))));
        assert!(matches!(decode(&h, b"[1]"), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn accept() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf,application/json"),
        );
        assert!(accepts_json(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf"),
        );
        assert!(!accepts_json(&h));
    }
}
