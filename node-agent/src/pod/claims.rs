//! The volume behind a pod's claim: the claim must exist, not be going away, be bound, and its volume
//! must name it back; then the volume's directory on this node (a `local` or `hostPath` volume, which
//! is what keel's local-path provisioner and users' static volumes are). Failures read as the
//! kubelet's, so `kubectl describe pod` says what is wrong.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use keel_client_kit::volume::claim_name;
use kube::api::Api;
use kube::{Client, ResourceExt};

/// Why a claim's volume cannot be mounted (the message the `FailedMount` Event carries).
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The claim, or its volume, is not ready: the pod waits.
    #[error("error processing PVC {claim}: {why}")]
    NotReady { claim: String, why: String },
    /// The volume exists but is not one this agent mounts.
    #[error("volume {pv:?}: {why}")]
    Unsupported { pv: String, why: String },
}

/// A claim's volume on the host.
#[derive(Debug, Clone)]
pub struct ClaimVolume {
    /// The volume's name.
    pub pv: String,
    /// Its directory.
    pub path: PathBuf,
    /// Whether ownership for `fsGroup` is managed (`local` volumes, not `hostPath` ones).
    pub owned_by_pod: bool,
    /// The hostPath type to check, for `hostPath` volumes.
    pub host_path_type: Option<String>,
}

fn not_ready(claim: &str, why: impl Into<String>) -> ClaimError {
    ClaimError::NotReady {
        claim: claim.to_string(),
        why: why.into(),
    }
}

/// Resolves the claim `v` uses (a `persistentVolumeClaim`, or a generic ephemeral volume's claim) to
/// its volume's directory; None when `v` uses no claim.
pub async fn resolve(
    client: &Client,
    pod: &Pod,
    v: &Volume,
) -> Option<Result<ClaimVolume, ClaimError>> {
    let name = claim_name(pod, v)?;
    Some(resolve_named(client, pod, v, &name).await)
}

async fn resolve_named(
    client: &Client,
    pod: &Pod,
    v: &Volume,
    name: &str,
) -> Result<ClaimVolume, ClaimError> {
    let ns = pod.namespace().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claim = match claims.get(name).await {
        Ok(c) => c,
        Err(kube::Error::Api(s)) => {
            return Err(not_ready(
                &key,
                format!("failed to fetch PVC from API server: {}", s.message),
            ))
        }
        Err(e) => {
            return Err(not_ready(
                &key,
                format!("failed to fetch PVC from API server: {e}"),
            ))
        }
    };
    if v.ephemeral.is_some() {
        let owner = claim
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.as_str());
        if owner != pod.metadata.uid.as_deref() {
            return Err(not_ready(
                &key,
                format!(
                    "PVC {key} was not created for pod {ns}/{} (pod is not owner)",
                    pod.name_any()
                ),
            ));
        }
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(not_ready(&key, "PVC is being deleted"));
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err(not_ready(&key, "PVC is not bound"));
    }
    let pv_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if pv_name.is_empty() {
        return Err(not_ready(&key, "PVC has empty pvc.Spec.VolumeName"));
    }
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes.get(&pv_name).await.map_err(|e| {
        not_ready(
            &key,
            format!("failed to fetch PV {pv_name} from API server: {e}"),
        )
    })?;
    let spec = pv.spec.clone().unwrap_or_default();
    match spec.claim_ref.as_ref() {
        None => {
            return Err(not_ready(
                &key,
                format!("found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"),
            ))
        }
        Some(r) if r.uid != claim.metadata.uid => {
            return Err(not_ready(
                &key,
                format!(
                    "found PV object {pv_name} but its pv.Spec.ClaimRef.UID {} does not point to claim.UID {}",
                    r.uid.as_deref().unwrap_or(""),
                    claim.metadata.uid.as_deref().unwrap_or("")
                ),
            ))
        }
        Some(_) => {}
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(ClaimError::Unsupported {
            pv: pv_name,
            why: "block volumes are not supported by keel's agent".into(),
        });
    }
    if let Some(l) = &spec.local {
        return Ok(ClaimVolume {
            pv: pv_name,
            path: PathBuf::from(&l.path),
            owned_by_pod: true,
            host_path_type: None,
        });
    }
    if let Some(h) = &spec.host_path {
        return Ok(ClaimVolume {
            pv: pv_name,
            path: PathBuf::from(&h.path),
            owned_by_pod: false,
            host_path_type: h.type_.clone(),
        });
    }
    Err(ClaimError::Unsupported {
        pv: pv_name,
        why: "only local and hostPath volumes are mounted by keel's agent".into(),
    })
}
