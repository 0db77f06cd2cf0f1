//! The cluster's service-account signing key: an ECDSA P-256 key made by the first member that needs it
//! and kept in the store (beside the PKI), so every member signs and verifies with the same one.

use std::time::Duration;

use base64::Engine;
use jsonwebtoken::{DecodingKey, EncodingKey};
use rcgen::{KeyPair, PublicKeyData};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::debug;

use crate::status::ApiError;
use crate::storage::Storage;

/// Where the key lives in the store (outside `/registry`, like the PKI).
pub(crate) const KEY: &str = "/keel/bootstrap/service-account-key";

#[derive(Serialize, Deserialize)]
struct Stored {
    /// PKCS#8 DER, base64.
    pkcs8: String,
}

/// The signing key and what verifies it.
pub struct SigningKey {
    /// Key id: base64url of the SHA-256 of the public key's SubjectPublicKeyInfo (as upstream derives it).
    pub kid: String,
    pub(crate) encoding: EncodingKey,
    pub(crate) decoding: DecodingKey,
    x: String,
    y: String,
}

/// Why a stored key cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("service-account key: {0}")]
    Bad(String),
}

impl SigningKey {
    fn from_pkcs8(der: &[u8]) -> Result<Self, KeyError> {
        let bad = |e: &dyn std::fmt::Display| KeyError::Bad(e.to_string());
        let pair = KeyPair::try_from(der).map_err(|e| bad(&e))?;
        let point = pair.public_key_raw();
        // An uncompressed P-256 point: 0x04, then X and Y of 32 bytes each.
        if point.len() != 65 || point[0] != 4 {
            return Err(KeyError::Bad("not an uncompressed P-256 public key".into()));
        }
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let (x, y) = (b64(&point[1..33]), b64(&point[33..]));
        let spki = pair.subject_public_key_info();
        let kid = b64(ring::digest::digest(&ring::digest::SHA256, &spki).as_ref());
        let decoding = DecodingKey::from_ec_components(&x, &y).map_err(|e| bad(&e))?;
        Ok(SigningKey {
            kid,
            encoding: EncodingKey::from_ec_der(der),
            decoding,
            x,
            y,
        })
    }

    /// `/openid/v1/jwks`: the public key as a JSON Web Key Set.
    pub fn jwks(&self) -> Value {
        json!({"keys": [{
            "use": "sig", "kty": "EC", "kid": self.kid, "crv": "P-256", "alg": "ES256",
            "x": self.x, "y": self.y,
        }]})
    }
}

/// Reads the cluster's key, making it first when no member has yet; waits (retrying) for a quorum.
pub(crate) async fn bootstrap(storage: &Storage) -> Result<SigningKey, KeyError> {
    let mut delay = Duration::from_millis(200);
    loop {
        let attempt = async {
            if let Some(raw) = storage.get_raw(KEY).await? {
                return Ok::<_, ApiError>(Some(raw));
            }
            let fresh = KeyPair::generate().map_err(|e| ApiError::Internal(e.to_string()))?;
            let stored = Stored {
                pkcs8: base64::engine::general_purpose::STANDARD.encode(fresh.serialize_der()),
            };
            let bytes =
                serde_json::to_vec(&stored).map_err(|e| ApiError::Internal(e.to_string()))?;
            storage.create_raw(KEY, bytes).await?;
            storage.get_raw(KEY).await
        };
        match attempt.await {
            Ok(Some(raw)) => {
                let stored: Stored =
                    serde_json::from_slice(&raw).map_err(|e| KeyError::Bad(e.to_string()))?;
                let der = base64::engine::general_purpose::STANDARD
                    .decode(stored.pkcs8)
                    .map_err(|e| KeyError::Bad(e.to_string()))?;
                return SigningKey::from_pkcs8(&der);
            }
            Ok(None) => {}
            Err(e) => debug!(error = %e, "service-account key not readable yet"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_key_round_trips_and_publishes_its_point() {
        let pair = KeyPair::generate().expect("key");
        let key = SigningKey::from_pkcs8(&pair.serialize_der()).expect("load");
        let jwks = key.jwks();
        assert_eq!(jwks["keys"][0]["kid"], key.kid);
        assert_eq!(jwks["keys"][0]["x"].as_str().map(str::len), Some(43));
        assert!(SigningKey::from_pkcs8(b"junk").is_err());
    }
}
