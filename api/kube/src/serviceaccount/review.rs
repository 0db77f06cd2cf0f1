//! TokenReview (`authentication.k8s.io/v1`): another server (an aggregated API server, a webhook) asks who
//! a bearer token belongs to. Static tokens and service-account JWTs are checked as a request's would be;
//! a JWT must be meant for one of the asked audiences (the API server's, by default).

use serde_json::{json, Map, Value};

use super::key::SigningKey;
use super::token::{authenticate_for, looks_like_jwt};
use super::ISSUER;
use crate::authn::Tokens;
use crate::status::ApiError;
use crate::storage::Storage;

/// Answers one TokenReview.
pub(crate) async fn answer(
    tokens: &Tokens,
    key: &SigningKey,
    storage: &Storage,
    body: &Value,
) -> Result<Value, ApiError> {
    crate::body::expect_kind(body, "TokenReview")?;
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    let asked: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let audiences = if asked.is_empty() {
        vec![ISSUER.to_string()]
    } else {
        asked.clone()
    };
    let found = if token.is_empty() {
        None
    } else if let Some(id) = tokens.lookup(token) {
        // A static token knows no audience: it is good for the API server's own.
        audiences
            .iter()
            .any(|a| a == ISSUER)
            .then(|| (id, vec![ISSUER.to_string()]))
    } else if looks_like_jwt(token) {
        authenticate_for(key, storage, token, &audiences).await
    } else {
        None
    };
    let mut status = Map::new();
    match found {
        Some((id, matched)) => {
            status.insert("authenticated".into(), json!(true));
            let mut groups = id.groups.clone();
            if !groups.iter().any(|g| g == crate::authz::AUTHENTICATED) {
                groups.push(crate::authz::AUTHENTICATED.into());
            }
            status.insert(
                "user".into(),
                json!({"username": id.user, "groups": groups}),
            );
            status.insert("audiences".into(), json!(matched));
        }
        None => {
            status.insert("user".into(), json!({}));
            if !token.is_empty() {
                status.insert("error".into(), json!("invalid bearer token"));
            }
        }
    }
    Ok(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": Value::Object(status),
    }))
}
