//! The `endpoints.kubernetes.io/last-change-trigger-time` of a Service's slices (upstream's trigger time
//! tracker): the earliest change not yet published, so a proxy can measure network programming latency
//! from the change that caused a slice write to the moment its rules are in force.
//!
//! A pod's change time is its `Ready` condition's last transition; a Service's is its creation. A
//! reconcile publishes the earliest of those that moved since the previous reconcile of that Service.
//! The first reconcile of a Service (after this controller starts, too) publishes none: old times
//! would read as huge latencies.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;

/// The annotation a slice's trigger time travels in.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// What the previous reconcile of one Service saw.
#[derive(Default)]
struct Seen {
    pods: HashMap<String, Timestamp>,
    service: Option<Timestamp>,
}

/// Trigger times per Service (`ns/name`).
#[derive(Default)]
pub struct TriggerTimes {
    services: Mutex<HashMap<String, Seen>>,
}

/// When `pod` last changed in a way that moves its endpoint: its `Ready` condition's last transition.
fn pod_time(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

impl TriggerTimes {
    /// The trigger time to publish for Service `key` given the pods it selects now, and remembers
    /// them for the next call. `None`: nothing changed since the last call, or the Service is new here.
    pub fn compute(
        &self,
        key: &str,
        svc: &Service,
        pods: &[std::sync::Arc<Pod>],
    ) -> Option<Timestamp> {
        let Ok(mut all) = self.services.lock() else {
            return None;
        };
        let known = all.contains_key(key);
        let seen = all.entry(key.to_string()).or_default();
        let mut earliest: Option<Timestamp> = None;
        let mut now_pods = HashMap::with_capacity(pods.len());
        for pod in pods {
            let Some(t) = pod_time(pod) else { continue };
            let name = pod.name_any();
            if seen.pods.get(&name).is_none_or(|before| t > *before) {
                earliest = Some(earliest.map_or(t, |e| e.min(t)));
            }
            now_pods.insert(name, t);
        }
        let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(c) = created {
            if seen.service.is_none_or(|before| c > before) {
                earliest = Some(earliest.map_or(c, |e| e.min(c)));
            }
        }
        seen.pods = now_pods;
        seen.service = created;
        if known {
            earliest
        } else {
            None
        }
    }

    /// Forgets a deleted Service.
    pub fn forget(&self, key: &str) {
        if let Ok(mut all) = self.services.lock() {
            all.remove(key);
        }
    }
}

/// The annotation's value for `t` (RFC 3339 with fractional seconds, as upstream writes it).
pub fn format(t: Timestamp) -> String {
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::sync::Arc;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn pod(name: &str, ready_at: i64) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(at(ready_at))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn svc() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("s".into()),
                creation_timestamp: Some(Time(at(0))),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn first_sight_publishes_nothing_then_the_earliest_change() {
        let t = TriggerTimes::default();
        assert_eq!(t.compute("ns/s", &svc(), &[pod("a", 1), pod("b", 2)]), None);
        // Nothing moved.
        assert_eq!(t.compute("ns/s", &svc(), &[pod("a", 1), pod("b", 2)]), None);
        // Two pods changed: the earlier change is the one still waiting to be programmed.
        assert_eq!(
            t.compute("ns/s", &svc(), &[pod("a", 7), pod("b", 5)]),
            Some(at(5))
        );
        // A new pod counts; a pod gone does not.
        assert_eq!(t.compute("ns/s", &svc(), &[pod("c", 9)]), Some(at(9)));
        t.forget("ns/s");
        assert_eq!(t.compute("ns/s", &svc(), &[pod("c", 10)]), None);
    }
}
