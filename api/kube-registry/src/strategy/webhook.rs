//! `admissionregistration.k8s.io/v1` MutatingWebhookConfigurations and ValidatingWebhookConfigurations,
//! with upstream's v1 defaults (failurePolicy `Fail`, matchPolicy `Equivalent`, empty selectors, 10 s
//! timeouts, scope `*`, service port 443, reinvocation `Never`) and validation: fully qualified and unique
//! webhook names, rules, one of `url` or `service`, `sideEffects`, `admissionReviewVersions`, timeouts of
//! 1 to 30 s and the match conditions' names. Generation counts changes of `webhooks`.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::persistentvolume::check_requirement;
use super::{list_at as list, str_at as s, Strategy};
use crate::resource::ResourceDef;
use crate::status::Cause;
use crate::validation::names::{self, NameRule};
use crate::validation::webhook_client::check_client_config;

pub(super) struct WebhookConfiguration;

const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
const REINVOCATION: &[&str] = &["IfNeeded", "Never"];
/// The AdmissionReview versions this server sends.
const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
/// At most this many match conditions per webhook (upstream's limit).
const MAX_MATCH_CONDITIONS: usize = 64;

fn default_in(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), v);
    }
}

fn mutating(def: &ResourceDef) -> bool {
    def.kind == "MutatingWebhookConfiguration"
}

impl Strategy for WebhookConfiguration {
    fn set_defaults(&self, def: &ResourceDef, obj: &mut Value) {
        let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
            return;
        };
        for h in hooks.iter_mut().filter_map(Value::as_object_mut) {
            default_in(h, "failurePolicy", json!("Fail"));
            default_in(h, "matchPolicy", json!("Equivalent"));
            default_in(h, "namespaceSelector", json!({}));
            default_in(h, "objectSelector", json!({}));
            default_in(h, "timeoutSeconds", json!(10));
            if mutating(def) {
                default_in(h, "reinvocationPolicy", json!("Never"));
            }
            if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
                for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                    default_in(r, "scope", json!("*"));
                }
            }
            if let Some(svc) = h
                .get_mut("clientConfig")
                .and_then(|c| c.get_mut("service"))
                .and_then(Value::as_object_mut)
            {
                default_in(svc, "port", json!(443));
            }
        }
    }

    fn validate(&self, def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let mut seen = HashSet::new();
        for (i, h) in list(obj, "webhooks").iter().enumerate() {
            let at = format!("webhooks[{i}]");
            let name = s(h, "name").unwrap_or("");
            if !seen.insert(name) {
                causes.push(Cause::duplicate(&format!("{at}.name"), &json!(name)));
            }
            check_webhook(h, &at, mutating(def), &mut causes);
        }
        causes
    }

    fn validate_update(&self, def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        self.validate(def, new)
    }

    fn generation_changes(&self, _def: &ResourceDef, old: &Value, new: &Value) -> bool {
        old.get("webhooks") != new.get("webhooks")
    }
}

/// Upstream's IsFullyQualifiedName: a DNS subdomain of at least three labels.
fn check_fully_qualified(field: &str, name: &str, causes: &mut Vec<Cause>) {
    if name.is_empty() {
        causes.push(Cause::required(field));
        return;
    }
    if let Err(e) = names::check(NameRule::Subdomain, name) {
        causes.push(Cause::invalid(field, &json!(name), &e));
        return;
    }
    if name.split('.').count() < 3 {
        causes.push(Cause::invalid(
            field,
            &json!(name),
            "should be a domain with at least three segments separated by dots",
        ));
    }
}

pub(super) fn check_one_of(
    field: &str,
    v: Option<&str>,
    allowed: &[&str],
    causes: &mut Vec<Cause>,
) {
    match v {
        None => causes.push(Cause::required(field)),
        Some(v) if !allowed.contains(&v) => {
            causes.push(Cause::not_supported(field, &json!(v), allowed))
        }
        Some(_) => {}
    }
}

fn check_webhook(h: &Value, at: &str, mutating: bool, causes: &mut Vec<Cause>) {
    check_fully_qualified(&format!("{at}.name"), s(h, "name").unwrap_or(""), causes);
    for (j, r) in list(h, "rules").iter().enumerate() {
        check_rule(r, &format!("{at}.rules[{j}]"), causes);
    }
    check_one_of(
        &format!("{at}.failurePolicy"),
        s(h, "failurePolicy"),
        FAILURE_POLICIES,
        causes,
    );
    check_one_of(
        &format!("{at}.matchPolicy"),
        s(h, "matchPolicy"),
        MATCH_POLICIES,
        causes,
    );
    match s(h, "sideEffects") {
        None => causes.push(Cause::required_because(
            &format!("{at}.sideEffects"),
            &format!("must specify one of {}", SIDE_EFFECTS.join(", ")),
        )),
        Some(v) => check_one_of(&format!("{at}.sideEffects"), Some(v), SIDE_EFFECTS, causes),
    }
    if mutating {
        check_one_of(
            &format!("{at}.reinvocationPolicy"),
            s(h, "reinvocationPolicy"),
            REINVOCATION,
            causes,
        );
    }
    if let Some(t) = h.get("timeoutSeconds").and_then(Value::as_i64) {
        if !(1..=30).contains(&t) {
            causes.push(Cause::invalid(
                &format!("{at}.timeoutSeconds"),
                &json!(t),
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
    }
    check_review_versions(h, &format!("{at}.admissionReviewVersions"), causes);
    for sel in ["namespaceSelector", "objectSelector"] {
        if let Some(v) = h.get(sel) {
            check_label_selector(v, &format!("{at}.{sel}"), causes);
        }
    }
    check_client_config(h.get("clientConfig"), &format!("{at}.clientConfig"), causes);
    check_match_conditions(
        list(h, "matchConditions"),
        &format!("{at}.matchConditions"),
        causes,
    );
}

fn check_review_versions(h: &Value, at: &str, causes: &mut Vec<Cause>) {
    let versions = list(h, "admissionReviewVersions");
    if versions.is_empty() {
        causes.push(Cause::required_because(
            at,
            &format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        ));
        return;
    }
    let mut seen = HashSet::new();
    let mut known = false;
    for (i, v) in versions.iter().enumerate() {
        let v = v.as_str().unwrap_or("");
        let f = format!("{at}[{i}]");
        if !seen.insert(v) {
            causes.push(Cause::invalid(&f, &json!(v), "duplicate version"));
            continue;
        }
        if let Err(e) = names::check(NameRule::Dns1035, v) {
            causes.push(Cause::invalid(&f, &json!(v), &e));
        }
        known |= REVIEW_VERSIONS.contains(&v);
    }
    if !known {
        let printed: Vec<String> = versions
            .iter()
            .map(|v| format!("{:?}", v.as_str().unwrap_or("")))
            .collect();
        causes.push(Cause::invalid_printed(
            at,
            &format!("[]string{{{}}}", printed.join(", ")),
            &format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
}

/// Upstream's rule checks: operations, groups, versions, resources (with the `*` and `/` forms) and scope.
pub(super) fn check_rule(r: &Value, at: &str, causes: &mut Vec<Cause>) {
    let strings = |k: &str| -> Vec<&str> { list(r, k).iter().filter_map(Value::as_str).collect() };
    let ops = strings("operations");
    if ops.is_empty() {
        causes.push(Cause::required(&format!("{at}.operations")));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        causes.push(Cause::invalid_printed(
            &format!("{at}.operations"),
            &go_strings(&ops),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            causes.push(Cause::not_supported(
                &format!("{at}.operations[{i}]"),
                &json!(op),
                OPERATIONS,
            ));
        }
    }
    for (key, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let vals = strings(key);
        if vals.is_empty() {
            causes.push(Cause::required(&format!("{at}.{key}")));
        }
        if vals.len() > 1 && vals.contains(&"*") {
            causes.push(Cause::invalid_printed(
                &format!("{at}.{key}"),
                &go_strings(&vals),
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
        if key == "apiVersions" {
            for (i, v) in vals.iter().enumerate() {
                if v.is_empty() {
                    causes.push(Cause::required(&format!("{at}.apiVersions[{i}]")));
                }
            }
        }
    }
    check_resources(&strings("resources"), &format!("{at}.resources"), causes);
    if let Some(scope) = s(r, "scope") {
        if !SCOPES.contains(&scope) {
            causes.push(Cause::not_supported(
                &format!("{at}.scope"),
                &json!(scope),
                SCOPES,
            ));
        }
    }
}

fn go_strings(v: &[&str]) -> String {
    let q: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", q.join(", "))
}

/// Upstream's resource checks, in its order: `r/*` and `*/s` exclude a later `r/x` and `x/s`; `*/*`
/// stands alone; `*` excludes plain resources.
fn check_resources(res: &[&str], at: &str, causes: &mut Vec<Cause>) {
    if res.is_empty() {
        causes.push(Cause::required(at));
    }
    let mut wild_sub: HashSet<&str> = HashSet::new();
    let mut wild_res: HashSet<&str> = HashSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, r) in res.iter().enumerate() {
        let f = format!("{at}[{i}]");
        if r.is_empty() {
            causes.push(Cause::required(&f));
            continue;
        }
        double |= *r == "*/*";
        single |= *r == "*";
        let Some((main, sub)) = r.split_once('/') else {
            plain = *r != "*";
            continue;
        };
        if wild_sub.contains(main) {
            causes.push(Cause::invalid(
                &f,
                &json!(r),
                &format!("if '{main}/*' is present, must not specify {r}"),
            ));
        }
        if wild_res.contains(sub) {
            causes.push(Cause::invalid(
                &f,
                &json!(r),
                &format!("if '*/{sub}' is present, must not specify {r}"),
            ));
        }
        if sub == "*" {
            wild_sub.insert(main);
        }
        if main == "*" {
            wild_res.insert(sub);
        }
    }
    if res.len() > 1 && double {
        causes.push(Cause::invalid_printed(
            at,
            &go_strings(res),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        causes.push(Cause::invalid_printed(
            at,
            &go_strings(res),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

pub(super) fn check_label_selector(sel: &Value, at: &str, causes: &mut Vec<Cause>) {
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Err(e) = names::check_qualified_name(k) {
                causes.push(Cause::invalid(&format!("{at}.matchLabels"), &json!(k), &e));
            }
            if let Err(e) = names::check_label_value(v.as_str().unwrap_or("")) {
                causes.push(Cause::invalid(&format!("{at}.matchLabels"), v, &e));
            }
        }
    }
    for (i, e) in list(sel, "matchExpressions").iter().enumerate() {
        let f = format!("{at}.matchExpressions[{i}]");
        check_requirement(e, &f, false, causes);
        let key = s(e, "key").unwrap_or("");
        if let Err(msg) = names::check_qualified_name(key) {
            causes.push(Cause::invalid(&format!("{f}.key"), &json!(key), &msg));
        }
    }
}

pub(super) fn check_match_conditions(conds: &[Value], at: &str, causes: &mut Vec<Cause>) {
    if conds.len() > MAX_MATCH_CONDITIONS {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            message: format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                conds.len()
            ),
            field: at.to_string(),
        });
    }
    let mut seen = HashSet::new();
    for (i, c) in conds.iter().enumerate() {
        let f = format!("{at}[{i}]");
        let name = s(c, "name").unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{f}.name")));
        } else if let Err(e) = names::check_qualified_name(name) {
            causes.push(Cause::invalid(&format!("{f}.name"), &json!(name), &e));
        } else if !seen.insert(name) {
            causes.push(Cause::duplicate(&format!("{f}.name"), &json!(name)));
        }
        check_expression(c, &format!("{f}.expression"), causes);
    }
}

/// A CEL expression at `at` (`expression` of `v`): given, and compiling (`compilation failed: …`).
pub(super) fn check_expression(v: &Value, at: &str, causes: &mut Vec<Cause>) {
    let expr = v.get("expression").and_then(Value::as_str).unwrap_or("");
    if expr.trim().is_empty() {
        causes.push(Cause::required(at));
    } else if let Err(e) = crate::cel::compile(expr) {
        causes.push(Cause::invalid(
            at,
            &json!(expr),
            &format!("compilation failed: {e}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn def(plural: &str) -> std::sync::Arc<ResourceDef> {
        resource::find("admissionregistration.k8s.io", "v1", plural).expect("served")
    }

    fn hook() -> Value {
        json!({"name": "deny.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "hooks", "name": "deny", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]})
    }

    #[test]
    fn defaults_are_upstreams() {
        let d = def("mutatingwebhookconfigurations");
        let mut obj = json!({"metadata": {"name": "m"}, "webhooks": [hook()]});
        WebhookConfiguration.set_defaults(&d, &mut obj);
        let h = &obj["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        assert!(WebhookConfiguration.validate(&d, &obj).is_empty());
    }

    #[test]
    fn bad_webhooks_get_upstreams_causes() {
        let d = def("validatingwebhookconfigurations");
        let mut bad = hook();
        bad["name"] = json!("deny");
        bad["timeoutSeconds"] = json!(31);
        bad["sideEffects"] = json!("Some");
        bad["admissionReviewVersions"] = json!(["v2"]);
        bad["clientConfig"] = json!({"url": "http://x.example.com/?a=b"});
        bad["rules"][0]["operations"] = json!(["*", "CREATE"]);
        let obj = json!({"metadata": {"name": "v"}, "webhooks": [bad, hook(), hook()]});
        let causes = WebhookConfiguration.validate(&d, &obj);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for want in [
            "webhooks[0].name",
            "webhooks[0].timeoutSeconds",
            "webhooks[0].sideEffects",
            "webhooks[0].admissionReviewVersions",
            "webhooks[0].clientConfig.url",
            "webhooks[0].rules[0].operations",
            "webhooks[2].name",
        ] {
            assert!(fields.contains(&want), "{want} missing: {causes:?}");
        }
        let name = causes
            .iter()
            .find(|c| c.field == "webhooks[0].name")
            .expect("name");
        assert!(name.message.contains("at least three segments"), "{name:?}");
    }
}
