//! A job's status conditions: which one is set, and setting one as upstream does (the transition time
//! moves only when the status flips).

use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The job completed.
pub const COMPLETE: &str = "Complete";
/// The job failed.
pub const FAILED: &str = "Failed";
/// The job is suspended (True) or was resumed (False).
pub const SUSPENDED: &str = "Suspended";
/// Interim: the job will fail once its pods are gone.
pub const FAILURE_TARGET: &str = "FailureTarget";
/// Interim: the job will complete once its pods are gone.
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";

/// The condition of `type_` when its status is True.
pub fn true_condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Whether the job has finished (Complete or Failed).
pub fn finished(status: &JobStatus) -> bool {
    true_condition(status, COMPLETE).is_some() || true_condition(status, FAILED).is_some()
}

/// A True condition.
pub fn new(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Sets `cond` in `status`, keeping the transition time of an existing one with the same status; returns
/// whether anything changed.
pub fn set(status: &mut JobStatus, mut cond: JobCondition) -> bool {
    let list = status.conditions.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(old) => {
            if old.status == cond.status && old.reason == cond.reason && old.message == cond.message
            {
                return false;
            }
            if old.status == cond.status {
                cond.last_transition_time = old.last_transition_time.clone();
            }
            *old = cond;
        }
        None => list.push(cond),
    }
    true
}
