//! The replica count a metric asks for (upstream's replica calculator): pods grouped into ready,
//! unready, missing and ignored; usage against requests or a raw target; the 10 % tolerance; and the
//! conservative guesses for pods without a usable sample, so a scale-up never counts on pods that are
//! not serving yet and a scale-down never counts on pods it cannot see.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use keel_client_kit::quantity;

/// What the calculator needs to know about one pod.
#[derive(Debug, Clone)]
pub struct PodView {
    /// The pod's name.
    pub name: String,
    /// Being deleted, or Failed: left out altogether.
    pub ignored: bool,
    /// Pending.
    pub pending: bool,
    /// The Ready condition: whether True, and when it last changed.
    pub ready: Option<(bool, Option<Timestamp>)>,
    /// When the pod started.
    pub start_time: Option<Timestamp>,
    /// Whether it is Running and Ready (what a raw external target counts).
    pub running_ready: bool,
    /// The sum of the containers' requests of the resource in milli-units, or the name of a container
    /// without one.
    pub request: Result<i64, String>,
}

/// One pod's sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Usage in milli-units.
    pub milli: i64,
    /// When it was measured.
    pub timestamp: Timestamp,
    /// The window it covers.
    pub window: Duration,
}

/// The controller's settings that shape the arithmetic.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Ratios within this of 1 change nothing (upstream's 0.1).
    pub tolerance: f64,
    /// How long after its start a pod's CPU samples are doubted (5 minutes).
    pub cpu_initialization_period: Duration,
    /// How long after its start a pod that has never been ready is taken as still starting (30 s).
    pub initial_readiness_delay: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

/// What one metric asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    /// Replicas.
    pub replicas: i32,
    /// Utilization in percent of the request, for utilization targets.
    pub utilization: Option<i32>,
    /// The average usage per pod in milli-units.
    pub average_milli: i64,
}

/// Why a metric gives no proposal (upstream's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalcError {
    #[error("no pods returned by selector while calculating replica count")]
    NoPods,
    #[error("did not receive metrics for targeted pods (pods might be unready)")]
    NoUsableMetrics,
    #[error("missing request for {resource} in container {container} of Pod {pod}")]
    MissingRequest {
        resource: String,
        container: String,
        pod: String,
    },
    #[error("no metrics returned matched known pods")]
    NoMatchingMetrics,
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(t)
}

/// The pod's request of `resource` in milli-units: every container (or only `container`) plus restartable
/// init containers; the name of a container that requests none.
pub fn request_of(pod: &Pod, resource: &str, container: Option<&str>) -> Result<i64, String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Err(String::new());
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let all: Vec<&Container> = spec.containers.iter().chain(sidecars).collect();
    let mut total = 0i64;
    for c in all
        .into_iter()
        .filter(|c| container.is_none_or(|n| c.name == n))
    {
        let req = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .and_then(|q| quantity::milli(&q.0));
        match req {
            Some(m) => total = total.saturating_add(m),
            None => return Err(c.name.clone()),
        }
    }
    Ok(total)
}

/// The calculator's view of a pod.
pub fn view(pod: &Pod, resource: &str, container: Option<&str>) -> PodView {
    let status = pod.status.as_ref();
    let phase = crate::pod_state::phase(pod);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| {
            (
                c.status == "True",
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        });
    PodView {
        name: pod.metadata.name.clone().unwrap_or_default(),
        ignored: pod.metadata.deletion_timestamp.is_some() || phase == "Failed",
        pending: phase == "Pending",
        ready,
        start_time: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
        running_ready: phase == "Running" && ready.is_some_and(|(r, _)| r),
        request: request_of(pod, resource, container),
    }
}

struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

/// Sorts pods as upstream's groupPods; CPU samples of pods still starting count as unready.
fn group(
    pods: &[PodView],
    samples: &BTreeMap<String, Sample>,
    cpu: bool,
    tuning: &Tuning,
    now: Timestamp,
) -> Groups {
    let mut g = Groups {
        ready: 0,
        unready: BTreeSet::new(),
        missing: BTreeSet::new(),
        ignored: BTreeSet::new(),
    };
    for p in pods {
        if p.ignored {
            g.ignored.insert(p.name.clone());
            continue;
        }
        if p.pending {
            g.unready.insert(p.name.clone());
            continue;
        }
        let Some(sample) = samples.get(&p.name) else {
            g.missing.insert(p.name.clone());
            continue;
        };
        if cpu {
            let unready = match (p.ready, p.start_time) {
                (Some((ready, changed)), Some(start)) => {
                    let changed = changed.unwrap_or(start);
                    if add(start, tuning.cpu_initialization_period) > now {
                        !ready || sample.timestamp < add(changed, sample.window)
                    } else {
                        !ready && add(start, tuning.initial_readiness_delay) > changed
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(p.name.clone());
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// (ratio, utilization, average usage) over pods with both a sample and a request.
fn utilization_ratio(
    samples: &BTreeMap<String, Sample>,
    requests: &BTreeMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), CalcError> {
    let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (name, s) in samples {
        if let Some(r) = requests.get(name) {
            used = used.saturating_add(s.milli);
            requested = requested.saturating_add(*r);
            n += 1;
        }
    }
    if requested == 0 {
        return Err(CalcError::NoMatchingMetrics);
    }
    let utilization = i32::try_from(used.saturating_mul(100) / requested).unwrap_or(i32::MAX);
    Ok((
        f64::from(utilization) / f64::from(target.max(1)),
        utilization,
        used / n,
    ))
}

fn ceil_replicas(x: f64) -> i32 {
    let c = x.ceil();
    if c >= f64::from(i32::MAX) {
        i32::MAX
    } else {
        c as i32
    }
}

/// Whether the adjusted ratio keeps the current count: within tolerance, or pointing the other way.
fn keeps(ratio: f64, adjusted: f64, tolerance: f64) -> bool {
    (1.0 - adjusted).abs() <= tolerance
        || (ratio < 1.0 && adjusted > 1.0)
        || (ratio > 1.0 && adjusted < 1.0)
}

/// The replicas a utilization target (`target` percent of the request) asks for.
pub fn for_utilization(
    current: i32,
    target: i32,
    resource: &str,
    pods: &[PodView],
    mut samples: BTreeMap<String, Sample>,
    tuning: &Tuning,
    now: Timestamp,
) -> Result<Proposal, CalcError> {
    if pods.is_empty() {
        return Err(CalcError::NoPods);
    }
    let g = group(pods, &samples, resource == "cpu", tuning, now);
    samples.retain(|n, _| !g.ignored.contains(n) && !g.unready.contains(n));
    if samples.is_empty() {
        return Err(CalcError::NoUsableMetrics);
    }
    let mut requests = BTreeMap::new();
    for p in pods {
        match &p.request {
            Ok(r) => {
                requests.insert(p.name.clone(), *r);
            }
            Err(container) => {
                return Err(CalcError::MissingRequest {
                    resource: resource.to_string(),
                    container: container.clone(),
                    pod: p.name.clone(),
                })
            }
        }
    }
    let (ratio, utilization, average) = utilization_ratio(&samples, &requests, target)?;
    let proposal = |replicas| Proposal {
        replicas,
        utilization: Some(utilization),
        average_milli: average,
    };
    let replicas = settle(current, ratio, &g, tuning, |up_with_unready| {
        let fill = |samples: &mut BTreeMap<String, Sample>,
                    names: &BTreeSet<String>,
                    milli: &dyn Fn(&str) -> i64| {
            for n in names {
                samples.insert(
                    n.clone(),
                    Sample {
                        milli: milli(n),
                        timestamp: now,
                        window: Duration::ZERO,
                    },
                );
            }
        };
        if ratio < 1.0 {
            // A pod without a sample may be busy: assume it uses its request (or the target, if higher).
            let fallback = i64::from(target.max(100));
            fill(&mut samples, &g.missing, &|m| {
                requests
                    .get(m)
                    .copied()
                    .unwrap_or(0)
                    .saturating_mul(fallback)
                    / 100
            });
        } else if ratio > 1.0 {
            fill(&mut samples, &g.missing, &|_| 0);
        }
        if up_with_unready {
            fill(&mut samples, &g.unready, &|_| 0);
        }
        let (adjusted, _, _) = utilization_ratio(&samples, &requests, target)?;
        Ok((adjusted, samples.len()))
    })?;
    Ok(proposal(replicas))
}

/// Upstream's last step, shared by every per-pod target: within tolerance the count stays; with every pod
/// sampled and none unready on the way up, the ratio scales the ready pods; otherwise `adjusted` fills in
/// the conservative guesses (told whether unready pods count as 0) and the count moves only if the
/// adjusted ratio still points the same way.
fn settle(
    current: i32,
    ratio: f64,
    g: &Groups,
    tuning: &Tuning,
    adjusted: impl FnOnce(bool) -> Result<(f64, usize), CalcError>,
) -> Result<i32, CalcError> {
    let up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !up_with_unready && g.missing.is_empty() {
        if (1.0 - ratio).abs() <= tuning.tolerance {
            return Ok(current);
        }
        return Ok(ceil_replicas(ratio * g.ready as f64));
    }
    let (adjusted, counted) = adjusted(up_with_unready)?;
    if keeps(ratio, adjusted, tuning.tolerance) {
        return Ok(current);
    }
    let replicas = ceil_replicas(adjusted * counted as f64);
    if (adjusted < 1.0 && replicas > current) || (adjusted > 1.0 && replicas < current) {
        return Ok(current);
    }
    Ok(replicas)
}

/// The replicas an average-value target (`target_milli` per pod) asks for; `cpu` turns on the doubt
/// about samples of starting pods.
pub fn for_average_value(
    current: i32,
    target_milli: i64,
    cpu: bool,
    pods: &[PodView],
    mut samples: BTreeMap<String, Sample>,
    tuning: &Tuning,
    now: Timestamp,
) -> Result<Proposal, CalcError> {
    if pods.is_empty() {
        return Err(CalcError::NoPods);
    }
    let g = group(pods, &samples, cpu, tuning, now);
    samples.retain(|n, _| !g.ignored.contains(n) && !g.unready.contains(n));
    if samples.is_empty() {
        return Err(CalcError::NoUsableMetrics);
    }
    let ratio_of = |s: &BTreeMap<String, Sample>| {
        let total: i64 = s.values().map(|s| s.milli).fold(0, i64::saturating_add);
        let average = total / s.len().max(1) as i64;
        (average as f64 / target_milli.max(1) as f64, average)
    };
    let (ratio, average) = ratio_of(&samples);
    let proposal = |replicas| Proposal {
        replicas,
        utilization: None,
        average_milli: average,
    };
    let replicas = settle(current, ratio, &g, tuning, |up_with_unready| {
        let sample = |milli| Sample {
            milli,
            timestamp: now,
            window: Duration::ZERO,
        };
        // A pod without a sample counts as at the target on the way down, as idle on the way up.
        let guess = if ratio < 1.0 { target_milli } else { 0 };
        for m in &g.missing {
            samples.insert(m.clone(), sample(guess));
        }
        if up_with_unready {
            for u in &g.unready {
                samples.insert(u.clone(), sample(0));
            }
        }
        Ok((ratio_of(&samples).0, samples.len()))
    })?;
    Ok(proposal(replicas))
}

/// The replicas a total (`Value`) target asks for, counting Running and Ready pods.
pub fn for_total_value(
    current: i32,
    usage_milli: i64,
    target_milli: i64,
    pods: &[PodView],
    tolerance: f64,
) -> Result<i32, CalcError> {
    let ratio = usage_milli as f64 / target_milli.max(1) as f64;
    if current == 0 {
        return Ok(ceil_replicas(ratio));
    }
    if (1.0 - ratio).abs() <= tolerance {
        return Ok(current);
    }
    if pods.is_empty() {
        return Err(CalcError::NoPods);
    }
    let ready = pods.iter().filter(|p| p.running_ready).count();
    Ok(ceil_replicas(ratio * ready as f64))
}

/// The replicas a per-pod (`AverageValue`) target of a total asks for, and the usage per pod, from the
/// target's observed replicas.
pub fn for_total_per_pod(
    status_replicas: i32,
    usage_milli: i64,
    target_milli: i64,
    tolerance: f64,
) -> (i32, i64) {
    let target = target_milli.max(1);
    let mut replicas = status_replicas;
    let ratio = usage_milli as f64 / (target as f64 * f64::from(status_replicas));
    if (1.0 - ratio).abs() > tolerance {
        replicas = ceil_replicas(usage_milli as f64 / target as f64);
    }
    let per_pod = (usage_milli as f64 / f64::from(status_replicas.max(1))).ceil() as i64;
    (replicas, per_pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn pod(name: &str, request: i64, started: i64) -> PodView {
        PodView {
            name: name.into(),
            ignored: false,
            pending: false,
            ready: Some((true, Some(t(started)))),
            start_time: Some(t(started)),
            running_ready: true,
            request: Ok(request),
        }
    }

    fn samples(list: &[(&str, i64)], at: i64) -> BTreeMap<String, Sample> {
        list.iter()
            .map(|(n, m)| {
                (
                    n.to_string(),
                    Sample {
                        milli: *m,
                        timestamp: t(at),
                        window: Duration::from_secs(10),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn busy_pods_scale_up_by_the_ratio() {
        // One pod using 200m of a 50m request against a 50 % target: 400 % / 50 % = 8 pods.
        let pods = [pod("a", 50, 0)];
        let p = for_utilization(
            1,
            50,
            "cpu",
            &pods,
            samples(&[("a", 200)], 600),
            &Tuning::default(),
            t(610),
        )
        .unwrap();
        assert_eq!(p.replicas, 8);
        assert_eq!(p.utilization, Some(400));
        assert_eq!(p.average_milli, 200);
    }

    #[test]
    fn within_tolerance_nothing_changes() {
        let pods = [pod("a", 100, 0), pod("b", 100, 0)];
        let p = for_utilization(
            2,
            50,
            "cpu",
            &pods,
            samples(&[("a", 52), ("b", 54)], 600),
            &Tuning::default(),
            t(610),
        )
        .unwrap();
        assert_eq!(p.replicas, 2);
    }

    #[test]
    fn idle_pods_scale_down_and_missing_ones_are_assumed_busy() {
        let pods = [pod("a", 100, 0), pod("b", 100, 0), pod("c", 100, 0)];
        let all = for_utilization(
            3,
            50,
            "cpu",
            &pods,
            samples(&[("a", 1), ("b", 1), ("c", 1)], 600),
            &Tuning::default(),
            t(610),
        )
        .unwrap();
        assert_eq!(all.replicas, 1);
        // c has no sample: it counts as using its full request, so the drop is smaller.
        let some = for_utilization(
            3,
            50,
            "cpu",
            &pods,
            samples(&[("a", 1), ("b", 1)], 600),
            &Tuning::default(),
            t(610),
        )
        .unwrap();
        assert_eq!(some.replicas, 3);
    }

    #[test]
    fn a_starting_pods_cpu_sample_is_not_trusted_for_a_scale_up() {
        // b became ready at 600; its sample (taken at 605 over 10 s) straddles its start.
        let pods = [pod("a", 100, 0), pod("b", 100, 600)];
        let p = for_utilization(
            2,
            50,
            "cpu",
            &pods,
            samples(&[("a", 100), ("b", 100)], 605),
            &Tuning::default(),
            t(606),
        )
        .unwrap();
        // Only a counts (200 %); b is unready and counts as 0: (100+0)/200 = 50 % → stays at 2.
        assert_eq!(p.replicas, 2);
        assert_eq!(p.utilization, Some(100));
    }

    #[test]
    fn errors_read_as_upstream() {
        let mut p = pod("a", 0, 0);
        p.request = Err("app".into());
        let e = for_utilization(
            1,
            50,
            "cpu",
            &[p],
            samples(&[("a", 5)], 600),
            &Tuning::default(),
            t(610),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "missing request for cpu in container app of Pod a"
        );
        let e = for_utilization(1, 50, "cpu", &[], BTreeMap::new(), &Tuning::default(), t(0))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "no pods returned by selector while calculating replica count"
        );
    }

    #[test]
    fn average_values_and_totals() {
        let pods = [pod("a", 0, 0), pod("b", 0, 0)];
        let p = for_average_value(
            2,
            100_000,
            false,
            &pods,
            samples(&[("a", 300_000), ("b", 100_000)], 600),
            &Tuning::default(),
            t(610),
        )
        .unwrap();
        assert_eq!((p.replicas, p.average_milli), (4, 200_000));
        assert_eq!(for_total_value(2, 30_000, 10_000, &pods, 0.1).unwrap(), 6);
        assert_eq!(for_total_value(0, 30_000, 10_000, &[], 0.1).unwrap(), 3);
        assert_eq!(for_total_per_pod(2, 50_000, 10_000, 0.1), (5, 25_000));
    }
}
