//! Validation of built-in kinds: the shape (every field has its declared type, checked by decoding into the
//! `k8s-openapi` type: a mismatch is a 400 as upstream's decoder answers) and the rules (names, required
//! fields, selectors, immutable fields: a 422 `Invalid` with one cause per problem). Metadata checks are
//! generic; which rules a kind adds is its strategy's (`strategy/`), built from the checks here that
//! several kinds share.

use serde_json::{json, Value};

use super::names::{self, NameRule};
use crate::object::{self, path};
use crate::resource::ResourceDef;
use crate::selector::LabelSelector;
use crate::status::{ApiError, Cause, Target};

/// Decodes `obj` as its `k8s-openapi` type; a type mismatch is upstream's 400, and so is a time Go's
/// decoder cannot parse (checked first: Go's decoder stops at it, while it collects type mismatches) and
/// base64 it refuses in a `[]byte` field. Byte fields are left in their canonical encoding
/// ([`super::bytes`]), as upstream stores the decoded bytes.
pub fn shape(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    let checked: Result<(), String> = crate::types::with_builtin_type!(def.group, def.version, def.kind,
        T => super::times::check(obj)
            .and_then(|()| super::bytes::canonicalize(&def.group, &def.kind, obj).map_err(|e| e.to_string()))
            .and_then(|()| {
                serde_json::from_value::<T>(obj.clone()).map(|_| ()).map_err(|e| e.to_string())
            }),
        _ => Ok(()));
    checked.map_err(|e| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            def.kind, def.version, def.kind
        ))
    })
}

/// Checks `metadata`: the name (by `rule`), label keys and values, annotation keys and size.
pub fn check_meta(rule: NameRule, obj: &Value, causes: &mut Vec<Cause>) {
    let name = object::name(obj);
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            message: "Required value: name or generateName is required".into(),
            field: "metadata.name".into(),
        });
    } else if let Err(msg) = names::check(rule, name) {
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

/// Checks the containers and restart policy of the pod spec at `at`.
pub fn check_containers(spec: &Value, at: &str, causes: &mut Vec<Cause>) {
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

/// Checks that `spec.selector` (required or not) matches the labels of the pod template at `template`,
/// and the template's containers.
pub fn check_selector_template(
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

/// `spec.replicas` may not be negative.
pub fn check_replicas(obj: &Value, causes: &mut Vec<Cause>) {
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

/// Keys of the map at `field` must be valid ConfigMap/Secret keys.
pub fn check_data_keys(obj: &Value, field: &str, causes: &mut Vec<Cause>) {
    if let Some(m) = obj.get(field).and_then(Value::as_object) {
        for k in m.keys() {
            if let Err(msg) = names::check_data_key(k) {
                causes.push(Cause::invalid(&format!("{field}[{k}]"), &json!(k), &msg));
            }
        }
    }
}

/// A set field may not change.
pub fn immutable(old: &Value, new: &Value, field: &str, causes: &mut Vec<Cause>) {
    let (a, b) = (path(old, field), path(new, field));
    if a.is_some_and(|v| !v.is_null()) && a != b {
        causes.push(Cause::invalid(
            field,
            &json!(b.map(Value::to_string).unwrap_or_default()),
            "field is immutable",
        ));
    }
}

/// The data of a ConfigMap or Secret marked `immutable` may not change, nor may the mark.
pub fn immutable_data(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    if path(old, "immutable") != Some(&json!(true)) {
        return;
    }
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
    fn shape_errors_are_bad_requests() {
        let def = &resource::find("apps", "v1", "deployments").expect("deploy");
        let mut d = json!({"metadata": {"name": "web"}, "spec": {"replicas": "three"}});
        let e = shape(def, &mut d).expect_err("type error");
        assert!(matches!(e, ApiError::BadRequest(_)));
    }
}
