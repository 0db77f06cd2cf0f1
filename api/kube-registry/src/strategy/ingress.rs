//! Ingresses and IngressClasses (`networking.k8s.io/v1`), with upstream's validation
//! (`pkg/apis/networking/validation`): rules with DNS hosts (a `*.` wildcard allowed, never an IP), paths
//! by `pathType`, backends that name a Service port or a resource but not both, TLS hosts and Secret
//! names; an IngressClass's domain-prefixed `controller` (immutable) and its `parameters` reference,
//! whose `scope` defaults to `Cluster`. The default class is the DefaultIngressClass admission
//! plugin's business. Generation counts spec changes (the resource table's `gen`).

use serde_json::{json, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::names::{self, NameRule};

pub(super) struct Ingress;
pub(super) struct IngressClass;

/// The `pathType` values, as upstream lists them in its message (sorted).
const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];
/// What an `Exact` or `Prefix` path may not contain, or end with.
const BAD_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const BAD_SUFFIXES: &[&str] = &["/..", "/."];
/// An IngressClass's `controller` is at most this long.
const MAX_CONTROLLER: usize = 250;
const SCOPES: &[&str] = &["Cluster", "Namespace"];
/// The annotation older Ingresses name their class with.
const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";

const WILDCARD_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const HTTP_PATH_MSG: &str =
    "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')";

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Upstream's IsWildcardDNS1123Subdomain.
fn wildcard_host(host: &str) -> Result<(), String> {
    if host.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    match host.strip_prefix("*.") {
        Some(rest) if names::check(NameRule::Subdomain, rest).is_ok() => Ok(()),
        _ => Err(WILDCARD_MSG.into()),
    }
}

/// A host of a rule or of a TLS entry: a DNS subdomain, or a `*.` wildcard one.
fn check_host(field: &str, host: &str, causes: &mut Vec<Cause>) {
    let checked = if host.contains('*') {
        wildcard_host(host)
    } else {
        names::check(NameRule::Subdomain, host)
    };
    if let Err(m) = checked {
        causes.push(Cause::invalid(field, &json!(host), &m));
    }
}

/// A reference by apiGroup, kind and name (a resource backend, an IngressClass's parameters).
fn check_reference(field: &str, r: &Value, causes: &mut Vec<Cause>) {
    if let Some(group) = s(r, "apiGroup") {
        if let Err(m) = names::check(NameRule::Subdomain, group) {
            causes.push(Cause::invalid(
                &format!("{field}.apiGroup"),
                &json!(group),
                &m,
            ));
        }
    }
    for key in ["kind", "name"] {
        match s(r, key).unwrap_or("") {
            "" => causes.push(Cause::required_because(
                &format!("{field}.{key}"),
                &format!("{key} is required"),
            )),
            v => {
                if let Err(m) = names::check(NameRule::PathSegment, v) {
                    causes.push(Cause::invalid(&format!("{field}.{key}"), &json!(v), &m));
                }
            }
        }
    }
}

fn check_backend(field: &str, b: &Value, causes: &mut Vec<Cause>) {
    let resource = b.get("resource").filter(|v| !v.is_null());
    let service = b.get("service").filter(|v| !v.is_null());
    match (resource, service) {
        (Some(_), Some(_)) => causes.push(Cause::invalid(
            field,
            &json!(""),
            "cannot set both resource and service backends",
        )),
        (Some(r), None) => check_reference(&format!("{field}.resource"), r, causes),
        (None, Some(svc)) => {
            match s(svc, "name").unwrap_or("") {
                "" => causes.push(Cause::required(&format!("{field}.service.name"))),
                n => {
                    if let Err(m) = names::check(NameRule::Dns1035, n) {
                        causes.push(Cause::invalid(
                            &format!("{field}.service.name"),
                            &json!(n),
                            &m,
                        ));
                    }
                }
            }
            let port = svc.get("port").cloned().unwrap_or(Value::Null);
            let name = s(&port, "name").unwrap_or("");
            let number = port.get("number").and_then(Value::as_i64).unwrap_or(0);
            match (name.is_empty(), number == 0) {
                (false, false) => causes.push(Cause::invalid(
                    field,
                    &json!(""),
                    "cannot set both port name & port number",
                )),
                (false, true) => {
                    for m in names::port_name_errors(name) {
                        causes.push(Cause::invalid(
                            &format!("{field}.service.port.name"),
                            &json!(name),
                            &m,
                        ));
                    }
                }
                (true, false) => {
                    if !(1..=65535).contains(&number) {
                        causes.push(Cause::invalid(
                            &format!("{field}.service.port.number"),
                            &json!(number),
                            "must be between 1 and 65535, inclusive",
                        ));
                    }
                }
                (true, true) => causes.push(Cause::required_because(
                    field,
                    "port name or number is required",
                )),
            }
        }
        (None, None) => causes.push(Cause::invalid(
            field,
            &json!(""),
            "resource or service backend is required",
        )),
    }
}

fn check_path(field: &str, p: &Value, causes: &mut Vec<Cause>) {
    let path = s(p, "path").unwrap_or("");
    let path_field = format!("{field}.path");
    match s(p, "pathType") {
        None => {
            causes.push(Cause::required_because(
                &format!("{field}.pathType"),
                "pathType must be specified",
            ));
            return;
        }
        Some("Exact" | "Prefix") => {
            if !path.starts_with('/') {
                causes.push(Cause::invalid(
                    &path_field,
                    &json!(path),
                    "must be an absolute path",
                ));
            }
            if !path.is_empty() {
                for bad in BAD_SEQUENCES.iter().filter(|b| path.contains(**b)) {
                    causes.push(Cause::invalid(
                        &path_field,
                        &json!(path),
                        &format!("must not contain '{bad}'"),
                    ));
                }
                for bad in BAD_SUFFIXES.iter().filter(|b| path.ends_with(**b)) {
                    causes.push(Cause::invalid(
                        &path_field,
                        &json!(path),
                        &format!("cannot end with '{bad}'"),
                    ));
                }
            }
        }
        Some("ImplementationSpecific") => {
            if !path.is_empty() && !path.starts_with('/') {
                causes.push(Cause::invalid(
                    &path_field,
                    &json!(path),
                    "must be an absolute path",
                ));
            }
        }
        Some(other) => causes.push(Cause::not_supported(
            &format!("{field}.pathType"),
            &json!(other),
            PATH_TYPES,
        )),
    }
    check_backend(
        &format!("{field}.backend"),
        p.get("backend").unwrap_or(&Value::Null),
        causes,
    );
}

/// A rule's `http` paths (its rule value).
fn check_rule_value(field: &str, rule: &Value, causes: &mut Vec<Cause>) {
    if let Some(http) = rule.get("http").filter(|v| !v.is_null()) {
        let paths = list(http, "paths");
        if paths.is_empty() {
            causes.push(Cause::required(&format!("{field}.http.paths")));
        }
        for (j, p) in paths.iter().enumerate() {
            check_path(&format!("{field}.http.paths[{j}]"), p, causes);
        }
    }
}

fn check_spec(spec: &Value, ratchet: Ratchet, causes: &mut Vec<Cause>) {
    let rules = list(spec, "rules");
    let default = spec.get("defaultBackend").filter(|v| !v.is_null());
    if rules.is_empty() && default.is_none() {
        let printed = if spec.get("rules").is_some_and(Value::is_array) {
            "[]networking.IngressRule{}"
        } else {
            "[]networking.IngressRule(nil)"
        };
        causes.push(Cause::invalid_printed(
            "spec",
            printed,
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = default {
        check_backend("spec.defaultBackend", b, causes);
    }
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.rules[{i}]");
        if let Some(host) = s(rule, "host").filter(|h| !h.is_empty()) {
            if host.parse::<std::net::IpAddr>().is_ok() {
                causes.push(Cause::invalid(
                    &format!("{field}.host"),
                    &json!(host),
                    "must be a DNS name, not an IP address",
                ));
            }
            check_host(&format!("{field}.host"), host, causes);
        }
        let wildcard = s(rule, "host").is_some_and(|h| h.contains('*'));
        if !(wildcard && ratchet.wildcard_rules) {
            check_rule_value(&field, rule, causes);
        }
    }
    for (i, tls) in list(spec, "tls").iter().enumerate() {
        for (j, host) in list(tls, "hosts").iter().enumerate() {
            if let Some(h) = host.as_str() {
                check_host(&format!("spec.tls[{i}].hosts[{j}]"), h, causes);
            }
        }
        let secret = s(tls, "secretName").filter(|n| !n.is_empty() && !ratchet.secret_names);
        if let Some(secret) = secret {
            if let Err(m) = names::check(NameRule::Subdomain, secret) {
                causes.push(Cause::invalid(
                    &format!("spec.tls[{i}].secretName"),
                    &json!(secret),
                    &m,
                ));
            }
        }
    }
    if let Some(class) = s(spec, "ingressClassName") {
        if let Err(m) = names::check(NameRule::Subdomain, class) {
            causes.push(Cause::invalid("spec.ingressClassName", &json!(class), &m));
        }
    }
}

fn legacy_class(obj: &Value) -> Option<&str> {
    obj.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(LEGACY_CLASS))
        .and_then(Value::as_str)
}

/// Update's compatibility with objects stored before a rule: a Secret name or a wildcard rule the old
/// object already broke may stay broken (upstream's AllowInvalidSecretName and
/// AllowInvalidWildcardHostRule).
#[derive(Default, Clone, Copy)]
struct Ratchet {
    secret_names: bool,
    wildcard_rules: bool,
}

impl Strategy for Ingress {
    /// Create's checks: the spec, and a legacy class annotation that must agree with the class name.
    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        if let (Some(legacy), Some(class)) = (legacy_class(obj), s(spec, "ingressClassName")) {
            if legacy != class {
                causes.push(Cause::invalid(
                    &format!("annotations.{LEGACY_CLASS}"),
                    &json!(legacy),
                    "must match `ingressClassName` when both are specified",
                ));
            }
        }
        check_spec(spec, Ratchet::default(), &mut causes);
        causes
    }

    fn warnings_on_create(&self, _def: &ResourceDef, obj: &Value) -> Vec<String> {
        let named = obj
            .get("spec")
            .and_then(|s| s.get("ingressClassName"))
            .is_some_and(|v| !v.is_null());
        if legacy_class(obj).is_some() && !named {
            vec![format!(
                "annotation \"{LEGACY_CLASS}\" is deprecated, please use 'spec.ingressClassName' instead"
            )]
        } else {
            Vec::new()
        }
    }

    fn revalidates_on_update(&self) -> bool {
        false
    }

    /// Update's checks: the whole spec again (the class name may change), with the old object's ratchets.
    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let old_spec = old.get("spec").unwrap_or(&Value::Null);
        let secret_names = list(old_spec, "tls").iter().any(|t| {
            s(t, "secretName")
                .is_some_and(|n| !n.is_empty() && names::check(NameRule::Subdomain, n).is_err())
        });
        let wildcard_rules = list(old_spec, "rules").iter().any(|r| {
            s(r, "host").is_some_and(|h| h.contains('*')) && {
                let mut c = Vec::new();
                check_rule_value("", r, &mut c);
                !c.is_empty()
            }
        });
        let mut causes = Vec::new();
        let ratchet = Ratchet {
            secret_names,
            wildcard_rules,
        };
        check_spec(
            new.get("spec").unwrap_or(&Value::Null),
            ratchet,
            &mut causes,
        );
        causes
    }
}

/// Upstream's IsDomainPrefixedPath, for an IngressClass's controller.
fn check_controller(controller: &str, causes: &mut Vec<Cause>) {
    const FIELD: &str = "spec.controller";
    if controller.len() > MAX_CONTROLLER {
        causes.push(Cause::too_long(FIELD, MAX_CONTROLLER));
    }
    if controller.is_empty() {
        causes.push(Cause::required(FIELD));
        return;
    }
    let Some((host, path)) = controller
        .split_once('/')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        causes.push(Cause::invalid(
            FIELD,
            &json!(controller),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    if let Err(m) = names::check(NameRule::Subdomain, host) {
        causes.push(Cause::invalid(FIELD, &json!(host), &m));
    }
    let path_ok = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c));
    if !path_ok {
        causes.push(Cause::invalid(FIELD, &json!(path), HTTP_PATH_MSG));
    }
}

fn check_parameters(p: &Value, causes: &mut Vec<Cause>) {
    const FIELD: &str = "spec.parameters";
    check_reference(FIELD, p, causes);
    let namespace = p.get("namespace").and_then(Value::as_str);
    match s(p, "scope") {
        None => causes.push(Cause::required(&format!("{FIELD}.scope"))),
        Some("Namespace") => match namespace {
            None => causes.push(Cause::required_because(
                &format!("{FIELD}.namespace"),
                "`parameters.scope` is set to 'Namespace'",
            )),
            Some(ns) => {
                if let Err(m) = names::check(NameRule::Label, ns) {
                    causes.push(Cause::invalid(
                        &format!("{FIELD}.namespace"),
                        &json!(ns),
                        &m,
                    ));
                }
            }
        },
        Some("Cluster") => {
            if namespace.is_some() {
                causes.push(Cause::forbidden(
                    &format!("{FIELD}.namespace"),
                    "`parameters.scope` is set to 'Cluster'",
                ));
            }
        }
        Some(other) => causes.push(Cause::not_supported(
            &format!("{FIELD}.scope"),
            &json!(other),
            SCOPES,
        )),
    }
}

impl Strategy for IngressClass {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let params = obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("parameters"))
            .and_then(Value::as_object_mut);
        if let Some(p) = params {
            p.entry("scope").or_insert_with(|| json!("Cluster"));
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        check_controller(s(spec, "controller").unwrap_or(""), &mut causes);
        if let Some(p) = spec.get("parameters").filter(|v| !v.is_null()) {
            check_parameters(p, &mut causes);
        }
        causes
    }

    fn validate_update(&self, _def: &ResourceDef, old: &Value, new: &Value) -> Vec<Cause> {
        let controller = |o: &Value| {
            o.get("spec")
                .and_then(|s| s.get("controller"))
                .cloned()
                .unwrap_or(Value::Null)
        };
        if controller(old) == controller(new) {
            return Vec::new();
        }
        vec![Cause::invalid(
            "spec.controller",
            &controller(new),
            "field is immutable",
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn ingress_causes(spec: Value) -> Vec<String> {
        let def = resource::find("networking.k8s.io", "v1", "ingresses").expect("def");
        Ingress
            .validate(&def, &json!({"metadata": {"name": "i"}, "spec": spec}))
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn backend(name: &str, port: Value) -> Value {
        json!({"service": {"name": name, "port": port}})
    }

    #[test]
    fn a_good_ingress_passes() {
        let spec = json!({
            "ingressClassName": "keel",
            "rules": [
                {"host": "a.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))},
                    {"path": "/api", "pathType": "Exact", "backend": backend("api", json!({"name": "http"}))}]}},
                {"host": "*.example.com", "http": {"paths": [
                    {"pathType": "ImplementationSpecific", "backend": backend("web", json!({"number": 80}))}]}}],
            "tls": [{"hosts": ["a.example.com", "*.example.com"], "secretName": "tls-a"}]
        });
        assert_eq!(ingress_causes(spec), Vec::<String>::new());
        let only_default = json!({"defaultBackend": backend("web", json!({"number": 8080}))});
        assert_eq!(ingress_causes(only_default), Vec::<String>::new());
    }

    #[test]
    fn bad_ingresses_get_upstreams_messages() {
        assert_eq!(
            ingress_causes(json!({})),
            ["spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"]
        );
        let rule =
            |host: &str, path: Value| json!({"rules": [{"host": host, "http": {"paths": [path]}}]});
        let ok = backend("web", json!({"number": 80}));
        let causes = ingress_causes(rule(
            "1.2.3.4",
            json!({"path": "/", "pathType": "Prefix", "backend": ok}),
        ));
        assert!(causes.contains(&"spec.rules[0].host: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address".to_string()), "{causes:?}");
        let causes = ingress_causes(rule("a.com", json!({"path": "/", "backend": ok})));
        assert_eq!(
            causes,
            ["spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"]
        );
        let causes = ingress_causes(rule(
            "a.com",
            json!({"path": "/", "pathType": "Regex", "backend": ok}),
        ));
        assert_eq!(causes, ["spec.rules[0].http.paths[0].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\""]);
        let causes = ingress_causes(rule(
            "a.com",
            json!({"path": "api", "pathType": "Prefix", "backend": ok}),
        ));
        assert_eq!(causes, ["spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path"]);
        let causes = ingress_causes(rule(
            "a.com",
            json!({"path": "/a//b/.", "pathType": "Exact", "backend": ok}),
        ));
        assert_eq!(causes, [
            "spec.rules[0].http.paths[0].path: Invalid value: \"/a//b/.\": must not contain '//'",
            "spec.rules[0].http.paths[0].path: Invalid value: \"/a//b/.\": cannot end with '/.'",
        ]);
        let both = json!({"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"name": "http", "number": 80}))});
        assert_eq!(ingress_causes(rule("a.com", both)), ["spec.rules[0].http.paths[0].backend: Invalid value: \"\": cannot set both port name & port number"]);
        let none = json!({"path": "/", "pathType": "Prefix", "backend": backend("web", json!({}))});
        assert_eq!(ingress_causes(rule("a.com", none)), ["spec.rules[0].http.paths[0].backend: Required value: port name or number is required"]);
        let neither = json!({"path": "/", "pathType": "Prefix", "backend": {}});
        assert_eq!(ingress_causes(rule("a.com", neither)), ["spec.rules[0].http.paths[0].backend: Invalid value: \"\": resource or service backend is required"]);
        let bad_svc = json!({"path": "/", "pathType": "Prefix", "backend": backend("9web", json!({"number": 70000}))});
        let causes = ingress_causes(rule("a.com", bad_svc));
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert!(
            causes[1].ends_with("must be between 1 and 65535, inclusive"),
            "{causes:?}"
        );
        let causes = ingress_causes(rule(
            "*.*.com",
            json!({"path": "/", "pathType": "Prefix", "backend": ok}),
        ));
        assert!(
            causes[0].starts_with(
                "spec.rules[0].host: Invalid value: \"*.*.com\": a wildcard DNS-1123 subdomain"
            ),
            "{causes:?}"
        );
    }

    #[test]
    fn the_legacy_annotation_must_agree_and_is_deprecated() {
        let def = resource::find("networking.k8s.io", "v1", "ingresses").expect("def");
        let obj = |class: Option<&str>| {
            let mut o = json!({"metadata": {"name": "i", "annotations": {LEGACY_CLASS: "nginx"}},
                               "spec": {"defaultBackend": backend("web", json!({"number": 80}))}});
            if let Some(c) = class {
                o["spec"]["ingressClassName"] = json!(c);
            }
            o
        };
        let causes = Ingress.validate(&def, &obj(Some("keel")));
        assert_eq!(causes[0].field, "annotations.kubernetes.io/ingress.class");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"nginx\": must match `ingressClassName` when both are specified"
        );
        assert!(Ingress.validate(&def, &obj(Some("nginx"))).is_empty());
        assert_eq!(
            Ingress.warnings_on_create(&def, &obj(None)),
            ["annotation \"kubernetes.io/ingress.class\" is deprecated, please use 'spec.ingressClassName' instead"]
        );
        assert!(Ingress
            .warnings_on_create(&def, &obj(Some("nginx")))
            .is_empty());
        // An update is not held to it, and keeps a Secret name the stored object already had.
        let mut old = obj(Some("keel"));
        old["spec"]["tls"] = json!([{"secretName": "Bad_Name"}]);
        assert!(Ingress.validate_update(&def, &old, &old).is_empty());
    }

    #[test]
    fn ingress_classes_are_checked_and_their_controller_is_immutable() {
        let def = resource::find("networking.k8s.io", "v1", "ingressclasses").expect("def");
        let causes = |spec: Value| -> Vec<String> {
            let mut obj = json!({"metadata": {"name": "c"}, "spec": spec});
            IngressClass.set_defaults(&def, &mut obj);
            IngressClass
                .validate(&def, &obj)
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect()
        };
        assert_eq!(
            causes(json!({"controller": "keel.io/ingress"})),
            Vec::<String>::new()
        );
        assert_eq!(causes(json!({})), ["spec.controller: Required value"]);
        assert_eq!(
            causes(json!({"controller": "ingress"})),
            ["spec.controller: Invalid value: \"ingress\": must be a domain-prefixed path (such as \"acme.io/foo\")"]
        );
        let params =
            json!({"controller": "keel.io/ingress", "parameters": {"kind": "Config", "name": "p"}});
        assert_eq!(
            causes(params),
            Vec::<String>::new(),
            "scope defaults to Cluster"
        );
        let params = json!({"controller": "keel.io/ingress",
                            "parameters": {"kind": "Config", "name": "p", "scope": "Namespace"}});
        assert_eq!(
            causes(params),
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"]
        );
        let old = json!({"spec": {"controller": "keel.io/ingress"}});
        let new = json!({"spec": {"controller": "example.com/other"}});
        let upd = IngressClass.validate_update(&def, &old, &new);
        assert_eq!(
            upd[0].message,
            "Invalid value: \"example.com/other\": field is immutable"
        );
    }
}
