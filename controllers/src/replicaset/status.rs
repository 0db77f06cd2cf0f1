//! A ReplicaSet's status from its active pods, and the ReplicaFailure condition.

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::pod_state;

/// The condition a failed create or delete sets.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// The status `rs` should report for its active `pods`, given the last create/delete failure
/// (`(reason, message)`); with it, how long until a Ready pod becomes available, if one is waiting.
pub fn calculate(
    rs: &ReplicaSet,
    pods: &[&Pod],
    failure: Option<(&str, String)>,
    now: Timestamp,
) -> (ReplicaSetStatus, Option<std::time::Duration>) {
    let spec = rs.spec.as_ref();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let template_labels = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut fully_labeled = 0;
    let mut ready = 0;
    let mut available = 0;
    let mut wait: Option<std::time::Duration> = None;
    for p in pods {
        let labels = p.metadata.labels.as_ref();
        if template_labels
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            fully_labeled += 1;
        }
        if pod_state::is_ready(p) {
            ready += 1;
        }
        match pod_state::available(p, min_ready, now) {
            Ok(true) => available += 1,
            Ok(false) => {}
            Err(left) => wait = Some(wait.map_or(left, |w| w.min(left))),
        }
    }
    let mut conditions: Vec<ReplicaSetCondition> = rs
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    match failure {
        Some((reason, message)) => {
            let existing = conditions.iter().position(|c| c.type_ == REPLICA_FAILURE);
            let cond = ReplicaSetCondition {
                type_: REPLICA_FAILURE.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(message),
                last_transition_time: Some(Time(now)),
            };
            match existing {
                Some(i)
                    if conditions[i].reason == cond.reason
                        && conditions[i].message == cond.message => {}
                Some(i) => conditions[i] = cond,
                None => conditions.push(cond),
            }
        }
        None => conditions.retain(|c| c.type_ != REPLICA_FAILURE),
    }
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let status = ReplicaSetStatus {
        replicas: count(pods.len()),
        fully_labeled_replicas: Some(count(fully_labeled)),
        ready_replicas: Some(count(ready)),
        available_replicas: Some(count(available)),
        observed_generation: rs.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
    };
    (status, wait)
}
