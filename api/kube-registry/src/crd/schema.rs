//! Structural schemas: the check that a CRD's
//! `openAPIV3Schema` is structural (every node has a type, properties and additionalProperties are not
//! both set, no `$ref`, ...), with upstream's field paths and messages.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::{json, Value};

use crate::status::Cause;

use super::props::{additional, embedded, int_or_string, items, preserves};

fn ty(s: &JSONSchemaProps) -> &str {
    s.type_.as_deref().unwrap_or("")
}

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// Checks that `root` (at field path `at`) is a structural schema; every problem is a cause.
pub fn check(root: &JSONSchemaProps, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if ty(root) != "object" {
        causes.push(Cause::invalid(
            &format!("{at}.type"),
            &json!(ty(root)),
            "must be object at the root",
        ));
    }
    if root.nullable == Some(true) {
        causes.push(Cause::forbidden(
            &format!("{at}.nullable"),
            "must be false at the root",
        ));
    }
    if let Some(meta) = root.properties.as_ref().and_then(|p| p.get("metadata")) {
        let other = meta
            .properties
            .iter()
            .flatten()
            .any(|(k, _)| k != "name" && k != "generateName");
        if other || meta.additional_properties.is_some() || meta.required.is_some() {
            causes.push(Cause::forbidden(
                &format!("{at}.properties[metadata]"),
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    node(root, at, true, &mut causes);
    causes
}

fn node(s: &JSONSchemaProps, at: &str, specified: bool, causes: &mut Vec<Cause>) {
    let t = ty(s);
    if !t.is_empty() && !TYPES.contains(&t) {
        causes.push(Cause::not_supported(
            &format!("{at}.type"),
            &json!(t),
            TYPES,
        ));
    }
    // An embedded resource must be an object; otherwise x-kubernetes-int-or-string or keeping unknown
    // fields stand in for a type (upstream has no rule against a type being set too).
    if embedded(s) && t != "object" {
        let field = format!("{at}.type");
        let rule = "must be object if x-kubernetes-embedded-resource is true";
        causes.push(if t.is_empty() {
            Cause {
                reason: "FieldValueRequired",
                message: format!("Required value: {rule}"),
                field,
            }
        } else {
            Cause::invalid(&field, &json!(t), rule)
        });
    } else if t.is_empty() && specified && !int_or_string(s) && !preserves(s) {
        causes.push(Cause {
            reason: "FieldValueRequired",
            message: "Required value: must not be empty for specified object fields".into(),
            field: format!("{at}.type"),
        });
    }
    if s.ref_path.is_some() {
        causes.push(Cause::forbidden(
            &format!("{at}.$ref"),
            "$ref is not supported",
        ));
    }
    if s.properties.is_some() && s.additional_properties.is_some() {
        causes.push(Cause::forbidden(
            &format!("{at}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if matches!(
        s.additional_properties,
        Some(JSONSchemaPropsOrBool::Bool(false))
    ) {
        causes.push(Cause::forbidden(
            &format!("{at}.additionalProperties"),
            "must not be false (unknown fields are pruned instead)",
        ));
    }
    if (s.properties.is_some() || s.additional_properties.is_some())
        && !t.is_empty()
        && t != "object"
    {
        causes.push(Cause::invalid(
            &format!("{at}.type"),
            &json!(t),
            "must be object if properties or additionalProperties are specified",
        ));
    }
    if t == "array" && s.items.is_none() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            message: "Required value: must be specified".into(),
            field: format!("{at}.items"),
        });
    }
    if matches!(s.items, Some(JSONSchemaPropsOrArray::Schemas(_))) {
        causes.push(Cause::forbidden(
            &format!("{at}.items"),
            "items must be a schema object and not an array",
        ));
    }
    if int_or_string(s) {
        for (ext, set) in [
            ("x-kubernetes-preserve-unknown-fields", preserves(s)),
            ("x-kubernetes-embedded-resource", embedded(s)),
        ] {
            if set {
                causes.push(Cause::invalid(
                    &format!("{at}.{ext}"),
                    &json!(true),
                    "must be false if x-kubernetes-int-or-string is true",
                ));
            }
        }
    }
    if s.x_kubernetes_validations
        .as_ref()
        .is_some_and(|v| !v.is_empty())
    {
        causes.push(Cause::forbidden(
            &format!("{at}.x-kubernetes-validations"),
            "CEL validation rules are not supported by this server",
        ));
    }
    if let Some(d) = &s.default {
        if let Some(problem) = super::validate::errors_of(s, &d.0, &format!("{at}.default"))
            .into_iter()
            .next()
        {
            causes.push(problem);
        }
    }
    for (name, p) in s.properties.iter().flatten() {
        node(p, &format!("{at}.properties[{name}]"), true, causes);
    }
    if let Some(a) = additional(s) {
        node(a, &format!("{at}.additionalProperties"), true, causes);
    }
    if let Some(i) = items(s) {
        let before = causes.len();
        node(i, &format!("{at}.items"), true, causes);
        for c in &mut causes[before..] {
            if c.field == format!("{at}.items.type") && c.reason == "FieldValueRequired" {
                c.message = "Required value: must not be empty for specified array items".into();
            }
        }
    }
    // Logic junctors may only restrict values, except the two int-or-string forms upstream allows.
    value_validation(
        s,
        at,
        int_or_string_any_of(s),
        int_or_string_all_of(s),
        causes,
    );
}

/// `anyOf: [{type: integer}, {type: string}]` and nothing else in either branch.
fn is_int_or_string_pair(list: Option<&Vec<JSONSchemaProps>>) -> bool {
    let Some(list) = list else { return false };
    list.len() == 2
        && to_value(&list[0]) == json!({"type": "integer"})
        && to_value(&list[1]) == json!({"type": "string"})
}

/// Upstream's first int-or-string exception: the node's `anyOf` is exactly the pair.
fn int_or_string_any_of(s: &JSONSchemaProps) -> bool {
    is_int_or_string_pair(s.any_of.as_ref())
}

/// Upstream's second int-or-string exception: the first `allOf` entry's `anyOf` is exactly the pair.
fn int_or_string_all_of(s: &JSONSchemaProps) -> bool {
    s.all_of
        .as_ref()
        .and_then(|l| l.first())
        .is_some_and(|first| is_int_or_string_pair(first.any_of.as_ref()))
}

/// The junctors of a node (upstream's validateValueValidation).
fn value_validation(
    s: &JSONSchemaProps,
    at: &str,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    causes: &mut Vec<Cause>,
) {
    if !skip_any_of {
        for (i, sub) in s.any_of.iter().flatten().enumerate() {
            nested(sub, &format!("{at}.anyOf[{i}]"), false, causes);
        }
    }
    for (i, sub) in s.all_of.iter().flatten().enumerate() {
        nested(
            sub,
            &format!("{at}.allOf[{i}]"),
            skip_first_all_of_any_of && i == 0,
            causes,
        );
    }
    for (i, sub) in s.one_of.iter().flatten().enumerate() {
        nested(sub, &format!("{at}.oneOf[{i}]"), false, causes);
    }
    if let Some(not) = &s.not {
        nested(not, &format!("{at}.not"), false, causes);
    }
}

/// A schema under a junctor (upstream's validateNestedValueValidation): only value checks, no types,
/// defaults, titles, descriptions or structure-changing extensions.
fn nested(s: &JSONSchemaProps, at: &str, skip_any_of: bool, causes: &mut Vec<Cause>) {
    value_validation(s, at, skip_any_of, false, causes);
    if let Some(i) = items(s) {
        nested(i, &format!("{at}.items"), false, causes);
    }
    for (name, p) in s.properties.iter().flatten() {
        nested(p, &format!("{at}.properties[{name}]"), false, causes);
    }
    let forbid = |causes: &mut Vec<Cause>, field: &str, message: &str| {
        causes.push(Cause::forbidden(&format!("{at}.{field}"), message))
    };
    if s.type_.as_deref().is_some_and(|t| !t.is_empty()) {
        forbid(causes, "type", "must be empty to be structural");
    }
    if s.additional_properties.is_some() {
        forbid(
            causes,
            "additionalProperties",
            "must be undefined to be structural",
        );
    }
    if s.default.is_some() {
        forbid(causes, "default", "must be undefined to be structural");
    }
    if s.title.as_deref().is_some_and(|t| !t.is_empty()) {
        forbid(causes, "title", "must be empty to be structural");
    }
    if s.description.as_deref().is_some_and(|d| !d.is_empty()) {
        forbid(causes, "description", "must be empty to be structural");
    }
    if s.nullable == Some(true) {
        forbid(causes, "nullable", "must be false to be structural");
    }
    if preserves(s) {
        forbid(
            causes,
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        );
    }
    if embedded(s) {
        forbid(
            causes,
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        );
    }
    if int_or_string(s) {
        forbid(
            causes,
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        );
    }
    if s.x_kubernetes_list_map_keys
        .as_ref()
        .is_some_and(|k| !k.is_empty())
    {
        forbid(
            causes,
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        );
    }
    if s.x_kubernetes_list_type.is_some() {
        forbid(
            causes,
            "x-kubernetes-list-type",
            "must be undefined to be structural",
        );
    }
    if s.x_kubernetes_map_type.is_some() {
        forbid(
            causes,
            "x-kubernetes-map-type",
            "must be undefined to be structural",
        );
    }
    if s.x_kubernetes_validations
        .as_ref()
        .is_some_and(|v| !v.is_empty())
    {
        forbid(
            causes,
            "x-kubernetes-validations",
            "must be empty to be structural",
        );
    }
    if s.properties
        .as_ref()
        .is_some_and(|p| p.contains_key("metadata"))
    {
        forbid(
            causes,
            "properties[metadata]",
            "must not be specified in a nested context",
        );
    }
}

/// The JSON form of a schema node (for error messages).
pub fn to_value(s: &JSONSchemaProps) -> Value {
    serde_json::to_value(s).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(v: Value) -> JSONSchemaProps {
        serde_json::from_value(v).expect("schema")
    }

    #[test]
    fn structural_schemas_pass() {
        let s = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "items": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}}));
        assert_eq!(check(&s, "x"), vec![]);
    }

    #[test]
    fn int_or_string_may_name_its_two_types_under_any_of_as_upstream() {
        let pair = json!([{"type": "integer"}, {"type": "string"}]);
        let s = schema(json!({"type": "object", "properties": {
            "a": {"x-kubernetes-int-or-string": true, "anyOf": pair},
            "b": {"x-kubernetes-int-or-string": true, "allOf": [{"anyOf": pair}, {"pattern": "^[0-9]+%?$"}]}}}));
        assert_eq!(check(&s, "x"), vec![]);
        // Any other typed junctor is not structural, with upstream's paths.
        let s = schema(json!({"type": "object", "properties": {
            "c": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "boolean"}]},
            "d": {"type": "string", "oneOf": [{"default": "x", "description": "y"}]}}}));
        let got: Vec<String> = check(&s, "x")
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            got,
            vec![
                "x.properties[c].anyOf[0].type: Forbidden: must be empty to be structural",
                "x.properties[c].anyOf[1].type: Forbidden: must be empty to be structural",
                "x.properties[d].oneOf[0].default: Forbidden: must be undefined to be structural",
                "x.properties[d].oneOf[0].description: Forbidden: must be empty to be structural",
            ]
        );
    }

    #[test]
    fn extension_rules_as_upstream() {
        let s = schema(json!({"type": "object", "properties": {
            "a": {"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true},
            "e": {"x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "l": {"type": "array"}}}));
        let got: Vec<String> = check(&s, "x")
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            got,
            vec![
                "x.properties[a].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true",
                "x.properties[e].type: Required value: must be object if x-kubernetes-embedded-resource is true",
                "x.properties[l].items: Required value: must be specified",
            ]
        );
    }

    #[test]
    fn non_structural_schemas_name_their_fields() {
        let s = schema(json!({"type": "object", "properties": {
            "spec": {"properties": {"a": {"type": "string"}}},
            "list": {"type": "array", "items": {}},
            "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}}}));
        let fields: Vec<String> = check(&s, "spec.versions[0].schema.openAPIV3Schema")
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let p = "spec.versions[0].schema.openAPIV3Schema.properties";
        assert!(
            fields.contains(&format!(
                "{p}[spec].type: Required value: must not be empty for specified object fields"
            )),
            "{fields:?}"
        );
        assert!(
            fields.contains(&format!(
                "{p}[list].items.type: Required value: must not be empty for specified array items"
            )),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|f| f.starts_with(&format!("{p}[both].additionalProperties: Forbidden"))),
            "{fields:?}"
        );
        let meta = schema(
            json!({"type": "object", "properties": {"metadata": {"type": "object",
            "properties": {"labels": {"type": "object"}}}}}),
        );
        assert_eq!(check(&meta, "r")[0].field, "r.properties[metadata]");
        let name_only = schema(
            json!({"type": "object", "properties": {"metadata": {"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 10}}}}}),
        );
        assert_eq!(check(&name_only, "r"), vec![]);
        let not_object = schema(json!({"type": "string"}));
        assert_eq!(check(&not_object, "r")[0].field, "r.type");
    }
}
