//! The built OpenAPI documents as served and cached (the served-resource registry keeps them until the
//! resources change); building them is the parent module's.

use bytes::Bytes;

/// One group-version's document, serialized, and its hash.
#[derive(Debug, Clone)]
pub struct Document {
    /// The JSON body.
    pub body: Bytes,
    /// Uppercase hex SHA-512 of `body`.
    pub hash: String,
}

/// The `/openapi/v2` document in both encodings.
#[derive(Debug, Clone)]
pub struct V2 {
    /// The JSON body.
    pub json: Bytes,
    /// The same document as gnostic's `openapi.v2.Document` message.
    pub protobuf: Bytes,
    /// Uppercase hex SHA-512 of `json`: the ETag of both encodings, as upstream.
    pub hash: String,
}
