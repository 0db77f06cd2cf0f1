//! Defaulting of built-in kinds on create and update: the values upstream's defaulters fill in, so that
//! `kubectl get -o yaml` shows what users expect and later controllers can rely on them.

use serde_json::{json, Map, Value};

use crate::resource::ResourceDef;

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let o = v.as_object_mut()?;
    let e = o.entry(key).or_insert_with(|| json!({}));
    if e.is_null() {
        *e = json!({});
    }
    e.as_object_mut()
}

fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
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
}

fn template(obj: &mut Value, path: &[&str], restart: &str) {
    let mut cur = obj;
    for p in path {
        let Some(next) = cur.get_mut(*p) else { return };
        cur = next;
    }
    if let Some(spec) = cur.get_mut("spec") {
        pod_spec(spec, restart);
    }
}

/// Fills in upstream's defaults for `def`'s kind.
pub fn apply(def: &ResourceDef, obj: &mut Value) {
    if let Some(c) = &def.custom {
        if let Some(s) = &c.schema {
            crate::crd::default::apply(s, obj);
        }
        return;
    }
    match def.gk() {
        (crate::crd::GROUP, "CustomResourceDefinition") => {
            crate::crd::definition::apply_defaults(obj)
        }
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                pod_spec(spec, "Always");
                if let Some(m) = spec.as_object_mut() {
                    set_default(m, "serviceAccountName", json!("default"));
                    set_default(m, "enableServiceLinks", json!(true));
                    set_default(m, "priority", json!(0));
                    set_default(m, "preemptionPolicy", json!("PreemptLowerPriority"));
                }
            }
        }
        ("", "Namespace") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "finalizers", json!(["kubernetes"]));
            }
            let name = crate::object::name(obj).to_string();
            let meta = crate::object::meta_mut(obj);
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        ("", "Secret") => {
            if let Some(m) = obj.as_object_mut() {
                set_default(m, "type", json!("Opaque"));
            }
        }
        ("", "Service") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "type", json!("ClusterIP"));
                set_default(spec, "sessionAffinity", json!("None"));
                let external = spec.get("type") == Some(&json!("ExternalName"));
                if !external {
                    set_default(spec, "internalTrafficPolicy", json!("Cluster"));
                }
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        if let Some(pm) = p.as_object_mut() {
                            set_default(pm, "protocol", json!("TCP"));
                            if let Some(port) = pm.get("port").cloned() {
                                set_default(pm, "targetPort", port);
                            }
                        }
                    }
                }
            }
        }
        ("apps", "Deployment") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Some(s) = strategy.as_object_mut() {
                    set_default(s, "type", json!("RollingUpdate"));
                    if s.get("type") == Some(&json!("RollingUpdate")) {
                        let ru = s.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            set_default(ru, "maxUnavailable", json!("25%"));
                            set_default(ru, "maxSurge", json!("25%"));
                        }
                    }
                }
            }
            template(obj, &["spec", "template"], "Always");
        }
        ("apps", "ReplicaSet") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "replicas", json!(1));
            }
            template(obj, &["spec", "template"], "Always");
        }
        ("apps", "StatefulSet") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                );
                set_default(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            template(obj, &["spec", "template"], "Always");
        }
        ("apps", "DaemonSet") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
                );
            }
            template(obj, &["spec", "template"], "Always");
        }
        ("batch", "Job") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                job_spec(spec);
            }
            template(obj, &["spec", "template"], "Never");
        }
        ("batch", "CronJob") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
                if let Some(js) = spec
                    .get_mut("jobTemplate")
                    .and_then(|t| t.get_mut("spec"))
                    .and_then(Value::as_object_mut)
                {
                    job_spec(js);
                }
            }
            template(obj, &["spec", "jobTemplate", "spec", "template"], "Never");
        }
        _ => {}
    }
}

fn job_spec(spec: &mut Map<String, Value>) {
    let has_completions = spec.get("completions").is_some_and(|v| !v.is_null());
    let has_parallelism = spec.get("parallelism").is_some_and(|v| !v.is_null());
    if !has_completions && !has_parallelism {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

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
}
