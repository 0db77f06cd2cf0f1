//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies and their bindings, with upstream's
//! defaults (failurePolicy `Fail`, matchPolicy `Equivalent`, empty selectors, rule scope `*`) and
//! validation: match constraints with resource rules, at least one validation or audit annotation, every
//! CEL expression compiling, reasons, variables and match conditions; a binding names its policy and
//! its validation actions (not both Deny and Warn), and a paramRef names a parameter or selects them.
//! Generation counts changes of the spec; the policy's status (type checking) is its own subresource.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::webhook::{
    check_expression, check_label_selector, check_match_conditions, check_one_of, check_rule,
};
use super::{list_at as list, str_at as s, Strategy};
use crate::resource::ResourceDef;
use crate::status::Cause;

pub(super) struct ValidatingAdmissionPolicy;
pub(super) struct ValidatingAdmissionPolicyBinding;

const REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
const NOT_FOUND_ACTIONS: &[&str] = &["Deny", "Allow"];
/// Names CEL reserves, which no variable may take.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

fn default_in(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), v);
    }
}

/// Defaults of a `matchConstraints` or `matchResources`.
fn default_match(m: &mut Map<String, Value>) {
    default_in(m, "matchPolicy", json!("Equivalent"));
    default_in(m, "namespaceSelector", json!({}));
    default_in(m, "objectSelector", json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = m.get_mut(key).and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                default_in(r, "scope", json!("*"));
            }
        }
    }
}

/// Checks a `matchConstraints` (rules required) or a binding's `matchResources`.
fn check_match(m: &Value, at: &str, rules_required: bool, causes: &mut Vec<Cause>) {
    let rules = list(m, "resourceRules");
    if rules_required && rules.is_empty() {
        causes.push(Cause::required(&format!("{at}.resourceRules")));
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in list(m, key).iter().enumerate() {
            check_rule(r, &format!("{at}.{key}[{i}]"), causes);
        }
    }
    check_one_of(
        &format!("{at}.matchPolicy"),
        s(m, "matchPolicy"),
        &["Equivalent", "Exact"],
        causes,
    );
    for sel in ["namespaceSelector", "objectSelector"] {
        if let Some(v) = m.get(sel) {
            check_label_selector(v, &format!("{at}.{sel}"), causes);
        }
    }
}

/// A CEL identifier: a letter or `_`, then letters, digits and `_`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name)
}

/// An expression field at `at`: given (`expression is not specified`) and compiling.
fn check_required_expression(expr: &str, at: &str, what: &str, causes: &mut Vec<Cause>) {
    if expr.trim().is_empty() {
        causes.push(Cause::required_because(
            at,
            &format!("{what} is not specified"),
        ));
    } else {
        check_expression(&json!({"expression": expr}), at, causes);
    }
}

impl Strategy for ValidatingAdmissionPolicy {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        default_in(spec, "failurePolicy", json!("Fail"));
        if let Some(m) = spec
            .get_mut("matchConstraints")
            .and_then(Value::as_object_mut)
        {
            default_match(m);
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        match crate::object::path(obj, "spec.matchConstraints").filter(|m| !m.is_null()) {
            None => causes.push(Cause::required("spec.matchConstraints")),
            Some(m) => check_match(m, "spec.matchConstraints", true, &mut causes),
        }
        check_one_of(
            "spec.failurePolicy",
            s(obj, "spec.failurePolicy"),
            &["Fail", "Ignore"],
            &mut causes,
        );
        if let Some(pk) = crate::object::path(obj, "spec.paramKind").filter(|p| !p.is_null()) {
            for key in ["apiVersion", "kind"] {
                if s(pk, key).unwrap_or("").is_empty() {
                    causes.push(Cause::required(&format!("spec.paramKind.{key}")));
                }
            }
        }
        let validations = list(obj, "spec.validations");
        let audits = list(obj, "spec.auditAnnotations");
        if validations.is_empty() && audits.is_empty() {
            for f in ["spec.validations", "spec.auditAnnotations"] {
                causes.push(Cause::required_because(
                    f,
                    "validations or auditAnnotations must contain at least one item",
                ));
            }
        }
        for (i, v) in validations.iter().enumerate() {
            let at = format!("spec.validations[{i}]");
            check_required_expression(
                s(v, "expression").unwrap_or(""),
                &format!("{at}.expression"),
                "expression",
                &mut causes,
            );
            if let Some(m) = s(v, "message").filter(|m| !m.is_empty()) {
                if m.trim().is_empty() {
                    causes.push(Cause::invalid(
                        &format!("{at}.message"),
                        &json!(m),
                        "message must be non-empty if specified",
                    ));
                } else if m.trim().contains(['\n', '\r']) {
                    causes.push(Cause::invalid(
                        &format!("{at}.message"),
                        &json!(m),
                        "message must not contain line breaks",
                    ));
                }
            }
            if let Some(me) = s(v, "messageExpression").filter(|e| !e.is_empty()) {
                if me.trim().is_empty() {
                    causes.push(Cause::invalid(
                        &format!("{at}.messageExpression"),
                        &json!(me),
                        "must be non-empty if specified",
                    ));
                } else {
                    check_expression(
                        &json!({"expression": me}),
                        &format!("{at}.messageExpression"),
                        &mut causes,
                    );
                }
            }
            if let Some(r) = s(v, "reason") {
                if !REASONS.contains(&r) {
                    causes.push(Cause::not_supported(
                        &format!("{at}.reason"),
                        &json!(r),
                        REASONS,
                    ));
                }
            }
        }
        for (i, a) in audits.iter().enumerate() {
            let at = format!("spec.auditAnnotations[{i}]");
            if s(a, "key").unwrap_or("").is_empty() {
                causes.push(Cause::required(&format!("{at}.key")));
            }
            check_required_expression(
                s(a, "valueExpression").unwrap_or(""),
                &format!("{at}.valueExpression"),
                "valueExpression",
                &mut causes,
            );
        }
        // As upstream, variable names need not be unique (a later one overrides).
        for (i, v) in list(obj, "spec.variables").iter().enumerate() {
            let at = format!("spec.variables[{i}]");
            let name = s(v, "name").unwrap_or("");
            if name.trim().is_empty() {
                causes.push(Cause::required_because(
                    &format!("{at}.name"),
                    "name is not specified",
                ));
            } else if !is_identifier(name) {
                causes.push(Cause::invalid(
                    &format!("{at}.name"),
                    &json!(name),
                    "name is not a valid CEL identifier",
                ));
            }
            check_required_expression(
                s(v, "expression").unwrap_or(""),
                &format!("{at}.expression"),
                "expression",
                &mut causes,
            );
        }
        check_match_conditions(
            list(obj, "spec.matchConditions"),
            "spec.matchConditions",
            &mut causes,
        );
        causes
    }

    fn validate_update(&self, def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        self.validate(def, new)
    }
}

impl Strategy for ValidatingAdmissionPolicyBinding {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(m) = obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("matchResources"))
            .and_then(Value::as_object_mut)
        {
            default_match(m);
        }
    }

    fn validate(&self, _def: &ResourceDef, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if s(obj, "spec.policyName").unwrap_or("").is_empty() {
            causes.push(Cause::required("spec.policyName"));
        }
        let actions: Vec<&str> = list(obj, "spec.validationActions")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if actions.is_empty() {
            causes.push(Cause::required_because(
                "spec.validationActions",
                "at least one validation action is required",
            ));
        }
        let mut seen = HashSet::new();
        for (i, a) in actions.iter().enumerate() {
            let at = format!("spec.validationActions[{i}]");
            if !ACTIONS.contains(a) {
                causes.push(Cause::not_supported(&at, &json!(a), ACTIONS));
            } else if !seen.insert(*a) {
                causes.push(Cause::duplicate(&at, &json!(a)));
            }
        }
        if seen.contains("Deny") && seen.contains("Warn") {
            let printed: Vec<String> = actions.iter().map(|a| format!("{a:?}")).collect();
            causes.push(Cause::invalid_printed(
                "spec.validationActions",
                &format!("[]v1.ValidationAction{{{}}}", printed.join(", ")),
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        if let Some(r) = crate::object::path(obj, "spec.paramRef").filter(|r| !r.is_null()) {
            let name = s(r, "name").unwrap_or("");
            let selector = r.get("selector").filter(|v| !v.is_null());
            match (name.is_empty(), selector) {
                (false, Some(_)) => {
                    for f in ["spec.paramRef.name", "spec.paramRef.selector"] {
                        causes.push(Cause::forbidden(
                            f,
                            "name and selector are mutually exclusive",
                        ));
                    }
                }
                (true, None) => causes.push(Cause::required_because(
                    "spec.paramRef",
                    "one of name or selector must be specified",
                )),
                (true, Some(sel)) => {
                    check_label_selector(sel, "spec.paramRef.selector", &mut causes)
                }
                (false, None) => {}
            }
            match s(r, "parameterNotFoundAction") {
                None => causes.push(Cause::required("spec.paramRef.parameterNotFoundAction")),
                Some(a) if !NOT_FOUND_ACTIONS.contains(&a) => causes.push(Cause::not_supported(
                    "spec.paramRef.parameterNotFoundAction",
                    &json!(a),
                    NOT_FOUND_ACTIONS,
                )),
                Some(_) => {}
            }
        }
        if let Some(m) = crate::object::path(obj, "spec.matchResources").filter(|m| !m.is_null()) {
            check_match(m, "spec.matchResources", false, &mut causes);
        }
        causes
    }

    fn validate_update(&self, def: &ResourceDef, _old: &Value, new: &Value) -> Vec<Cause> {
        self.validate(def, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn policies_are_defaulted_and_their_cel_compiled() {
        let def = resource::find(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
        )
        .expect("served");
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}});
        ValidatingAdmissionPolicy.set_defaults(&def, &mut p);
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        assert_eq!(p["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert!(ValidatingAdmissionPolicy.validate(&def, &p).is_empty());
        p["spec"]["validations"][0]["expression"] = json!("object.spec.replicas <=");
        let causes = ValidatingAdmissionPolicy.validate(&def, &p);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.validations[0].expression");
        assert!(
            causes[0].message.contains("compilation failed: "),
            "{causes:?}"
        );
    }

    #[test]
    fn bindings_may_not_both_deny_and_warn() {
        let def = resource::find(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
        )
        .expect("served");
        let b = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p",
            "validationActions": ["Deny", "Warn"], "paramRef": {"name": "x"}}});
        let fields: Vec<String> = ValidatingAdmissionPolicyBinding
            .validate(&def, &b)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.validationActions",
                "spec.paramRef.parameterNotFoundAction"
            ]
        );
    }
}
