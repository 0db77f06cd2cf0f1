//! Defaulting and validation of CustomResourceDefinition objects, with upstream's field paths and
//! messages: names, group, scope, versions (exactly one storage version), structural schemas, printer
//! columns and subresource paths.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use serde_json::{json, Value};

use super::schema;
use crate::object::{self, path};
use crate::status::Cause;
use crate::validation::names::{self, NameRule};

/// Upstream's defaults: `singular` (lowercased kind), `listKind` (`<Kind>List`), conversion `None`.
pub fn apply_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(n) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = n
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !kind.is_empty() {
            if n.get("singular")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                n.insert("singular".into(), json!(kind.to_lowercase()));
            }
            if n.get("listKind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                n.insert("listKind".into(), json!(format!("{kind}List")));
            }
        }
    }
    let conv = spec
        .entry("conversion")
        .or_insert_with(|| json!({"strategy": "None"}));
    if let Some(c) = conv.as_object_mut() {
        c.entry("strategy").or_insert_with(|| json!("None"));
    }
}

/// Drops the fields of a CRD object that its type does not have (found by a round trip through
/// `k8s-openapi`'s CustomResourceDefinition); returns their paths for `fieldValidation`. An object that does
/// not decode is left to the shape check, which answers 400.
pub fn prune_unknown(obj: &mut Value) -> Vec<String> {
    let Ok(typed) = serde_json::from_value::<CustomResourceDefinition>(obj.clone()) else {
        return Vec::new();
    };
    let Ok(known) = serde_json::to_value(&typed) else {
        return Vec::new();
    };
    let mut dropped = Vec::new();
    strip(obj, &known, "", &mut dropped);
    dropped.sort();
    dropped
}

fn strip(v: &mut Value, known: &Value, at: &str, dropped: &mut Vec<String>) {
    match (v, known) {
        (Value::Object(m), Value::Object(k)) => {
            let unknown: Vec<String> = m
                .iter()
                .filter(|(key, val)| !k.contains_key(*key) && !val.is_null())
                .map(|(key, _)| key.clone())
                .collect();
            for key in unknown {
                m.remove(&key);
                dropped.push(if at.is_empty() {
                    key
                } else {
                    format!("{at}.{key}")
                });
            }
            for (key, val) in m.iter_mut() {
                if let Some(kv) = k.get(key) {
                    let child = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    // Schema values (`default`, `enum`, `example`) are free-form JSON: kept whole.
                    if !["default", "enum", "example"].contains(&key.as_str()) {
                        strip(val, kv, &child, dropped);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(k)) => {
            for (i, (val, kv)) in a.iter_mut().zip(k.iter()).enumerate() {
                strip(val, kv, &format!("{at}[{i}]"), dropped);
            }
        }
        _ => {}
    }
}

fn str_at<'a>(obj: &'a Value, p: &str) -> &'a str {
    path(obj, p).and_then(Value::as_str).unwrap_or("")
}

/// Kinds may have mixed case but must otherwise be DNS-1035 labels.
fn dns1035(field: &str, value: &str, prefix: &str, causes: &mut Vec<Cause>) {
    if let Err(msg) = names::check(NameRule::Dns1035, &value.to_lowercase()) {
        causes.push(Cause::invalid(
            field,
            &json!(value),
            &format!("{prefix}{msg}"),
        ));
    }
}

fn check_names(obj: &Value, causes: &mut Vec<Cause>) {
    let plural = str_at(obj, "spec.names.plural");
    let singular = str_at(obj, "spec.names.singular");
    let kind = str_at(obj, "spec.names.kind");
    let list_kind = str_at(obj, "spec.names.listKind");
    for (f, v) in [
        ("plural", plural),
        ("singular", singular),
        ("kind", kind),
        ("listKind", list_kind),
    ] {
        if v.is_empty() {
            causes.push(Cause::required(&format!("spec.names.{f}")));
        }
    }
    for (f, v) in [("plural", plural), ("singular", singular)] {
        if v.is_empty() {
            continue;
        }
        if let Err(msg) = names::check(NameRule::Dns1035, v) {
            causes.push(Cause::invalid(&format!("spec.names.{f}"), &json!(v), &msg));
        }
    }
    let mixed = "may have mixed case, but should otherwise match: ";
    if !kind.is_empty() {
        dns1035("spec.names.kind", kind, mixed, causes);
    }
    if !list_kind.is_empty() {
        dns1035("spec.names.listKind", list_kind, mixed, causes);
        if list_kind == kind {
            causes.push(Cause::invalid(
                "spec.names.listKind",
                &json!(list_kind),
                "kind and listKind may not be the same",
            ));
        }
    }
    for (i, s) in path(obj, "spec.names.shortNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let s = s.as_str().unwrap_or("");
        if let Err(msg) = names::check(NameRule::Dns1035, s) {
            causes.push(Cause::invalid(
                &format!("spec.names.shortNames[{i}]"),
                &json!(s),
                &msg,
            ));
        }
    }
}

fn check_columns(v: &Value, at: &str, causes: &mut Vec<Cause>) {
    const TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
    for (i, c) in v
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{at}.additionalPrinterColumns[{i}]");
        if c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            causes.push(Cause::required(&format!("{at}.name")));
        }
        let t = c.get("type").and_then(Value::as_str).unwrap_or("");
        if !TYPES.contains(&t) {
            causes.push(Cause::not_supported(
                &format!("{at}.type"),
                &json!(t),
                TYPES,
            ));
        }
        let jp = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
        if jp.is_empty() {
            causes.push(Cause::required(&format!("{at}.jsonPath")));
        } else if super::printer::compile(jp).is_err() {
            causes.push(Cause::invalid(
                &format!("{at}.jsonPath"),
                &json!(jp),
                "must be a simple json path starting with .",
            ));
        }
    }
}

fn check_scale(v: &Value, at: &str, causes: &mut Vec<Cause>) {
    let Some(scale) = v.get("subresources").and_then(|s| s.get("scale")) else {
        return;
    };
    let at = format!("{at}.subresources.scale");
    for (f, under) in [
        ("specReplicasPath", ".spec."),
        ("statusReplicasPath", ".status."),
    ] {
        let p = scale.get(f).and_then(Value::as_str).unwrap_or("");
        if p.is_empty() {
            causes.push(Cause::required(&format!("{at}.{f}")));
        } else if !p.starts_with(under) {
            let under = under.trim_end_matches('.');
            causes.push(Cause::invalid(
                &format!("{at}.{f}"),
                &json!(p),
                &format!("should be a json path under {under}"),
            ));
        }
    }
    if let Some(p) = scale.get("labelSelectorPath").and_then(Value::as_str) {
        if !p.starts_with(".spec.") && !p.starts_with(".status.") {
            causes.push(Cause::invalid(
                &format!("{at}.labelSelectorPath"),
                &json!(p),
                "should be a json path under either .spec or .status",
            ));
        }
    }
}

/// The conversion strategies: `None`, or `Webhook` with a client config and review versions (upstream's
/// rules and messages).
fn check_conversion(obj: &Value, causes: &mut Vec<Cause>) {
    const KNOWN: &[&str] = &["v1", "v1beta1"];
    let strategy = str_at(obj, "spec.conversion.strategy");
    let webhook = path(obj, "spec.conversion.webhook").filter(|w| !w.is_null());
    match strategy {
        "" | "None" => {
            if webhook.is_some() {
                causes.push(Cause::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            let Some(w) = webhook else {
                causes.push(Cause::required_because(
                    "spec.conversion.webhook",
                    "required when strategy is set to Webhook",
                ));
                return;
            };
            match w.get("clientConfig").filter(|c| !c.is_null()) {
                None => causes.push(Cause::required_because(
                    "spec.conversion.webhook.clientConfig",
                    "required when strategy is set to Webhook",
                )),
                Some(cc) => crate::validation::webhook_client::check_client_config(
                    Some(cc),
                    "spec.conversion.webhook.clientConfig",
                    causes,
                ),
            }
            let at = "spec.conversion.webhook.conversionReviewVersions";
            let versions: Vec<&str> = w
                .get("conversionReviewVersions")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if versions.is_empty() {
                causes.push(Cause::required_because(
                    at,
                    &format!("must specify one of {}", KNOWN.join(", ")),
                ));
            } else if !versions.iter().any(|v| KNOWN.contains(v)) {
                let printed: Vec<String> = versions.iter().map(|v| format!("{v:?}")).collect();
                causes.push(Cause::invalid_printed(
                    at,
                    &format!("[]string{{{}}}", printed.join(", ")),
                    &format!("must include at least one of {}", KNOWN.join(", ")),
                ));
            }
        }
        other => causes.push(Cause::not_supported(
            "spec.conversion.strategy",
            &json!(other),
            &["None", "Webhook"],
        )),
    }
}

fn check_versions(obj: &Value, causes: &mut Vec<Cause>) {
    let versions = path(obj, "spec.versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
        return;
    }
    let names: Vec<&str> = versions
        .iter()
        .map(|v| v.get("name").and_then(Value::as_str).unwrap_or(""))
        .collect();
    let storage = versions
        .iter()
        .filter(|v| v.get("storage") == Some(&json!(true)))
        .count();
    if storage != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(names.join(",")),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions
        .iter()
        .any(|v| v.get("served") == Some(&json!(true)))
    {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(names.join(",")),
            "must have at least one version marked as served",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        let name = names[i];
        if name.is_empty() {
            causes.push(Cause::required(&format!("{at}.name")));
        } else if let Err(msg) = names::check(NameRule::Dns1035, name) {
            causes.push(Cause::invalid(&format!("{at}.name"), &json!(name), &msg));
        }
        if names[..i].contains(&name) && !name.is_empty() {
            causes.push(Cause::duplicate(&format!("{at}.name"), &json!(name)));
        }
        let schema_at = format!("{at}.schema.openAPIV3Schema");
        match v.get("schema").and_then(|s| s.get("openAPIV3Schema")) {
            None | Some(Value::Null) => causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: schemas are required".into(),
                field: schema_at,
            }),
            Some(raw) => match serde_json::from_value::<JSONSchemaProps>(raw.clone()) {
                Ok(s) => causes.extend(schema::check(&s, &schema_at)),
                Err(e) => causes.push(Cause::invalid(&schema_at, &json!("object"), &e.to_string())),
            },
        }
        check_columns(v, &at, causes);
        check_scale(v, &at, causes);
    }
}

/// Every problem of a CRD object (after defaulting).
pub fn validate(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let group = str_at(obj, "spec.group");
    let plural = str_at(obj, "spec.names.plural");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    } else if let Err(msg) = names::check(NameRule::Subdomain, group) {
        causes.push(Cause::invalid("spec.group", &json!(group), &msg));
    } else if !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    let name = object::name(obj);
    if !name.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = str_at(obj, "spec.scope");
    if scope.is_empty() {
        causes.push(Cause::required("spec.scope"));
    } else if !["Cluster", "Namespaced"].contains(&scope) {
        causes.push(Cause::not_supported(
            "spec.scope",
            &json!(scope),
            &["Cluster", "Namespaced"],
        ));
    }
    check_names(obj, &mut causes);
    check_versions(obj, &mut causes);
    check_conversion(obj, &mut causes);
    if path(obj, "spec.preserveUnknownFields") == Some(&json!(true)) {
        causes.push(Cause::invalid(
            "spec.preserveUnknownFields",
            &json!(true),
            "must be false in order to use defaults in the schema",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "kind": "Widget"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    fn lines(mut c: Value) -> Vec<String> {
        apply_defaults(&mut c);
        validate(&c)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn unknown_crd_fields_are_found() {
        let mut c = crd();
        c["spec"]["versions"][0]["servd"] = json!(true);
        c["spec"]["bogus"] = json!(1);
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["default"] =
            json!({"free": {"x": 1}});
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            ["x-kubernetes-preserve-unknown-fields"] = json!(true);
        let dropped = prune_unknown(&mut c);
        assert_eq!(dropped, ["spec.bogus", "spec.versions[0].servd"]);
        assert_eq!(
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["default"]["free"]["x"],
            1
        );
        assert_eq!(prune_unknown(&mut crd()), Vec::<String>::new());
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        for junk in [
            json!({}),
            json!({"spec": "x"}),
            json!({"spec": {"names": 3, "versions": "v1", "group": ["a"]}}),
            json!({"spec": {"versions": [1, null, {"name": 7, "schema": {"openAPIV3Schema": "x"}}]}}),
            json!({"spec": {"versions": [{"name": "v1", "storage": true, "served": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"a": {"type": "array",
                    "items": [{"type": "string"}]}}}},
                "additionalPrinterColumns": [{"name": "", "type": "color", "jsonPath": "[[["}],
                "subresources": {"scale": {"specReplicasPath": "replicas"}}}]}}),
        ] {
            let l = lines(junk.clone());
            assert!(!l.is_empty(), "{junk}");
        }
    }

    #[test]
    fn a_good_crd_is_defaulted_and_valid() {
        let mut c = crd();
        apply_defaults(&mut c);
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["spec"]["conversion"]["strategy"], "None");
        assert_eq!(validate(&c), vec![]);
    }

    #[test]
    fn bad_crds_name_their_fields() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        c["spec"]["group"] = json!("example");
        c["spec"]["scope"] = json!("Galaxy");
        c["spec"]["versions"] = json!([
            {"name": "v1", "served": true, "storage": true},
            {"name": "v2", "served": true, "storage": true,
             "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"properties": {}}}}}}]);
        let l = lines(c);
        for want in [
            "metadata.name: Invalid value: \"wrong\": must be spec.names.plural+\".\"+spec.group",
            "spec.group: Invalid value: \"example\": should be a domain with at least one dot",
            "spec.scope: Unsupported value: \"Galaxy\": supported values: \"Cluster\", \"Namespaced\"",
            "spec.versions: Invalid value: \"v1,v2\": must have exactly one version marked as storage version",
            "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
            "spec.versions[1].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
        ] {
            assert!(l.contains(&want.to_string()), "missing {want}\nin {l:#?}");
        }
        let mut c = crd();
        c["spec"]["names"]["kind"] = json!("Bad_Kind");
        c["spec"]["names"]["plural"] = json!("");
        let l = lines(c);
        assert!(
            l.contains(&"spec.names.plural: Required value".to_string()),
            "{l:?}"
        );
        assert!(
            l.iter().any(|x| x
                .starts_with("spec.names.kind: Invalid value: \"Bad_Kind\": may have mixed case")),
            "{l:?}"
        );
    }
}
