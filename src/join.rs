//! The joining side of `keel server --join URL --token T` and `keel agent --join URL --token T`.
//!
//! The token is `K10<sha256 of the cluster CA>::<id>.<secret>`. The CA is fetched from `URL/cacerts`
//! without verification, and only if its hash matches the token is anything sent: the join request then
//! goes over TLS verified against that CA, so a man in the middle can neither learn the token's secret nor
//! hand out another cluster's identity.

use std::path::Path;

use keel_kube_api::join::{AgentJoin, ServerJoin, VERSION};
use serde_json::json;

/// Why a join failed; nothing of the newcomer is left behind when this is returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JoinError {
    #[error("--token: {0}")]
    Token(String),
    #[error("{url}: {reason}")]
    Remote { url: String, reason: String },
    #[error("the CA at {url} has hash {got}, the token pins {want}: another cluster, or someone in between")]
    CaMismatch {
        url: String,
        got: String,
        want: String,
    },
    #[error("join refused by {url}: {message}")]
    Refused { url: String, message: String },
    #[error("{url} is busy: {message}")]
    Busy { url: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// A join token split: the CA hash it pins and the `<id>.<secret>` the server checks.
pub(crate) struct Token {
    ca_hash: String,
    credential: String,
}

/// Parses `K10<64 hex>::<id>.<secret>`.
pub(crate) fn parse_token(t: &str) -> Result<Token, JoinError> {
    let rest = t.trim().strip_prefix("K10").ok_or_else(|| {
        JoinError::Token("a join token starts with K10 (keel token create prints one)".into())
    })?;
    let (hash, credential) = rest
        .split_once("::")
        .ok_or_else(|| JoinError::Token("want K10<ca hash>::<id>.<secret>".into()))?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(JoinError::Token("the CA hash must be 64 hex digits".into()));
    }
    Ok(Token {
        ca_hash: hash.to_ascii_lowercase(),
        credential: credential.to_string(),
    })
}

fn client(url: &str, ca_pem: Option<&str>) -> Result<kube::Client, JoinError> {
    let remote = |reason: String| JoinError::Remote {
        url: url.to_string(),
        reason,
    };
    let mut config = kube::Config::new(url.parse().map_err(|e| remote(format!("not a URL: {e}")))?);
    match ca_pem {
        Some(pem) => {
            use rustls::pki_types::pem::PemObject;
            let ders: Vec<Vec<u8>> =
                rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
                    .filter_map(Result::ok)
                    .map(|c| c.to_vec())
                    .collect();
            if ders.is_empty() {
                return Err(remote("the CA bundle holds no certificate".into()));
            }
            config.root_cert = Some(ders);
        }
        // Only to read /cacerts, whose hash is checked before it is trusted.
        None => config.accept_invalid_certs = true,
    }
    config.connect_timeout = Some(std::time::Duration::from_secs(10));
    config.read_timeout = Some(std::time::Duration::from_secs(60));
    kube::Client::try_from(config).map_err(|e| remote(e.to_string()))
}

/// Fetches the cluster CA from `url` and checks it against the token.
pub(crate) async fn fetch_ca(url: &str, token: &Token) -> Result<String, JoinError> {
    let remote = |reason: String| JoinError::Remote {
        url: url.to_string(),
        reason,
    };
    let c = client(url, None)?;
    let req = http::Request::get("/cacerts")
        .body(Vec::new())
        .map_err(|e| remote(e.to_string()))?;
    let pem = c
        .request_text(req)
        .await
        .map_err(|e| remote(e.to_string()))?;
    let got = keel_kube_api::join::ca_hash(&pem);
    if got != token.ca_hash {
        return Err(JoinError::CaMismatch {
            url: url.to_string(),
            got,
            want: token.ca_hash.clone(),
        });
    }
    Ok(pem)
}

async fn post_join(url: &str, ca_pem: &str, body: serde_json::Value) -> Result<String, JoinError> {
    let remote = |reason: String| JoinError::Remote {
        url: url.to_string(),
        reason,
    };
    let c = client(url, Some(ca_pem))?;
    let bytes = serde_json::to_vec(&body).map_err(|e| remote(e.to_string()))?;
    let req = http::Request::post("/v1-keel/join")
        .header("content-type", "application/json")
        .body(bytes)
        .map_err(|e| remote(e.to_string()))?;
    c.request_text(req).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 503 => JoinError::Busy {
            url: url.to_string(),
            message: s.message,
        },
        kube::Error::Api(s) => JoinError::Refused {
            url: url.to_string(),
            message: s.message,
        },
        other => remote(other.to_string()),
    })
}

/// Joins a server: the cluster adds it to the membership and says how to start.
pub(crate) async fn join_server(
    url: &str,
    token: &str,
    name: &str,
    peer_urls: &[String],
    client_urls: &[String],
) -> Result<(ServerJoin, String), JoinError> {
    let token = parse_token(token)?;
    let ca = fetch_ca(url, &token).await?;
    let body = json!({"token": token.credential, "role": "server", "name": name, "peerUrls": peer_urls, "clientUrls": client_urls, "version": VERSION});
    // Another member joining at the same moment makes the cluster answer "busy": wait for it, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let text = loop {
        match post_join(url, &ca, body.clone()).await {
            Err(JoinError::Busy { message, .. }) if std::time::Instant::now() < deadline => {
                tracing::info!(%message, "waiting for another join to finish");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            other => break other?,
        }
    };
    let answer: ServerJoin = serde_json::from_str(&text).map_err(|e| JoinError::Remote {
        url: url.to_string(),
        reason: format!("join answer: {e}"),
    })?;
    Ok((answer, ca))
}

/// Joins an agent: the cluster hands it a kubeconfig for its node identity, written to `kubeconfig`
/// (mode 0600).
pub(crate) async fn join_agent(
    url: &str,
    token: &str,
    node_name: &str,
    kubeconfig: &Path,
) -> Result<AgentJoin, JoinError> {
    let token = parse_token(token)?;
    let ca = fetch_ca(url, &token).await?;
    let text = post_join(
        url,
        &ca,
        json!({"token": token.credential, "role": "agent", "name": node_name, "version": VERSION}),
    )
    .await?;
    let answer: AgentJoin = serde_json::from_str(&text).map_err(|e| JoinError::Remote {
        url: url.to_string(),
        reason: format!("join answer: {e}"),
    })?;
    // The API URL the joiner used, not the member's advertised one: it is what this machine can reach.
    let kubeconfig_text = rewrite_server(&answer.kubeconfig, url);
    write_private(kubeconfig, kubeconfig_text.as_bytes())?;
    Ok(answer)
}

/// Replaces the `server:` line of a kubeconfig.
fn rewrite_server(kubeconfig: &str, url: &str) -> String {
    kubeconfig
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("server: ") {
                format!("{}server: {url}", &l[..l.len() - t.len()])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Writes a file only its owner may read, durably.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), JoinError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| JoinError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_bad_ones_say_why() {
        let hash = "a".repeat(64);
        let t = parse_token(&format!("K10{hash}::abcdef.0123456789abcdef")).ok();
        assert_eq!(
            t.map(|t| t.credential).as_deref(),
            Some("abcdef.0123456789abcdef")
        );
        assert!(parse_token("abcdef.0123456789abcdef").is_err());
        assert!(parse_token("K10abc::x.y").is_err());
    }

    #[test]
    fn the_kubeconfig_points_at_the_url_used() {
        let k = "clusters:\n- cluster:\n    server: https://10.0.0.1:6443\n";
        assert_eq!(
            rewrite_server(k, "https://127.0.0.1:6443"),
            "clusters:\n- cluster:\n    server: https://127.0.0.1:6443\n"
        );
    }
}
