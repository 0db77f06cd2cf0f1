//! The `default/kubernetes` Service (ClusterIP `10.96.0.1`, port 443) and its Endpoints and EndpointSlice,
//! listing every member that serves the API, so clients inside the cluster find the API as they expect.
//!
//! Each member publishes its API address under `/keel/apiservers/<member id>` when it starts serving; the Raft
//! leader turns the published addresses of current members into the Endpoints and drops those of removed
//! members (upstream's endpoint reconciler does the same with `/registry/masterleases/`).

use std::net::IpAddr;

use serde_json::{json, Value};

use super::alloc::KUBERNETES_SERVICE_IP;
use super::object;
use super::status::ApiError;
use super::storage::{Storage, WriteOutcome};

const PREFIX: &str = "/keel/apiservers/";

/// Publishes this member's API address (`https://host:port`).
pub async fn publish(storage: &Storage, url: &str) -> Result<(), ApiError> {
    let key = format!("{PREFIX}{:016x}", storage.member_id());
    let value =
        serde_json::to_vec(&json!({"url": url})).map_err(|e| ApiError::Internal(e.to_string()))?;
    storage.put_raw(&key, value).await
}

/// The API address member `member` published, as this member's store has it (a local read: the
/// member may be cut off from the others).
pub fn published(storage: &Storage, member: u64) -> Option<String> {
    let key = format!("{PREFIX}{member:016x}");
    let (_, value) = storage
        .list_raw(key.as_bytes())
        .ok()?
        .into_iter()
        .find(|(k, _)| k.as_ref() == key.as_bytes())?;
    let v: Value = serde_json::from_slice(&value).ok()?;
    v.get("url")?.as_str().map(str::to_string)
}

fn ip_port(url: &str) -> Option<(IpAddr, u16)> {
    let hostport = url.split("://").nth(1)?.split('/').next()?;
    let (host, port) = hostport.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.parse().ok()?, port.parse().ok()?))
}

/// The published addresses of current members, stale ones removed.
async fn api_addresses(storage: &Storage) -> Result<Vec<(IpAddr, u16)>, ApiError> {
    let members: Vec<String> = storage
        .member_ids()
        .iter()
        .map(|id| format!("{PREFIX}{id:016x}"))
        .collect();
    // Raw values are not Kubernetes objects: read them as they are.
    let mut out = Vec::new();
    for (key, value) in storage.list_raw(PREFIX.as_bytes())? {
        if !members.iter().any(|m| m.as_bytes() == key.as_ref()) {
            // A removed member's address; a failed delete is retried on the next pass.
            let _ = storage.delete_raw(&key).await;
            continue;
        }
        let url = serde_json::from_slice::<Value>(&value)
            .ok()
            .and_then(|v| v.get("url").and_then(Value::as_str).map(str::to_string));
        if let Some(a) = url.as_deref().and_then(ip_port) {
            out.push(a);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The API URLs current members published (read from this member's store, no quorum needed).
pub fn member_urls(storage: &Storage) -> Vec<String> {
    let members: Vec<String> = storage
        .member_ids()
        .iter()
        .map(|id| format!("{PREFIX}{id:016x}"))
        .collect();
    let mut out: Vec<String> = storage
        .list_raw(PREFIX.as_bytes())
        .unwrap_or_default()
        .into_iter()
        .filter(|(key, _)| members.iter().any(|m| m.as_bytes() == key.as_ref()))
        .filter_map(|(_, value)| {
            serde_json::from_slice::<Value>(&value)
                .ok()?
                .get("url")?
                .as_str()
                .map(str::to_string)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn service(port: u16) -> Value {
    let ip = KUBERNETES_SERVICE_IP.to_string();
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "uid": object::new_uid(),
                     "creationTimestamp": object::now_rfc3339(),
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "sessionAffinity": "None",
                 "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
        "status": {"loadBalancer": {}},
    })
}

/// Writes `desired` at `key` unless the stored object already has the same `field`.
async fn ensure(
    storage: &Storage,
    key: &str,
    mut desired: Value,
    fields: &[&str],
) -> Result<(), ApiError> {
    match storage.get(key, false).await? {
        None => {
            let _ = storage.put_if(key, &desired, 0).await?;
        }
        Some(cur) => {
            if fields.iter().all(|f| cur.object.get(*f) == desired.get(*f)) {
                return Ok(());
            }
            let mut obj = cur.object.clone();
            for f in fields {
                if let (Some(m), Some(v)) = (obj.as_object_mut(), desired.get_mut(*f)) {
                    m.insert((*f).to_string(), v.take());
                }
            }
            if let WriteOutcome::Lost(_) = storage.put_if(key, &obj, cur.mod_revision).await? {
                // Someone else wrote it meanwhile; the next pass looks again.
            }
        }
    }
    Ok(())
}

/// How often the leader brings the Service and its endpoints up to date (upstream's endpoint reconciler
/// runs every 10 s; a new leader runs a pass at once).
const PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// Keeps the `kubernetes` Service, Endpoints and EndpointSlice current while this member leads.
pub async fn run(storage: Storage, stop: tokio::sync::watch::Receiver<bool>) {
    let st = &storage;
    super::leader::while_leading(st, "kubernetes service", PERIOD, stop, || reconcile(st)).await
}

/// One pass (on the leader): the Service, its Endpoints and its EndpointSlice.
pub async fn reconcile(storage: &Storage) -> Result<(), ApiError> {
    let addrs = api_addresses(storage).await?;
    let Some(&(_, port)) = addrs.first() else {
        return Ok(());
    };
    let svc_key = "/registry/services/specs/default/kubernetes";
    if storage.get(svc_key, false).await?.is_none() {
        let claim = format!("/keel/ranges/serviceips/{KUBERNETES_SERVICE_IP}");
        let _ = storage
            .put_claiming(svc_key, &service(port), 0, &[claim])
            .await?;
    }
    let ips: Vec<Value> = addrs
        .iter()
        .filter(|(_, p)| *p == port)
        .map(|(ip, _)| json!({"ip": ip.to_string()}))
        .collect();
    let meta = |kind: &str| {
        json!({"name": "kubernetes", "namespace": "default", "uid": object::new_uid(),
        "creationTimestamp": object::now_rfc3339(),
        "labels": if kind == "EndpointSlice" {
            json!({"kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "keel"})
        } else {
            json!({"endpointslice.kubernetes.io/skip-mirror": "true"})
        }})
    };
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": meta("Endpoints"),
        "subsets": [{"addresses": ips, "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    });
    ensure(
        storage,
        "/registry/services/endpoints/default/kubernetes",
        endpoints,
        &["subsets"],
    )
    .await?;
    let slice_endpoints: Vec<Value> = addrs
        .iter()
        .filter(|(ip, p)| *p == port && ip.is_ipv4())
        .map(|(ip, _)| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}}))
        .collect();
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta("EndpointSlice"),
        "addressType": "IPv4", "endpoints": slice_endpoints,
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    ensure(
        storage,
        "/registry/endpointslices/default/kubernetes",
        slice,
        &["endpoints", "ports"],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_from_urls() {
        assert_eq!(
            ip_port("https://127.0.0.11:6443"),
            Some(("127.0.0.11".parse().expect("ip"), 6443))
        );
        assert_eq!(
            ip_port("https://[::1]:6443"),
            Some(("::1".parse().expect("ip"), 6443))
        );
        assert_eq!(ip_port("https://node-a:6443"), None);
    }
}
