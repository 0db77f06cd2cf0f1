//! GET `pods/{name}/log`: the API server finds the pod's node and proxies to that node agent's
//! `/containerLogs/{namespace}/{pod}/{container}` over HTTPS with its kubelet-client certificate, streaming
//! the answer back (so `kubectl logs -f` follows). As kube-apiserver does with
//! `--kubelet-certificate-authority`, the agent's serving certificate must be signed by the cluster CA for
//! the address dialed (agents get theirs through a kubelet-serving CertificateSigningRequest); the agent,
//! for its part, authenticates and authorizes its callers.
//!
//! Checked here first, with upstream's messages: the container name (required when the pod has several),
//! a pod with no node or a container still waiting, the numeric parameters.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::Value;

use super::{Call, KubeState};
use crate::dial::{agent_address, get_from_agent};
use crate::status::{ApiError, Target};

/// Query parameters passed on to the agent.
const FORWARDED: [&str; 7] = [
    "follow",
    "previous",
    "timestamps",
    "tailLines",
    "sinceSeconds",
    "sinceTime",
    "limitBytes",
];

fn names(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Which container's log: the one named, or the only one.
pub(crate) fn container_of(
    pod: &Value,
    name: &str,
    asked: Option<&str>,
) -> Result<String, ApiError> {
    let spec = pod.get("spec");
    let app = names(spec.and_then(|s| s.get("containers")));
    let init = names(spec.and_then(|s| s.get("initContainers")));
    let eph = names(spec.and_then(|s| s.get("ephemeralContainers")));
    match asked.filter(|c| !c.is_empty()) {
        Some(c) => {
            if app.iter().chain(&init).chain(&eph).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(ApiError::BadRequest(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        None if app.len() == 1 => Ok(app[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                app.join(" ")
            );
            if !init.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            Err(ApiError::BadRequest(msg))
        }
    }
}

/// The waiting reason of `container` in the pod's status, if it waits (and has never run).
fn waiting_reason(pod: &Value, container: &str) -> Option<String> {
    let st = pod.get("status")?;
    for list in [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ] {
        for cs in st.get(list).and_then(Value::as_array).into_iter().flatten() {
            if cs.get("name").and_then(Value::as_str) != Some(container) {
                continue;
            }
            let waiting = cs.pointer("/state/waiting")?;
            let ran = cs.pointer("/lastState/terminated").is_some();
            return (!ran).then(|| {
                waiting
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("ContainerCreating")
                    .to_string()
            });
        }
    }
    Some("ContainerCreating".into())
}

/// Where pod `name`'s node agent answers, and the TLS to reach it: upstream's errors for a pod with no
/// node, a node that is gone or has no address, and a member without a kubelet-client certificate.
pub(crate) async fn agent_of(
    state: &KubeState,
    name: &str,
    node_name: &str,
) -> Result<(String, u16, Arc<rustls::ClientConfig>), ApiError> {
    if node_name.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let node = state
        .storage
        .get(&format!("/registry/minions/{node_name}"), true)
        .await?
        .ok_or_else(|| ApiError::NotFound(Target::new("", "nodes", node_name)))?
        .object;
    let (host, port) = agent_address(&node).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "node {node_name} has no address to reach its agent at"
        ))
    })?;
    let tls = state.kubelet_tls().ok_or_else(|| {
        ApiError::Unavailable("this API server has no client certificate for node agents".into())
    })?;
    Ok((host, port, tls))
}

/// GET `pods/{name}/log`.
pub async fn log(call: Call) -> Result<Response, ApiError> {
    let name = call.name().to_string();
    let ns = call.route.namespace.clone().unwrap_or_default();
    for k in ["tailLines", "sinceSeconds", "limitBytes"] {
        call.params.int(k)?;
    }
    let pod = call
        .state
        .storage
        .get(&call.key(), true)
        .await?
        .ok_or_else(|| ApiError::NotFound(Target::new("", "pods", &name)))?
        .object;
    let container = container_of(&pod, &name, call.params.get("container"))?;
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let previous = call.params.flag("previous");
    if !previous {
        if let Some(reason) = waiting_reason(&pod, &container) {
            return Err(ApiError::BadRequest(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
            )));
        }
    }
    let (host, port, tls) = agent_of(&call.state, &name, &node_name).await?;
    let query = {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for k in FORWARDED {
            if let Some(v) = call.params.get(k) {
                q.append_pair(k, v);
            }
        }
        q.finish()
    };
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let path = format!(
        "/containerLogs/{}/{}/{}?{}",
        enc(&ns),
        enc(&name),
        enc(&container),
        query
    );
    let upstream = get_from_agent(tls, &host, port, &path).await?;
    let status = upstream.status();
    if status != hyper::StatusCode::OK {
        let text = upstream
            .into_body()
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        let msg = text.trim().to_string();
        return Err(match status.as_u16() {
            400 | 404 => ApiError::BadRequest(msg),
            _ => ApiError::Internal(format!("node agent {node_name} answered {status}: {msg}")),
        });
    }
    let body = Body::new(upstream.into_body().map_err(axum::Error::new));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(body)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_is_required_when_there_are_several() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        let e = container_of(&pod, "p", None).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]")
        );
        assert_eq!(
            container_of(&pod, "p", Some("i")).ok().as_deref(),
            Some("i")
        );
        assert_eq!(
            container_of(&pod, "p", Some("x"))
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("container x is not valid for pod p")
        );
        let one = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(container_of(&one, "p", None).ok().as_deref(), Some("only"));
    }
}
