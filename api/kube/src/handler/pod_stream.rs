//! `pods/{name}/exec`, `pods/{name}/attach` and `pods/{name}/portforward`: upgrade requests (WebSocket
//! or SPDY/3.1) relayed to the pod's node agent (`/exec/…`, `/attach/…`, `/portForward/…`, with the
//! kubelet's parameter names `input`, `output`, `error`), then the two upgraded connections spliced. The
//! API server never looks inside the stream: the agent relays SPDY to the container runtime as it is and
//! translates kubectl's WebSocket (`v5.channel.k8s.io`, port-forward's `SPDY/3.1+portforward.k8s.io`
//! tunnel) to the runtime's SPDY itself, which upstream's kube-apiserver does here. An answer other
//! than 101 reaches the client unchanged, so kubectl's fallback from WebSocket to SPDY still works
//! where an agent refuses the WebSocket.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use keel_client_kit::upgrade;
use serde_json::Value;

use super::pod_log::{agent_of, container_of};
use super::KubeState;
use crate::dial::connect_agent;
use crate::status::{ApiError, Target};

/// Headers that belong to one hop (or to the API server's own authentication).
const HOP_BY_HOP: [&str; 6] = [
    "host",
    "authorization",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "impersonate-user",
];

/// The API's query names for exec and attach, and the kubelet's.
const RENAMED: [(&str, &str); 4] = [
    ("stdin", "input"),
    ("stdout", "output"),
    ("stderr", "error"),
    ("tty", "tty"),
];

/// Serves one exec, attach or portforward request for pod `ns/name`.
pub async fn serve(
    state: Arc<KubeState>,
    identity: Option<crate::authn::Identity>,
    ns: &str,
    name: &str,
    sub: &str,
    req: Request,
) -> Result<Response, ApiError> {
    let key = format!("/registry/pods/{ns}/{name}");
    let pod = state
        .storage
        .get(&key, true)
        .await?
        .ok_or_else(|| ApiError::NotFound(Target::new("", "pods", name)))?
        .object;
    let query = req.uri().query().unwrap_or_default().to_string();
    let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    admit_connect(&state, identity, ns, name, sub, &params).await?;
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if matches!(phase, "Succeeded" | "Failed") && sub != "portforward" {
        return Err(ApiError::BadRequest(format!(
            "cannot {sub} into a container in a completed pod; current phase is {phase}"
        )));
    }
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let path = match sub {
        "exec" | "attach" => {
            let container = container_of(&pod, name, get("container"))?;
            let mut q = form_urlencoded::Serializer::new(String::new());
            if sub == "exec" {
                let cmd: Vec<&str> = params
                    .iter()
                    .filter(|(k, _)| k == "command")
                    .map(|(_, v)| v.as_str())
                    .collect();
                if cmd.is_empty() {
                    return Err(ApiError::BadRequest(
                        "you must specify at least one command for the container".into(),
                    ));
                }
                for c in cmd {
                    q.append_pair("command", c);
                }
            }
            for (api, kubelet) in RENAMED {
                if let Some(v) = get(api) {
                    q.append_pair(kubelet, v);
                }
            }
            let what = if sub == "exec" { "exec" } else { "attach" };
            format!(
                "/{what}/{}/{}/{}?{}",
                enc(ns),
                enc(name),
                enc(&container),
                q.finish()
            )
        }
        _ => {
            let mut q = form_urlencoded::Serializer::new(String::new());
            for (k, v) in params.iter().filter(|(k, _)| k == "ports" || k == "port") {
                let _ = k;
                q.append_pair("port", v);
            }
            format!("/portForward/{}/{}?{}", enc(ns), enc(name), q.finish())
        }
    };
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (host, port, tls) = agent_of(&state, name, &node_name).await?;
    relay(req, tls, &host, port, &path).await
}

/// The connection's options as upstream's CONNECT admission sees them (`PodExecOptions`,
/// `PodAttachOptions`, `PodPortForwardOptions`), offered to the validating policies and webhooks that
/// match `pods/<sub>` with CONNECT before anything is relayed.
async fn admit_connect(
    state: &KubeState,
    identity: Option<crate::authn::Identity>,
    ns: &str,
    name: &str,
    sub: &str,
    params: &[(String, String)],
) -> Result<(), ApiError> {
    let flag = |k: &str| {
        params
            .iter()
            .any(|(n, v)| n == k && matches!(v.as_str(), "1" | "true"))
    };
    let all = |k: &str| -> Vec<&str> {
        params
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let container = all("container").first().copied().unwrap_or("");
    let options = match sub {
        "exec" => serde_json::json!({"kind": "PodExecOptions", "apiVersion": "v1",
            "stdin": flag("stdin"), "stdout": flag("stdout"), "stderr": flag("stderr"),
            "tty": flag("tty"), "container": container, "command": all("command")}),
        "attach" => serde_json::json!({"kind": "PodAttachOptions", "apiVersion": "v1",
            "stdin": flag("stdin"), "stdout": flag("stdout"), "stderr": flag("stderr"),
            "tty": flag("tty"), "container": container}),
        _ => {
            let ports: Vec<i64> = params
                .iter()
                .filter(|(k, _)| k == "ports" || k == "port")
                .filter_map(|(_, v)| v.parse().ok())
                .collect();
            serde_json::json!({"kind": "PodPortForwardOptions", "apiVersion": "v1", "ports": ports})
        }
    };
    let Some(pods) = crate::resource::find("", "v1", "pods") else {
        return Ok(());
    };
    let identity = identity.unwrap_or_else(|| crate::authn::Identity {
        user: String::new(),
        groups: Vec::new(),
    });
    let req = crate::admission::request::Request {
        operation: crate::admission::request::Operation::Connect,
        requested: &pods,
        stored: &pods,
        namespace: Some(ns),
        name,
        subresource: Some(sub),
        dry_run: false,
        identity: &identity,
        old: None,
        authz: Some(&state.authz),
    };
    crate::admission::policy::validate(&state.storage, &state.registry, &req, Some(&options))
        .await?;
    state
        .webhooks
        .validate(&state.storage, &req, Some(&options))
        .await?;
    Ok(())
}

async fn relay(
    mut req: Request,
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
    path: &str,
) -> Result<Response, ApiError> {
    let failed = |e: &dyn std::fmt::Display| {
        ApiError::Internal(format!(
            "error dialing backend: node agent {host}:{port}: {e}"
        ))
    };
    let stream = connect_agent(tls, host, port)
        .await
        .map_err(|e| failed(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(&e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let answer = upgrade::relay(&mut req, &mut sender, path, host, &HOP_BY_HOP, "node agent")
        .await
        .map_err(|e| failed(&e))?;
    if let upgrade::Answer::Refused { status, body, .. } = &answer {
        if !status.is_success() && !status.is_client_error() {
            return Err(ApiError::Internal(format!(
                "node agent answered {status}: {}",
                String::from_utf8_lossy(body).trim()
            )));
        }
    }
    // A 4xx from the agent or the runtime's streaming server is a refused upgrade (containerd 1.6 itself
    // refuses kubectl's WebSocket `v5.channel.k8s.io` with 403; keel's agent translates it): passed on as
    // it is, for the client to fall back to SPDY.
    answer
        .into_response::<Body>()
        .map_err(|e| ApiError::Internal(e.to_string()))
}
