//! Availability of APIServices (upstream's `APIServiceAvailabilityController`), plus this member's cache of
//! the aggregated servers' discovery documents.
//!
//! Every member checks every remote APIService each [`PERIOD`]: its Service exists and listens on the port,
//! an EndpointSlice of the Service has a ready address for that port, and `GET /apis/<group>/<version>` on
//! it answers 2xx. The answer feeds this member's discovery (`/apis`, aggregated discovery), so each
//! member's documents follow its own view. Only the Raft leader writes the `Available` condition (Local
//! APIServices are always `True`/`Local`), and only when it changes, so members never fight over it.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tracing::{debug, info};

use super::{group_version, service_of, Aggregator, Remote, PREFIX};
use crate::dial::{resolve_service, unavailable, Endpoint, Unavailable};
use crate::object::{self, path};
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage};

/// How often the checks run (upstream re-checks every 30 s and on every change; a short period stands in
/// for the change notifications).
pub(crate) const PERIOD: Duration = Duration::from_secs(2);
/// How long one discovery check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    path(v, p).and_then(Value::as_str).unwrap_or("")
}

/// Resolves the APIService's Service to one ready endpoint (picked at random among the ready ones), with
/// upstream's reasons when it cannot.
pub(crate) fn resolve(storage: &Storage, apiservice: &Value) -> Result<Endpoint, Unavailable> {
    let svc_ref = service_of(apiservice).cloned().unwrap_or(Value::Null);
    let port = svc_ref.get("port").and_then(Value::as_i64).unwrap_or(443);
    resolve_service(storage, s(&svc_ref, "namespace"), s(&svc_ref, "name"), port)
}

/// Opens an HTTP/1.1 connection to `ep` over TLS.
pub(crate) async fn connect(
    tls: Arc<rustls::ClientConfig>,
    ep: &Endpoint,
) -> Result<hyper::client::conn::http1::SendRequest<axum::body::Body>, String> {
    let stream =
        crate::dial::dial_tls(tls, &ep.authority(), &ep.server_name, CHECK_TIMEOUT).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            debug!(error = %e, "aggregated API connection ended");
        }
    });
    Ok(sender)
}

/// The discovery check: `GET /apis/<group>/<version>` answering 2xx, as the aggregator itself
/// (`system:kube-aggregator` in `system:masters`). Returns the APIResourceList.
async fn discovery_check(
    agg: &Aggregator,
    storage: &Storage,
    apiservice: &Value,
) -> Result<Value, Unavailable> {
    let ep = resolve(storage, apiservice)?;
    let (group, version) = group_version(apiservice);
    let url = format!("https://{}/apis/{group}/{version}", ep.authority());
    let failed = |e: String| {
        unavailable(
            "FailedDiscoveryCheck",
            format!("failing or missing response from {url}: {e}"),
        )
    };
    let tls = agg.tls_for(apiservice).map_err(failed)?;
    let work = async {
        let mut sender = connect(tls, &ep).await?;
        let req = hyper::Request::get(format!("/apis/{group}/{version}"))
            .header(hyper::header::HOST, ep.server_name.as_str())
            .header(hyper::header::ACCEPT, "application/json")
            .header("X-Remote-User", "system:kube-aggregator")
            .header("X-Remote-Group", "system:masters")
            .body(axum::body::Body::new(Empty::<bytes::Bytes>::new()))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("bad status from {url}: {}", status.as_u16()));
        }
        serde_json::from_slice::<Value>(&body).map_err(|e| format!("decoding discovery: {e}"))
    };
    match tokio::time::timeout(CHECK_TIMEOUT, work).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failed(e)),
        Err(_) => Err(failed("context deadline exceeded".into())),
    }
}

/// The condition an APIService should carry now.
fn wanted(result: &Result<(), Unavailable>, local: bool) -> Value {
    match (local, result) {
        (true, _) => json!({"type": "Available", "status": "True", "reason": "Local",
                            "message": "Local APIServices are always available"}),
        (false, Ok(())) => json!({"type": "Available", "status": "True", "reason": "Passed",
                                  "message": "all checks passed"}),
        (false, Err(u)) => json!({"type": "Available", "status": "False", "reason": u.reason,
                                  "message": u.message}),
    }
}

/// Writes the `Available` condition if it differs (leader only), keeping `lastTransitionTime` while
/// the status stays the same.
async fn write_condition(
    storage: &Storage,
    key: &str,
    obj: &Value,
    rev: i64,
    mut cond: Value,
) -> Result<(), ApiError> {
    let conds: Vec<Value> = path(obj, "status.conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let old = conds
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"));
    if let Some(o) = old {
        if ["status", "reason", "message"]
            .iter()
            .all(|f| o.get(*f) == cond.get(*f))
        {
            return Ok(());
        }
    }
    let ts = match old {
        Some(o) if o.get("status") == cond.get("status") => o
            .get("lastTransitionTime")
            .cloned()
            .unwrap_or_else(|| json!(object::now_rfc3339())),
        _ => json!(object::now_rfc3339()),
    };
    if let Some(m) = cond.as_object_mut() {
        m.insert("lastTransitionTime".into(), ts);
    }
    let mut new_conds: Vec<Value> = conds
        .into_iter()
        .filter(|c| c.get("type").and_then(Value::as_str) != Some("Available"))
        .collect();
    new_conds.push(cond.clone());
    let mut out = obj.clone();
    out["status"] = json!({"conditions": new_conds});
    info!(apiservice = object::name(obj), status = %cond["status"], reason = %cond["reason"],
          "APIService availability changed");
    // A lost race means someone wrote meanwhile; the next pass looks again.
    let _ = storage.put_if(key, &out, rev).await?;
    Ok(())
}

/// One pass over every APIService.
pub(crate) async fn pass(storage: &Storage, agg: &Aggregator) -> Result<(), ApiError> {
    let page = storage.range(PREFIX.as_bytes(), &prefix_end(PREFIX.as_bytes()), 0, 0)?;
    let leader = storage.is_leader();
    let mut remote = Vec::new();
    for (key, st) in page.items {
        let key = String::from_utf8_lossy(&key).to_string();
        let obj = st.object;
        if object::is_deleting(&obj) {
            continue;
        }
        let local = service_of(&obj).is_none();
        let result = if local {
            Ok(())
        } else {
            let (group, version) = group_version(&obj);
            let checked = discovery_check(agg, storage, &obj).await;
            let num = |p: &str| path(&obj, p).and_then(Value::as_i64).unwrap_or(0);
            remote.push(Remote {
                group,
                version,
                group_priority: num("spec.groupPriorityMinimum"),
                version_priority: num("spec.versionPriority"),
                resources: checked.as_ref().ok().cloned(),
            });
            checked.map(|_| ())
        };
        if leader {
            write_condition(storage, &key, &obj, st.mod_revision, wanted(&result, local)).await?;
        }
    }
    agg.set_remote(remote);
    Ok(())
}

/// Runs the checks on this member until `stop` fires.
pub(crate) async fn run(
    storage: Storage,
    agg: Arc<Aggregator>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = pass(&storage, &agg).await {
            debug!(error = %e, "APIService availability pass failed; retrying");
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(PERIOD) => {}
        }
    }
}
