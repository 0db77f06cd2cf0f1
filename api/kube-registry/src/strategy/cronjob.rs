//! CronJobs (upstream's `pkg/registry/batch/cronjob`): concurrency, history and pod template defaults; a
//! schedule and a job template with containers are required.

use serde_json::{json, Value};

use super::Strategy;
use crate::object::path;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::defaults::{obj_mut, set_default, template};
use crate::validation::validate::check_containers;

pub(super) struct CronJob;

impl Strategy for CronJob {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(spec) = obj_mut(obj, "spec") {
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
        }
        // As upstream, only the pod spec of the job template is defaulted; its Job gets the Job
        // defaults when the controller creates it.
        template(obj, &["spec", "jobTemplate", "spec", "template"], "Never");
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let schedule = path(obj, "spec.schedule")
            .and_then(Value::as_str)
            .unwrap_or("");
        if schedule.is_empty() {
            causes.push(Cause::required("spec.schedule"));
        } else if schedule.contains("TZ") {
            // As upstream: the zone goes in spec.timeZone, never in the schedule.
            causes.push(Cause::invalid(
                "spec.schedule",
                &json!(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
        match path(obj, "spec.jobTemplate.spec.template.spec") {
            Some(spec) => {
                check_containers(spec, "spec.jobTemplate.spec.template.spec", &mut causes)
            }
            None => causes.push(Cause::required(
                "spec.jobTemplate.spec.template.spec.containers",
            )),
        }
        causes
    }
}
