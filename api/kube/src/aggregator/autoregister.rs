//! Local APIServices (upstream's autoregister and crdregistration controllers), on the Raft leader: one
//! per group-version this server answers itself, with no `spec.service`.
//!
//! - Built-in group-versions (and `v1beta1.metrics.k8s.io`, which keel serves itself) get upstream's
//!   priorities and the label `kube-aggregator.kubernetes.io/automanaged: onstart`. They are created when
//!   missing and otherwise left alone, so an operator may point one elsewhere (a real metrics-server's
//!   APIService replaces keel's own `metrics.k8s.io`).
//! - Served CRD versions get priorities 1000/100 and the label `true`: created, corrected when their spec
//!   drifts, and deleted when no CRD serves the group-version any more.
//!
//! The leader also keeps `kube-system/extension-apiserver-authentication`, the ConfigMap aggregated
//! servers read to trust the front-proxy certificate and find the user headers.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{AUTOMANAGED, PREFIX};
use crate::crd::registry::Registry;
use crate::object;
use crate::resource;
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage, WriteOutcome};

/// Upstream's priorities of built-in group-versions (group minimum, version), as kube-apiserver
/// registers them; unknown groups get a low default.
pub(crate) fn builtin_priority(group: &str, version: &str) -> (i64, i64) {
    let group_priority = match group {
        "" => return (18000, 1),
        "apiregistration.k8s.io" => 18000,
        "apps" => 17800,
        "events.k8s.io" => 17750,
        "authentication.k8s.io" => 17700,
        "authorization.k8s.io" => 17600,
        "autoscaling" => 17500,
        "batch" => 17400,
        "certificates.k8s.io" => 17300,
        "networking.k8s.io" => 17200,
        "policy" => 17100,
        "rbac.authorization.k8s.io" => 17000,
        "storage.k8s.io" => 16800,
        "apiextensions.k8s.io" | "admissionregistration.k8s.io" => 16700,
        "scheduling.k8s.io" => 16600,
        "coordination.k8s.io" => 16500,
        "node.k8s.io" => 16300,
        "discovery.k8s.io" => 16200,
        "flowcontrol.apiserver.k8s.io" => return (16100, 21),
        // What metrics-server registers its group with.
        crate::metrics_api::GROUP => return (100, 100),
        _ => return (1000, 100),
    };
    let _ = version;
    (group_priority, 15)
}

/// `v1.apps`, or `v1.` for the core group.
pub(crate) fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

fn local(group: &str, version: &str, gp: i64, vp: i64, mode: &str) -> Value {
    let mut spec = json!({"version": version, "groupPriorityMinimum": gp, "versionPriority": vp});
    if !group.is_empty() {
        spec["group"] = json!(group);
    }
    json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name_of(group, version), "uid": object::new_uid(),
                     "creationTimestamp": object::now_rfc3339(),
                     "labels": {AUTOMANAGED: mode}},
        "spec": spec,
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local",
                                   "message": "Local APIServices are always available",
                                   "lastTransitionTime": object::now_rfc3339()}]},
    })
}

/// The built-in group-versions keel answers itself.
fn builtin_group_versions() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in resource::BUILTIN.iter() {
        let gv = (r.group.to_string(), r.version.to_string());
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out.push((crate::metrics_api::GROUP.to_string(), "v1beta1".to_string()));
    out
}

/// One pass (on the leader).
pub(crate) async fn reconcile(storage: &Storage, registry: &Registry) -> Result<(), ApiError> {
    let page = storage.range(PREFIX.as_bytes(), &prefix_end(PREFIX.as_bytes()), 0, 0)?;
    let mut existing: BTreeMap<String, (Value, i64)> = BTreeMap::new();
    for (key, st) in page.items {
        let key = String::from_utf8_lossy(&key).to_string();
        existing.insert(key, (st.object, st.mod_revision));
    }
    let builtin = builtin_group_versions();
    for (g, v) in &builtin {
        let key = format!("{PREFIX}{}", name_of(g, v));
        if !existing.contains_key(&key) {
            let (gp, vp) = builtin_priority(g, v);
            let _ = storage
                .put_if(&key, &local(g, v, gp, vp, "onstart"), 0)
                .await?;
        }
    }
    // CRD group-versions: every served version of every established CRD the registry serves.
    let mut crd_gvs: Vec<(String, String)> = Vec::new();
    for (g, versions) in registry.groups() {
        for v in versions {
            let gv = (g.clone(), v.clone());
            if builtin.contains(&gv) {
                continue;
            }
            let custom = registry
                .of_group_version(&g, &v)
                .iter()
                .any(|d| d.custom.is_some());
            if custom {
                crd_gvs.push(gv);
            }
        }
    }
    for (g, v) in &crd_gvs {
        let key = format!("{PREFIX}{}", name_of(g, v));
        let desired = local(g, v, 1000, 100, "true");
        match existing.get(&key) {
            None => {
                let _ = storage.put_if(&key, &desired, 0).await?;
            }
            Some((cur, rev)) => {
                let managed = object::labels(cur)
                    .and_then(|l| l.get(AUTOMANAGED))
                    .and_then(Value::as_str)
                    == Some("true");
                if managed && cur.get("spec") != desired.get("spec") {
                    let mut o = cur.clone();
                    o["spec"] = desired["spec"].clone();
                    let _ = storage.put_if(&key, &o, *rev).await?;
                }
            }
        }
    }
    // CRD group-versions no longer served.
    for (key, (cur, rev)) in &existing {
        let managed = object::labels(cur)
            .and_then(|l| l.get(AUTOMANAGED))
            .and_then(Value::as_str)
            == Some("true");
        if !managed {
            continue;
        }
        let gv = super::group_version(cur);
        if !crd_gvs.contains(&gv) {
            if let WriteOutcome::Done(_) = storage.delete_if(key, *rev, &[]).await? {
                tracing::info!(
                    apiservice = object::name(cur),
                    "removed the APIService of a CRD group-version no longer served"
                );
            }
        }
    }
    Ok(())
}

/// How often the leader brings Local APIServices in step (CRD changes show within this period).
const PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps Local APIServices and the authentication ConfigMap current while this member leads.
pub(crate) async fn run(
    storage: Storage,
    registry: std::sync::Arc<Registry>,
    ca_pem: String,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let (st, reg, ca) = (&storage, &registry, &ca_pem);
    crate::leader::while_leading(st, "autoregister", PERIOD, stop, || async move {
        reconcile(st, reg).await?;
        ensure_authentication_configmap(st, ca).await
    })
    .await
}

/// The ConfigMap aggregated servers read (`kube-system/extension-apiserver-authentication`): the CA of
/// client certificates and of the front-proxy certificate, and the request-header names.
pub(crate) async fn ensure_authentication_configmap(
    storage: &Storage,
    ca_pem: &str,
) -> Result<(), ApiError> {
    let key = "/registry/configmaps/kube-system/extension-apiserver-authentication";
    let data = json!({
        "client-ca-file": ca_pem,
        "requestheader-client-ca-file": ca_pem,
        "requestheader-allowed-names": format!("[{:?}]", crate::pki::FRONT_PROXY_CLIENT_USER),
        "requestheader-username-headers": "[\"X-Remote-User\"]",
        "requestheader-group-headers": "[\"X-Remote-Group\"]",
        "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
    });
    match storage.get(key, false).await? {
        Some(cur) if cur.object.get("data") == Some(&data) => Ok(()),
        Some(cur) => {
            let mut o = cur.object.clone();
            o["data"] = data;
            let _ = storage.put_if(key, &o, cur.mod_revision).await?;
            Ok(())
        }
        None => {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system",
                             "uid": object::new_uid(), "creationTimestamp": object::now_rfc3339()},
                "data": data,
            });
            let _ = storage.put_if(key, &cm, 0).await?;
            Ok(())
        }
    }
}
