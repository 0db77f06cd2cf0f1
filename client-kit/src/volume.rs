//! What the PersistentVolume controller, the scheduler's VolumeBinding and the node agent agree on about
//! claims and volumes: upstream's annotations, a claim's class, and which volume satisfies a claim (the
//! rules of upstream's `FindMatchingVolume`).

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::placement::term_matches;
use crate::quantity::Quantity;

/// On a claim: the controller finished binding it (`"yes"`).
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a claim or volume: the binding was made by the controller, not asked for by the user (`"yes"`).
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a volume: the provisioner that made it (and deletes it).
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// On a claim: the provisioner asked to make its volume.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The beta form of [`STORAGE_PROVISIONER`], still written for older provisioners.
pub const STORAGE_PROVISIONER_BETA: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a claim of a `WaitForFirstConsumer` class: the node the scheduler chose for its first pod.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The annotation that named a class before `storageClassName`; it wins when present.
pub const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The default-class annotation of a StorageClass, and its beta form.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta form of [`DEFAULT_CLASS`].
pub const DEFAULT_CLASS_BETA: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// A class whose volumes are only ever made by hand.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The provisioner built into keel's node agent.
pub const LOCAL_PATH_PROVISIONER: &str = "keel.io/local-path";
/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The finalizer that keeps a volume while a claim is bound to it.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
/// The finalizer an external provisioner keeps on the volumes it must delete.
pub const PROVISIONER_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A claim's class: the beta annotation, else `storageClassName`; None when neither is set (the claim
/// then takes the default class), `""` for "no class".
pub fn claim_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&claim.metadata, BETA_CLASS).or_else(|| {
        claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
    })
}

/// A volume's class (`""` for none).
pub fn volume_class(pv: &PersistentVolume) -> &str {
    annotation(&pv.metadata, BETA_CLASS)
        .or_else(|| {
            pv.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

/// Whether a StorageClass carries either default annotation as `"true"`.
pub fn is_default_class(class: &StorageClass) -> bool {
    [DEFAULT_CLASS, DEFAULT_CLASS_BETA]
        .iter()
        .any(|a| annotation(&class.metadata, a) == Some("true"))
}

/// The default class among `classes`: the newest marked one, then the first by name (upstream's tie
/// rule), as admission and the retroactive assignment pick it.
pub fn default_class<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    classes
        .into_iter()
        .filter(|c| is_default_class(c))
        .max_by(|a, b| {
            let t = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            t(a).cmp(&t(b))
                .then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
}

/// Whether a class binds at the first pod's scheduling (`WaitForFirstConsumer`).
pub fn delays_binding(class: &StorageClass) -> bool {
    class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
}

/// The storage a claim asks for; zero when unset.
pub fn requested(claim: &PersistentVolumeClaim) -> Quantity {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .unwrap_or_default()
}

/// A volume's storage capacity; zero when unset.
pub fn capacity(pv: &PersistentVolume) -> Quantity {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .unwrap_or_default()
}

fn modes_of(list: Option<&Vec<String>>) -> &[String] {
    list.map_or(&[], Vec::as_slice)
}

/// Whether the volume offers every access mode the claim asks for.
pub fn access_modes_fit(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let have = modes_of(pv.spec.as_ref().and_then(|s| s.access_modes.as_ref()));
    modes_of(claim.spec.as_ref().and_then(|s| s.access_modes.as_ref()))
        .iter()
        .all(|m| have.contains(m))
}

/// Whether claim and volume agree on `volumeMode` (unset means `Filesystem`).
pub fn volume_modes_fit(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let c = claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    let v = pv.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    c.unwrap_or("Filesystem") == v.unwrap_or("Filesystem")
}

/// Whether the volume may be used on `node`: no required node affinity, or one of its terms matches.
pub fn node_fits(pv: &PersistentVolume, node: &Node) -> bool {
    match pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node)),
        None => true,
    }
}

/// Whether the volume's `claimRef` names this claim (its uid too, when the reference has one).
pub fn is_bound_to(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name == claim.metadata.name
        && r.namespace == claim.metadata.namespace
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == claim.metadata.uid.as_deref())
}

/// Why a volume cannot satisfy a claim that names it, in upstream's words; Ok when it can.
pub fn check_satisfies(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> Result<(), &'static str> {
    if capacity(pv).milli() < requested(claim).milli() {
        return Err("requested PV is too small");
    }
    if claim_class(claim).unwrap_or("") != volume_class(pv) {
        return Err("storageClassName does not match");
    }
    if !volume_modes_fit(claim, pv) {
        return Err("incompatible volumeMode");
    }
    if !access_modes_fit(claim, pv) {
        return Err("incompatible accessMode");
    }
    Ok(())
}

fn phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The volume that best satisfies `claim` among `volumes`: one already bound to it (pre-bound by the
/// user or a provisioner), else the smallest Available one that fits (class, access and volume modes,
/// selector, size and, with `node`, its node affinity). The controller (no `node`) leaves claims of a
/// `WaitForFirstConsumer` class (`delayed`) to the scheduler unless a volume is pre-bound to them.
pub fn best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    node: Option<&Node>,
    delayed: bool,
) -> Option<&'a PersistentVolume> {
    let wanted = requested(claim).milli();
    let class = claim_class(claim).unwrap_or("");
    let selector = claim.spec.as_ref().and_then(|s| s.selector.as_ref());
    let mut best: Option<(&PersistentVolume, i128)> = None;
    for pv in volumes {
        let size = capacity(pv).milli();
        if size < wanted || !volume_modes_fit(claim, pv) || !access_modes_fit(claim, pv) {
            continue;
        }
        if pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let node_ok = node.is_none_or(|n| node_fits(pv, n));
        if is_bound_to(pv, claim) {
            // A volume pre-bound to the claim is the only candidate: on a wrong node, nothing fits.
            return node_ok.then_some(pv);
        }
        if node.is_none() && delayed {
            continue;
        }
        if phase(pv) != "Available"
            || pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_some())
            || selector.is_some_and(|s| !crate::labels::matches(s, pv.metadata.labels.as_ref()))
            || volume_class(pv) != class
            || !node_ok
        {
            continue;
        }
        if best.is_none_or(|(_, b)| size < b) {
            best = Some((pv, size));
        }
    }
    best.map(|(pv, _)| pv)
}

/// A reference to `claim` as a volume's `claimRef` holds it (its uid and resourceVersion included).
pub fn claim_ref(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// The pod's volumes.
pub fn pod_volumes(pod: &Pod) -> impl Iterator<Item = &Volume> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
}

/// The claim a pod volume uses: its `persistentVolumeClaim`, or the `<pod>-<volume>` claim of a
/// generic ephemeral volume.
pub fn claim_name(pod: &Pod, v: &Volume) -> Option<String> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some(c.claim_name.clone());
    }
    v.ephemeral.as_ref()?;
    Some(format!(
        "{}-{}",
        pod.metadata.name.as_deref().unwrap_or(""),
        v.name
    ))
}

/// The names of the claims a pod uses.
pub fn pod_claims(pod: &Pod) -> Vec<String> {
    pod_volumes(pod)
        .filter_map(|v| claim_name(pod, v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(v: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap()
    }

    fn claim(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    fn available(
        name: &str,
        size: &str,
        class: &str,
        labels: serde_json::Value,
    ) -> PersistentVolume {
        pv(json!({"metadata": {"name": name, "labels": labels},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                     "storageClassName": class},
            "status": {"phase": "Available"}}))
    }

    #[test]
    fn the_smallest_fitting_volume_wins() {
        let c = claim(
            json!({"metadata": {"name": "data", "namespace": "a", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}},
                     "storageClassName": "slow", "selector": {"matchLabels": {"tier": "db"}}}}),
        );
        let vols = [
            available("small", "1Gi", "slow", json!({"tier": "db"})),
            available("big", "10Gi", "slow", json!({"tier": "db"})),
            available("mid", "3Gi", "slow", json!({"tier": "db"})),
            available("unlabelled", "2Gi", "slow", json!({})),
            available("otherclass", "2Gi", "fast", json!({"tier": "db"})),
        ];
        assert_eq!(
            best_match(&c, &vols, None, false).and_then(|v| v.metadata.name.as_deref()),
            Some("mid")
        );
        // The controller leaves delayed claims alone unless a volume is pre-bound to them.
        assert!(best_match(&c, &vols, None, true).is_none());
        let mut pre = available("pre", "5Gi", "slow", json!({}));
        pre.spec.as_mut().unwrap().claim_ref =
            Some(serde_json::from_value(json!({"namespace": "a", "name": "data"})).unwrap());
        let with_pre = [vols[2].clone(), pre];
        assert_eq!(
            best_match(&c, &with_pre, None, true).and_then(|v| v.metadata.name.as_deref()),
            Some("pre")
        );
    }

    #[test]
    fn named_volumes_say_why_they_do_not_fit() {
        let c = claim(json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}));
        assert_eq!(
            check_satisfies(&c, &available("v", "512Mi", "", json!({}))),
            Err("requested PV is too small")
        );
        assert_eq!(
            check_satisfies(&c, &available("v", "1Gi", "x", json!({}))),
            Err("storageClassName does not match")
        );
        assert_eq!(
            check_satisfies(&c, &available("v", "1Gi", "", json!({}))),
            Err("incompatible accessMode")
        );
    }

    #[test]
    fn node_affinity_limits_where_a_volume_is_used() {
        let v = pv(
            json!({"metadata": {"name": "v"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}),
        );
        let node = |name: &str| -> Node {
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
            )
            .unwrap()
        };
        assert!(node_fits(&v, &node("n1")));
        assert!(!node_fits(&v, &node("n2")));
    }
}
