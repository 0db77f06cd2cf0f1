//! `keel token create|list|revoke`: the cluster's join tokens (bootstrap-token Secrets in `kube-system`,
//! see `keel_kube_api::join`), managed through the Kubernetes API with an admin kubeconfig.

use k8s_openapi::api::core::v1::Secret;
use keel_kube_api::join::{
    full_token, new_token_parts, token_secret, AGENT_USAGE, SERVER_USAGE, TOKEN_SECRET_TYPE,
};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use crate::cli::{TokenArgs, TokenCommand};
use crate::server::ServerError;

fn err(e: impl std::fmt::Display) -> ServerError {
    ServerError::Config(e.to_string())
}

/// Runs `keel token ...`.
pub(crate) async fn run(a: TokenArgs) -> Result<(), ServerError> {
    let path = a
        .kubeconfig
        .clone()
        .unwrap_or_else(|| a.data_dir.join("admin.kubeconfig"));
    let config = crate::control::load_kubeconfig(&path).await?;
    let client = kube::Client::try_from(config).map_err(err)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    match a.command {
        TokenCommand::Create {
            ttl,
            agent,
            description,
        } => {
            let ca = client
                .request_text(
                    http::Request::get("/cacerts")
                        .body(Vec::new())
                        .map_err(err)?,
                )
                .await
                .map_err(|e| err(format!("reading the cluster CA: {e}")))?;
            let (id, secret) = new_token_parts();
            let expiration = if ttl.is_zero() {
                None
            } else {
                let span = jiff::SignedDuration::try_from(ttl).map_err(err)?;
                Some(jiff::Timestamp::now().checked_add(span).map_err(err)?)
            };
            let usage = if agent { AGENT_USAGE } else { SERVER_USAGE };
            let obj = token_secret(&id, &secret, usage, &description, expiration);
            let s: Secret = serde_json::from_value(obj).map_err(err)?;
            secrets
                .create(&PostParams::default(), &s)
                .await
                .map_err(|e| err(format!("creating the token: {e}")))?;
            println!("{}", full_token(&ca, &id, &secret));
            Ok(())
        }
        TokenCommand::List => {
            let list = secrets
                .list(&ListParams::default().fields(&format!("type={TOKEN_SECRET_TYPE}")))
                .await
                .map_err(|e| err(format!("listing tokens: {e}")))?;
            println!("{:<8}{:<8}{:<22}DESCRIPTION", "ID", "ROLE", "EXPIRES");
            for s in list.items {
                let field = |k: &str| {
                    s.data
                        .as_ref()
                        .and_then(|d| d.get(k))
                        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                };
                let role = match (field(SERVER_USAGE), field(AGENT_USAGE)) {
                    (Some(_), _) => "server",
                    (None, Some(_)) => "agent",
                    _ => "-",
                };
                println!(
                    "{:<8}{:<8}{:<22}{}",
                    field("token-id").unwrap_or_default(),
                    role,
                    field("expiration").unwrap_or_else(|| "never".into()),
                    field("description").unwrap_or_default()
                );
            }
            Ok(())
        }
        TokenCommand::Revoke { id } => {
            // Accept a whole token too: its ID is what names the Secret.
            let id = id.rsplit("::").next().unwrap_or(&id);
            let id = id.split('.').next().unwrap_or(id).to_string();
            secrets
                .delete(&format!("bootstrap-token-{id}"), &DeleteParams::default())
                .await
                .map_err(|e| err(format!("revoking token {id}: {e}")))?;
            println!("token {id} revoked");
            Ok(())
        }
    }
}
