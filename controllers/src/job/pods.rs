//! A job's pods: the labels, annotations and finalizer they carry, how one is made from the template, and
//! what state each is in.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

/// Keeps a finished pod until the job controller has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The completion index of an Indexed job's pod (annotation and label).
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";
/// How many earlier pods of the same index failed (with `backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// The env var a container reads its index from.
pub const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// Whether the pod is owned (as controller) by the job with `uid`.
pub fn owned_by(pod: &Pod, uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The pod's phase.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Exited for good: Succeeded or Failed.
pub fn terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether the pod still carries the tracking finalizer.
pub fn tracked(pod: &Pod) -> bool {
    pod.finalizers().iter().any(|f| f == TRACKING_FINALIZER)
}

/// Whether the pod counts as failed: it failed, or (without a pod failure policy, which waits for the
/// kubelet's verdict) it is being deleted before succeeding, so an orphan that never reaches a phase counts.
pub fn failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    let spec = job.spec.as_ref();
    let waits_for_phase = spec.is_some_and(|s| {
        s.pod_failure_policy.is_some() || s.pod_replacement_policy.as_deref() == Some("Failed")
    });
    !waits_for_phase && pod.metadata.deletion_timestamp.is_some() && phase(pod) != "Succeeded"
}

/// Running or pending and not being deleted.
pub fn active(pod: &Pod) -> bool {
    !terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's completion index (from the annotation, else the label).
pub fn index(pod: &Pod) -> Option<i32> {
    pod.annotations()
        .get(INDEX_KEY)
        .or_else(|| pod.labels().get(INDEX_KEY))
        .and_then(|v| v.parse().ok())
}

/// The pod's index failure count (0 when absent).
pub fn failure_count(pod: &Pod) -> i32 {
    pod.annotations()
        .get(INDEX_FAILURE_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A new pod for `job` from its template; with `index`, as an Indexed job's pod of that index.
pub fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let name = job.name_any();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tm.labels.unwrap_or_default();
    let mut annotations: BTreeMap<String, String> = tm.annotations.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let generate_name = match index {
        Some(i) => {
            labels.insert(INDEX_KEY.into(), i.to_string());
            annotations.insert(INDEX_KEY.into(), i.to_string());
            // The stable hostname lets indexed pods find each other through a headless Service.
            if spec.hostname.is_none() {
                spec.hostname = Some(format!("{name}-{i}"));
            }
            let env = EnvVar {
                name: INDEX_ENV.into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.labels['{INDEX_KEY}']"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            for c in spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten())
            {
                let envs = c.env.get_or_insert_with(Vec::new);
                if !envs.iter().any(|e| e.name == INDEX_ENV) {
                    envs.push(env.clone());
                }
            }
            format!("{name}-{i}-")
        }
        None => format!("{name}-"),
    };
    let mut finalizers = tm.finalizers.unwrap_or_default();
    finalizers.push(TRACKING_FINALIZER.into());
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(finalizers),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name,
                uid: job.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// When the pod finished (its last container's exit, else its Ready condition's last change).
pub fn finish_time(pod: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    let status = pod.status.as_ref()?;
    let exited = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    exited.or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
    })
}

/// Removes the tracking finalizer from `pod`, conditionally (a merge patch carrying the pod's
/// resourceVersion, retried once on a fresh read); a pod already gone or already released is fine.
pub async fn remove_finalizer(api: &kube::Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    match release(api, pod).await {
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&pod.name_any()).await? {
            Some(fresh) if fresh.uid() == pod.uid() => release(api, &fresh).await,
            _ => Ok(()),
        },
        r => r,
    }
}

async fn release(api: &kube::Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    if !tracked(pod) {
        return Ok(());
    }
    let keep: Vec<&String> = pod
        .finalizers()
        .iter()
        .filter(|f| *f != TRACKING_FINALIZER)
        .collect();
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": pod.resource_version(),
        "finalizers": keep,
    }});
    match api
        .patch(
            &pod.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::JobSpec;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

    #[test]
    fn indexed_pod_has_its_index_hostname_and_finalizer() {
        let job = Job {
            metadata: ObjectMeta {
                name: Some("pi".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            status: None,
        };
        let pod = new_pod(&job, Some(2));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-2-"));
        assert_eq!(index(&pod), Some(2));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("pi-2"));
        assert!(tracked(&pod));
        assert!(owned_by(&pod, "u1"));
        let env = spec.containers[0].env.as_ref().unwrap();
        assert_eq!(env[0].name, INDEX_ENV);
    }
}
