//! The agent's local-path provisioner (`keel.io/local-path`): a claim the PersistentVolume controller
//! handed to it (the `volume.kubernetes.io/storage-provisioner` annotation) and the scheduler placed on
//! this node (`volume.kubernetes.io/selected-node`) gets a directory under the storage directory and a
//! `local` PersistentVolume pinned to this node, pre-bound to the claim; a Released volume of this node
//! whose policy is Delete loses its directory, then its object. The directory and the volume are named
//! after the claim's uid, so a pass cut short (a crash, a lost write) is finished by the next one and
//! nothing is made twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use keel_client_kit::reflect::reflect_all;
use keel_client_kit::volume::{self as rules, LOCAL_PATH_PROVISIONER};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

/// How often the caches are looked at again without a change (a failed pass is retried then).
const RESYNC: Duration = Duration::from_secs(15);

/// What the provisioner needs.
#[derive(Debug, Clone)]
pub struct ProvisionerOptions {
    /// This node's name.
    pub node: String,
    /// Where volume directories go.
    pub dir: PathBuf,
}

/// The directory of a claim's volume: `pvc-<uid>_<namespace>_<name>`, as k3s's provisioner names it.
pub fn volume_dir(base: &Path, claim: &PersistentVolumeClaim) -> PathBuf {
    base.join(format!(
        "pvc-{}_{}_{}",
        claim.metadata.uid.as_deref().unwrap_or(""),
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    ))
}

/// The volume's name for a claim.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or(""))
}

/// Runs the provisioner until the watches end. The storage directory is made and resolved first (a
/// volume's path is an absolute one without `..`, as the API requires); without it the node provisions
/// nothing.
pub async fn run(client: Client, mut opts: ProvisionerOptions) {
    match std::fs::create_dir_all(&opts.dir).and_then(|()| opts.dir.canonicalize()) {
        Ok(dir) => opts.dir = dir,
        Err(e) => {
            warn!(dir = %opts.dir.display(), error = %e, "no storage directory: local-path volumes are not provisioned on this node");
            return std::future::pending().await;
        }
    }
    let wake = Arc::new(Notify::new());
    let (claims, claims_driver) = reflect_all::<PersistentVolumeClaim>(&client, &wake);
    let (volumes, volumes_driver) = reflect_all::<PersistentVolume>(&client, &wake);
    let (classes, classes_driver) = reflect_all::<StorageClass>(&client, &wake);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: format!("{LOCAL_PATH_PROVISIONER}_{}", opts.node),
            instance: Some(opts.node.clone()),
        },
    );
    let p = Provisioner {
        client,
        opts,
        claims,
        volumes,
        classes,
        recorder,
    };
    info!(dir = %p.opts.dir.display(), "local-path provisioner running");
    let work = async {
        loop {
            let _ = tokio::time::timeout(RESYNC, wake.notified()).await;
            p.pass().await;
        }
    };
    tokio::select! {
        _ = claims_driver => {}
        _ = volumes_driver => {}
        _ = classes_driver => {}
        _ = work => {}
    }
}

struct Provisioner {
    client: Client,
    opts: ProvisionerOptions,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    recorder: Recorder,
}

/// Why a claim cannot be given a local-path volume.
fn refusal(claim: &PersistentVolumeClaim) -> Option<String> {
    let spec = claim.spec.as_ref()?;
    if spec.selector.is_some() {
        return Some("claim.Spec.Selector is not supported".into());
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Some(format!(
            "{LOCAL_PATH_PROVISIONER} does not support block volume provisioning"
        ));
    }
    let modes = spec.access_modes.as_deref().unwrap_or(&[]);
    if modes
        .iter()
        .any(|m| m != "ReadWriteOnce" && m != "ReadWriteOncePod")
    {
        return Some(
            "local-path volumes support only the ReadWriteOnce and ReadWriteOncePod access modes"
                .into(),
        );
    }
    None
}

impl Provisioner {
    async fn pass(&self) {
        for claim in self.claims.state() {
            if self.wants_volume(&claim) {
                self.provision(&claim).await;
            }
        }
        for pv in self.volumes.state() {
            if self.should_delete(&pv) {
                self.delete(&pv).await;
            }
        }
    }

    /// A claim waiting for this node's provisioner, with no volume made for it yet.
    fn wants_volume(&self, claim: &PersistentVolumeClaim) -> bool {
        let a = claim.annotations();
        let asked = a
            .get(rules::STORAGE_PROVISIONER)
            .or_else(|| a.get(rules::STORAGE_PROVISIONER_BETA))
            .map(String::as_str)
            == Some(LOCAL_PATH_PROVISIONER);
        let here = a.get(rules::SELECTED_NODE) == Some(&self.opts.node);
        let unbound = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .unwrap_or("")
            .is_empty();
        asked
            && here
            && unbound
            && claim.metadata.deletion_timestamp.is_none()
            && claim.metadata.uid.is_some()
            && self
                .volumes
                .get(&ObjectRef::new(&volume_name(claim)))
                .is_none()
    }

    async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        kind: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_: kind,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            debug!(error = %e, "event not recorded");
        }
    }

    async fn provision(&self, claim: &PersistentVolumeClaim) {
        let key = format!(
            "{}/{}",
            claim.namespace().unwrap_or_default(),
            claim.name_any()
        );
        let class_name = rules::claim_class(claim).unwrap_or("").to_string();
        let Some(class) = self.classes.get(&ObjectRef::new(&class_name)) else {
            // The class is gone or not seen yet; the PV controller reports a missing class.
            return;
        };
        if class.provisioner != LOCAL_PATH_PROVISIONER {
            return;
        }
        self.event(
            claim,
            EventType::Normal,
            "Provisioning",
            format!("External provisioner is provisioning volume for claim {key:?}"),
        )
        .await;
        let made = match refusal(claim) {
            Some(why) => Err(why),
            None => self.make(claim, &class).await,
        };
        match made {
            Ok(name) => {
                info!(claim = %key, volume = %name, "volume provisioned");
                self.event(
                    claim,
                    EventType::Normal,
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {name}"),
                )
                .await;
            }
            Err(e) => {
                warn!(claim = %key, error = %e, "provisioning failed");
                self.event(
                    claim,
                    EventType::Warning,
                    "ProvisioningFailed",
                    format!("failed to provision volume with StorageClass {class_name:?}: {e}"),
                )
                .await;
            }
        }
    }

    /// Makes the directory (kept if it exists: a pass cut short made it) and the volume.
    async fn make(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<String, String> {
        let dir = volume_dir(&self.opts.dir, claim);
        make_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let spec = claim.spec.clone().unwrap_or_default();
        let capacity: BTreeMap<_, _> = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| [("storage".to_string(), q.clone())].into_iter().collect())
            .unwrap_or_default();
        let name = volume_name(claim);
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                annotations: Some(
                    [(
                        rules::PROVISIONED_BY.to_string(),
                        LOCAL_PATH_PROVISIONER.to_string(),
                    )]
                    .into_iter()
                    .collect(),
                ),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: spec.access_modes.clone(),
                capacity: Some(capacity),
                claim_ref: Some(rules::claim_ref(claim)),
                local: Some(LocalVolumeSource {
                    path: dir.to_string_lossy().into_owned(),
                    fs_type: None,
                }),
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec![self.opts.node.clone()]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                }),
                persistent_volume_reclaim_policy: class.reclaim_policy.clone(),
                storage_class_name: class.metadata.name.clone(),
                volume_mode: Some("Filesystem".into()),
                mount_options: class.mount_options.clone(),
                ..Default::default()
            }),
            status: None,
        };
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => Ok(name),
            // Made by an earlier pass whose answer was lost.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(name),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A Released local-path volume of this node whose policy deletes it.
    fn should_delete(&self, pv: &PersistentVolume) -> bool {
        let Some(spec) = pv.spec.as_ref() else {
            return false;
        };
        let ours = pv
            .annotations()
            .get(rules::PROVISIONED_BY)
            .map(String::as_str)
            == Some(LOCAL_PATH_PROVISIONER);
        let here = spec
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
            .is_some_and(|r| {
                r.node_selector_terms.iter().any(|t| {
                    t.match_expressions.iter().flatten().any(|e| {
                        e.key == "kubernetes.io/hostname"
                            && e.values.as_deref() == Some(std::slice::from_ref(&self.opts.node))
                    })
                })
            });
        let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
        let deletes = spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete");
        ours && here && released && deletes && pv.metadata.deletion_timestamp.is_none()
    }

    async fn delete(&self, pv: &PersistentVolume) {
        let name = pv.name_any();
        let path = pv
            .spec
            .as_ref()
            .and_then(|s| {
                s.local
                    .as_ref()
                    .map(|l| l.path.clone())
                    .or_else(|| s.host_path.as_ref().map(|h| h.path.clone()))
            })
            .map(PathBuf::from);
        if let Some(p) = path {
            if let Err(e) = remove_dir(&self.opts.dir, &p) {
                warn!(volume = %name, error = %e, "volume directory not removed");
                self.event(pv, EventType::Warning, "VolumeFailedDelete", e)
                    .await;
                return;
            }
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pv.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => info!(volume = %name, "released volume deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => warn!(volume = %name, error = %e, "volume not deleted"),
        }
    }
}

/// Makes a volume directory anyone in the pod may write (its owner is the pod's business).
fn make_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
}

/// Removes a volume's directory, refusing any path outside the storage directory (a volume object is
/// an API input: it must not steer the agent to remove something else).
fn remove_dir(base: &Path, dir: &Path) -> Result<(), String> {
    let inside = dir.parent() == Some(base)
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("pvc-") && n != "." && n != "..");
    if !inside {
        return Err(format!(
            "refusing to remove {}: not a volume directory under {}",
            dir.display(),
            base.display()
        ));
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn directories_are_named_after_the_claim_and_removed_only_inside() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data-web-0", "namespace": "db", "uid": "1234"}}))
        .unwrap();
        let base = Path::new("/var/lib/keel/storage");
        assert_eq!(
            volume_dir(base, &claim),
            base.join("pvc-1234_db_data-web-0")
        );
        assert_eq!(volume_name(&claim), "pvc-1234");
        assert!(remove_dir(base, Path::new("/etc")).is_err());
        assert!(remove_dir(base, &base.join("pvc-1/../..")).is_err());
        assert!(remove_dir(base, &base.join("other")).is_err());
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("pvc-9_a_b");
        make_dir(&d).unwrap();
        std::fs::write(d.join("f"), b"x").unwrap();
        remove_dir(t.path(), &d).unwrap();
        assert!(!d.exists());
    }

    #[test]
    fn selectors_and_shared_modes_are_refused() {
        let c = |spec: serde_json::Value| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": spec})).unwrap()
        };
        assert!(refusal(&c(json!({"accessModes": ["ReadWriteOnce"]}))).is_none());
        assert!(refusal(&c(json!({"accessModes": ["ReadWriteMany"]}))).is_some());
        assert!(refusal(&c(
            json!({"accessModes": ["ReadWriteOnce"], "selector": {}})
        ))
        .is_some());
    }
}
