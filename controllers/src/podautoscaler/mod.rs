//! The horizontal-pod-autoscaler controller: every 15 s per HPA, reads the target's `/scale`, asks each
//! metric how many replicas it wants ([`replicas`]), keeps the largest, stabilizes and limits it
//! ([`behavior`]), writes the new count through `/scale`, and reports in the HPA's status (current
//! metrics, AbleToScale / ScalingActive / ScalingLimited) and in Events, with upstream's texts.

pub mod behavior;
pub mod replicas;
pub mod source;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, ExternalMetricStatus, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerSpec, HorizontalPodAutoscalerStatus,
    MetricSpec, MetricStatus, MetricValueStatus, ObjectMetricStatus, PodsMetricStatus,
    ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use tracing::debug;

use self::behavior::{Ask, History};
use self::replicas::{PodView, Tuning};
use crate::context::Context;
use crate::error::{is_conflict, is_not_found, Result};
use crate::manager::ControllerDef;
use crate::runner;

/// Upstream's controller name (`--controllers`).
pub const NAME: &str = "horizontalpodautoscaling";
/// The Events' reporting component.
const COMPONENT: &str = "horizontal-pod-autoscaler";
/// How often each HPA is synced (upstream's `--horizontal-pod-autoscaler-sync-period`).
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);
/// The scale-down window of HPAs without `behavior`, and of those that leave it unset
/// (`--horizontal-pod-autoscaler-downscale-stabilization`).
pub const DOWNSCALE_STABILIZATION: Duration = Duration::from_secs(300);

/// What the controller keeps per HPA between syncs.
#[derive(Default)]
struct Entry {
    history: History,
    synced: Option<(Instant, Option<HorizontalPodAutoscalerSpec>)>,
}

/// Per-HPA memory, dropped when the HPA goes.
#[derive(Default)]
struct Memory(Mutex<HashMap<String, Entry>>);

/// Registration under upstream's name.
pub fn def() -> ControllerDef {
    ControllerDef { name: NAME, start }
}

fn start(ctx: &Arc<Context>) -> BoxFuture<'static, ()> {
    let hpas = ctx.shared::<HorizontalPodAutoscaler>();
    // The pods' informer starts with the others; the calculator reads it.
    let _pods = ctx.shared::<Pod>();
    let memory = Arc::new(Memory::default());
    let store = hpas.store();
    let controller = Controller::for_shared_stream(hpas.subscribe(), hpas.store());
    runner::run(NAME, controller, ctx, move |hpa, ctx| {
        let memory = memory.clone();
        let store = store.clone();
        async move { reconcile(hpa, ctx, memory, store).await }
    })
}

fn key_of(hpa: &HorizontalPodAutoscaler) -> String {
    format!("{}/{}", hpa.namespace().unwrap_or_default(), hpa.name_any())
}

/// Sets a condition in place (its transition time moves only when its status does).
fn set_condition(
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
) {
    let status = if ok { "True" } else { "False" }.to_string();
    let now = Some(Time(Timestamp::now()));
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = Some(reason.to_string());
            c.message = Some(message);
        }
        None => conditions.push(HorizontalPodAutoscalerCondition {
            type_: type_.to_string(),
            status,
            reason: Some(reason.to_string()),
            message: Some(message),
            last_transition_time: now,
        }),
    }
}

/// A milli-unit count as upstream's `NewMilliQuantity(…, DecimalSI)` prints it (`250m`, `2`, `1500m`).
pub fn milli_quantity(m: i64) -> Quantity {
    if m == 0 {
        return Quantity("0".into());
    }
    if m % 1000 != 0 {
        return Quantity(format!("{m}m"));
    }
    let mut v = m / 1000;
    let mut suffix = 0;
    while v % 1000 == 0 && suffix < 6 {
        v /= 1000;
        suffix += 1;
    }
    Quantity(format!("{v}{}", ["", "k", "M", "G", "T", "P", "E"][suffix]))
}

/// One metric's outcome: its proposal, name and status, or a failure with its condition.
struct Measured {
    replicas: i32,
    name: String,
    status: MetricStatus,
}

struct Failure {
    reason: &'static str,
    condition_message: String,
    error: String,
}

/// Everything one sync needs to measure.
struct Measuring<'a> {
    ctx: &'a Context,
    ns: String,
    selector: String,
    pods: Vec<Arc<Pod>>,
    current: i32,
    status_replicas: i32,
    tuning: Tuning,
}

impl Measuring<'_> {
    fn views(&self, resource: &str, container: Option<&str>) -> Vec<PodView> {
        self.pods
            .iter()
            .map(|p| replicas::view(p, resource, container))
            .collect()
    }

    async fn measure(&self, spec: &MetricSpec) -> Result<Measured, Failure> {
        let client = &self.ctx.client;
        let now = Timestamp::now();
        match spec.type_.as_str() {
            "Resource" | "ContainerResource" => {
                let (name, container, target) = match (&spec.resource, &spec.container_resource) {
                    (Some(r), _) if spec.type_ == "Resource" => {
                        (r.name.clone(), None, r.target.clone())
                    }
                    (_, Some(c)) if spec.type_ == "ContainerResource" => {
                        (c.name.clone(), Some(c.container.clone()), c.target.clone())
                    }
                    _ => return Err(invalid_source(spec)),
                };
                let container_resource = container.is_some();
                let reason = if container_resource {
                    "FailedGetContainerResourceMetric"
                } else {
                    "FailedGetResourceMetric"
                };
                let utilization = target.average_utilization;
                let what = if utilization.is_some() {
                    "utilization"
                } else {
                    "usage"
                };
                let fail = |inner: String| {
                    let detail = format!("failed to get {name} {what}: {inner}");
                    let outer = match &container {
                        Some(c) => format!("failed to get {c} container metric value: {detail}"),
                        None => format!("failed to get {name} resource metric value: {detail}"),
                    };
                    Failure {
                        reason,
                        condition_message: format!(
                            "the HPA was unable to compute the replica count: {detail}"
                        ),
                        error: outer,
                    }
                };
                let samples = source::pod_resource_samples(
                    client,
                    &self.ns,
                    &self.selector,
                    &name,
                    container.as_deref(),
                )
                .await
                .map_err(|e| fail(format!("unable to get metrics for resource {name}: {e}")))?;
                let views = self.views(&name, container.as_deref());
                let kind = if container_resource {
                    format!("{name} container resource")
                } else {
                    format!("{name} resource")
                };
                let (proposal, metric_name) = match utilization {
                    Some(u) => (
                        replicas::for_utilization(
                            self.current,
                            u,
                            &name,
                            &views,
                            samples,
                            &self.tuning,
                            now,
                        ),
                        format!("{kind} utilization (percentage of request)"),
                    ),
                    None => {
                        let target = target
                            .average_value
                            .as_ref()
                            .and_then(|q| keel_client_kit::quantity::milli(&q.0))
                            .unwrap_or(0);
                        (
                            replicas::for_average_value(
                                self.current,
                                target,
                                name == "cpu",
                                &views,
                                samples,
                                &self.tuning,
                                now,
                            ),
                            kind,
                        )
                    }
                };
                let p = proposal.map_err(|e| fail(e.to_string()))?;
                let current = MetricValueStatus {
                    average_utilization: p.utilization,
                    average_value: Some(milli_quantity(p.average_milli)),
                    value: None,
                };
                let status = match container {
                    Some(c) => MetricStatus {
                        type_: spec.type_.clone(),
                        container_resource: Some(ContainerResourceMetricStatus {
                            name,
                            container: c,
                            current,
                        }),
                        ..Default::default()
                    },
                    None => MetricStatus {
                        type_: spec.type_.clone(),
                        resource: Some(ResourceMetricStatus { name, current }),
                        ..Default::default()
                    },
                };
                Ok(Measured {
                    replicas: p.replicas,
                    name: metric_name,
                    status,
                })
            }
            "Pods" => {
                let Some(src) = &spec.pods else {
                    return Err(invalid_source(spec));
                };
                let fail = |e: String| Failure {
                    reason: "FailedGetPodsMetric",
                    condition_message: format!(
                        "the HPA was unable to compute the replica count: {e}"
                    ),
                    error: format!("failed to get pods metric value: {e}"),
                };
                let metric = &src.metric.name;
                let samples =
                    source::pods_metric_samples(client, &self.ns, &self.selector, &src.metric)
                        .await
                        .map_err(|e| fail(format!("unable to get metric {metric}: {e}")))?;
                let target = src
                    .target
                    .average_value
                    .as_ref()
                    .and_then(|q| keel_client_kit::quantity::milli(&q.0))
                    .unwrap_or(0);
                let views = self.views("", None);
                let p = replicas::for_average_value(
                    self.current,
                    target,
                    false,
                    &views,
                    samples,
                    &self.tuning,
                    now,
                )
                .map_err(|e| fail(e.to_string()))?;
                Ok(Measured {
                    replicas: p.replicas,
                    name: format!("pods metric {metric}"),
                    status: MetricStatus {
                        type_: spec.type_.clone(),
                        pods: Some(PodsMetricStatus {
                            metric: src.metric.clone(),
                            current: MetricValueStatus {
                                average_value: Some(milli_quantity(p.average_milli)),
                                ..Default::default()
                            },
                        }),
                        ..Default::default()
                    },
                })
            }
            "Object" | "External" => {
                let external = spec.type_ == "External";
                let (metric, target) = match (&spec.object, &spec.external) {
                    (Some(o), _) if !external => (o.metric.clone(), o.target.clone()),
                    (_, Some(e)) if external => (e.metric.clone(), e.target.clone()),
                    _ => return Err(invalid_source(spec)),
                };
                let (reason, label) = if external {
                    ("FailedGetExternalMetric", "external")
                } else {
                    ("FailedGetObjectMetric", "object")
                };
                let fail = |e: String| Failure {
                    reason,
                    condition_message: format!(
                        "the HPA was unable to compute the replica count: {e}"
                    ),
                    error: format!("failed to get {label} metric value: {e}"),
                };
                let usage = if external {
                    source::external_metric(client, &self.ns, &metric).await
                } else {
                    let described = spec
                        .object
                        .as_ref()
                        .map(|o| o.described_object.clone())
                        .unwrap_or_default();
                    source::object_metric(client, &self.ns, &described, &metric).await
                }
                .map_err(|e| fail(format!("unable to get {label} metric {}: {e}", metric.name)))?;
                let quantity_milli = |q: &Option<Quantity>| {
                    q.as_ref()
                        .and_then(|q| keel_client_kit::quantity::milli(&q.0))
                };
                let (replicas, current, name) = match quantity_milli(&target.average_value) {
                    Some(per_pod) => {
                        let (r, avg) = replicas::for_total_per_pod(
                            self.status_replicas,
                            usage,
                            per_pod,
                            self.tuning.tolerance,
                        );
                        let current = MetricValueStatus {
                            average_value: Some(milli_quantity(avg)),
                            ..Default::default()
                        };
                        (
                            r,
                            current,
                            format!(
                                "external metric {}({})",
                                metric.name,
                                source::selector_text(metric.selector.as_ref())
                            ),
                        )
                    }
                    None => {
                        let total = quantity_milli(&target.value).unwrap_or(0);
                        let views = self.views("", None);
                        let r = replicas::for_total_value(
                            self.current,
                            usage,
                            total,
                            &views,
                            self.tuning.tolerance,
                        )
                        .map_err(|e| fail(e.to_string()))?;
                        let current = MetricValueStatus {
                            value: Some(milli_quantity(usage)),
                            ..Default::default()
                        };
                        let name = if external {
                            format!(
                                "external metric {}({})",
                                metric.name,
                                source::selector_text(metric.selector.as_ref())
                            )
                        } else {
                            let kind = spec
                                .object
                                .as_ref()
                                .map(|o| o.described_object.kind.clone())
                                .unwrap_or_default();
                            format!("{kind} metric {}", metric.name)
                        };
                        (r, current, name)
                    }
                };
                let status = if external {
                    MetricStatus {
                        type_: spec.type_.clone(),
                        external: Some(ExternalMetricStatus { metric, current }),
                        ..Default::default()
                    }
                } else {
                    MetricStatus {
                        type_: spec.type_.clone(),
                        object: Some(ObjectMetricStatus {
                            metric,
                            current,
                            described_object: spec
                                .object
                                .as_ref()
                                .map(|o| o.described_object.clone())
                                .unwrap_or_default(),
                        }),
                        ..Default::default()
                    }
                };
                Ok(Measured {
                    replicas,
                    name,
                    status,
                })
            }
            _ => Err(invalid_source(spec)),
        }
    }
}

fn invalid_source(spec: &MetricSpec) -> Failure {
    let e = format!("unknown metric source type {:?}", spec.type_);
    Failure {
        reason: "InvalidMetricSourceType",
        condition_message: format!("the HPA was unable to compute the replica count: {e}"),
        error: e,
    }
}

/// The outcome of all metrics.
enum Computed {
    /// The largest proposal and the metric that made it.
    Replicas(i32, String),
    /// Too many metrics failed to act on: the error for the Event.
    Failed(String),
}

async fn reconcile(
    hpa: Arc<HorizontalPodAutoscaler>,
    ctx: Arc<Context>,
    memory: Arc<Memory>,
    store: Store<HorizontalPodAutoscaler>,
) -> Result<Action> {
    let key = key_of(&hpa);
    // Syncs come every SYNC_PERIOD; the controller's own status writes (and other updates that leave the
    // spec alone) do not bring them forward.
    if let Ok(mut m) = memory.0.lock() {
        // Deleted HPAs are not reconciled: their entries go when the memory outgrows the cache.
        let hpas = store.state();
        if m.len() > hpas.len() {
            let live: std::collections::HashSet<String> = hpas.iter().map(|h| key_of(h)).collect();
            m.retain(|k, _| live.contains(k));
        }
        let e = m.entry(key.clone()).or_default();
        if let Some((at, spec)) = &e.synced {
            if *spec == hpa.spec && at.elapsed() < SYNC_PERIOD {
                return Ok(Action::requeue(SYNC_PERIOD - at.elapsed()));
            }
        }
        e.synced = Some((Instant::now(), hpa.spec.clone()));
    }
    if hpa.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    sync(&hpa, &ctx, &memory, &key).await?;
    Ok(Action::requeue(SYNC_PERIOD))
}

async fn warn(ctx: &Context, hpa: &HorizontalPodAutoscaler, reason: &str, note: String) {
    ctx.publish(COMPONENT, hpa, EventType::Warning, reason, note, true)
        .await;
}

async fn sync(
    hpa: &HorizontalPodAutoscaler,
    ctx: &Context,
    memory: &Memory,
    key: &str,
) -> Result<()> {
    let ns = hpa.namespace().unwrap_or_default();
    let spec = hpa.spec.clone().unwrap_or_default();
    let original = hpa.status.clone().unwrap_or_default();
    let mut conditions = original.conditions.clone().unwrap_or_default();
    let target = &spec.scale_target_ref;
    let reference = format!("{}/{}", target.kind, target.name);

    let api = source::target_api(
        &ctx.client,
        &ns,
        target.api_version.as_deref().unwrap_or(""),
        &target.kind,
    )
    .await;
    let got = match api {
        Ok(api) => source::get_scale(&api, &target.name)
            .await
            .map(|s| (api, s))
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let (api, scale) = match got {
        Ok(x) => x,
        Err(e) => {
            warn(ctx, hpa, "FailedGetScale", e.clone()).await;
            set_condition(
                &mut conditions,
                "AbleToScale",
                false,
                "FailedGetScale",
                format!("the HPA controller was unable to get the target's current scale: {e}"),
            );
            let status = HorizontalPodAutoscalerStatus {
                conditions: Some(conditions),
                ..original.clone()
            };
            return write_status(ctx, hpa, &original, status).await;
        }
    };
    set_condition(
        &mut conditions,
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
    );
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let status_replicas = scale.status.as_ref().map_or(0, |s| s.replicas);
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut metric_statuses: Option<Vec<MetricStatus>> = None;
    let (desired, reason, rescale) = if current == 0 && min != 0 {
        set_condition(
            &mut conditions,
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero".into(),
        );
        (0, String::new(), false)
    } else if current > max {
        (
            max,
            "Current number of replicas above Spec.MaxReplicas".to_string(),
            true,
        )
    } else if current < min {
        (
            min,
            "Current number of replicas below Spec.MinReplicas".to_string(),
            true,
        )
    } else {
        let selector = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        let computed = compute(
            ctx,
            hpa,
            &spec,
            &mut conditions,
            &mut metric_statuses,
            Measuring {
                ctx,
                ns: ns.clone(),
                selector,
                pods: Vec::new(),
                current,
                status_replicas,
                tuning: Tuning::default(),
            },
        )
        .await;
        let (proposal, metric) = match computed {
            Computed::Replicas(r, m) => (r, m),
            Computed::Failed(e) => {
                let status = HorizontalPodAutoscalerStatus {
                    current_replicas: Some(current),
                    current_metrics: metric_statuses,
                    conditions: Some(conditions),
                    ..original.clone()
                };
                write_status(ctx, hpa, &original, status).await?;
                warn(ctx, hpa, "FailedComputeMetricsReplicas", e).await;
                return Ok(());
            }
        };
        let reason = if proposal > current {
            format!("{metric} above target")
        } else {
            "All metrics below target".to_string()
        };
        let now = Timestamp::now();
        let ask = Ask {
            current,
            desired: proposal,
            min,
            max,
        };
        let normalized = match memory.0.lock() {
            Ok(mut m) => {
                let e = m.entry(key.to_string()).or_default();
                match &spec.behavior {
                    Some(b) => e
                        .history
                        .with_behavior(b, ask, DOWNSCALE_STABILIZATION, now),
                    None => e.history.legacy(ask, DOWNSCALE_STABILIZATION, now),
                }
            }
            // A poisoned lock means a panic elsewhere: hold still rather than guess.
            Err(_) => return Ok(()),
        };
        set_condition(
            &mut conditions,
            "AbleToScale",
            true,
            normalized.able.0,
            normalized.able.1.into(),
        );
        let (limited, why, message) = normalized.limited;
        set_condition(
            &mut conditions,
            "ScalingLimited",
            limited,
            why,
            message.into(),
        );
        (normalized.replicas, reason, normalized.replicas != current)
    };

    let mut last_scale_time = original.last_scale_time.clone();
    let desired = if rescale {
        match source::set_scale(&api, &target.name, scale, desired).await {
            Ok(_) => {
                set_condition(
                    &mut conditions,
                    "AbleToScale",
                    true,
                    "SucceededRescale",
                    format!("the HPA controller was able to update the target scale to {desired}"),
                );
                ctx.publish(
                    COMPONENT,
                    hpa,
                    EventType::Normal,
                    "SuccessfulRescale",
                    format!("New size: {desired}; reason: {reason}"),
                    false,
                )
                .await;
                if let (Some(b), Ok(mut m)) = (&spec.behavior, memory.0.lock()) {
                    if let Some(e) = m.get_mut(key) {
                        e.history.rescaled(b, current, desired, Timestamp::now());
                    }
                }
                debug!(hpa = %key, target = %reference, from = current, to = desired, "rescaled");
                last_scale_time = Some(Time(Timestamp::now()));
                desired
            }
            Err(e) => {
                warn(
                    ctx,
                    hpa,
                    "FailedRescale",
                    format!("New size: {desired}; reason: {reason}; error: {e}"),
                )
                .await;
                set_condition(
                    &mut conditions,
                    "AbleToScale",
                    false,
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {e}"),
                );
                let status = HorizontalPodAutoscalerStatus {
                    current_replicas: Some(current),
                    current_metrics: metric_statuses,
                    conditions: Some(conditions),
                    ..original.clone()
                };
                return write_status(ctx, hpa, &original, status).await;
            }
        }
    } else {
        current
    };
    // Rebuilt as upstream's setStatus does: observedGeneration is not kept.
    let status = HorizontalPodAutoscalerStatus {
        current_replicas: Some(current),
        desired_replicas: desired,
        last_scale_time,
        current_metrics: metric_statuses,
        conditions: Some(conditions),
        observed_generation: None,
    };
    write_status(ctx, hpa, &original, status).await
}

/// Asks every metric; sets ScalingActive from the outcome.
async fn compute(
    ctx: &Context,
    hpa: &HorizontalPodAutoscaler,
    spec: &HorizontalPodAutoscalerSpec,
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    statuses: &mut Option<Vec<MetricStatus>>,
    mut m: Measuring<'_>,
) -> Computed {
    if m.selector.is_empty() {
        warn(ctx, hpa, "SelectorRequired", "selector is required".into()).await;
        set_condition(
            conditions,
            "ScalingActive",
            false,
            "InvalidSelector",
            "the HPA target's scale is missing a selector".into(),
        );
        return Computed::Failed("selector is required".into());
    }
    let selector = match keel_client_kit::labels::parse(&m.selector) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!(
                "couldn't convert selector into a corresponding internal selector object: {e}"
            );
            warn(ctx, hpa, "InvalidSelector", msg.clone()).await;
            set_condition(
                conditions,
                "ScalingActive",
                false,
                "InvalidSelector",
                msg.clone(),
            );
            return Computed::Failed(msg);
        }
    };
    m.pods = ctx
        .store::<Pod>()
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(m.ns.as_str()))
        .filter(|p| keel_client_kit::labels::matches(&selector, p.metadata.labels.as_ref()))
        .collect();
    let specs = spec.metrics.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut best: Option<(i32, String)> = None;
    let mut failures: Vec<Failure> = Vec::new();
    for s in &specs {
        match m.measure(s).await {
            Ok(measured) => {
                if best.as_ref().is_none_or(|(r, _)| measured.replicas > *r) {
                    best = Some((measured.replicas, measured.name.clone()));
                }
                out.push(measured.status);
            }
            Err(f) => {
                warn(
                    ctx,
                    hpa,
                    f.reason,
                    f.condition_message
                        .trim_start_matches("the HPA was unable to compute the replica count: ")
                        .to_string(),
                )
                .await;
                out.push(MetricStatus::default());
                failures.push(f);
            }
        }
    }
    *statuses = Some(out);
    let invalid = failures.len();
    let proposal = best.as_ref().map_or(0, |(r, _)| *r);
    if let Some(first) = failures.first() {
        if invalid >= specs.len() || proposal < m.current {
            set_condition(
                conditions,
                "ScalingActive",
                false,
                first.reason,
                first.condition_message.clone(),
            );
            return Computed::Failed(format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {}",
                specs.len(),
                first.error
            ));
        }
    }
    let (replicas, name) = best.unwrap_or((m.current, String::new()));
    set_condition(
        conditions,
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {name}"),
    );
    Computed::Replicas(replicas, name)
}

/// Writes the status when it changed (PUT guarded by the read's resourceVersion; a conflict waits for
/// the next sync).
async fn write_status(
    ctx: &Context,
    hpa: &HorizontalPodAutoscaler,
    original: &HorizontalPodAutoscalerStatus,
    status: HorizontalPodAutoscalerStatus,
) -> Result<()> {
    if &status == original {
        return Ok(());
    }
    let mut updated = hpa.clone();
    updated.status = Some(status);
    let api = ctx.api::<HorizontalPodAutoscaler>(&hpa.namespace().unwrap_or_default());
    match api
        .replace_status(&hpa.name_any(), &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
        Err(e) => {
            warn(ctx, hpa, "FailedUpdateStatus", e.to_string()).await;
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_quantities_print_as_upstream() {
        assert_eq!(milli_quantity(250).0, "250m");
        assert_eq!(milli_quantity(2000).0, "2");
        assert_eq!(milli_quantity(1500).0, "1500m");
        assert_eq!(milli_quantity(104_857_600_000).0, "104857600");
        assert_eq!(milli_quantity(3_000_000).0, "3k");
        assert_eq!(milli_quantity(0).0, "0");
    }

    #[test]
    fn conditions_keep_their_transition_time_until_the_status_changes() {
        let mut c = Vec::new();
        set_condition(&mut c, "AbleToScale", true, "A", "a".into());
        let first = c[0].last_transition_time.clone();
        set_condition(&mut c, "AbleToScale", true, "B", "b".into());
        assert_eq!(c[0].last_transition_time, first);
        assert_eq!(c[0].reason.as_deref(), Some("B"));
        set_condition(&mut c, "ScalingActive", false, "C", "c".into());
        assert_eq!(c.len(), 2);
    }
}
