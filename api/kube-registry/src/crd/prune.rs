//! Pruning: fields a structural schema does not specify are dropped (as upstream stores custom objects),
//! except under `x-kubernetes-preserve-unknown-fields`, `additionalProperties: true`, and the
//! `apiVersion`/`kind`/`metadata` of the root and of embedded resources. The dropped paths are returned
//! for `fieldValidation` (Strict refuses them, Warn reports them).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::Value;

use super::props::{additional, additional_any, embedded, items, preserves};

const RESOURCE_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Prunes a whole custom object; returns the dropped field paths.
pub fn object(s: &JSONSchemaProps, obj: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    walk(s, obj, "", true, &mut dropped);
    dropped.sort();
    dropped
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn walk(s: &JSONSchemaProps, v: &mut Value, path: &str, resource: bool, dropped: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let resource = resource || embedded(s);
            if let Some(a) = additional(s) {
                for (k, child_v) in m.iter_mut() {
                    walk(a, child_v, &child(path, k), false, dropped);
                }
                return;
            }
            if additional_any(s) {
                return;
            }
            let keep_unknown = preserves(s);
            let props = s.properties.as_ref();
            let mut remove = Vec::new();
            for (k, child_v) in m.iter_mut() {
                match props.and_then(|p| p.get(k)) {
                    Some(p) => walk(p, child_v, &child(path, k), false, dropped),
                    None if keep_unknown => {}
                    None if resource && RESOURCE_FIELDS.contains(&k.as_str()) => {}
                    None => remove.push(k.clone()),
                }
            }
            for k in remove {
                m.remove(&k);
                dropped.push(child(path, &k));
            }
        }
        Value::Array(list) => {
            if let Some(is) = items(s) {
                for (i, item) in list.iter_mut().enumerate() {
                    walk(is, item, &format!("{path}[{i}]"), false, dropped);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_go_except_where_preserved() {
        let s: JSONSchemaProps = serde_json::from_value(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"x-kubernetes-int-or-string": true},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "port": {"type": "integer"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                    "inner": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "v": {"type": "string"}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}))
        .expect("schema");
        let mut v = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"},
            "extra": 1,
            "spec": {"size": "1Gi", "bogus": true,
                     "ports": [{"port": 1, "name": "x"}],
                     "free": {"anything": [1], "inner": {"a": "s", "b": 2}},
                     "labels": {"k": {"v": "s", "w": 1}},
                     "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                  "spec": {"x": 1}, "junk": 1}}});
        let dropped = object(&s, &mut v);
        assert_eq!(
            dropped,
            [
                "extra",
                "spec.bogus",
                "spec.free.inner.b",
                "spec.labels.k.w",
                "spec.ports[0].name",
                "spec.template.junk"
            ]
        );
        assert_eq!(v["apiVersion"], "x/v1");
        assert_eq!(v["spec"]["free"]["anything"], json!([1]));
        assert_eq!(v["spec"]["template"]["metadata"]["name"], "p");
        assert_eq!(v["spec"]["template"]["spec"]["x"], 1);
        assert_eq!(v["spec"]["size"], "1Gi");
    }
}
