//! VolumeBinding: a pod's claims decide where it may run. A bound claim's volume must allow the node
//! (its node affinity); an unbound claim of a `WaitForFirstConsumer` class needs, on the node, a free
//! volume that fits or a provisioner that can make one there; an unbound claim of an immediate class
//! waits for the PersistentVolume controller. Once a node is chosen, [`plan`] says what the binding
//! cycle writes before the pod is bound ([`pre_bind`]): static volumes pre-bound to their claims, the
//! other claims annotated with the node for their provisioner; then it waits for every claim to be
//! bound. Reasons are upstream's (1.32).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use keel_client_kit::volume::{self as rules, BIND_COMPLETED, BOUND_BY_CONTROLLER, SELECTED_NODE};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Plugin, Status};
use crate::pod_info::PodInfo;

const NAME: &str = "VolumeBinding";
/// How long the binding cycle waits for the claims to be bound (upstream's `bindTimeoutSeconds`).
pub const BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// A bound volume's node affinity excludes the node.
pub const AFFINITY_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// No volume fits and none can be provisioned on the node.
pub const NO_VOLUME: &str = "node(s) didn't find available persistent volumes to bind";
/// A bound claim's volume is gone.
pub const MISSING_VOLUME: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// A claim of an immediate class is not bound yet.
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// The plugin.
pub struct VolumeBinding;

/// An unbound claim whose class binds at the first pod's scheduling.
#[derive(Clone)]
struct Delayed {
    claim: Arc<PersistentVolumeClaim>,
    class: Arc<StorageClass>,
}

/// What PreFilter found of the pod's claims.
#[derive(Clone, Default)]
struct PodVolumes {
    /// The volumes of bound claims (None: the volume is gone).
    bound: Vec<Option<Arc<PersistentVolume>>>,
    /// Unbound delayed claims, smallest request first.
    delayed: Vec<Delayed>,
    /// Every volume, to find free ones in.
    volumes: Vec<Arc<PersistentVolume>>,
}

/// What the binding cycle writes before binding the pod to the chosen node.
#[derive(Clone, Debug, Default)]
pub struct VolumePlan {
    /// Free volumes to pre-bind to claims (volume, claim).
    pub bind: Vec<(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)>,
    /// Claims to hand to their provisioner on the node.
    pub provision: Vec<Arc<PersistentVolumeClaim>>,
    /// Every claim of the pod, which must be bound before the pod is.
    pub claims: Vec<(String, String)>,
}

impl VolumePlan {
    /// Whether nothing needs doing before the pod is bound.
    pub fn is_empty(&self) -> bool {
        self.bind.is_empty() && self.provision.is_empty()
    }
}

fn fully_bound(c: &PersistentVolumeClaim) -> bool {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && c.annotations().contains_key(BIND_COMPLETED)
}

/// Whether a class may provision a volume reachable from `node` (its provisioner and allowedTopologies).
fn provisionable(class: &StorageClass, node: &Node) -> bool {
    if class.provisioner.is_empty() || class.provisioner == rules::NO_PROVISIONER {
        return false;
    }
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let labels = node.metadata.labels.as_ref();
    terms.iter().any(|t| {
        t.match_label_expressions.iter().flatten().all(|e| {
            labels
                .and_then(|l| l.get(&e.key))
                .is_some_and(|v| e.values.contains(v))
        })
    })
}

/// The claims of the pod, by name: missing ones are Err with upstream's reason.
fn claims_of(pod: &Pod, snap: &Snapshot) -> Result<Vec<Arc<PersistentVolumeClaim>>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let mut out = Vec::new();
    for v in rules::pod_volumes(pod) {
        let Some(name) = rules::claim_name(pod, v) else {
            continue;
        };
        let Some(c) = snap.objects.claims.get(&format!("{ns}/{name}")) else {
            return Err(if v.ephemeral.is_some() {
                format!("waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}")
            } else {
                format!("persistentvolumeclaim {name:?} not found")
            });
        };
        if v.ephemeral.is_some() {
            let owner = c
                .owner_references()
                .iter()
                .find(|r| r.controller == Some(true))
                .map(|r| r.uid.as_str());
            if owner != pod.metadata.uid.as_deref() {
                return Err(format!(
                    "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                    pod.metadata.name.as_deref().unwrap_or("")
                ));
            }
        }
        if c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            let pv = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or("");
            return Err(format!(
                "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {pv:?}"
            ));
        }
        if c.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
        }
        out.push(c.clone());
    }
    Ok(out)
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
        let claims = match claims_of(&pod.pod, snap) {
            Ok(c) => c,
            Err(why) => return Status::unresolvable(why),
        };
        let mut found = PodVolumes::default();
        if claims.is_empty() {
            state.write(NAME, found);
            return Status::success();
        }
        for c in claims {
            if fully_bound(&c) {
                let pv = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .unwrap_or("");
                found.bound.push(snap.objects.volumes.get(pv).cloned());
                continue;
            }
            let named = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty());
            let class = rules::claim_class(&c)
                .filter(|n| !n.is_empty())
                .and_then(|n| snap.objects.classes.get(n));
            match class {
                Some(class) if !named && rules::delays_binding(class) => {
                    found.delayed.push(Delayed {
                        claim: c.clone(),
                        class: class.clone(),
                    })
                }
                _ => return Status::unresolvable(UNBOUND_IMMEDIATE),
            }
        }
        found
            .delayed
            .sort_by_key(|d| rules::requested(&d.claim).milli());
        found.volumes = snap.objects.volumes.values().cloned().collect();
        state.write(NAME, found);
        Status::success()
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let (Some(found), Some(n)) = (state.read::<PodVolumes>(NAME), node.node.as_ref()) else {
            return Status::success();
        };
        match check_node(found, n) {
            Ok(_) => Status::success(),
            Err(reasons) => Status::new(
                crate::framework::Code::UnschedulableAndUnresolvable,
                reasons,
            ),
        }
    }
}

/// Whether the pod's volumes allow `node`; the plan for it when they do, upstream's reasons when not.
fn check_node(found: &PodVolumes, node: &Node) -> Result<VolumePlan, Vec<String>> {
    let mut reasons: Vec<String> = Vec::new();
    let mut add = |r: &str| {
        if !reasons.iter().any(|x| x == r) {
            reasons.push(r.to_string());
        }
    };
    for pv in &found.bound {
        match pv {
            None => add(MISSING_VOLUME),
            Some(pv) if !rules::node_fits(pv, node) => add(AFFINITY_CONFLICT),
            Some(_) => {}
        }
    }
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    let mut plan = VolumePlan::default();
    let mut taken: HashSet<String> = HashSet::new();
    for d in &found.delayed {
        let selected = d.claim.annotations().get(SELECTED_NODE);
        if selected.is_some_and(|s| s != node_name) {
            add(NO_VOLUME);
            continue;
        }
        let free = found
            .volumes
            .iter()
            .filter(|v| !taken.contains(v.metadata.name.as_deref().unwrap_or("")));
        if let Some(pv) = rules::best_match(&d.claim, free.map(Arc::as_ref), Some(node), true) {
            let pv_name = pv.metadata.name.clone().unwrap_or_default();
            if let Some(arc) = found
                .volumes
                .iter()
                .find(|v| v.metadata.name.as_deref() == Some(&pv_name))
            {
                if !rules::is_bound_to(pv, &d.claim) {
                    plan.bind.push((arc.clone(), d.claim.clone()));
                }
            }
            taken.insert(pv_name);
        } else if provisionable(&d.class, node) {
            if selected.is_none() {
                plan.provision.push(d.claim.clone());
            }
        } else {
            add(NO_VOLUME);
        }
    }
    if reasons.is_empty() {
        Ok(plan)
    } else {
        Err(reasons)
    }
}

/// What the binding cycle must write for the pod on `node` (None when the pod has no claims).
pub fn plan(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<VolumePlan> {
    let found = state.read::<PodVolumes>(NAME)?;
    if found.bound.is_empty() && found.delayed.is_empty() {
        return None;
    }
    let mut plan = match node.node.as_ref() {
        Some(n) => check_node(found, n).ok()?,
        None => return None,
    };
    let ns = pod.namespace().to_string();
    plan.claims = rules::pod_volumes(&pod.pod)
        .filter_map(|v| rules::claim_name(&pod.pod, v))
        .map(|c| (ns.clone(), c))
        .collect();
    Some(plan)
}

/// Annotates a claim with the chosen node; the PersistentVolume controller writes the same claim (the
/// provisioner's annotations), so a conflict is met with the newer claim, a few times.
async fn select_node(
    client: &Client,
    claim: &PersistentVolumeClaim,
    node: &str,
) -> Result<(), String> {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &claim.namespace().unwrap_or_default());
    let name = claim.name_any();
    let mut current = claim.clone();
    for _ in 0..5 {
        if current.metadata.uid != claim.metadata.uid {
            return Err(format!("binding volumes: PVC {name:?} was replaced"));
        }
        let mut next = current.clone();
        next.annotations_mut()
            .insert(SELECTED_NODE.into(), node.to_string());
        match api.replace(&name, &PostParams::default(), &next).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = api
                    .get(&name)
                    .await
                    .map_err(|e| format!("binding volumes: {}", crate::binder::error_text(&e)))?;
            }
            Err(e) => {
                return Err(format!(
                    "binding volumes: {}",
                    crate::binder::error_text(&e)
                ))
            }
        }
    }
    Err(format!("binding volumes: PVC {name:?} kept changing"))
}

/// Writes the plan and waits for every claim of the pod to be bound (PreBind), polling after 0.1, 0.2,
/// 0.4, 0.8 s and then each second up to [`BIND_TIMEOUT`]; the error says why the pod goes back to the
/// queue.
pub async fn pre_bind(
    client: &Client,
    plan: &VolumePlan,
    pod: &PodInfo,
    node: &str,
) -> Result<(), String> {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for (pv, claim) in &plan.bind {
        let mut next = (**pv).clone();
        next.spec.get_or_insert_with(Default::default).claim_ref = Some(rules::claim_ref(claim));
        next.annotations_mut()
            .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        pvs.replace(&pv.name_any(), &PostParams::default(), &next)
            .await
            .map_err(|e| format!("binding volumes: {}", crate::binder::error_text(&e)))?;
    }
    for claim in &plan.provision {
        select_node(client, claim, node).await?;
    }
    let deadline = Instant::now() + BIND_TIMEOUT;
    // Most claims are bound within a second or two: look early, then every second (upstream's period).
    let mut pause = Duration::from_millis(100);
    let pods: Api<Pod> = Api::namespaced(client.clone(), pod.namespace());
    loop {
        let mut all = true;
        for (ns, name) in &plan.claims {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
            let c = api
                .get(name)
                .await
                .map_err(|e| format!("binding volumes: {}", crate::binder::error_text(&e)))?;
            if fully_bound(&c) {
                continue;
            }
            all = false;
            let provisioned_here = plan.provision.iter().any(|p| p.name_any() == *name);
            if provisioned_here
                && c.annotations().get(SELECTED_NODE).map(String::as_str) != Some(node)
            {
                return Err(format!(
                    "binding volumes: provisioning failed for PVC {name:?}"
                ));
            }
        }
        if all {
            return Ok(());
        }
        match pods.get_opt(pod.name()).await {
            Ok(Some(p))
                if p.metadata.uid.as_deref() == Some(pod.uid.as_str()) || pod.uid.is_empty() => {}
            Ok(_) => return Err("binding volumes: pod does not exist any more".into()),
            Err(e) => {
                return Err(format!(
                    "binding volumes: {}",
                    crate::binder::error_text(&e)
                ))
            }
        }
        if Instant::now() > deadline {
            return Err("binding volumes: context deadline exceeded".into());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
        )
        .unwrap()
    }

    fn class(v: serde_json::Value) -> Arc<StorageClass> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn claim(name: &str, annotations: serde_json::Value) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "a", "uid": name,
                "annotations": annotations},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                         "storageClassName": "local-path"}}))
            .unwrap(),
        )
    }

    fn pinned(name: &str, to: &str) -> Arc<PersistentVolume> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [to]}]}]}}},
                "status": {"phase": "Available"}}))
            .unwrap(),
        )
    }

    #[test]
    fn bound_volumes_pin_their_pods() {
        let found = PodVolumes {
            bound: vec![Some(pinned("v", "n1"))],
            ..Default::default()
        };
        assert!(check_node(&found, &node("n1")).is_ok());
        assert_eq!(
            check_node(&found, &node("n2")).unwrap_err(),
            [AFFINITY_CONFLICT]
        );
        let gone = PodVolumes {
            bound: vec![None],
            ..Default::default()
        };
        assert_eq!(
            check_node(&gone, &node("n1")).unwrap_err(),
            [MISSING_VOLUME]
        );
    }

    #[test]
    fn delayed_claims_take_a_free_volume_or_a_provisioner() {
        let local = class(
            json!({"metadata": {"name": "local-path"}, "provisioner": "keel.io/local-path",
            "volumeBindingMode": "WaitForFirstConsumer"}),
        );
        let found = PodVolumes {
            delayed: vec![Delayed {
                claim: claim("data", json!({})),
                class: local.clone(),
            }],
            volumes: vec![pinned("static", "n1")],
            ..Default::default()
        };
        let on_n1 = check_node(&found, &node("n1")).unwrap();
        assert_eq!(on_n1.bind.len(), 1);
        assert!(on_n1.provision.is_empty());
        let on_n2 = check_node(&found, &node("n2")).unwrap();
        assert!(on_n2.bind.is_empty());
        assert_eq!(on_n2.provision.len(), 1);
        let manual = class(
            json!({"metadata": {"name": "local-path"}, "provisioner": rules::NO_PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer"}),
        );
        let none = PodVolumes {
            delayed: vec![Delayed {
                claim: claim("data", json!({})),
                class: manual,
            }],
            ..Default::default()
        };
        assert_eq!(check_node(&none, &node("n1")).unwrap_err(), [NO_VOLUME]);
        let elsewhere = PodVolumes {
            delayed: vec![Delayed {
                claim: claim("data", json!({SELECTED_NODE: "n2"})),
                class: local,
            }],
            ..Default::default()
        };
        assert_eq!(
            check_node(&elsewhere, &node("n1")).unwrap_err(),
            [NO_VOLUME]
        );
        assert!(check_node(&elsewhere, &node("n2")).is_ok_and(|p| p.is_empty()));
    }
}
