//! POST `pods/{name}/eviction` (a `policy/v1` Eviction): deletes the pod if the PodDisruptionBudget
//! selecting it allows one more disruption, which the same request takes from the budget with a
//! conditional status write; otherwise 429, which `kubectl drain` retries.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::delete::{delete_one, DeleteOptions};
use super::Call;
use crate::body::{self, respond};
use crate::object::{self, path};
use crate::resource;
use crate::selector::LabelSelector;
use crate::status::{ApiError, Cause};
use crate::storage::{prefix_end, Stored, WriteOutcome};

/// Upstream's refusal, the same for every budget.
pub const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
/// The cause type of a refusal (`policy/v1` DisruptionBudgetCause).
pub const CAUSE: &str = "DisruptionBudget";
/// Upstream's cap on evictions the disruption controller has not yet seen.
const MAX_DISRUPTED_PODS: usize = 2000;
/// Tries of the budget's conditional write before giving up.
const RETRIES: usize = 8;

/// Pods whose eviction needs no budget: finished, not started, or already going.
fn can_ignore_budget(pod: &Value) -> bool {
    let phase = path(pod, "status.phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    matches!(phase, "Succeeded" | "Failed" | "Pending") || object::is_deleting(pod)
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(pod: &Value) -> bool {
    path(pod, "status.conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Whether a budget's selector picks the pod (policy/v1: no selector picks nothing, an empty one all).
fn selects(pdb: &Value, pod: &Value) -> bool {
    match path(pdb, "spec.selector") {
        Some(sel) if sel.is_object() => {
            LabelSelector::from_object(sel).matches(object::labels(pod))
        }
        _ => false,
    }
}

fn budgets_of(call: &Call, pod: &Value) -> Result<Vec<Stored>, ApiError> {
    let Some(def) = resource::find("policy", "v1", "poddisruptionbudgets") else {
        return Ok(Vec::new());
    };
    let prefix = def.ns_prefix(object::namespace(pod));
    let page = call
        .state
        .storage
        .range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    Ok(page
        .items
        .into_iter()
        .map(|(_, st)| st)
        .filter(|st| selects(&st.object, pod))
        .collect())
}

fn int(v: &Value, p: &str) -> i64 {
    path(v, p).and_then(Value::as_i64).unwrap_or(0)
}

fn too_many(message: String, retry_after: i64) -> ApiError {
    ApiError::TooManyRequests {
        message: REFUSED.into(),
        retry_after,
        causes: vec![Cause {
            reason: CAUSE,
            message,
            field: String::new(),
        }],
    }
}

/// What the budget says about one eviction.
enum Verdict {
    /// Allowed; the budget (already decremented when it counted).
    Allowed,
    /// The budget changed under us; read it again.
    Retry,
}

/// Upstream's checkAndDecrement: refuses unless a disruption is allowed, then takes one and records the
/// pod in `disruptedPods` so the controller does not count it healthy until it is gone.
async fn take_disruption(
    call: &Call,
    pdb: &Stored,
    pod_name: &str,
    dry_run: bool,
) -> Result<Verdict, ApiError> {
    let o = &pdb.object;
    let name = object::name(o);
    let generation = path(o, "metadata.generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if int(o, "status.observedGeneration") < generation {
        return Err(too_many(
            format!("The disruption budget {name} is still being processed by the server."),
            10,
        ));
    }
    let allowed = int(o, "status.disruptionsAllowed");
    let forbidden = |message: &str| ApiError::Forbidden {
        target: crate::status::Target::new("policy", "poddisruptionbudget", name),
        message: format!("poddisruptionbudget.policy \"{name}\" is forbidden: {message}"),
    };
    if allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    let disrupted = path(o, "status.disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many(
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int(o, "status.desiredHealthy"),
                int(o, "status.currentHealthy")
            ),
            0,
        ));
    }
    if dry_run {
        return Ok(Verdict::Allowed);
    }
    let mut next = o.clone();
    let left = allowed - 1;
    let status = next
        .as_object_mut()
        .map(|m| m.entry("status").or_insert_with(|| json!({})));
    let Some(status) = status.and_then(Value::as_object_mut) else {
        return Err(ApiError::Internal("malformed PodDisruptionBudget".into()));
    };
    status.insert("disruptionsAllowed".into(), json!(left));
    let pods = status.entry("disruptedPods").or_insert_with(|| json!({}));
    if let Some(p) = pods.as_object_mut() {
        p.insert(pod_name.into(), json!(object::now_rfc3339()));
    }
    set_allowed_condition(status, left > 0);
    let Some(def) = resource::find("policy", "v1", "poddisruptionbudgets") else {
        return Err(ApiError::Internal("no PodDisruptionBudget resource".into()));
    };
    let key = def.key(Some(object::namespace(o)), name);
    match call
        .state
        .storage
        .put_if(&key, &next, pdb.mod_revision)
        .await?
    {
        WriteOutcome::Done(_) => Ok(Verdict::Allowed),
        WriteOutcome::Lost(_) => Ok(Verdict::Retry),
    }
}

/// Upstream's UpdateDisruptionAllowedCondition, as the eviction leaves it.
fn set_allowed_condition(status: &mut serde_json::Map<String, Value>, allowed: bool) {
    let (st, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    let now = object::now_rfc3339();
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed"))
    {
        Some(c) => {
            if c.get("status").and_then(Value::as_str) != Some(st) {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(st);
            c["reason"] = json!(reason);
        }
        None => list.push(
            json!({"type": "DisruptionAllowed", "status": st, "reason": reason,
                                 "message": "", "lastTransitionTime": now}),
        ),
    }
}

/// POST `pods/{name}/eviction`.
pub async fn evict(call: Call) -> Result<Response, ApiError> {
    let eviction = body::decode(&call.headers, &call.body)?;
    let named = object::name(&eviction);
    if !named.is_empty() && named != call.name() {
        return Err(ApiError::BadRequest(
            "name in URL does not match name in Eviction object".into(),
        ));
    }
    let opts: DeleteOptions = match eviction.get("deleteOptions") {
        Some(d) if !d.is_null() => serde_json::from_value(d.clone())
            .map_err(|e| ApiError::BadRequest(format!("invalid deleteOptions: {e}")))?,
        _ => DeleteOptions::default(),
    };
    let dry_run = call.params.dry_run()? || !opts.dry_run.is_empty();
    let key = call.key();
    let pod = call
        .state
        .storage
        .get(&key, true)
        .await?
        .ok_or_else(|| ApiError::NotFound(call.target()))?;
    if !can_ignore_budget(&pod.object) {
        let mut settled = false;
        for _ in 0..RETRIES {
            let budgets = budgets_of(&call, &pod.object)?;
            let pdb = match budgets.as_slice() {
                [] => {
                    settled = true;
                    break;
                }
                [one] => one,
                _ => {
                    return Err(ApiError::Internal(
                        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                            .into(),
                    ))
                }
            };
            let always = path(&pdb.object, "spec.unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow");
            // An unready pod costs the application nothing when the budget is met (IfHealthyBudget,
            // the default) or the budget says AlwaysAllow.
            let desired = int(&pdb.object, "status.desiredHealthy");
            let healthy_budget =
                int(&pdb.object, "status.currentHealthy") >= desired && desired > 0;
            if !is_ready(&pod.object) && (always || healthy_budget) {
                settled = true;
                break;
            }
            match take_disruption(&call, pdb, call.name(), dry_run).await? {
                Verdict::Allowed => {
                    settled = true;
                    break;
                }
                Verdict::Retry => continue,
            }
        }
        if !settled {
            return Err(ApiError::Conflict {
                target: call.target(),
                detail: "the disruption budget kept changing; try again".into(),
            });
        }
    }
    delete_one(&call, &key, call.name(), &opts, dry_run).await?;
    Ok(respond(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_select_by_labels() {
        let pod = json!({"metadata": {"labels": {"app": "web"}}});
        let pdb = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
        assert!(selects(&pdb, &pod));
        assert!(!selects(&json!({"spec": {}}), &pod));
        assert!(selects(&json!({"spec": {"selector": {}}}), &pod));
    }

    #[test]
    fn refusal_is_429_with_the_budget_cause() {
        let s = too_many("needs 2".into(), 0).status();
        assert_eq!(s["code"], 429);
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["message"], REFUSED);
        assert_eq!(s["details"]["causes"][0]["reason"], CAUSE);
    }
}
