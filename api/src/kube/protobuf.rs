//! Kubernetes' protobuf envelope: the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message
//! (`typeMeta{apiVersion, kind}`, `raw`, `contentEncoding`, `contentType`). kubectl 1.32 sends typed-client
//! bodies this way and upstream stores built-in objects this way in etcd.
//!
//! The envelope is decoded here; turning the inner message into JSON needs the schema of every built-in
//! kind, which keel does not carry yet, so those bodies are refused with 415 naming the kind.

use prost::Message;
use serde_json::Value;

use super::status::ApiError;

/// The magic prefix of Kubernetes protobuf payloads.
pub const MAGIC: &[u8] = b"k8s\0";
/// The Content-Type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// `runtime.TypeMeta` (k8s.io/apimachinery/pkg/runtime).
#[derive(Clone, PartialEq, Message)]
pub struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `runtime.Unknown`: the envelope around every protobuf-encoded object.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

/// Decodes the envelope of a protobuf payload (magic included).
pub fn envelope(bytes: &[u8]) -> Result<Unknown, ApiError> {
    let rest = bytes.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::BadRequest("protobuf body does not start with the k8s magic prefix".into())
    })?;
    Unknown::decode(rest)
        .map_err(|e| ApiError::BadRequest(format!("protobuf body does not decode: {e}")))
}

fn type_of(u: &Unknown) -> (String, String) {
    let tm = u.type_meta.clone().unwrap_or_default();
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
    )
}

/// Decodes a protobuf request body into JSON.
pub fn decode_body(bytes: &[u8]) -> Result<Value, ApiError> {
    let u = envelope(bytes)?;
    let (api_version, kind) = type_of(&u);
    Err(ApiError::UnsupportedMediaType(format!(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json, application/yaml (keel does not decode {CONTENT_TYPE} bodies of {kind} \
         {api_version} yet)"
    )))
}

/// Decodes an object stored in upstream's protobuf encoding.
pub fn decode_stored(bytes: &[u8]) -> Result<Value, ApiError> {
    let u = envelope(bytes).map_err(|e| ApiError::Internal(e.to_string()))?;
    let (api_version, kind) = type_of(&u);
    Err(ApiError::Internal(format!(
        "object stored in Kubernetes' protobuf encoding ({kind} {api_version}) cannot be decoded by \
         this keel version"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trip() {
        let u = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
            }),
            raw: Some(vec![1, 2, 3]),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut bytes = MAGIC.to_vec();
        bytes.extend(u.encode_to_vec());
        assert_eq!(envelope(&bytes).expect("decode"), u);
        assert!(envelope(b"nope").is_err());
        let err = decode_body(&bytes).expect_err("not decoded yet");
        assert!(err.to_string().contains("Deployment"));
    }
}
