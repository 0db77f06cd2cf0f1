//! Structural defaulting: a property's `default` fills it in when it is missing (or null without
//! `nullable`), at any depth (objects, map values, array items), on create, update and read, as upstream.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::Value;

use super::props::{additional, items};

/// Fills in defaults of `s` throughout `v`.
pub fn apply(s: &JSONSchemaProps, v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (name, p) in s.properties.iter().flatten() {
                let null_not_allowed =
                    m.get(name).is_some_and(Value::is_null) && p.nullable != Some(true);
                if null_not_allowed {
                    // Upstream drops a null that the schema does not allow, so the default can apply.
                    m.remove(name);
                }
                if !m.contains_key(name) {
                    if let Some(d) = &p.default {
                        m.insert(name.clone(), d.0.clone());
                    }
                }
                if let Some(child) = m.get_mut(name) {
                    apply(p, child);
                }
            }
            if let Some(a) = additional(s) {
                for child in m.values_mut() {
                    apply(a, child);
                }
            }
        }
        Value::Array(list) => {
            if let Some(is) = items(s) {
                for child in list.iter_mut() {
                    apply(is, child);
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
    fn defaults_fill_nested_objects_arrays_and_maps() {
        let s: JSONSchemaProps = serde_json::from_value(json!({"type": "object", "properties": {
            "spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "fast"},
                "note": {"type": "string", "nullable": true, "default": "n"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}}}},
                "limits": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "unit": {"type": "string", "default": "Mi"}}}}}}}}))
        .expect("schema");
        let mut v = json!({});
        apply(&s, &mut v);
        assert_eq!(
            v["spec"]["replicas"], 1,
            "defaults apply inside a defaulted object"
        );
        let mut v = json!({"spec": {"replicas": 3, "mode": null, "note": null,
                                    "ports": [{"port": 80}, {"protocol": "UDP"}], "limits": {"cpu": {}}}});
        apply(&s, &mut v);
        assert_eq!(v["spec"]["replicas"], 3);
        assert_eq!(
            v["spec"]["mode"], "fast",
            "a null that is not nullable is defaulted"
        );
        assert_eq!(v["spec"]["note"], Value::Null, "a nullable null stays");
        assert_eq!(v["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(v["spec"]["ports"][1]["protocol"], "UDP");
        assert_eq!(v["spec"]["limits"]["cpu"]["unit"], "Mi");
    }
}
