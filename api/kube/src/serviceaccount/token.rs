//! The JWTs of service accounts: what they claim (upstream's claim set, `kubernetes.io` private claims
//! included), signing them, and checking one a client presents (signature, issuer, audience, time, and
//! that the service account and the object it is bound to still exist with the same uid).

use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Serialize};

use super::key::SigningKey;
use super::ISSUER;
use crate::authn::Identity;
use crate::object;
use crate::storage::Storage;

/// A named object with its uid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Ref {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct KubeClaims {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pod: Option<Ref>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub secret: Option<Ref>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub node: Option<Ref>,
}

/// Every claim keel writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Claims {
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub iss: String,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kube: KubeClaims,
    pub nbf: i64,
    pub sub: String,
}

/// Signs `claims`.
pub(crate) fn sign(
    key: &SigningKey,
    claims: &Claims,
) -> Result<String, jsonwebtoken::errors::Error> {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding)
}

/// Whether a bearer token looks like a JWT (three dot-separated parts) rather than a static token.
pub(crate) fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && token.starts_with("eyJ")
}

/// The identity of a valid token meant for the API server (audience [`ISSUER`]); None otherwise.
pub(crate) async fn authenticate(
    key: &SigningKey,
    storage: &Storage,
    token: &str,
) -> Option<Identity> {
    authenticate_for(key, storage, token, &[ISSUER.to_string()])
        .await
        .map(|(id, _)| id)
}

/// The identity of a valid token meant for any of `audiences`, with the audiences it matched (what a
/// TokenReview answers).
pub(crate) async fn authenticate_for(
    key: &SigningKey,
    storage: &Storage,
    token: &str,
    audiences: &[String],
) -> Option<(Identity, Vec<String>)> {
    let mut v = Validation::new(Algorithm::ES256);
    v.set_issuer(&[ISSUER]);
    v.set_audience(audiences);
    v.validate_nbf = true;
    v.leeway = 0;
    let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &v)
        .ok()?
        .claims;
    let matched: Vec<String> = audiences
        .iter()
        .filter(|a| claims.aud.contains(a))
        .cloned()
        .collect();
    let k = &claims.kube;
    let ns = k.namespace.as_str();
    if claims.sub != super::user_name(ns, &k.serviceaccount.name) {
        return None;
    }
    // The token dies with the objects it names (a deleted and recreated one has another uid).
    let mut named = vec![("serviceaccounts", &k.serviceaccount)];
    named.extend(k.pod.as_ref().map(|p| ("pods", p)));
    named.extend(k.secret.as_ref().map(|s| ("secrets", s)));
    for (plural, r) in named {
        let key = format!("/registry/{plural}/{ns}/{}", r.name);
        let alive = match storage.get(&key, false).await {
            Ok(Some(s)) => object::uid(&s.object) == r.uid && !object::is_deleting(&s.object),
            _ => false,
        };
        if !alive {
            return None;
        }
    }
    Some((
        Identity {
            user: claims.sub.clone(),
            groups: super::groups(ns),
        },
        matched,
    ))
}

/// The claims a token request asks for, as of `now` (seconds since the epoch).
#[allow(clippy::too_many_arguments)]
pub(crate) fn claims(
    namespace: &str,
    sa: Ref,
    audiences: Vec<String>,
    now: i64,
    expiration_seconds: i64,
    pod: Option<Ref>,
    secret: Option<Ref>,
    node: Option<Ref>,
) -> Claims {
    Claims {
        aud: audiences,
        exp: now + expiration_seconds,
        iat: now,
        iss: ISSUER.into(),
        jti: object::new_uid(),
        sub: super::user_name(namespace, &sa.name),
        kube: KubeClaims {
            namespace: namespace.into(),
            serviceaccount: sa,
            pod,
            secret,
            node,
        },
        nbf: now,
    }
}
