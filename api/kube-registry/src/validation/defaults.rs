//! Defaulting of built-in kinds on create and update: the values upstream's defaulters fill in, so that
//! `kubectl get -o yaml` shows what users expect and later controllers can rely on them. Which kind gets
//! which defaults is its strategy's (`strategy/`); the building blocks several kinds share are here.

use serde_json::{json, Map, Value};

/// The object at `key`, created empty if missing or null.
pub fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let o = v.as_object_mut()?;
    let e = o.entry(key).or_insert_with(|| json!({}));
    if e.is_null() {
        *e = json!({});
    }
    e.as_object_mut()
}

/// Sets `key` unless it holds a value (null and "" count as unset).
pub fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
    match m.get(key) {
        None | Some(Value::Null) => {
            m.insert(key.to_string(), v);
        }
        Some(Value::String(s)) if s.is_empty() => {
            m.insert(key.to_string(), v);
        }
        _ => {}
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default(m, "imagePullPolicy", json!(image_pull_policy(&image)));
    set_default(m, "resources", json!({}));
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(pm) = p.as_object_mut() {
                set_default(pm, "protocol", json!("TCP"));
            }
        }
    }
}

/// Pod spec defaults (also used for workload templates).
pub fn pod_spec(spec: &mut Value, restart: &str) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    set_default(m, "restartPolicy", json!(restart));
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "dnsPolicy", json!("ClusterFirst"));
    set_default(m, "securityContext", json!({}));
    set_default(m, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(container);
        }
    }
    service_account_alias(m);
}

/// v1's `serviceAccount` is a deprecated alias of `serviceAccountName`: upstream's conversion takes the
/// name from it when the name is unset, and always writes it back as a copy of the name.
pub fn service_account_alias(m: &mut Map<String, Value>) {
    let name = [m.get("serviceAccountName"), m.get("serviceAccount")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|s| !s.is_empty())
        .map(String::from);
    match name {
        Some(name) => {
            m.insert("serviceAccountName".into(), json!(name));
            m.insert("serviceAccount".into(), json!(name));
        }
        // Both empty: upstream writes neither (`omitempty`).
        None => {
            m.remove("serviceAccount");
        }
    }
}

/// Pod spec defaults for the pod template at `path`, if present.
pub fn template(obj: &mut Value, path: &[&str], restart: &str) {
    let mut cur = obj;
    for p in path {
        let Some(next) = cur.get_mut(*p) else { return };
        cur = next;
    }
    if let Some(spec) = cur.get_mut("spec") {
        pod_spec(spec, restart);
    }
}

/// Job spec defaults (upstream's SetDefaults_Job; a CronJob's job template does not get them).
pub fn job_spec(spec: &mut Map<String, Value>) {
    let has_completions = spec.get("completions").is_some_and(|v| !v.is_null());
    let has_parallelism = spec.get("parallelism").is_some_and(|v| !v.is_null());
    if !has_completions && !has_parallelism {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    // As upstream: with a per-index limit the job-wide one is effectively off.
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    set_default(
        spec,
        "backoffLimit",
        json!(if per_index { i32::MAX } else { 6 }),
    );
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    // Pods of a job with a pod failure policy are replaced only once they have failed.
    let failure_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    set_default(
        spec,
        "podReplacementPolicy",
        json!(if failure_policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    set_default(spec, "manualSelector", json!(false));
    // A pod condition pattern without a status matches the condition being True.
    let rules = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        let patterns = rule
            .get_mut("onPodConditions")
            .and_then(Value::as_array_mut);
        for p in patterns
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            set_default(p, "status", json!("True"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    /// The kind's defaults, as the write path applies them (through its strategy).
    fn apply(def: &resource::ResourceDef, obj: &mut Value) {
        crate::strategy::of(def).set_defaults(def, obj);
    }

    #[test]
    fn deployment_defaults() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        apply(def, &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let mut explicit = json!({"spec": {"replicas": 0}});
        apply(def, &mut explicit);
        assert_eq!(explicit["spec"]["replicas"], 0);
    }

    #[test]
    fn pull_policy_follows_tag() {
        assert_eq!(image_pull_policy("nginx:1.25"), "IfNotPresent");
        assert_eq!(image_pull_policy("reg:5000/nginx"), "Always");
        assert_eq!(image_pull_policy("nginx:latest"), "Always");
    }

    #[test]
    fn a_pod_failure_policy_changes_the_replacement_default() {
        let mut plain = Map::new();
        job_spec(&mut plain);
        assert_eq!(plain["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(plain["manualSelector"], false);
        let mut with_policy = json!({"podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}});
        if let Some(m) = with_policy.as_object_mut() {
            job_spec(m);
        }
        assert_eq!(with_policy["podReplacementPolicy"], "Failed");
        assert_eq!(
            with_policy["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
            "True"
        );
    }

    #[test]
    fn service_account_is_an_alias_of_the_name() {
        let alias = |spec: Value| {
            let mut spec = spec;
            pod_spec(&mut spec, "Always");
            (
                spec.get("serviceAccountName").cloned(),
                spec.get("serviceAccount").cloned(),
            )
        };
        let both = |s: &str| (Some(json!(s)), Some(json!(s)));
        assert_eq!(alias(json!({"serviceAccountName": "a"})), both("a"));
        assert_eq!(alias(json!({"serviceAccount": "b"})), both("b"));
        assert_eq!(
            alias(json!({"serviceAccountName": "a", "serviceAccount": "b"})),
            both("a")
        );
        assert_eq!(alias(json!({"serviceAccount": ""})), (None, None));
    }
}
