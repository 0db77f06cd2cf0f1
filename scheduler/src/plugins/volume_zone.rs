//! VolumeZone: a pod whose bound volumes carry zone or region labels runs only on nodes in one of
//! those zones (a label value may list several, joined by `__`). Nodes without any zone label pass, as
//! a single-zone cluster's do.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;
use keel_client_kit::volume as rules;

const NAME: &str = "VolumeZone";
/// Upstream's reason.
pub const NO_ZONE: &str = "node(s) had no available volume zone";
/// The topology labels compared, beta ones first as upstream reads them.
const KEYS: &[(&str, &str)] = &[
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    (
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    ),
    (
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    ),
];

/// The plugin.
pub struct VolumeZone;

#[derive(Clone, Default)]
struct Zones(Vec<Arc<PersistentVolume>>);

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
        let ns = pod.namespace();
        let mut volumes = Vec::new();
        for name in rules::pod_claims(&pod.pod) {
            let Some(c) = snap.objects.claims.get(&format!("{ns}/{name}")) else {
                continue;
            };
            let pv = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or("");
            if let Some(v) = snap.objects.volumes.get(pv) {
                let labelled = v
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| KEYS.iter().any(|(k, _)| l.contains_key(*k)));
                if labelled {
                    volumes.push(v.clone());
                }
            }
        }
        state.write(NAME, Zones(volumes));
        Status::success()
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let (Some(Zones(volumes)), Some(n)) = (state.read::<Zones>(NAME), node.node.as_ref())
        else {
            return Status::success();
        };
        let empty = Default::default();
        let labels = n.metadata.labels.as_ref().unwrap_or(&empty);
        if volumes.is_empty() || !KEYS.iter().any(|(k, _)| labels.contains_key(*k)) {
            return Status::success();
        }
        for v in volumes {
            for (key, value) in v.metadata.labels.iter().flatten() {
                let Some((_, fallback)) = KEYS.iter().find(|(k, _)| k == key) else {
                    continue;
                };
                let have = labels.get(key).or_else(|| labels.get(*fallback));
                if !have.is_some_and(|h| value.split("__").any(|z| z == h)) {
                    return Status::unresolvable(NO_ZONE);
                }
            }
        }
        Status::success()
    }
}
