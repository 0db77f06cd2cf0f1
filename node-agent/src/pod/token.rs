//! Projected service-account tokens: the agent asks the TokenRequest API for a token bound to the pod
//! (with the projection's audience and lifetime) and keeps it until 80 % of its lifetime has passed or it
//! is a day old, as the kubelet's token manager does; the volume's next refresh then writes a fresh one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount, ServiceAccountTokenProjection};
use kube::api::{Api, PostParams};
use kube::Client;

use crate::error::{Error, Result};

/// What a token is asked for with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pod_uid: String,
    service_account: String,
    audience: String,
    seconds: i64,
}

struct Cached {
    token: String,
    fetched: Instant,
    lifetime: Duration,
}

impl Cached {
    fn fresh(&self, now: Instant) -> bool {
        let age = now.saturating_duration_since(self.fetched);
        age < self.lifetime.mul_f64(0.8) && age < Duration::from_secs(24 * 3600)
    }
}

/// The agent's tokens, by pod and projection.
#[derive(Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<Key, Cached>>,
}

/// The default lifetime of a projected token (upstream's `expirationSeconds` default).
const DEFAULT_SECONDS: i64 = 3600;

impl TokenCache {
    /// The token for one `serviceAccountToken` projection of `pod`, fetched when none is fresh.
    pub async fn token(
        &self,
        client: &Client,
        pod: &Pod,
        projection: &ServiceAccountTokenProjection,
    ) -> Result<String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let key = Key {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            service_account: sa.clone(),
            audience: projection.audience.clone().unwrap_or_default(),
            seconds: projection.expiration_seconds.unwrap_or(DEFAULT_SECONDS),
        };
        let now = Instant::now();
        if let Some(c) = self.lock().get(&key).filter(|c| c.fresh(now)) {
            return Ok(c.token.clone());
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if key.audience.is_empty() {
                    Vec::new()
                } else {
                    vec![key.audience.clone()]
                },
                expiration_seconds: Some(key.seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        let answer = api
            .create_token_request(&sa, &PostParams::default(), &request)
            .await
            .map_err(|e| {
                Error::Config(format!(
                    "failed to fetch token for service account \"{ns}/{sa}\": {e}"
                ))
            })?;
        let status = answer.status.ok_or_else(|| {
            Error::Config(format!(
                "the token request for \"{ns}/{sa}\" returned no token"
            ))
        })?;
        let lifetime = Duration::from_secs(u64::try_from(key.seconds).unwrap_or(0));
        self.lock().insert(
            key,
            Cached {
                token: status.token.clone(),
                fetched: now,
                lifetime,
            },
        );
        Ok(status.token)
    }

    /// Forgets a pod's tokens (its volumes are gone).
    pub fn forget(&self, pod_uid: &str) {
        self.lock().retain(|k, _| k.pod_uid != pod_uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cached>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_after_80_percent_of_its_life() {
        let start = Instant::now();
        let c = Cached {
            token: "t".into(),
            fetched: start,
            lifetime: Duration::from_secs(3600),
        };
        assert!(c.fresh(start + Duration::from_secs(2879)));
        assert!(!c.fresh(start + Duration::from_secs(2881)));
        let long = Cached {
            lifetime: Duration::from_secs(7 * 24 * 3600),
            ..c
        };
        assert!(!long.fresh(start + Duration::from_secs(24 * 3600 + 1)));
    }
}
