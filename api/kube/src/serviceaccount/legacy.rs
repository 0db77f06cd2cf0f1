//! Legacy service-account token Secrets, made only when asked for: a Secret of type
//! `kubernetes.io/service-account-token` naming its account in `kubernetes.io/service-account.name` gets a
//! token that never expires, the cluster CA and the namespace (upstream's tokens controller fills them
//! after the create; keel fills them in the create). The token is good while the Secret holds it and the
//! account exists with the same uid.

use base64::Engine;
use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::key::SigningKey;
use crate::authn::Identity;
use crate::object;
use crate::storage::Storage;

/// The Secret type.
pub(crate) const TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming the account.
pub(crate) const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// The annotation the account's uid is written to.
pub(crate) const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// The legacy tokens' issuer.
const ISSUER: &str = "kubernetes/serviceaccount";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    #[serde(rename = "kubernetes.io/serviceaccount/namespace")]
    namespace: String,
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name")]
    secret: String,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name")]
    account: String,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid")]
    uid: String,
    sub: String,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// Fills a token Secret being created (when its account exists; otherwise it stays empty).
pub(crate) async fn fill(storage: &Storage, key: &SigningKey, ca_pem: &str, secret: &mut Value) {
    if secret.get("type").and_then(Value::as_str) != Some(TYPE) {
        return;
    }
    let ns = object::namespace(secret).to_string();
    let name = object::name(secret).to_string();
    let Some(account) = object::path(secret, "metadata.annotations")
        .and_then(|a| a.get(NAME_ANNOTATION))
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let Ok(Some(sa)) = storage
        .get(&format!("/registry/serviceaccounts/{ns}/{account}"), true)
        .await
    else {
        return;
    };
    let uid = object::uid(&sa.object).to_string();
    let claims = Claims {
        iss: ISSUER.into(),
        namespace: ns.clone(),
        secret: name,
        account: account.clone(),
        uid: uid.clone(),
        sub: super::user_name(&ns, &account),
    };
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    let Ok(token) = jsonwebtoken::encode(&header, &claims, &key.encoding) else {
        return;
    };
    if let Some(a) = object::meta_mut(secret)
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        a.insert(UID_ANNOTATION.into(), json!(uid));
    }
    if let Some(m) = secret.as_object_mut() {
        let data = m.entry("data").or_insert_with(|| json!({}));
        if let Some(d) = data.as_object_mut() {
            d.insert("token".into(), json!(b64(&token)));
            d.insert("ca.crt".into(), json!(b64(ca_pem)));
            d.insert("namespace".into(), json!(b64(&ns)));
        }
    }
}

/// The identity of a legacy token whose Secret still holds it and whose account still exists.
pub(crate) async fn authenticate(
    key: &SigningKey,
    storage: &Storage,
    token: &str,
) -> Option<Identity> {
    let mut v = Validation::new(Algorithm::ES256);
    v.set_issuer(&[ISSUER]);
    v.required_spec_claims.clear();
    v.validate_exp = false;
    v.validate_aud = false;
    let c = jsonwebtoken::decode::<Claims>(token, &key.decoding, &v)
        .ok()?
        .claims;
    if c.sub != super::user_name(&c.namespace, &c.account) {
        return None;
    }
    let secret = storage
        .get(
            &format!("/registry/secrets/{}/{}", c.namespace, c.secret),
            false,
        )
        .await
        .ok()??
        .object;
    let held = object::path(&secret, "data.token")
        .and_then(Value::as_str)
        .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok());
    if held.as_deref() != Some(token.as_bytes()) || object::is_deleting(&secret) {
        return None;
    }
    let sa = storage
        .get(
            &format!("/registry/serviceaccounts/{}/{}", c.namespace, c.account),
            false,
        )
        .await
        .ok()??
        .object;
    if object::uid(&sa) != c.uid {
        return None;
    }
    Some(Identity {
        user: c.sub,
        groups: super::groups(&c.namespace),
    })
}
