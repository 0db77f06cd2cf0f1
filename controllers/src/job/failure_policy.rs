//! `spec.podFailurePolicy`: the first rule matching a failed pod (a container's non-zero exit code, or a
//! pod condition) decides whether the failure fails the job, is ignored, counts, or fails its index.

use k8s_openapi::api::batch::v1::PodFailurePolicy;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// What a failed pod's failure does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The job fails at once; the message says which rule matched.
    FailJob(String),
    /// Not counted towards backoffLimit; the pod is replaced.
    Ignore,
    /// Counted (no rule matched, or a `Count` rule did).
    Count,
    /// The pod's index fails (with backoffLimitPerIndex).
    FailIndex,
}

/// The verdict of `policy` on the failed `pod`.
pub fn judge(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let Some(policy) = policy else {
        return Verdict::Count;
    };
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let status = pod.status.as_ref();
    for (i, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(req) = &rule.on_exit_codes {
            status
                .into_iter()
                .flat_map(|s| {
                    s.init_container_statuses
                        .iter()
                        .flatten()
                        .chain(s.container_statuses.iter().flatten())
                })
                .filter(|c| req.container_name.as_ref().is_none_or(|n| *n == c.name))
                .find_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    // Exit code 0 is a success, whatever the operator.
                    let hit = code != 0
                        && match req.operator.as_str() {
                            "In" => req.values.contains(&code),
                            "NotIn" => !req.values.contains(&code),
                            _ => false,
                        };
                    hit.then(|| {
                        format!(
                            "Container {} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {i}",
                            c.name, rule.action
                        )
                    })
                })
        } else {
            rule.on_pod_conditions.iter().flatten().find_map(|want| {
                let has = status
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == want.type_ && c.status == want.status)
                    });
                has.then(|| {
                    format!(
                        "Pod {ns}/{name} has condition {} matching {} rule at index {i}",
                        want.type_, rule.action
                    )
                })
            })
        };
        if let Some(message) = matched {
            return match rule.action.as_str() {
                "FailJob" => Verdict::FailJob(message),
                "Ignore" => Verdict::Ignore,
                "FailIndex" => Verdict::FailIndex,
                _ => Verdict::Count,
            };
        }
    }
    Verdict::Count
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{
        PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
    };
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn exited(code: i32) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                namespace: Some("n".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "main".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            spec: None,
        }
    }

    #[test]
    fn first_matching_rule_decides() {
        let rule = |action: &str, op: &str, values: Vec<i32>| PodFailurePolicyRule {
            action: action.into(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: None,
                operator: op.into(),
                values,
            }),
            on_pod_conditions: None,
        };
        let policy = PodFailurePolicy {
            rules: vec![
                rule("Ignore", "In", vec![3]),
                rule("FailJob", "NotIn", vec![1]),
            ],
        };
        assert_eq!(judge(Some(&policy), &exited(3)), Verdict::Ignore);
        assert_eq!(judge(Some(&policy), &exited(1)), Verdict::Count);
        assert_eq!(
            judge(Some(&policy), &exited(42)),
            Verdict::FailJob(
                "Container main for pod n/p failed with exit code 42 matching FailJob rule at index 1"
                    .into()
            )
        );
        assert_eq!(judge(None, &exited(42)), Verdict::Count);
    }
}
