//! The PersistentVolume binder: binds each claim to a volume that satisfies it (or asks its class's
//! provisioner for one), keeps both sides' phases, and reclaims a volume whose claim went away. Upstream's
//! `persistentvolume-binder`, with its write order (volume claimRef, volume phase, claim volumeName,
//! claim phase), so a binding cut short by a crash or a lost leadership is finished by the next pass.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    PersistentVolumeStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use keel_client_kit::volume::{self as rules, BIND_COMPLETED, BOUND_BY_CONTROLLER};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::event;
use crate::context::Context;
use crate::error::{is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// Upstream's name.
pub const NAME: &str = "persistentvolume-binder";
/// The Events' reporting controller.
pub const REPORTER: &str = "persistentvolume-controller";
/// How often claims and volumes that are not settled are looked at again (upstream's
/// `--pvclaimbinder-sync-period`).
const RESYNC: Duration = Duration::from_secs(15);

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let claims = ctx.shared::<PersistentVolumeClaim>();
    let volumes = ctx.shared::<PersistentVolume>();
    // Registered so the stores fill; reads go through `ctx.store`.
    let _ = ctx.shared::<StorageClass>();
    let _ = ctx.shared::<Pod>();
    let claim_loop = Controller::for_shared_stream(claims.subscribe(), claims.store())
        .watches_shared_stream(volumes.subscribe(), |pv: Arc<PersistentVolume>| {
            let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
            Some(ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
        });
    let volume_store = volumes.store();
    let volume_loop = Controller::for_shared_stream(volumes.subscribe(), volumes.store())
        .watches_shared_stream(claims.subscribe(), move |c: Arc<PersistentVolumeClaim>| {
            // The claim's volume; a claim that names none yet, any volume pre-bound to it (the
            // scan is skipped for bound claims, whose changes are most of them; unsettled volumes
            // are looked at again every RESYNC anyway).
            match c.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
                Some(v) if !v.is_empty() => vec![ObjectRef::new(v)],
                _ => volume_store
                    .state()
                    .iter()
                    .filter(|pv| rules::is_bound_to(pv, &c))
                    .map(|pv| ObjectRef::from_obj(pv.as_ref()))
                    .collect(),
            }
        });
    let a = runner::run(NAME, claim_loop, ctx, sync_claim);
    let b = runner::run(
        "persistentvolume-binder-volumes",
        volume_loop,
        ctx,
        sync_volume,
    );
    Box::pin(async move {
        futures::join!(a, b);
    })
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn volume_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn has_annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

fn claims_api(ctx: &Context, c: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
    ctx.api(&c.namespace().unwrap_or_default())
}

fn class_of(ctx: &Context, name: &str) -> Option<Arc<StorageClass>> {
    ctx.store::<StorageClass>().get(&ObjectRef::new(name))
}

async fn sync_claim(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action> {
    if has_annotation(&claim.metadata, BIND_COMPLETED) {
        sync_bound_claim(&claim, &ctx).await?;
    } else {
        sync_unbound_claim(&claim, &ctx).await?;
    }
    Ok(if claim_phase(&claim) == "Bound" {
        Action::await_change()
    } else {
        Action::requeue(RESYNC)
    })
}

async fn sync_bound_claim(claim: &PersistentVolumeClaim, ctx: &Context) -> Result<()> {
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if volume.is_empty() {
        return lose(
            ctx,
            claim,
            "ClaimLost",
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        )
        .await;
    }
    let Some(pv) = ctx
        .store::<PersistentVolume>()
        .get(&ObjectRef::new(&volume))
    else {
        return lose(
            ctx,
            claim,
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        )
        .await;
    };
    let uid = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.clone());
    match uid {
        None => bind(ctx, &pv, claim).await,
        Some(u) if Some(&u) == claim.metadata.uid.as_ref() => bind(ctx, &pv, claim).await,
        Some(_) => {
            lose(
                ctx,
                claim,
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )
            .await
        }
    }
}

async fn lose(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    reason: &str,
    note: &str,
) -> Result<()> {
    if claim_phase(claim) != "Lost" {
        set_claim_phase(ctx, claim, "Lost", None).await?;
        event(
            ctx,
            REPORTER,
            claim,
            EventType::Warning,
            reason,
            note.to_string(),
        )
        .await;
    }
    Ok(())
}

async fn sync_unbound_claim(claim: &PersistentVolumeClaim, ctx: &Context) -> Result<()> {
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if !named.is_empty() {
        return sync_prebound_claim(claim, ctx, &named).await;
    }
    let class_name = rules::claim_class(claim).map(str::to_string);
    let class = class_name
        .as_deref()
        .filter(|c| !c.is_empty())
        .and_then(|c| class_of(ctx, c));
    let delayed = class.as_deref().is_some_and(rules::delays_binding);
    let volumes = ctx.store::<PersistentVolume>().state();
    if let Some(pv) = rules::best_match(claim, volumes.iter().map(Arc::as_ref), None, delayed) {
        return bind(ctx, pv, claim).await;
    }
    if class_name.is_none() && assign_default_class(ctx, claim).await? {
        return Ok(());
    }
    let selected = claim
        .annotations()
        .get(rules::SELECTED_NODE)
        .is_some_and(|n| !n.is_empty());
    match class_name.as_deref() {
        _ if delayed && !selected => wait_for_consumer(ctx, claim).await,
        Some(c) if !c.is_empty() => provision(ctx, claim, c, class.as_deref()).await?,
        _ => {
            event(
                ctx,
                REPORTER,
                claim,
                EventType::Normal,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set".into(),
            )
            .await
        }
    }
    if claim_phase(claim) != "Pending" {
        set_claim_phase(ctx, claim, "Pending", None).await?;
    }
    Ok(())
}

/// A claim that names its volume: bound to it when the volume is free and fits.
async fn sync_prebound_claim(
    claim: &PersistentVolumeClaim,
    ctx: &Context,
    named: &str,
) -> Result<()> {
    let Some(pv) = ctx.store::<PersistentVolume>().get(&ObjectRef::new(named)) else {
        if claim_phase(claim) != "Pending" {
            set_claim_phase(ctx, claim, "Pending", None).await?;
        }
        return Ok(());
    };
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if claim_ref.is_none() {
        let why = if pv.metadata.deletion_timestamp.is_some() {
            Some(format!("the volume is marked for deletion {named:?}"))
        } else {
            rules::check_satisfies(claim, &pv).err().map(str::to_string)
        };
        if let Some(why) = why {
            event(
                ctx,
                REPORTER,
                claim,
                EventType::Warning,
                "VolumeMismatch",
                format!("Cannot bind to requested volume {named:?}: {why}"),
            )
            .await;
            if claim_phase(claim) != "Pending" {
                set_claim_phase(ctx, claim, "Pending", None).await?;
            }
            return Ok(());
        }
        return bind(ctx, &pv, claim).await;
    }
    if rules::is_bound_to(&pv, claim) {
        return bind(ctx, &pv, claim).await;
    }
    event(
        ctx,
        REPORTER,
        claim,
        EventType::Warning,
        "FailedBinding",
        format!("volume {named:?} already bound to a different claim."),
    )
    .await;
    if claim_phase(claim) != "Pending" {
        set_claim_phase(ctx, claim, "Pending", None).await?;
    }
    Ok(())
}

/// Gives a claim made without a class (when no default existed) the default class, once one exists.
async fn assign_default_class(ctx: &Context, claim: &PersistentVolumeClaim) -> Result<bool> {
    let classes = ctx.store::<StorageClass>().state();
    let Some(default) = rules::default_class(classes.iter().map(Arc::as_ref)) else {
        return Ok(false);
    };
    let mut c = claim.clone();
    c.spec
        .get_or_insert_with(Default::default)
        .storage_class_name = default.metadata.name.clone();
    claims_api(ctx, claim)
        .replace(&claim.name_any(), &PostParams::default(), &c)
        .await?;
    Ok(true)
}

async fn wait_for_consumer(ctx: &Context, claim: &PersistentVolumeClaim) {
    let ns = claim.namespace();
    let name = claim.name_any();
    let mut waiting: Vec<String> = ctx
        .store::<Pod>()
        .state()
        .iter()
        .filter(|p| {
            p.metadata.namespace == ns
                && !matches!(crate::pod_state::phase(p), "Succeeded" | "Failed")
        })
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("")
                .is_empty()
        })
        .filter(|p| rules::pod_claims(p).contains(&name))
        .map(|p| p.name_any())
        .collect();
    waiting.sort();
    let (reason, note) = match waiting.len() {
        0 => (
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".to_string(),
        ),
        1 => (
            "WaitForPodScheduled",
            format!("waiting for pod {} to be scheduled", waiting[0]),
        ),
        _ => (
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", waiting.join(",")),
        ),
    };
    event(ctx, REPORTER, claim, EventType::Normal, reason, note).await;
}

/// Asks the class's provisioner for a volume: the claim is annotated with its name (both forms), which
/// is what external provisioners (keel's agents among them) watch for.
async fn provision(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    class_name: &str,
    class: Option<&StorageClass>,
) -> Result<()> {
    let Some(class) = class else {
        event(
            ctx,
            REPORTER,
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io {class_name:?} not found"),
        )
        .await;
        return Ok(());
    };
    let annotations = claim.annotations();
    let missing = [rules::STORAGE_PROVISIONER, rules::STORAGE_PROVISIONER_BETA]
        .iter()
        .any(|a| annotations.get(*a) != Some(&class.provisioner));
    if missing {
        let mut c = claim.clone();
        let a = c.annotations_mut();
        a.insert(rules::STORAGE_PROVISIONER.into(), class.provisioner.clone());
        a.insert(
            rules::STORAGE_PROVISIONER_BETA.into(),
            class.provisioner.clone(),
        );
        claims_api(ctx, claim)
            .replace(&claim.name_any(), &PostParams::default(), &c)
            .await?;
    }
    event(
        ctx,
        REPORTER,
        claim,
        EventType::Normal,
        "ExternalProvisioning",
        format!(
            "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
            class.provisioner
        ),
    )
    .await;
    Ok(())
}

/// Binds `pv` and `claim`, each step skipped when already done: the volume's claimRef, its phase, the
/// claim's volumeName and annotations, its phase with the volume's modes and capacity.
async fn bind(ctx: &Context, pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<()> {
    let pvs: Api<PersistentVolume> = ctx.api_all();
    let pv_name = pv.name_any();
    let current_uid = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.as_deref());
    let mut pv = pv.clone();
    if current_uid != claim.metadata.uid.as_deref() || !rules::is_bound_to(&pv, claim) {
        let by_user = rules::is_bound_to(&pv, claim);
        pv.spec.get_or_insert_with(Default::default).claim_ref = Some(rules::claim_ref(claim));
        if !by_user {
            pv.annotations_mut()
                .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        pv = pvs.replace(&pv_name, &PostParams::default(), &pv).await?;
    }
    if volume_phase(&pv) != "Bound" {
        let mut next = pv.clone();
        next.status
            .get_or_insert_with(PersistentVolumeStatus::default)
            .phase = Some("Bound".into());
        pvs.replace_status(&pv_name, &PostParams::default(), &next)
            .await?;
    }
    let claims = claims_api(ctx, claim);
    let claim_name = claim.name_any();
    let mut c = claim.clone();
    let named = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv_name.as_str());
    if !named || !has_annotation(&c.metadata, BIND_COMPLETED) {
        if !named {
            c.spec.get_or_insert_with(Default::default).volume_name = Some(pv_name.clone());
            c.annotations_mut()
                .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        c.annotations_mut()
            .insert(BIND_COMPLETED.into(), "yes".into());
        c = claims
            .replace(&claim_name, &PostParams::default(), &c)
            .await?;
    }
    let modes = pv.spec.as_ref().and_then(|s| s.access_modes.clone());
    let status = c.status.clone().unwrap_or_default();
    let capacity = if status.phase.as_deref() == Some("Bound") {
        status.capacity.clone()
    } else {
        pv.spec.as_ref().and_then(|s| s.capacity.clone())
    };
    if status.phase.as_deref() != Some("Bound")
        || status.access_modes != modes
        || status.capacity != capacity
    {
        set_claim_phase(ctx, &c, "Bound", Some((modes, capacity))).await?;
    }
    Ok(())
}

type Capacity = BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>;

/// Writes a claim's phase; Bound carries the volume's access modes and capacity, Pending clears them.
async fn set_claim_phase(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    phase: &str,
    bound: Option<(Option<Vec<String>>, Option<Capacity>)>,
) -> Result<()> {
    let mut c = claim.clone();
    let s = c
        .status
        .get_or_insert_with(PersistentVolumeClaimStatus::default);
    s.phase = Some(phase.into());
    match bound {
        Some((modes, capacity)) => {
            s.access_modes = modes;
            s.capacity = capacity;
        }
        None if phase == "Pending" => {
            s.access_modes = None;
            s.capacity = None;
        }
        None => {}
    }
    claims_api(ctx, claim)
        .replace_status(&claim.name_any(), &PostParams::default(), &c)
        .await?;
    Ok(())
}

async fn set_volume_phase(
    ctx: &Context,
    pv: &PersistentVolume,
    phase: &str,
    message: Option<String>,
) -> Result<PersistentVolume> {
    let mut next = pv.clone();
    let s = next
        .status
        .get_or_insert_with(PersistentVolumeStatus::default);
    s.phase = Some(phase.into());
    s.message = message;
    let pvs: Api<PersistentVolume> = ctx.api_all();
    Ok(pvs
        .replace_status(&pv.name_any(), &PostParams::default(), &next)
        .await?)
}

/// The claim a volume's claimRef names, from the cache and, when the cache has none, from the API (a
/// cache that is behind must not release a bound volume).
async fn find_claim(ctx: &Context, r: &ObjectReference) -> Result<Option<PersistentVolumeClaim>> {
    let (Some(ns), Some(name)) = (r.namespace.as_deref(), r.name.as_deref()) else {
        return Ok(None);
    };
    if let Some(c) = ctx
        .store::<PersistentVolumeClaim>()
        .get(&ObjectRef::new(name).within(ns))
    {
        return Ok(Some((*c).clone()));
    }
    match ctx.api::<PersistentVolumeClaim>(ns).get(name).await {
        Ok(c) => Ok(Some(c)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn sync_volume(pv: Arc<PersistentVolume>, ctx: Arc<Context>) -> Result<Action> {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()) else {
        if volume_phase(&pv) != "Available" {
            set_volume_phase(&ctx, &pv, "Available", None).await?;
        }
        return Ok(Action::await_change());
    };
    if r.uid.as_deref().unwrap_or("").is_empty() {
        // Pre-bound by the user to a claim that is not bound yet.
        if volume_phase(&pv) != "Available" {
            set_volume_phase(&ctx, &pv, "Available", None).await?;
        }
        return Ok(Action::requeue(RESYNC));
    }
    let claim = find_claim(&ctx, &r).await?;
    let claim = claim.filter(|c| c.metadata.uid == r.uid);
    let Some(claim) = claim else {
        let pv = match volume_phase(&pv) {
            "Released" | "Failed" => (*pv).clone(),
            _ => set_volume_phase(&ctx, &pv, "Released", None).await?,
        };
        reclaim(&ctx, &pv).await?;
        return Ok(Action::requeue(RESYNC));
    };
    let bound_to = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("");
    if bound_to.is_empty() {
        if !rules::volume_modes_fit(&claim, &pv) {
            event(
                &ctx,
                REPORTER,
                pv.as_ref(),
                EventType::Warning,
                "VolumeMismatch",
                format!("Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.", claim.name_any()),
            )
            .await;
        }
        // The claim's own pass binds it (it watches volumes).
        return Ok(Action::requeue(RESYNC));
    }
    if bound_to == pv.name_any() {
        if volume_phase(&pv) != "Bound" {
            set_volume_phase(&ctx, &pv, "Bound", None).await?;
        }
        return Ok(Action::await_change());
    }
    // The claim is bound to another volume.
    let provisioned = has_annotation(&pv.metadata, rules::PROVISIONED_BY);
    let policy = reclaim_policy(&pv);
    if provisioned && policy == "Delete" {
        let pv = match volume_phase(&pv) {
            "Released" | "Failed" => (*pv).clone(),
            _ => set_volume_phase(&ctx, &pv, "Released", None).await?,
        };
        reclaim(&ctx, &pv).await?;
        return Ok(Action::requeue(RESYNC));
    }
    let mut next = (*pv).clone();
    if has_annotation(&pv.metadata, BOUND_BY_CONTROLLER) {
        if let Some(s) = next.spec.as_mut() {
            s.claim_ref = None;
        }
        next.annotations_mut().remove(BOUND_BY_CONTROLLER);
    } else if let Some(r) = next.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    let pvs: Api<PersistentVolume> = ctx.api_all();
    let next = pvs
        .replace(&pv.name_any(), &PostParams::default(), &next)
        .await?;
    set_volume_phase(&ctx, &next, "Available", None).await?;
    Ok(Action::await_change())
}

fn reclaim_policy(pv: &PersistentVolume) -> &str {
    pv.spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain")
}

/// What a Released volume's policy asks: Retain keeps it; Delete of a provisioned volume is its
/// provisioner's (keel's agents delete `keel.io/local-path` volumes); keel has no in-tree deleter or
/// recycler, so the rest fail as upstream reports a missing plugin.
async fn reclaim(ctx: &Context, pv: &PersistentVolume) -> Result<()> {
    let (reason, note) = match reclaim_policy(pv) {
        "Retain" => return Ok(()),
        "Delete" => {
            let by = pv
                .annotations()
                .get(rules::PROVISIONED_BY)
                .map(String::as_str)
                .unwrap_or("");
            if !by.is_empty() && !by.starts_with("kubernetes.io/") {
                return Ok(());
            }
            (
                "VolumeFailedDelete",
                format!(
                    "error getting deleter volume plugin for volume {:?}: no deletable volume plugin matched",
                    pv.name_any()
                ),
            )
        }
        "Recycle" => (
            "VolumeFailedRecycle",
            "No recycler plugin found for the volume!".to_string(),
        ),
        _ => (
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy".to_string(),
        ),
    };
    if volume_phase(pv) != "Failed" {
        set_volume_phase(ctx, pv, "Failed", Some(note.clone())).await?;
        event(ctx, REPORTER, pv, EventType::Warning, reason, note).await;
    }
    Ok(())
}
