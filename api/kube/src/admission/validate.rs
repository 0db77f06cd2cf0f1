//! Validation of built-in kinds: the shape (every field has its declared type, checked by decoding into the
//! `k8s-openapi` type: a mismatch is a 400 as upstream's decoder answers) and the rules (names, required
//! fields, selectors, immutable fields: a 422 `Invalid` with one cause per problem).

use serde_json::{json, Value};

use super::names::{self, NameRule};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::selector::LabelSelector;
use crate::status::{ApiError, Cause, Target};

/// Decodes `obj` as its `k8s-openapi` type; a type mismatch is upstream's 400.
pub fn shape(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let checked: Result<(), String> = crate::types::with_builtin_type!(def.group, def.kind,
        T => serde_json::from_value::<T>(obj.clone()).map(|_| ()).map_err(|e| e.to_string()),
        _ => Ok(()));
    checked.map_err(|e| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            def.kind, def.version, def.kind
        ))
    })
}

/// The name rule of a resource.
pub fn name_rule(def: &ResourceDef) -> NameRule {
    match def.gk() {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::Dns1035,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

fn check_meta(def: &ResourceDef, obj: &Value, causes: &mut Vec<Cause>) {
    let name = object::name(obj);
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            message: "Required value: name or generateName is required".into(),
            field: "metadata.name".into(),
        });
    } else if let Err(msg) = names::check(name_rule(def), name) {
        causes.push(Cause::invalid("metadata.name", &json!(name), &msg));
    }
    if let Some(labels) = object::labels(obj) {
        for (k, v) in labels {
            if let Err(msg) = names::check_qualified_name(k) {
                causes.push(Cause::invalid("metadata.labels", &json!(k), &msg));
            }
            match v.as_str() {
                Some(s) => {
                    if let Err(msg) = names::check_label_value(s) {
                        causes.push(Cause::invalid("metadata.labels", v, &msg));
                    }
                }
                None => causes.push(Cause::invalid("metadata.labels", v, "must be a string")),
            }
        }
    }
    if let Some(ann) = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let mut total = 0;
        for (k, v) in ann {
            total += k.len() + v.as_str().map_or(0, str::len);
            if let Err(msg) = names::check_qualified_name(k) {
                causes.push(Cause::invalid("metadata.annotations", &json!(k), &msg));
            }
        }
        if total > 256 * 1024 {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                message: "Too long: must have at most 262144 bytes".into(),
                field: "metadata.annotations".into(),
            });
        }
    }
}

fn check_containers(spec: &Value, at: &str, causes: &mut Vec<Cause>) {
    let containers = spec.get("containers").and_then(Value::as_array);
    match containers {
        None => causes.push(Cause::required(&format!("{at}.containers"))),
        Some(list) if list.is_empty() => causes.push(Cause::required(&format!("{at}.containers"))),
        Some(list) => {
            let mut seen = Vec::new();
            for (i, c) in list.iter().enumerate() {
                let f = format!("{at}.containers[{i}]");
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    causes.push(Cause::required(&format!("{f}.name")));
                } else if let Err(msg) = names::check(NameRule::Label, name) {
                    causes.push(Cause::invalid(&format!("{f}.name"), &json!(name), &msg));
                } else if seen.contains(&name) {
                    causes.push(Cause::duplicate(&format!("{f}.name"), &json!(name)));
                }
                seen.push(name);
                if c.get("image")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim()
                    .is_empty()
                {
                    causes.push(Cause::required(&format!("{f}.image")));
                }
            }
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(Value::as_str) {
        if !["Always", "OnFailure", "Never"].contains(&rp) {
            causes.push(Cause::not_supported(
                &format!("{at}.restartPolicy"),
                &json!(rp),
                &["Always", "OnFailure", "Never"],
            ));
        }
    }
}

fn check_selector_template(
    obj: &Value,
    causes: &mut Vec<Cause>,
    template: &str,
    selector_required: bool,
) {
    let sel = path(obj, "spec.selector");
    let sel_empty = sel.is_none_or(|s| {
        s.get("matchLabels")
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty())
            && s.get("matchExpressions")
                .and_then(Value::as_array)
                .is_none_or(|a| a.is_empty())
    });
    if sel_empty {
        if selector_required {
            causes.push(Cause::required("spec.selector"));
        }
    } else if let Some(sel) = sel {
        let selector = LabelSelector::from_object(sel);
        let labels = path(obj, &format!("{template}.metadata.labels")).and_then(Value::as_object);
        if !selector.matches(labels) {
            causes.push(Cause::invalid(
                &format!("{template}.metadata.labels"),
                &json!(labels
                    .map(|l| Value::Object(l.clone()))
                    .unwrap_or(Value::Null)
                    .to_string()),
                "`selector` does not match template `labels`",
            ));
        }
    }
    match path(obj, &format!("{template}.spec")) {
        Some(spec) => check_containers(spec, &format!("{template}.spec"), causes),
        None => causes.push(Cause::required(&format!("{template}.spec.containers"))),
    }
}

fn check_replicas(obj: &Value, causes: &mut Vec<Cause>) {
    if let Some(r) = path(obj, "spec.replicas").and_then(Value::as_i64) {
        if r < 0 {
            causes.push(Cause::invalid(
                "spec.replicas",
                &json!(r),
                "must be greater than or equal to 0",
            ));
        }
    }
}

fn check_service(obj: &Value, causes: &mut Vec<Cause>) {
    let kind = path(obj, "spec.type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let types = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !types.contains(&kind) {
        causes.push(Cause::not_supported("spec.type", &json!(kind), &types));
    }
    let ports = path(obj, "spec.ports").and_then(Value::as_array);
    let headless = path(obj, "spec.clusterIP").and_then(Value::as_str) == Some("None");
    if kind != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
        causes.push(Cause::required("spec.ports"));
    }
    if kind == "ExternalName"
        && path(obj, "spec.externalName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        causes.push(Cause::required("spec.externalName"));
    }
    let list = ports.cloned().unwrap_or_default();
    let mut names_seen = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            causes.push(Cause::invalid(
                &format!("spec.ports[{i}].port"),
                &json!(port),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if list.len() > 1 && name.is_empty() {
            causes.push(Cause::required(&format!("spec.ports[{i}].name")));
        } else if !name.is_empty() {
            if names_seen.contains(&name) {
                causes.push(Cause::duplicate(
                    &format!("spec.ports[{i}].name"),
                    &json!(name),
                ));
            }
            names_seen.push(name);
        }
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            causes.push(Cause::not_supported(
                &format!("spec.ports[{i}].protocol"),
                &json!(proto),
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if let Some(np) = p.get("nodePort").and_then(Value::as_i64) {
            if np != 0 && kind == "ClusterIP" {
                causes.push(Cause::forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
}

fn check_data_keys(obj: &Value, field: &str, causes: &mut Vec<Cause>) {
    if let Some(m) = obj.get(field).and_then(Value::as_object) {
        for k in m.keys() {
            if let Err(msg) = names::check_data_key(k) {
                causes.push(Cause::invalid(&format!("{field}[{k}]"), &json!(k), &msg));
            }
        }
    }
}

/// Checks an object before it is created (or replaced): every problem as a cause.
pub fn object(def: &ResourceDef, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    check_meta(def, obj, &mut causes);
    if let Some(c) = &def.custom {
        if let Some(s) = &c.schema {
            causes.extend(crate::crd::validate::object(s, obj));
        }
        return causes;
    }
    match def.gk() {
        (crate::crd::GROUP, "CustomResourceDefinition") => {
            causes.extend(crate::crd::definition::validate(obj))
        }
        ("", "Pod") => match obj.get("spec") {
            Some(spec) => check_containers(spec, "spec", &mut causes),
            None => causes.push(Cause::required("spec.containers")),
        },
        ("", "Service") => check_service(obj, &mut causes),
        ("", "ConfigMap") => {
            check_data_keys(obj, "data", &mut causes);
            check_data_keys(obj, "binaryData", &mut causes);
        }
        ("", "Secret") => check_data_keys(obj, "data", &mut causes),
        ("apps", "Deployment") | ("apps", "ReplicaSet") | ("apps", "StatefulSet") => {
            check_replicas(obj, &mut causes);
            check_selector_template(obj, &mut causes, "spec.template", true);
        }
        ("apps", "DaemonSet") => check_selector_template(obj, &mut causes, "spec.template", true),
        ("batch", "Job") => {
            check_selector_template(obj, &mut causes, "spec.template", false);
            let rp = path(obj, "spec.template.spec.restartPolicy").and_then(Value::as_str);
            if let Some(rp) = rp {
                if !["OnFailure", "Never"].contains(&rp) {
                    causes.push(Cause::not_supported(
                        "spec.template.spec.restartPolicy",
                        &json!(rp),
                        &["OnFailure", "Never"],
                    ));
                }
            }
        }
        ("batch", "CronJob") => {
            if path(obj, "spec.schedule")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                causes.push(Cause::required("spec.schedule"));
            }
            match path(obj, "spec.jobTemplate.spec.template.spec") {
                Some(spec) => {
                    check_containers(spec, "spec.jobTemplate.spec.template.spec", &mut causes)
                }
                None => causes.push(Cause::required(
                    "spec.jobTemplate.spec.template.spec.containers",
                )),
            }
        }
        ("rbac.authorization.k8s.io", "RoleBinding")
        | ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            if path(obj, "roleRef.name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                causes.push(Cause::required("roleRef.name"));
            }
            let kind = path(obj, "roleRef.kind")
                .and_then(Value::as_str)
                .unwrap_or("");
            let allowed: &[&str] = if def.kind == "RoleBinding" {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            if !allowed.contains(&kind) {
                causes.push(Cause::not_supported("roleRef.kind", &json!(kind), allowed));
            }
        }
        _ => {}
    }
    causes
}

fn immutable(old: &Value, new: &Value, field: &str, causes: &mut Vec<Cause>) {
    let (a, b) = (path(old, field), path(new, field));
    if a.is_some_and(|v| !v.is_null()) && a != b {
        causes.push(Cause::invalid(
            field,
            &json!(b.map(Value::to_string).unwrap_or_default()),
            "field is immutable",
        ));
    }
}

/// Checks an update against the stored object (immutable fields).
pub fn update(def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = object(def, new);
    match def.gk() {
        ("apps", "Deployment")
        | ("apps", "ReplicaSet")
        | ("apps", "StatefulSet")
        | ("apps", "DaemonSet") => {
            immutable(old, new, "spec.selector", &mut causes);
        }
        ("batch", "Job") => {
            immutable(old, new, "spec.selector", &mut causes);
            immutable(old, new, "spec.completions", &mut causes);
        }
        ("", "Service") => immutable(old, new, "spec.clusterIP", &mut causes),
        ("", "ConfigMap") | ("", "Secret") if path(old, "immutable") == Some(&json!(true)) => {
            for f in ["data", "binaryData"] {
                if path(old, f) != path(new, f) {
                    causes.push(Cause::forbidden(
                        f,
                        "field is immutable when `immutable` is set",
                    ));
                }
            }
            if path(new, "immutable") != Some(&json!(true)) {
                causes.push(Cause::forbidden(
                    "immutable",
                    "field is immutable when `immutable` is set",
                ));
            }
        }
        ("", "Pod") => pod_update(old, new, &mut causes),
        (crate::crd::GROUP, "CustomResourceDefinition") => {
            // Objects are stored per scope; changing it would strand them.
            immutable(old, new, "spec.group", &mut causes);
            immutable(old, new, "spec.scope", &mut causes);
        }
        _ => {}
    }
    causes
}

/// Pods allow only images, activeDeadlineSeconds, tolerations (additions) and a few others to change.
fn pod_update(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    let strip = |v: &Value| -> Value {
        let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(m) = s.as_object_mut() {
            m.remove("activeDeadlineSeconds");
            m.remove("tolerations");
            m.remove("terminationGracePeriodSeconds");
            for list in ["containers", "initContainers"] {
                if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        if let Some(cm) = c.as_object_mut() {
                            cm.remove("image");
                        }
                    }
                }
            }
            // The scheduler binds through the binding subresource; an unset node may be set once.
            if m.get("nodeName")
                .is_some_and(|n| n.as_str().unwrap_or("").is_empty())
            {
                m.remove("nodeName");
            }
        }
        s
    };
    let (mut a, b) = (strip(old), strip(new));
    if path(old, "spec.nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        if let (Some(am), Some(n)) = (a.as_object_mut(), b.get("nodeName")) {
            am.insert("nodeName".into(), n.clone());
        }
    }
    if a != b {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

/// Turns causes into the 422 answer.
pub fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Result<(), ApiError> {
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        target: Target::new(&def.group, &def.kind, name),
        causes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn deployment_selector_must_match() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let d = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let causes = object(def, &d);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }

    #[test]
    fn shape_errors_are_bad_requests() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let d = json!({"metadata": {"name": "web"}, "spec": {"replicas": "three"}});
        let e = shape(def, &d).expect_err("type error");
        assert!(matches!(e, ApiError::BadRequest(_)));
    }

    #[test]
    fn pod_spec_is_mostly_immutable() {
        let def = &resource::find("", "v1", "pods").expect("pods");
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}]}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("b");
        assert!(update(def, &old, &new).is_empty());
        new["spec"]["containers"][0]["name"] = json!("d");
        assert_eq!(update(def, &old, &new).len(), 1);
    }
}
