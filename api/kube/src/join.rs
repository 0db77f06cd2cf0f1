//! Joining a cluster with a token (k3s's idea): `GET /cacerts` hands anyone the cluster CA, whose SHA-256
//! the token pins, and `POST /v1-keel/join` checks a join token and answers with what the newcomer
//! needs. A server is added to the Raft membership (as a learner, promoted once caught up) and told the
//! cluster token and membership; an agent gets a kubeconfig for its node identity (`system:node:<name>`).
//!
//! Join tokens are upstream's bootstrap tokens: Secrets `kube-system/bootstrap-token-<id>` of type
//! `bootstrap.kubernetes.io/token` with `token-id`, `token-secret` and an optional `expiration`, and the
//! keel usages `usage-keel-server-join` and `usage-keel-agent-join`. Revoking a token deletes its Secret.

use std::sync::Arc;

use base64::Engine;
use keel_raft::types::{MemberChange, MemberInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::handler::KubeState;
use crate::status::{ApiError, Target};

/// The type of a bootstrap-token Secret.
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The usage key that lets a token join servers.
pub const SERVER_USAGE: &str = "usage-keel-server-join";
/// The usage key that lets a token join agents.
pub const AGENT_USAGE: &str = "usage-keel-agent-join";
/// keel's version, which joiners are checked against.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a newcomer sends.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequest {
    /// `<id>.<secret>`, the part of the join token after `K10<hash>::`.
    pub token: String,
    /// `server` or `agent`.
    pub role: String,
    /// The member or node name.
    pub name: String,
    /// A server's peer URLs.
    #[serde(default)]
    pub peer_urls: Vec<String>,
    /// A server's etcd client URLs (the names its etcd serving certificate is made for).
    #[serde(default)]
    pub client_urls: Vec<String>,
    /// The newcomer's keel version.
    pub version: String,
}

/// What a joining server is told.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJoin {
    /// `--initial-cluster-token` of the cluster.
    pub cluster_token: String,
    /// `--initial-cluster`: every member, the newcomer included.
    pub initial_cluster: String,
    /// The newcomer's member ID (hex).
    pub member_id: String,
    /// Every member's Kubernetes API URL known so far.
    pub servers: Vec<String>,
    /// The newcomer's peer and etcd certificates, signed by the cluster CA (it needs them to reach the
    /// other members over peer TLS before it can read anything from the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::pki::MemberTls>,
}

/// What a joining agent is told.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentJoin {
    /// A kubeconfig for `system:node:<name>` in `system:nodes`, signed by the cluster CA.
    pub kubeconfig: String,
    /// Every member's Kubernetes API URL known so far.
    pub servers: Vec<String>,
}

/// The hash a join token pins: SHA-256 of the CA bundle `/cacerts` serves, lowercase hex.
pub fn ca_hash(ca_pem: &str) -> String {
    Sha256::digest(ca_pem.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The full join token users pass around: `K10<CA hash>::<id>.<secret>`.
pub fn full_token(ca_pem: &str, id: &str, secret: &str) -> String {
    format!("K10{}::{id}.{secret}", ca_hash(ca_pem))
}

/// A fresh token ID (6 characters) and secret (16), upstream's bootstrap-token alphabet `[a-z0-9]`.
pub fn new_token_parts() -> (String, String) {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    let mut pick = |n: usize| -> String {
        (0..n)
            .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
            .collect()
    };
    let id = pick(6);
    let secret = pick(16);
    (id, secret)
}

/// The Secret that holds a join token; `usage` is [`SERVER_USAGE`] or [`AGENT_USAGE`].
pub fn token_secret(
    id: &str,
    secret: &str,
    usage: &str,
    description: &str,
    expiration: Option<jiff::Timestamp>,
) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut data = serde_json::json!({
        "token-id": b64(id),
        "token-secret": b64(secret),
        "description": b64(description),
        usage: b64("true"),
    });
    if let Some(t) = expiration {
        data["expiration"] = Value::String(b64(&t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": TOKEN_SECRET_TYPE,
        "data": data,
    })
}

/// Stores a join token that never expires unless it exists already (what `keel server --init` makes).
pub async fn ensure_token(
    storage: &crate::storage::Storage,
    id: &str,
    secret: &str,
    usage: &str,
    description: &str,
) -> Result<(), ApiError> {
    let key = format!("/registry/secrets/kube-system/bootstrap-token-{id}");
    if storage.get(&key, true).await?.is_some() {
        return Ok(());
    }
    let mut obj = token_secret(id, secret, usage, description, None);
    obj["metadata"]["uid"] = Value::String(crate::object::new_uid());
    obj["metadata"]["creationTimestamp"] = Value::String(crate::object::now_rfc3339());
    storage.put_if(&key, &obj, 0).await?;
    Ok(())
}

fn refused(message: String) -> ApiError {
    ApiError::Forbidden {
        target: Target::new("", "jointokens", ""),
        message,
    }
}

/// Whether `a` and `b` (major.minor.patch) are at most one minor version apart in the same major.
pub fn compatible(a: &str, b: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.trim_start_matches('v').split('.');
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parse(a), parse(b)) {
        (Some((ma, ia)), Some((mb, ib))) => ma == mb && ia.abs_diff(ib) <= 1,
        _ => false,
    }
}

/// Checks `token` (`<id>.<secret>`) against its Secret for `usage`; the error says what is wrong.
async fn check_token(state: &KubeState, token: &str, usage: &str) -> Result<(), ApiError> {
    let (id, secret) = token
        .split_once('.')
        .filter(|(i, s)| {
            i.len() == 6
                && s.len() == 16
                && i.bytes()
                    .chain(s.bytes())
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        .ok_or_else(|| {
            refused(
                "the join token is malformed: want K10<ca hash>::<6 characters>.<16 characters>"
                    .into(),
            )
        })?;
    let key = format!("/registry/secrets/kube-system/bootstrap-token-{id}");
    let stored = state.storage.get(&key, true).await?;
    let Some(stored) = stored else {
        return Err(refused(format!(
            "join token {id} is not valid: it does not exist or was revoked"
        )));
    };
    let obj = &stored.object;
    if obj.get("type").and_then(Value::as_str) != Some(TOKEN_SECRET_TYPE) {
        return Err(refused(format!(
            "join token {id} is not valid: its Secret is not a bootstrap token"
        )));
    }
    let field = |name: &str| -> Option<String> {
        let b64 = obj.pointer(&format!("/data/{name}"))?.as_str()?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        String::from_utf8(bytes).ok()
    };
    let want = field("token-secret").unwrap_or_default();
    // Compared in constant time: the secret is what the token proves.
    let same = want.len() == secret.len()
        && want
            .bytes()
            .zip(secret.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return Err(refused(format!(
            "join token {id} is not valid: wrong secret"
        )));
    }
    if let Some(exp) = field("expiration") {
        match exp.parse::<jiff::Timestamp>() {
            Ok(t) if t <= jiff::Timestamp::now() => {
                return Err(refused(format!("join token {id} expired at {exp}")));
            }
            Ok(_) => {}
            Err(_) => {
                return Err(refused(format!(
                    "join token {id} has an unreadable expiration {exp:?}"
                )))
            }
        }
    }
    if field(usage).as_deref() != Some("true") {
        let what = if usage == SERVER_USAGE {
            "servers"
        } else {
            "agents"
        };
        return Err(refused(format!("join token {id} may not join {what}")));
    }
    Ok(())
}

/// Serves `POST /v1-keel/join`.
pub async fn serve(state: Arc<KubeState>, body: &[u8]) -> Result<Value, ApiError> {
    let req: JoinRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("join request: {e}")))?;
    if !compatible(&req.version, VERSION) {
        return Err(refused(format!(
            "keel {} cannot join a cluster running keel {VERSION}: versions may be at most one minor version apart",
            req.version
        )));
    }
    if req.name.is_empty() || req.name.len() > 253 {
        return Err(ApiError::BadRequest(
            "join request: name must be 1 to 253 characters".into(),
        ));
    }
    let servers = api_urls(&state).await;
    match req.role.as_str() {
        "server" => {
            check_token(&state, &req.token, SERVER_USAGE).await?;
            let pki = cluster_pki(&state.storage).await?;
            let hosts = |urls: &[String]| -> Vec<String> {
                urls.iter()
                    .filter_map(|u| crate::pki::url_host(u))
                    .collect()
            };
            let tls = pki
                .member_tls(
                    &hosts(&req.peer_urls),
                    &hosts(&req.client_urls),
                    crate::pki::LEAF_DAYS,
                )
                .map_err(|e| ApiError::BadRequest(format!("join request: certificates: {e}")))?;
            let joined = join_server(&state, &req).await?;
            Ok(serde_json::to_value(ServerJoin {
                servers,
                tls: Some(tls),
                ..joined
            })
            .map_err(|e| ApiError::Internal(e.to_string()))?)
        }
        "agent" => {
            check_token(&state, &req.token, AGENT_USAGE).await?;
            let pki = cluster_pki(&state.storage).await?;
            let server = state.server_address.clone();
            let kubeconfig = crate::pki::user_kubeconfig(
                &pki.ca_cert,
                &pki.ca_key,
                &server,
                &format!("system:node:{}", req.name),
                &["system:nodes".to_string()],
            )
            .map_err(|e| ApiError::Internal(e.to_string()))?;
            Ok(serde_json::to_value(AgentJoin {
                kubeconfig,
                servers,
            })
            .map_err(|e| ApiError::Internal(e.to_string()))?)
        }
        other => Err(ApiError::BadRequest(format!(
            "join request: role {other:?} is neither server nor agent"
        ))),
    }
}

/// Every member's Kubernetes API URL (this member's first).
pub async fn api_urls(state: &KubeState) -> Vec<String> {
    let mut out = vec![state.server_address.clone()];
    for u in crate::kubernetes_service::member_urls(&state.storage) {
        if !out.contains(&u) {
            out.push(u);
        }
    }
    out
}

/// How long a member added by a join may take to start before the next join removes it.
pub const JOIN_GRACE_SECS: i64 = 20;

fn joined_key(id: u64) -> String {
    format!("/keel/joins/{id:016x}")
}

/// When a join added member `id` (Unix seconds), if one did.
async fn joined_at(state: &KubeState, id: u64) -> Option<i64> {
    let raw = state.storage.get_raw(&joined_key(id)).await.ok()??;
    String::from_utf8(raw).ok()?.trim().parse().ok()
}

/// Adds a server to the membership. A member left half-joined by an earlier attempt (added more than
/// [`JOIN_GRACE_SECS`] ago and never started, so it never published its name) is removed first, so it
/// never blocks this one; one added more recently makes this join wait (503, retried by the joiner); a running member with
/// the same peer URLs is refused.
async fn join_server(state: &KubeState, req: &JoinRequest) -> Result<ServerJoin, ApiError> {
    let _one = state.joining.lock().await;
    if req.peer_urls.is_empty() {
        return Err(ApiError::BadRequest(
            "join request: a server needs its peer URLs".into(),
        ));
    }
    let node = state.storage.node();
    let members = node.members();
    let now = jiff::Timestamp::now().as_second();
    for m in &members {
        let same_urls = m.node.peer_urls.iter().any(|u| req.peer_urls.contains(u));
        let half_joined = m.node.name.is_empty();
        if same_urls && !half_joined {
            return Err(refused(format!(
                "a member named {:?} already has peer URL(s) {}; remove it first (etcdctl member remove {:x})",
                m.node.name,
                m.node.peer_urls.join(","),
                m.id
            )));
        }
        if !half_joined && m.node.name == req.name {
            return Err(refused(format!(
                "a member named {:?} already exists; pick another --name or remove it first",
                req.name
            )));
        }
        if half_joined && m.id != node.member_id() {
            // Added moments ago by another join: it is starting, not abandoned (a retry of this same
            // join, with the same peer URLs, replaces it at once).
            let added = joined_at(state, m.id).await;
            if let Some(t) = added.filter(|t| !same_urls && now - t < JOIN_GRACE_SECS) {
                return Err(ApiError::Unavailable(format!(
                    "member {:x} is still joining (added {}s ago); retry shortly",
                    m.id,
                    now - t
                )));
            }
            tracing::info!(member = %format!("{:x}", m.id), "removing a half-joined member before a join");
            node.member_change(MemberChange::Remove { id: m.id })
                .await
                .map_err(|e| {
                    ApiError::Unavailable(format!("removing half-joined member {:x}: {e}", m.id))
                })?;
            let _ = state.storage.delete_raw(joined_key(m.id).as_bytes()).await;
        }
    }
    let added = node
        .member_change(MemberChange::Add {
            peer_urls: req.peer_urls.clone(),
            learner: false,
        })
        .await
        .map_err(|e| ApiError::Unavailable(format!("adding member {}: {e}", req.name)))?;
    let new: Option<&MemberInfo> = added.member.as_ref();
    let new_id = new.map(|m| m.id).unwrap_or(0);
    // When it was added, so that a join meanwhile waits for it instead of taking it for abandoned.
    if let Err(e) = state
        .storage
        .put_raw(&joined_key(new_id), now.to_string().into_bytes())
        .await
    {
        tracing::warn!(%e, "recording the join time failed");
    }
    let initial_cluster = added
        .members
        .iter()
        .flat_map(|m| {
            // A member that has not started yet has no name; it is not part of how the newcomer starts.
            let name = if m.id == new_id {
                req.name.clone()
            } else {
                m.node.name.clone()
            };
            let name = (!name.is_empty()).then_some(name);
            m.node
                .peer_urls
                .iter()
                .filter_map(move |u| name.as_ref().map(|n| format!("{n}={u}")))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join(",");
    Ok(ServerJoin {
        cluster_token: node.config().cluster_token.clone(),
        initial_cluster,
        member_id: format!("{new_id:x}"),
        servers: Vec::new(),
        tls: None,
    })
}

/// The cluster PKI as stored (for signing credentials handed to joining agents).
async fn cluster_pki(
    storage: &crate::storage::Storage,
) -> Result<crate::pki::ClusterPki, ApiError> {
    let raw = storage
        .get_raw(crate::pki::PKI_KEY)
        .await?
        .ok_or_else(|| ApiError::Unavailable("the cluster PKI is not stored yet".into()))?;
    serde_json::from_slice(&raw).map_err(|e| ApiError::Internal(format!("stored PKI: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_may_differ_by_one_minor() {
        assert!(compatible("0.1.0", "0.1.5"));
        assert!(compatible("0.2.0", "0.1.0"));
        assert!(!compatible("0.3.0", "0.1.0"));
        assert!(!compatible("1.1.0", "0.1.0"));
        assert!(!compatible("x", "0.1.0"));
    }

    #[test]
    fn token_secrets_are_bootstrap_tokens_with_a_usage() {
        let (id, secret) = new_token_parts();
        assert_eq!((id.len(), secret.len()), (6, 16));
        let s = token_secret(&id, &secret, SERVER_USAGE, "d", None);
        assert_eq!(s["type"], TOKEN_SECRET_TYPE);
        assert_eq!(s["metadata"]["name"], format!("bootstrap-token-{id}"));
        assert_eq!(s["data"][SERVER_USAGE], "dHJ1ZQ==");
        assert!(s["data"].get("expiration").is_none());
    }

    #[test]
    fn tokens_pin_the_ca() {
        let t = full_token("PEM", "abcdef", "0123456789abcdef");
        assert!(t.starts_with("K10") && t.ends_with("::abcdef.0123456789abcdef"));
        assert_eq!(t.len(), 3 + 64 + 2 + 6 + 1 + 16);
    }
}
