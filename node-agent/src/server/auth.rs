//! Who may call the agent's API, as the kubelet's webhook authentication and authorization decide:
//!
//! - a client certificate the cluster CA signed (checked in the TLS handshake) names the user (CN) and
//!   groups (O); otherwise an `Authorization: Bearer` token is asked about with a TokenReview; neither is
//!   a 401;
//! - the user is then authorized with a SubjectAccessReview of the Node: resource `nodes`, name the node,
//!   subresource `stats` (`/stats/…`), `metrics` (`/metrics/…`), `log` (`/logs/…`) or `proxy` (every
//!   other path, `/containerLogs`, `/exec`, `/healthz` included), verb from the HTTP method (`get`,
//!   `create`, `update`, `patch`, `delete`). A denial is a 403 with upstream's message.
//!
//! Answers are cached as the kubelet's defaults do: a token for 2 minutes, an allowed review 5 minutes,
//! a denied one 30 seconds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries a cache holds before expired ones are swept.
const SWEEP_AT: usize = 1024;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// The identity of a connection's client certificate, if it showed one (set per connection).
#[derive(Debug, Clone, Default)]
pub struct PeerCert(pub Option<User>);

/// The user named by a client certificate (DER): CN the name, every O a group.
pub fn user_of_cert(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_string)
        .collect();
    Some(User { name, groups })
}

/// What a request asks, in the kubelet's terms: `(verb, subresource)`.
pub fn attributes(method: &Method, path: &str) -> (&'static str, &'static str) {
    let verb = match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    let under = |p: &str| path == p || path.starts_with(&format!("{p}/"));
    let sub = if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else {
        "proxy"
    };
    (verb, sub)
}

type Cache<K, V> = Mutex<HashMap<K, (V, Instant)>>;

fn cached<K: std::hash::Hash + Eq, V: Clone>(cache: &Cache<K, V>, k: &K) -> Option<V> {
    let c = cache.lock().unwrap_or_else(|e| e.into_inner());
    c.get(k)
        .filter(|(_, until)| *until > Instant::now())
        .map(|(v, _)| v.clone())
}

fn remember<K: std::hash::Hash + Eq, V>(cache: &Cache<K, V>, k: K, v: V, ttl: Duration) {
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() >= SWEEP_AT {
        let now = Instant::now();
        c.retain(|_, (_, until)| *until > now);
    }
    c.insert(k, (v, Instant::now() + ttl));
}

/// Authentication and authorization of the agent's API against the API server.
pub struct Auth {
    client: kube::Client,
    node: String,
    tokens: Cache<String, Option<User>>,
    reviews: Cache<(User, &'static str, &'static str), bool>,
}

impl Auth {
    /// Checks for node `node` through `client` (the agent's own credentials).
    pub fn new(client: kube::Client, node: String) -> Self {
        Auth {
            client,
            node,
            tokens: Mutex::default(),
            reviews: Mutex::default(),
        }
    }

    /// The user a bearer token belongs to (TokenReview), `None` if nobody.
    async fn token_user(&self, token: &str) -> Result<Option<User>, kube::Error> {
        if let Some(u) = cached(&self.tokens, &token.to_string()) {
            return Ok(u);
        }
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        let user = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .and_then(|u| {
                Some(User {
                    name: u.username.filter(|n| !n.is_empty())?,
                    groups: u.groups.unwrap_or_default(),
                })
            });
        remember(&self.tokens, token.to_string(), user.clone(), TOKEN_TTL);
        Ok(user)
    }

    /// Whether `user` may `verb` the node's `sub` subresource (SubjectAccessReview).
    async fn allowed(
        &self,
        user: &User,
        verb: &'static str,
        sub: &'static str,
    ) -> Result<bool, kube::Error> {
        let key = (user.clone(), verb, sub);
        if let Some(a) = cached(&self.reviews, &key) {
            return Ok(a);
        }
        let mut groups = user.groups.clone();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(groups),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(sub.into()),
                    name: Some(self.node.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        remember(&self.reviews, key, allowed, ttl);
        Ok(allowed)
    }
}

fn answer(code: StatusCode, msg: String) -> Response {
    (code, msg).into_response()
}

/// The middleware: authenticates, authorizes, then passes the request on.
pub async fn guard(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<PeerCert>().and_then(|p| p.0.clone());
    let user = match peer {
        Some(u) => u,
        None => {
            let bearer = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty());
            let Some(token) = bearer else {
                return answer(StatusCode::UNAUTHORIZED, "Unauthorized".into());
            };
            match auth.token_user(token).await {
                Ok(Some(u)) => u,
                Ok(None) => return answer(StatusCode::UNAUTHORIZED, "Unauthorized".into()),
                Err(e) => {
                    warn!(error = %e, "TokenReview failed");
                    return answer(StatusCode::UNAUTHORIZED, "Unauthorized".into());
                }
            }
        }
    };
    let (verb, sub) = attributes(req.method(), req.uri().path());
    match auth.allowed(&user, verb, sub).await {
        Ok(true) => next.run(req).await,
        Ok(false) => {
            debug!(user = %user.name, verb, sub, "agent API: forbidden");
            answer(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource={sub})",
                    user.name
                ),
            )
        }
        Err(e) => {
            warn!(error = %e, "SubjectAccessReview failed");
            answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "Authorization error (user={}, verb={verb}, resource=nodes, subresource={sub})",
                    user.name
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_node_subresources() {
        assert_eq!(attributes(&Method::GET, "/stats/summary"), ("get", "stats"));
        assert_eq!(attributes(&Method::GET, "/metrics"), ("get", "metrics"));
        assert_eq!(
            attributes(&Method::GET, "/metrics/cadvisor"),
            ("get", "metrics")
        );
        assert_eq!(attributes(&Method::GET, "/logs/syslog"), ("get", "log"));
        assert_eq!(
            attributes(&Method::GET, "/containerLogs/ns/p/c"),
            ("get", "proxy")
        );
        assert_eq!(
            attributes(&Method::POST, "/exec/ns/p/c"),
            ("create", "proxy")
        );
        assert_eq!(attributes(&Method::GET, "/statsx"), ("get", "proxy"));
        assert_eq!(attributes(&Method::GET, "/healthz"), ("get", "proxy"));
    }

    #[test]
    fn certificates_name_users_and_groups() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "dev");
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(
            user_of_cert(cert.der()),
            Some(User {
                name: "alice".into(),
                groups: vec!["dev".into()]
            })
        );
    }
}
