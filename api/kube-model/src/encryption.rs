//! Encryption at rest (kube-apiserver's `--encryption-provider-config`): an EncryptionConfiguration names,
//! per resource, providers in order; the first one writes, every one can read. keel has `aesgcm` (AES-GCM
//! with a 12-byte random nonce and the etcd key as authenticated data, stored as
//! `k8s:enc:aesgcm:v1:<key name>:<nonce><ciphertext+tag>`, upstream's layout) and `identity` (plain).
//! A value without the `k8s:enc:` prefix is read as plain, so turning encryption on needs no migration; a
//! key is rotated by listing the new one first, restarting the members, then rewriting the objects
//! (`kubectl get secrets -A -o json | kubectl replace -f -`).

use std::path::Path;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;

/// The prefix of every encrypted value.
pub const PREFIX: &[u8] = b"k8s:enc:";
const AESGCM: &str = "k8s:enc:aesgcm:v1:";

/// Why a configuration does not load.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Parse(String, String),
    #[error("{0}: {1}")]
    Invalid(String, String),
}

/// Why a stored value does not decrypt.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no key {0:?} in the encryption configuration for this value")]
    UnknownKey(String),
    #[error("the value does not decrypt with key {0:?} (wrong key, or the data was altered)")]
    Tampered(String),
    #[error("unsupported encryption provider in stored value {0:?}")]
    Provider(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Deserialize)]
struct ResourceConfig {
    resources: Vec<String>,
    providers: Vec<ProviderConfig>,
}

#[derive(Deserialize)]
struct ProviderConfig {
    aesgcm: Option<KeysConfig>,
    identity: Option<serde_yaml_ng::Value>,
    aescbc: Option<KeysConfig>,
    secretbox: Option<KeysConfig>,
    kms: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
struct KeysConfig {
    keys: Vec<KeyConfig>,
}

#[derive(Deserialize)]
struct KeyConfig {
    name: String,
    secret: String,
}

struct AesKey {
    name: String,
    key: LessSafeKey,
}

enum Provider {
    AesGcm(Vec<AesKey>),
    Identity,
}

struct Rule {
    /// Key prefixes (`/registry/secrets/`), or None for `*.*`.
    prefixes: Option<Vec<String>>,
    providers: Vec<Provider>,
}

/// The loaded configuration.
pub struct Encryption {
    rules: Vec<Rule>,
    rng: SystemRandom,
}

/// The storage key prefix of a resource named as in an EncryptionConfiguration (`secrets`,
/// `deployments.apps`).
fn prefix_of(resource: &str) -> Option<String> {
    let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
    crate::resource::BUILTIN
        .iter()
        .find(|d| d.plural == plural && d.group == group)
        .map(|d| d.prefix())
}

impl Encryption {
    /// Reads an EncryptionConfiguration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(name.clone(), e))?;
        Self::parse(&name, &text)
    }

    fn parse(name: &str, text: &str) -> Result<Self, ConfigError> {
        let invalid = |why: String| ConfigError::Invalid(name.to_string(), why);
        let file: File = serde_yaml_ng::from_str(text)
            .map_err(|e| ConfigError::Parse(name.to_string(), e.to_string()))?;
        if file.kind != "EncryptionConfiguration" {
            return Err(invalid(format!(
                "kind is {:?}, expected EncryptionConfiguration",
                file.kind
            )));
        }
        let mut rules = Vec::new();
        for (i, r) in file.resources.into_iter().enumerate() {
            let prefixes = if r.resources.iter().any(|x| x == "*.*") {
                None
            } else {
                let mut ps = Vec::new();
                for res in &r.resources {
                    ps.push(prefix_of(res).ok_or_else(|| {
                        invalid(format!("resources[{i}]: unknown resource {res:?}"))
                    })?);
                }
                Some(ps)
            };
            let mut providers = Vec::new();
            for (j, p) in r.providers.into_iter().enumerate() {
                if let Some(g) = p.aesgcm {
                    let mut keys = Vec::new();
                    for k in g.keys {
                        let raw = base64::engine::general_purpose::STANDARD
                            .decode(k.secret.trim())
                            .map_err(|e| {
                                invalid(format!(
                                    "resources[{i}].providers[{j}].aesgcm key {:?}: {e}",
                                    k.name
                                ))
                            })?;
                        let alg = match raw.len() {
                            16 => &AES_128_GCM,
                            32 => &AES_256_GCM,
                            n => {
                                return Err(invalid(format!(
                                    "resources[{i}].providers[{j}].aesgcm key {:?} is {n} bytes; keel takes 16 or 32",
                                    k.name
                                )))
                            }
                        };
                        let key = UnboundKey::new(alg, &raw)
                            .map_err(|_| invalid(format!("key {:?} is not usable", k.name)))?;
                        keys.push(AesKey {
                            name: k.name,
                            key: LessSafeKey::new(key),
                        });
                    }
                    if keys.is_empty() {
                        return Err(invalid(format!(
                            "resources[{i}].providers[{j}].aesgcm has no keys"
                        )));
                    }
                    providers.push(Provider::AesGcm(keys));
                } else if p.identity.is_some() {
                    providers.push(Provider::Identity);
                } else if p.aescbc.is_some() || p.secretbox.is_some() || p.kms.is_some() {
                    return Err(invalid(format!(
                        "resources[{i}].providers[{j}]: keel supports the aesgcm and identity providers only"
                    )));
                } else {
                    return Err(invalid(format!(
                        "resources[{i}].providers[{j}] names no provider"
                    )));
                }
            }
            if providers.is_empty() {
                return Err(invalid(format!("resources[{i}] has no providers")));
            }
            rules.push(Rule {
                prefixes,
                providers,
            });
        }
        Ok(Encryption {
            rules,
            rng: SystemRandom::new(),
        })
    }

    fn rule_for(&self, key: &[u8]) -> Option<&Rule> {
        self.rules.iter().find(|r| match &r.prefixes {
            None => true,
            Some(ps) => ps.iter().any(|p| key.starts_with(p.as_bytes())),
        })
    }

    /// The stored form of `plain` at `key`: sealed by the first provider of the key's rule.
    pub fn seal(&self, key: &[u8], plain: Vec<u8>) -> Vec<u8> {
        let Some(Provider::AesGcm(keys)) = self.rule_for(key).and_then(|r| r.providers.first())
        else {
            return plain;
        };
        let Some(k) = keys.first() else { return plain };
        let mut nonce = [0u8; 12];
        if self.rng.fill(&mut nonce).is_err() {
            // Without randomness nothing can be sealed safely; ring's system source does not fail on Linux.
            return plain;
        }
        let mut out = Vec::with_capacity(AESGCM.len() + k.name.len() + 1 + 12 + plain.len() + 16);
        out.extend_from_slice(AESGCM.as_bytes());
        out.extend_from_slice(k.name.as_bytes());
        out.push(b':');
        out.extend_from_slice(&nonce);
        let mut body = plain;
        match k.key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(key),
            &mut body,
        ) {
            Ok(()) => {
                out.extend_from_slice(&body);
                out
            }
            Err(_) => body,
        }
    }

    /// The plain form of a stored value at `key`.
    pub fn open(&self, key: &[u8], stored: &[u8]) -> Result<Vec<u8>, OpenError> {
        let Some(rest) = stored.strip_prefix(AESGCM.as_bytes()) else {
            if stored.starts_with(PREFIX) {
                let end = stored
                    .iter()
                    .skip(PREFIX.len())
                    .position(|b| *b == b':')
                    .unwrap_or(0);
                return Err(OpenError::Provider(
                    String::from_utf8_lossy(&stored[..PREFIX.len() + end]).into_owned(),
                ));
            }
            return Ok(stored.to_vec());
        };
        let colon = rest
            .iter()
            .position(|b| *b == b':')
            .ok_or_else(|| OpenError::UnknownKey(String::new()))?;
        let name = String::from_utf8_lossy(&rest[..colon]).into_owned();
        let sealed = &rest[colon + 1..];
        let k = self
            .rules
            .iter()
            .flat_map(|r| r.providers.iter())
            .filter_map(|p| match p {
                Provider::AesGcm(keys) => Some(keys),
                Provider::Identity => None,
            })
            .flatten()
            .find(|k| k.name == name)
            .ok_or_else(|| OpenError::UnknownKey(name.clone()))?;
        if sealed.len() < 12 + 16 {
            return Err(OpenError::Tampered(name));
        }
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&sealed[..12]);
        let mut body = sealed[12..].to_vec();
        let plain = k
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key),
                &mut body,
            )
            .map_err(|_| OpenError::Tampered(name))?;
        Ok(plain.to_vec())
    }
}

/// [`Encryption::seal`] with the server's configuration (plain when there is none).
pub fn seal(active: Option<&Encryption>, key: &[u8], plain: Vec<u8>) -> Vec<u8> {
    match active {
        Some(e) => e.seal(key, plain),
        None => plain,
    }
}

/// [`Encryption::open`] with the server's configuration; a plain value needs none.
pub fn open<'a>(
    active: Option<&Encryption>,
    key: &[u8],
    stored: &'a [u8],
) -> Result<std::borrow::Cow<'a, [u8]>, OpenError> {
    if !stored.starts_with(PREFIX) {
        return Ok(std::borrow::Cow::Borrowed(stored));
    }
    match active {
        Some(e) => e.open(key, stored).map(std::borrow::Cow::Owned),
        None => Err(OpenError::UnknownKey(
            String::from_utf8_lossy(&stored[..stored.len().min(40)]).into_owned(),
        )),
    }
}

/// The system's random source failed, so no key could be made.
#[derive(Debug, thiserror::Error)]
#[error("the system random source failed: no encryption key could be generated")]
pub struct NoRandomness;

/// A fresh EncryptionConfiguration for secrets with one random AES-256 key (what `keel up` writes).
/// Fails rather than write a key the random source did not fill.
pub fn generate_config() -> Result<String, NoRandomness> {
    let mut key = [0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| NoRandomness)?;
    Ok(format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - name: key1\n        secret: {}\n  - identity: {{}}\n",
        base64::engine::general_purpose::STANDARD.encode(key)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_and_place() {
        let e = Encryption::parse("t", &generate_config().expect("random")).expect("config");
        let key = b"/registry/secrets/default/s";
        let sealed = e.seal(key, b"{\"data\":1}".to_vec());
        assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
        assert!(!sealed.windows(8).any(|w| w == b"\"data\":1"));
        assert_eq!(e.open(key, &sealed).expect("open"), b"{\"data\":1}");
        assert!(
            matches!(
                e.open(b"/registry/secrets/default/t", &sealed),
                Err(OpenError::Tampered(_))
            ),
            "bound to its key"
        );
        let cm = b"/registry/configmaps/default/c";
        assert_eq!(
            e.seal(cm, b"x".to_vec()),
            b"x",
            "only the configured resources"
        );
        assert_eq!(e.open(cm, b"plain").expect("plain"), b"plain");
        let other = Encryption::parse("t", &generate_config().expect("random")).expect("config");
        let mut wrong = sealed.clone();
        wrong[30] ^= 1;
        assert!(other.open(key, &wrong).is_err());
        assert!(Encryption::parse("t", "kind: Other\n").is_err());
    }
}
