//! Kubernetes' protobuf envelope: the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message
//! (`typeMeta{apiVersion, kind}`, `raw`, `contentEncoding`, `contentType`). kubectl 1.32 sends typed-client
//! bodies this way and upstream stores built-in objects this way in etcd.
//!
//! The envelope is decoded here, the inner message by [`decode`] with the field table in [`schema`].

pub mod decode;
pub mod schema;

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

/// Decodes an envelope's object into JSON with `apiVersion` and `kind` set.
fn object(u: &Unknown) -> Result<Value, String> {
    let (api_version, kind) = type_of(u);
    if u.content_encoding.as_deref().is_some_and(|e| !e.is_empty()) {
        return Err(format!(
            "content encoding {:?} is not supported",
            u.content_encoding
        ));
    }
    let name = schema::message_for(&api_version, &kind)
        .ok_or_else(|| format!("no protobuf schema for {kind} {api_version}"))?;
    let mut v =
        decode::decode(&name, u.raw.as_deref().unwrap_or_default()).map_err(|e| e.to_string())?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(api_version));
        m.insert("kind".into(), Value::String(kind));
    }
    Ok(v)
}

/// Decodes a protobuf request body into JSON.
pub fn decode_body(bytes: &[u8]) -> Result<Value, ApiError> {
    let u = envelope(bytes)?;
    object(&u).map_err(|e| {
        ApiError::BadRequest(format!("the body of the request could not be decoded: {e}"))
    })
}

/// Decodes an object stored in upstream's protobuf encoding.
pub fn decode_stored(bytes: &[u8]) -> Result<Value, ApiError> {
    let u = envelope(bytes).map_err(|e| ApiError::Internal(e.to_string()))?;
    object(&u).map_err(|e| ApiError::Internal(format!("stored object does not decode: {e}")))
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
        // raw [1,2,3] is not a valid Deployment message: a 400, not a panic.
        assert!(matches!(decode_body(&bytes), Err(ApiError::BadRequest(_))));
    }
}
