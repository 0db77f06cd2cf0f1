//! Pod Security admission (upstream's built-in `PodSecurity` plugin, 1.32 checks): a namespace's labels
//! `pod-security.kubernetes.io/{enforce,warn,audit}[-version]` pick a level (privileged, baseline,
//! restricted); a pod that violates the `enforce` level is refused with a 403, one that violates the `warn`
//! level is admitted with a warning, and workload templates (Deployments, Jobs, ...) get the warning only.
//! Changing a namespace's enforce level warns about the pods already there that would be refused.
//!
//! Every version label is evaluated with the 1.32 checks (the label's version is kept in the messages).
//! The `audit` level is parsed and validated, but keel has no audit log yet to record it in.

pub mod checks;

use serde_json::{json, Map, Value};

use checks::{describe, evaluate, Level};

use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Cause, Target};
use crate::storage::{prefix_end, Storage};

const PREFIX: &str = "pod-security.kubernetes.io/";

/// A level with the version its label asked for (`latest` or `v1.x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelVersion {
    pub level: Level,
    pub version: String,
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.name(), self.version)
    }
}

/// A namespace's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

fn valid_version(v: &str) -> bool {
    v == "latest"
        || v.strip_prefix("v1.")
            .is_some_and(|n| !n.is_empty() && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The policy of a namespace's labels (upstream's `PolicyToEvaluate`, defaults privileged:latest) and the
/// problems with its labels. A bad enforce level fails closed (restricted), bad warn and audit levels open.
pub fn policy(labels: Option<&Map<String, Value>>) -> (Policy, Vec<Cause>) {
    let default = LevelVersion {
        level: Level::Privileged,
        version: "latest".into(),
    };
    let mut p = Policy {
        enforce: default.clone(),
        audit: default.clone(),
        warn: default,
    };
    let mut causes = Vec::new();
    let Some(labels) = labels else {
        return (p, causes);
    };
    let get = |k: &str| {
        labels
            .get(&format!("{PREFIX}{k}"))
            .map(|v| v.as_str().unwrap_or("").to_string())
    };
    let mut bad = |k: &str, v: &str, why: &str| {
        causes.push(Cause::invalid(
            &format!("metadata.labels[{PREFIX}{k}]"),
            &json!(v),
            why,
        ));
    };
    let level_err = "must be one of privileged, baseline, restricted";
    let version_err = "must be \"latest\" or \"v1.x\"";
    let mut has_enforce = false;
    let mut has_warn = false;
    let mut has_warn_version = false;
    for (mode, fail) in [
        ("enforce", Level::Restricted),
        ("audit", Level::Privileged),
        ("warn", Level::Privileged),
    ] {
        let target = match mode {
            "enforce" => &mut p.enforce,
            "audit" => &mut p.audit,
            _ => &mut p.warn,
        };
        if let Some(v) = get(mode) {
            match Level::parse(&v) {
                Some(l) => {
                    target.level = l;
                    if mode == "enforce" {
                        has_enforce = true;
                    }
                }
                None => {
                    target.level = fail;
                    bad(mode, &v, level_err);
                }
            }
            if mode == "warn" {
                has_warn = true;
            }
        }
        if let Some(v) = get(&format!("{mode}-version")) {
            if valid_version(&v) {
                target.version = v;
            } else {
                bad(&format!("{mode}-version"), &v, version_err);
            }
            if mode == "warn" {
                has_warn_version = true;
            }
        }
    }
    // Without its own warn label, warn follows a stricter enforce level.
    if !has_warn && has_enforce && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if !has_warn_version {
            p.warn.version = p.enforce.version.clone();
        }
    }
    (p, causes)
}

async fn namespace_policy(storage: &Storage, ns: &str) -> Option<Policy> {
    let obj = storage
        .get(&format!("/registry/namespaces/{ns}"), false)
        .await
        .ok()??
        .object;
    Some(policy(object::path(&obj, "metadata.labels").and_then(Value::as_object)).0)
}

/// The pod template's metadata and spec of a workload, or the pod's own.
fn pod_parts<'a>(def: &ResourceDef, obj: &'a Value) -> Option<(&'a Value, &'a Value)> {
    let template = match (def.group.as_ref(), def.kind.as_ref()) {
        ("", "Pod") => return Some((obj.get("metadata")?, obj.get("spec")?)),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job")
        | ("", "ReplicationController") => object::path(obj, "spec.template")?,
        ("batch", "CronJob") => object::path(obj, "spec.jobTemplate.spec.template")?,
        _ => return None,
    };
    Some((
        template.get("metadata").unwrap_or(&Value::Null),
        template.get("spec")?,
    ))
}

/// Whether a pod update changes what the checks look at (upstream re-checks only such updates).
fn significant(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
        for f in ["initContainers", "containers", "ephemeralContainers"] {
            if let Some(cs) = spec.get_mut(f).and_then(Value::as_array_mut) {
                for c in cs {
                    if let Some(c) = c.as_object_mut() {
                        c.remove("image");
                    }
                }
            }
        }
        let notes = object::path(v, "metadata.annotations").cloned();
        (spec, notes)
    };
    strip(old) != strip(new)
}

/// Admits a write of `new` (with `old` for updates) in namespace `ns`; returns the warnings to send, or
/// the 403 or 422 that refuses it.
pub async fn admit(
    storage: &Storage,
    def: &ResourceDef,
    subresource: Option<&str>,
    old: Option<&Value>,
    new: &Value,
) -> Result<Vec<String>, ApiError> {
    if subresource.is_some() {
        return Ok(Vec::new());
    }
    if def.group.is_empty() && def.kind == "Namespace" {
        return namespace_change(storage, old, new).await;
    }
    let Some((meta, spec)) = pod_parts(def, new) else {
        return Ok(Vec::new());
    };
    let ns = object::namespace(new);
    let Some(p) = namespace_policy(storage, ns).await else {
        return Ok(Vec::new());
    };
    let is_pod = def.group.is_empty() && def.kind == "Pod";
    if is_pod && old.is_some_and(|o| !significant(o, new)) {
        return Ok(Vec::new());
    }
    if is_pod {
        let v = evaluate(p.enforce.level, meta, spec);
        if !v.is_empty() {
            let target = Target::new("", "pods", object::name(new));
            let name = object::name(new);
            let why = format!("violates PodSecurity \"{}\": {}", p.enforce, describe(&v));
            return Err(ApiError::Forbidden {
                message: if name.is_empty() {
                    format!("pods is forbidden: {why}")
                } else {
                    format!("pods {name:?} is forbidden: {why}")
                },
                target,
            });
        }
    }
    let v = evaluate(p.warn.level, meta, spec);
    if v.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![format!(
        "would violate PodSecurity \"{}\": {}",
        p.warn,
        describe(&v)
    )])
}

/// A namespace's labels: refused when they are invalid (and were not already), and a stricter enforce
/// level warns about the pods already in the namespace that it would refuse.
async fn namespace_change(
    storage: &Storage,
    old: Option<&Value>,
    new: &Value,
) -> Result<Vec<String>, ApiError> {
    let labels = |v: &Value| {
        object::path(v, "metadata.labels")
            .and_then(Value::as_object)
            .cloned()
    };
    let (new_policy, new_errs) = policy(labels(new).as_ref());
    let (old_policy, old_errs) = match old {
        Some(o) => policy(labels(o).as_ref()),
        None => policy(None),
    };
    let name = object::name(new);
    if !new_errs.is_empty() && (old.is_none() || old_errs.is_empty() || old_errs != new_errs) {
        return Err(ApiError::Invalid {
            target: Target::new("", "Namespace", name),
            causes: new_errs,
        });
    }
    if old.is_none()
        || new_policy.enforce == old_policy.enforce
        || new_policy.enforce.level == Level::Privileged
        || (new_policy.enforce.version == old_policy.enforce.version
            && new_policy.enforce.level <= old_policy.enforce.level)
    {
        return Ok(Vec::new());
    }
    let prefix = format!("/registry/pods/{name}/");
    let pods = storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0)?;
    // One warning per distinct set of reasons, naming the first pod (by name) and how many others.
    let mut found: Vec<(String, String, usize)> = Vec::new();
    for (_, s) in pods.items {
        let pod = s.object;
        let (Some(meta), Some(spec)) = (pod.get("metadata"), pod.get("spec")) else {
            continue;
        };
        let v = evaluate(new_policy.enforce.level, meta, spec);
        if v.is_empty() {
            continue;
        }
        let reasons = v
            .iter()
            .map(|x| x.reason.clone())
            .collect::<Vec<_>>()
            .join(", ");
        let pod_name = object::name(&pod).to_string();
        match found.iter_mut().find(|(r, _, _)| *r == reasons) {
            Some((_, first, n)) => {
                *n += 1;
                if pod_name < *first {
                    *first = pod_name;
                }
            }
            None => found.push((reasons, pod_name, 1)),
        }
    }
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let mut warnings = vec![format!(
        "existing pods in namespace {name:?} violate the new PodSecurity enforce level \"{}\"",
        new_policy.enforce
    )];
    let mut per_pod: Vec<String> = found
        .into_iter()
        .map(|(reasons, first, n)| match n {
            1 => format!("{first}: {reasons}"),
            2 => format!("{first} (and 1 other pod): {reasons}"),
            n => format!("{first} (and {} other pods): {reasons}", n - 1),
        })
        .collect();
    per_pod.sort();
    warnings.extend(per_pod);
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{PREFIX}{k}"), json!(v)))
            .collect()
    }

    #[test]
    fn labels_pick_the_policy_as_upstream() {
        let (p, errs) = policy(Some(&labels(&[("enforce", "baseline")])));
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:latest");
        assert_eq!(
            p.warn.to_string(),
            "baseline:latest",
            "warn follows a stricter enforce"
        );
        let (p, errs) = policy(Some(&labels(&[
            ("enforce", "strict"),
            ("warn-version", "v1.x"),
        ])));
        assert_eq!(
            p.enforce.level,
            Level::Restricted,
            "a bad enforce level fails closed"
        );
        assert_eq!(errs.len(), 2);
        assert_eq!(
            errs[0].field,
            "metadata.labels[pod-security.kubernetes.io/enforce]"
        );
        assert!(
            errs[0]
                .message
                .contains("must be one of privileged, baseline, restricted"),
            "{}",
            errs[0].message
        );
        let (p, _) = policy(Some(&labels(&[
            ("enforce", "restricted"),
            ("enforce-version", "v1.30"),
            ("warn", "baseline"),
        ])));
        assert_eq!(
            (p.enforce.to_string(), p.warn.to_string()),
            ("restricted:v1.30".into(), "baseline:latest".into())
        );
    }
}
