//! Validation of custom objects against their structural schema: types, required, enum, bounds, lengths,
//! patterns, item counts, uniqueness and a few formats, with upstream's field paths and messages
//! (`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{json, Value};

use super::props::{additional, embedded, int_or_string, items};
use crate::status::Cause;

/// Values in messages as Go prints them: strings quoted, everything else bare.
fn go(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// A number bound as Go's `%v` prints a float64 (`0`, `1.5`).
fn num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// The JSON type name of a value, as the schema's `type` spells them.
fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    match (want, type_of(v)) {
        ("", _) => true,
        ("number", "integer") => true,
        (w, got) => w == got,
    }
}

fn invalid(path: &str, v: &Value, rule: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {}: {path} in body {rule}", go(v)),
        field: path.to_string(),
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Every problem of `v` (at field path `path`) against schema `s`.
pub fn errors_of(s: &JSONSchemaProps, v: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    check(s, v, path, &mut out);
    out
}

/// Validates a whole custom object (its `metadata`, `apiVersion` and `kind` are the API's to check).
pub fn object(s: &JSONSchemaProps, obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    for req in s.required.iter().flatten() {
        if !m.contains_key(req) && !["apiVersion", "kind", "metadata"].contains(&req.as_str()) {
            out.push(Cause::required(req));
        }
    }
    for (k, v) in m {
        if ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
            continue;
        }
        if let Some(p) = s.properties.as_ref().and_then(|p| p.get(k)) {
            check(p, v, k, &mut out);
        } else if let Some(a) = additional(s) {
            check(a, v, k, &mut out);
        }
    }
    out
}

fn check(s: &JSONSchemaProps, v: &Value, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() {
        if s.nullable != Some(true) {
            let want = s.type_.as_deref().unwrap_or("");
            if int_or_string(s) {
                out.push(invalid(
                    path,
                    &json!("null"),
                    "must be of type integer,string: \"null\"",
                ));
            } else if !want.is_empty() {
                out.push(Cause::invalid(
                    path,
                    &json!("null"),
                    &format!("{path} in body must be of type {want}: \"null\""),
                ));
            }
        }
        return;
    }
    if int_or_string(s) {
        if !matches!(type_of(v), "integer" | "string") {
            let t = type_of(v);
            out.push(Cause::invalid(
                path,
                &json!(t),
                &format!("{path} in body must be of type integer,string: {t:?}"),
            ));
            return;
        }
    } else if let Some(want) = s.type_.as_deref() {
        if !type_matches(want, v) {
            let t = type_of(v);
            out.push(Cause::invalid(
                path,
                &json!(t),
                &format!("{path} in body must be of type {want}: {t:?}"),
            ));
            return;
        }
    }
    if let Some(allowed) = &s.enum_ {
        if !allowed.iter().any(|a| a.0 == *v) {
            let list: Vec<String> = allowed.iter().map(|a| go(&a.0)).collect();
            out.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!(
                    "Unsupported value: {}: supported values: {}",
                    go(v),
                    list.join(", ")
                ),
                field: path.to_string(),
            });
        }
    }
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s.minimum {
                if s.exclusive_minimum == Some(true) && f <= min {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should be greater than {}", num(min)),
                    ));
                } else if f < min {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should be greater than or equal to {}", num(min)),
                    ));
                }
            }
            if let Some(max) = s.maximum {
                if s.exclusive_maximum == Some(true) && f >= max {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should be less than {}", num(max)),
                    ));
                } else if f > max {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should be less than or equal to {}", num(max)),
                    ));
                }
            }
            if let Some(m) = s.multiple_of.filter(|m| *m > 0.0) {
                if (f / m).fract().abs() > 1e-9 {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should be a multiple of {}", num(m)),
                    ));
                }
            }
            check_format(s, v, path, out);
        }
        Value::String(text) => {
            let len = text.chars().count() as i64;
            if let Some(max) = s.max_length {
                if len > max {
                    out.push(Cause {
                        reason: "FieldValueTooLong",
                        message: format!("Too long: may not be more than {max} bytes"),
                        field: path.to_string(),
                    });
                }
            }
            if let Some(min) = s.min_length {
                if len < min {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should be at least {min} chars long"),
                    ));
                }
            }
            if let Some(p) = &s.pattern {
                match compiled(p) {
                    Some(re) if !re.is_match(text) => {
                        out.push(invalid(path, v, &format!("should match '{p}'")))
                    }
                    Some(_) => {}
                    None => out.push(invalid(path, v, &format!("has an unusable pattern '{p}'"))),
                }
            }
            check_format(s, v, path, out);
        }
        Value::Array(list) => {
            let n = list.len() as i64;
            if let Some(max) = s.max_items {
                if n > max {
                    out.push(Cause {
                        reason: "FieldValueTooMany",
                        message: format!("Too many: {n}: must have at most {max} items"),
                        field: path.to_string(),
                    });
                }
            }
            if let Some(min) = s.min_items {
                if n < min {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should have at least {min} items"),
                    ));
                }
            }
            if s.unique_items == Some(true) || s.x_kubernetes_list_type.as_deref() == Some("set") {
                for (i, item) in list.iter().enumerate() {
                    if list[..i].contains(item) {
                        out.push(Cause::duplicate(&format!("{path}[{i}]"), item));
                    }
                }
            }
            if s.x_kubernetes_list_type.as_deref() == Some("map") {
                let keys = s.x_kubernetes_list_map_keys.clone().unwrap_or_default();
                let key_of = |item: &Value| -> Value {
                    let m: serde_json::Map<String, Value> = keys
                        .iter()
                        .filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone())))
                        .collect();
                    Value::Object(m)
                };
                let seen: Vec<Value> = list.iter().map(key_of).collect();
                for (i, k) in seen.iter().enumerate() {
                    if !keys.is_empty() && seen[..i].contains(k) {
                        out.push(Cause::duplicate(&format!("{path}[{i}]"), k));
                    }
                }
            }
            if let Some(is) = items(s) {
                for (i, item) in list.iter().enumerate() {
                    check(is, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(m) => {
            for req in s.required.iter().flatten() {
                if !m.contains_key(req) {
                    out.push(Cause::required(&child(path, req)));
                }
            }
            if let Some(max) = s.max_properties {
                if m.len() as i64 > max {
                    out.push(Cause {
                        reason: "FieldValueTooMany",
                        message: format!("Too many: {}: must have at most {max} items", m.len()),
                        field: path.to_string(),
                    });
                }
            }
            if let Some(min) = s.min_properties {
                if (m.len() as i64) < min {
                    out.push(invalid(
                        path,
                        v,
                        &format!("should have at least {min} properties"),
                    ));
                }
            }
            if embedded(s) {
                for f in ["apiVersion", "kind"] {
                    if m.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
                        out.push(Cause {
                            reason: "FieldValueRequired",
                            message: "Required value: must not be empty".into(),
                            field: child(path, f),
                        });
                    }
                }
            }
            for (k, item) in m {
                if let Some(p) = s.properties.as_ref().and_then(|p| p.get(k)) {
                    check(p, item, &child(path, k), out);
                } else if let Some(a) = additional(s) {
                    check(a, item, &child(path, k), out);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Most schema patterns kept compiled; a write validates every patterned string, and compiling
/// is far dearer than matching.
const PATTERN_CACHE: usize = 512;

/// The compiled `pattern`, `None` if it is not a usable regular expression.
fn compiled(pattern: &str) -> Option<regex::Regex> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // A panic elsewhere while holding the lock leaves a usable map.
    let lock = || cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(re) = lock().get(pattern) {
        return re.clone();
    }
    let re = regex::Regex::new(pattern).ok();
    let mut c = lock();
    if c.len() >= PATTERN_CACHE {
        // Patterns come from CRDs, which change rarely: starting over is simpler than an LRU.
        c.clear();
    }
    c.insert(pattern.to_string(), re.clone());
    re
}

/// The formats upstream checks that are cheap to check here.
fn check_format(s: &JSONSchemaProps, v: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(format) = s.format.as_deref() else {
        return;
    };
    let ok = match (format, v) {
        ("int32", Value::Number(n)) => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
        ("date-time", Value::String(t)) => t.parse::<jiff::Timestamp>().is_ok(),
        ("date", Value::String(t)) => t.parse::<jiff::civil::Date>().is_ok(),
        ("uuid", Value::String(t)) => uuid::Uuid::parse_str(t).is_ok(),
        // Go's StdEncoding, as upstream's format check uses (line breaks skipped).
        ("byte", Value::String(t)) => crate::validation::bytes::decode(t).is_ok(),
        _ => true,
    };
    if !ok {
        out.push(invalid(
            path,
            v,
            &format!("must be of type {format}: {}", go(v)),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> JSONSchemaProps {
        serde_json::from_value(json!({"type": "object", "required": ["spec"], "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
                "size": {"x-kubernetes-int-or-string": true},
                "color": {"type": "string", "enum": ["red", "green"]},
                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                "note": {"type": "string", "nullable": true},
                "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0},
                "when": {"type": "string", "format": "date-time"},
                "ports": {"type": "array", "maxItems": 2, "items": {"type": "object", "required": ["port"],
                          "properties": {"port": {"type": "integer"}}}},
                "tags": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
                "envs": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                         "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                     "value": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "x-kubernetes-preserve-unknown-fields": true}}}}}))
        .expect("schema")
    }

    fn lines(obj: Value) -> Vec<String> {
        object(&schema(), &obj)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn values_of_the_wrong_shape_stop_at_the_mismatch() {
        let s = schema();
        let mut weird = json!({"spec": ["not", "an", "object"], "status": 3});
        let l: Vec<String> = object(&s, &weird)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            l,
            ["spec: Invalid value: \"array\": spec in body must be of type object: \"array\""]
        );
        super::super::default::apply(&s, &mut weird);
        let dropped = super::super::prune::object(&s, &mut weird);
        assert_eq!(dropped, ["status"]);
        assert_eq!(weird["spec"], json!(["not", "an", "object"]));
        let bad_pattern: JSONSchemaProps =
            serde_json::from_value(json!({"type": "string", "pattern": "(("})).expect("schema");
        assert_eq!(errors_of(&bad_pattern, &json!("x"), "f").len(), 1);
    }

    #[test]
    fn a_good_object_passes() {
        let ok = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"}, "spec": {
            "replicas": 3, "size": "10Gi", "color": "red", "name": "abc", "note": null, "ratio": 0.5,
            "when": "2026-01-02T03:04:05Z", "ports": [{"port": 80}], "tags": ["a", "b"],
            "labels": {"x": "y"}, "embedded": {"apiVersion": "v1", "kind": "Pod", "spec": {}}}});
        assert_eq!(lines(ok), Vec::<String>::new());
        assert!(lines(json!({"spec": {"size": 3}})).is_empty());
    }

    #[test]
    fn wrong_types_read_as_upstream() {
        let l = lines(json!({"spec": {"size": 1, "replicas": "string"}}));
        assert_eq!(
            l,
            ["spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""]
        );
        let l = lines(json!({"spec": {"size": true, "note": null, "name": null}}));
        assert!(
            l.iter()
                .any(|x| x.starts_with("spec.size: Invalid value: \"boolean\"")),
            "{l:?}"
        );
        assert!(
            l.iter()
                .any(|x| x.contains("spec.name in body must be of type string: \"null\"")),
            "{l:?}"
        );
        assert_eq!(l.len(), 2, "{l:?}");
    }

    #[test]
    fn rules_name_nested_paths() {
        let l = lines(json!({"spec": {
            "replicas": 11, "color": "blue", "name": "ABCDEFG", "ratio": 0,
            "when": "yesterday", "ports": [{"port": 1}, {}, {"port": "x"}], "tags": ["a", "a"],
            "labels": {"k": 1}, "embedded": {"spec": {}},
            "envs": [{"name": "a", "value": "1"}, {"name": "b"}, {"name": "a", "value": "2"}]}}));
        let want = [
            "spec: Required value",
            "spec.size: Required value",
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
            "spec.color: Unsupported value: \"blue\": supported values: \"red\", \"green\"",
            "spec.name: Too long: may not be more than 5 bytes",
            "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
            "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
            "spec.ports: Too many: 3: must have at most 2 items",
            "spec.ports[1].port: Required value",
            "spec.ports[2].port: Invalid value: \"string\": spec.ports[2].port in body must be of type integer: \"string\"",
            "spec.tags[1]: Duplicate value: \"a\"",
            "spec.envs[2]: Duplicate value: {\"name\":\"a\"}",
            "spec.labels.k: Invalid value: \"integer\": spec.labels.k in body must be of type string: \"integer\"",
            "spec.embedded.apiVersion: Required value: must not be empty",
            "spec.embedded.kind: Required value: must not be empty",
        ];
        for w in want.iter().skip(2) {
            assert!(l.contains(&w.to_string()), "missing {w}\nin {l:#?}");
        }
        assert!(!l.contains(&"spec: Required value".to_string()));
        assert!(lines(json!({})).contains(&"spec: Required value".to_string()));
    }
}
