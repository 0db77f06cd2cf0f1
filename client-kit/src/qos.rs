//! A pod's quality-of-service class by upstream's rules (`GetPodQOS`): the API server records it in
//! `status.qosClass` and the node agent places the pod's cgroup by it, so both must agree.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::quantity::Quantity;

/// Guaranteed, Burstable or BestEffort.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    /// Every container limits cpu and memory, and requests exactly its limits.
    Guaranteed,
    /// Something is requested or limited, short of Guaranteed.
    Burstable,
    /// Nothing requested or limited.
    BestEffort,
}

impl QosClass {
    /// The name `status.qosClass` carries.
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// One container's requests and limits as `(resource, quantity text)` pairs.
#[derive(Default)]
pub struct ContainerResources<'a> {
    /// `resources.requests`.
    pub requests: Vec<(&'a str, &'a str)>,
    /// `resources.limits`.
    pub limits: Vec<(&'a str, &'a str)>,
}

/// Only cpu and memory decide the class.
fn counts(resource: &str) -> bool {
    resource == "cpu" || resource == "memory"
}

/// The class of a pod whose init and regular containers have these resources. Only positive cpu and
/// memory quantities count; requests and limits are summed over the containers and compared as
/// quantities (`1` equals `1000m`). Requests are taken as given: the API server defaults missing
/// requests to the limits before this runs.
pub fn qos_class<'a>(containers: impl IntoIterator<Item = ContainerResources<'a>>) -> QosClass {
    let mut requests: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut guaranteed = true;
    let positive = |q: &str| Quantity::parse(q).filter(|q| !q.is_zero() && !q.is_negative());
    for c in containers {
        for (name, q) in c.requests {
            if let Some(q) = positive(q).filter(|_| counts(name)) {
                let sum = requests.entry(name).or_default();
                *sum = sum.plus(q);
            }
        }
        let mut limited = (false, false);
        for (name, q) in c.limits {
            if let Some(q) = positive(q).filter(|_| counts(name)) {
                if name == "cpu" {
                    limited.0 = true;
                } else {
                    limited.1 = true;
                }
                let sum = limits.entry(name).or_default();
                *sum = sum.plus(q);
            }
        }
        if limited != (true, true) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(name, r)| limits.get(name) == Some(r))
    {
        return QosClass::Guaranteed;
    }
    QosClass::Burstable
}

type ResourceList = BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>;

fn pairs(m: Option<&ResourceList>) -> Vec<(&str, &str)> {
    m.into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_str()))
        .collect()
}

fn resources(c: &Container) -> ContainerResources<'_> {
    let r = c.resources.as_ref();
    ContainerResources {
        requests: pairs(r.and_then(|r| r.requests.as_ref())),
        limits: pairs(r.and_then(|r| r.limits.as_ref())),
    }
}

/// The class of a typed pod spec.
pub fn of_spec(spec: &PodSpec) -> QosClass {
    qos_class(
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(resources),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(
        requests: &[(&'a str, &'a str)],
        limits: &[(&'a str, &'a str)],
    ) -> ContainerResources<'a> {
        ContainerResources {
            requests: requests.to_vec(),
            limits: limits.to_vec(),
        }
    }

    #[test]
    fn requests_equal_to_limits_as_quantities_are_guaranteed() {
        let full = [("cpu", "1000m"), ("memory", "128Mi")];
        assert_eq!(
            qos_class([c(&[("cpu", "1"), ("memory", "134217728")], &full)]),
            QosClass::Guaranteed
        );
        assert_eq!(
            qos_class([c(&[("cpu", "500m")], &full)]),
            QosClass::Burstable
        );
        assert_eq!(qos_class([c(&[("cpu", "1")], &[])]), QosClass::Burstable);
        assert_eq!(qos_class([c(&[], &[])]), QosClass::BestEffort);
        assert_eq!(qos_class([]), QosClass::BestEffort);
    }

    #[test]
    fn init_containers_count_and_zero_or_other_resources_do_not() {
        let full = [("cpu", "1"), ("memory", "1Gi")];
        // An init container with nothing makes the pod short of Guaranteed.
        assert_eq!(
            qos_class([c(&full, &full), c(&[], &[])]),
            QosClass::Burstable
        );
        assert_eq!(
            qos_class([c(&[("cpu", "0")], &[("ephemeral-storage", "1Gi")])]),
            QosClass::BestEffort
        );
        // Summed over containers: 1 + 1 requested against 2 limited.
        let half = [("cpu", "1"), ("memory", "512Mi")];
        assert_eq!(
            qos_class([c(&half, &half), c(&half, &half)]),
            QosClass::Guaranteed
        );
    }
}
