//! The ValidatingAdmissionPolicy plugin: every ValidatingAdmissionPolicyBinding whose policy matches a
//! write (the policy's `matchConstraints`, then the binding's `matchResources`) evaluates the policy's
//! CEL: match conditions, variables, then each validation, with `object`, `oldObject`, `request`,
//! `params` (the binding's parameter objects of the policy's `paramKind`), `namespaceObject` and
//! `variables`. A failed validation is answered by the binding's actions: `Deny` refuses the write with
//! the validation's reason, `Warn` adds a warning, `Audit` records it in the audit event, next to the
//! policy's `auditAnnotations`. An expression that fails to evaluate, or parameters that cannot be
//! read, follow the policy's `failurePolicy`. Texts are upstream's.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, RuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use keel_kube_registry::cel::{self, Value as Cel};
use serde_json::{json, Value};
use tracing::debug;

use super::cel_env::{request_value, run, sizes, with_authorizer};
use super::request::{Operation, Request};
use super::webhook::matching;
use crate::crd::registry::Registry;
use crate::resource::ResourceDef;
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage};

const POLICIES: &str = "/registry/validatingadmissionpolicies/";
const BINDINGS: &str = "/registry/validatingadmissionpolicybindings/";

fn objects<T: serde::de::DeserializeOwned>(storage: &Storage, prefix: &str) -> Vec<T> {
    match storage.range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0, 0) {
        Ok(page) => page
            .items
            .into_iter()
            .filter_map(|(_, st)| serde_json::from_value(st.object).ok())
            .collect(),
        Err(e) => {
            debug!(error = %e, "admission policies unreadable");
            Vec::new()
        }
    }
}

/// What a policy and binding pair decided.
enum Verdict {
    /// Nothing to say.
    Pass,
    /// A validation failed: its message and reason.
    Failed { message: String, reason: String },
}

fn named_rule_covers(rule: &NamedRuleWithOperations, req: &Request<'_>, def: &ResourceDef) -> bool {
    let plain = RuleWithOperations {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        operations: rule.operations.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.clone(),
    };
    let named = rule
        .resource_names
        .as_ref()
        .is_none_or(|n| n.is_empty() || n.iter().any(|n| n == req.name));
    named && matching::rule_matches(&plain, req, def)
}

/// Whether `m` selects the request; `rules_required`: a binding's `matchResources` without rules takes
/// every resource its policy does.
fn selects(
    m: &MatchResources,
    req: &Request<'_>,
    obj: Option<&Value>,
    ns_labels: Option<&BTreeMap<String, String>>,
    rules_required: bool,
) -> Option<bool> {
    if !matching::namespace_selector_matches(&m.namespace_selector, ns_labels) {
        return Some(false);
    }
    if !matching::object_selector_matches(&m.object_selector, obj, req.old) {
        return Some(false);
    }
    let rules = m.resource_rules.as_deref().unwrap_or(&[]);
    let excluded = m.exclude_resource_rules.as_deref().unwrap_or(&[]);
    if excluded
        .iter()
        .any(|r| named_rule_covers(r, req, req.requested))
    {
        return Some(false);
    }
    if rules.is_empty() && !rules_required {
        return Some(true);
    }
    let matched = matching::matched_by(req, m.match_policy.as_deref(), |r, def| {
        rules.iter().any(|rule| named_rule_covers(rule, r, def))
    });
    Some(matched.is_some())
}

/// The HTTP code of a validation's reason.
fn code_of(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Runs the policies bound to what `req` writes; returns their warnings, or the first refusal.
pub async fn validate(
    storage: &Storage,
    registry: &Registry,
    req: &Request<'_>,
    obj: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    if matching::exempt(req.stored) {
        return Ok(Vec::new());
    }
    let bindings: Vec<ValidatingAdmissionPolicyBinding> = objects(storage, BINDINGS);
    if bindings.is_empty() {
        return Ok(Vec::new());
    }
    let policies: BTreeMap<String, ValidatingAdmissionPolicy> =
        objects::<ValidatingAdmissionPolicy>(storage, POLICIES)
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
    let namespace = namespace_object(storage, req).await?;
    let ns_labels: Option<BTreeMap<String, String>> = namespace
        .as_ref()
        .map(|n| matching::labels_of(Some(n)).unwrap_or_default());
    let mut warnings = Vec::new();
    // Failed validations of bindings with the Audit action, for the audit event.
    let mut audit_failures: Vec<Value> = Vec::new();
    for binding in &bindings {
        let bname = binding.metadata.name.clone().unwrap_or_default();
        let Some(spec) = &binding.spec else { continue };
        let pname = spec.policy_name.clone().unwrap_or_default();
        let Some(policy) = policies.get(&pname) else {
            continue;
        };
        let Some(pspec) = &policy.spec else { continue };
        let Some(constraints) = &pspec.match_constraints else {
            continue;
        };
        if selects(constraints, req, obj, ns_labels.as_ref(), true) != Some(true) {
            continue;
        }
        if let Some(m) = &spec.match_resources {
            if selects(m, req, obj, ns_labels.as_ref(), false) != Some(true) {
                continue;
            }
        }
        let fail_open = pspec.failure_policy.as_deref() == Some("Ignore");
        let actions: Vec<&str> = spec
            .validation_actions
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let refuse = |message: String, reason: &str| {
            let msg = format!(
                "ValidatingAdmissionPolicy '{pname}' with binding '{bname}' denied request: {message}"
            );
            denial(req, obj, msg, reason)
        };
        let params = match params(storage, registry, policy, binding, req).await {
            Ok(p) => p,
            Err(why) if fail_open => {
                debug!(policy = %pname, binding = %bname, error = %why, "policy skipped (failurePolicy Ignore)");
                continue;
            }
            Err(why) => {
                return Err(refuse(
                    format!("failed to configure binding: {why}"),
                    "Invalid",
                ))
            }
        };
        let matched = req.requested;
        let audit_failure = |failures: &mut Vec<Value>, index: usize, message: &str| {
            if actions.contains(&"Audit") {
                failures.push(
                    json!({"message": message, "policy": pname, "binding": bname,
                    "expressionIndex": index, "validationActions": actions}),
                );
            }
        };
        for param in params {
            let (verdicts, notes) =
                evaluate(pspec, req, matched, obj, param.as_ref(), namespace.as_ref());
            for (key, value) in notes {
                match value {
                    Ok(Some(v)) => crate::audit::annotate(format!("{pname}/{key}"), v),
                    Ok(None) => {}
                    Err(why) if fail_open => {
                        debug!(policy = %pname, binding = %bname, error = %why, "audit annotation error ignored (failurePolicy Ignore)");
                    }
                    Err(why) => {
                        publish_failures(&audit_failures);
                        return Err(refuse(why, "Invalid"));
                    }
                }
            }
            for (index, v) in verdicts.into_iter().enumerate() {
                match v {
                    Ok(Verdict::Pass) => {}
                    Ok(Verdict::Failed { message, reason }) => {
                        audit_failure(&mut audit_failures, index, &message);
                        if actions.contains(&"Deny") {
                            publish_failures(&audit_failures);
                            return Err(refuse(message, &reason));
                        }
                        if actions.contains(&"Warn") {
                            warnings.push(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {message}"
                            ));
                        }
                    }
                    Err(why) if fail_open => {
                        debug!(policy = %pname, binding = %bname, error = %why, "evaluation error ignored (failurePolicy Ignore)");
                    }
                    Err(why) => {
                        audit_failure(&mut audit_failures, index, &why);
                        if actions.contains(&"Deny") {
                            publish_failures(&audit_failures);
                            return Err(refuse(why, "Invalid"));
                        }
                        if actions.contains(&"Warn") {
                            warnings.push(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {why}"
                            ));
                        }
                    }
                }
            }
        }
    }
    publish_failures(&audit_failures);
    Ok(warnings)
}

/// The Audit action's record: every failed validation of the request in one annotation.
fn publish_failures(failures: &[Value]) {
    if !failures.is_empty() {
        crate::audit::annotate(
            "validation.policy.admission.k8s.io/validation_failure".into(),
            Value::Array(failures.to_vec()).to_string(),
        );
    }
}

/// upstream's refusal: a Forbidden-form message (`<resource> "<name>" is forbidden: …`) whose code and
/// reason are the validation's, with the message alone as its one cause.
fn denial(req: &Request<'_>, obj: Option<&Value>, msg: String, reason: &str) -> ApiError {
    let def = req.requested;
    let resource = if def.group.is_empty() {
        def.plural.to_string()
    } else {
        format!("{}.{}", def.plural, def.group)
    };
    let meta = |k: &str| {
        obj.or(req.old)
            .and_then(|o| o.pointer(&format!("/metadata/{k}")))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let name = [req.name.to_string(), meta("name"), meta("generateName")]
        .into_iter()
        .find(|n| !n.is_empty())
        .unwrap_or_else(|| "Unknown".into());
    let mut details = json!({"kind": def.plural, "name": name, "causes": [{"message": msg}]});
    if !def.group.is_empty() {
        details["group"] = json!(def.group);
    }
    ApiError::Refused {
        code: code_of(reason),
        reason: reason.to_string(),
        message: format!("{resource} {name:?} is forbidden: {msg}"),
        details: Some(details),
    }
}

/// The namespace object of a namespaced request (null for cluster-scoped ones and for Namespaces
/// themselves); a Namespace's labels are its own.
async fn namespace_object(storage: &Storage, req: &Request<'_>) -> Result<Option<Value>, ApiError> {
    if req.stored.group.is_empty() && req.stored.plural == "namespaces" {
        return Ok(None);
    }
    let Some(ns) = req.namespace.filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    Ok(storage
        .get(&format!("/registry/namespaces/{ns}"), false)
        .await?
        .map(|st| st.object))
}

/// The parameter objects a binding gives its policy: none (`params` is null) without a paramKind or a
/// paramRef; the named object; or every object the selector picks. Missing parameters are an error
/// under `parameterNotFoundAction: Deny` and skip the binding under `Allow` (an empty list).
async fn params(
    storage: &Storage,
    registry: &Registry,
    policy: &ValidatingAdmissionPolicy,
    binding: &ValidatingAdmissionPolicyBinding,
    req: &Request<'_>,
) -> Result<Vec<Option<Value>>, String> {
    let pspec = policy.spec.as_ref();
    let Some(kind) = pspec.and_then(|s| s.param_kind.as_ref()) else {
        return Ok(vec![None]);
    };
    let Some(pref) = binding.spec.as_ref().and_then(|s| s.param_ref.as_ref()) else {
        return Ok(vec![None]);
    };
    let api_version = kind.api_version.clone().unwrap_or_default();
    let kind_name = kind.kind.clone().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let Some(def) = registry
        .of_group_version(group, version)
        .into_iter()
        .find(|d| d.kind == kind_name)
    else {
        return Err(format!("paramKind kind `{kind_name}` not known"));
    };
    let ns = match (def.namespaced, pref.namespace.as_deref().filter(|n| !n.is_empty())) {
        (false, _) => None,
        (true, Some(n)) => Some(n.to_string()),
        (true, None) => match req.namespace.filter(|n| !n.is_empty()) {
            Some(n) => Some(n.to_string()),
            None => {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                        .into(),
                )
            }
        },
    };
    let found: Vec<Value> = match pref.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => storage
            .get(&def.key(ns.as_deref(), name), false)
            .await
            .map_err(|e| e.to_string())?
            .map(|st| vec![st.object])
            .unwrap_or_default(),
        None => {
            let prefix = match &ns {
                Some(n) => def.ns_prefix(n),
                None => def.prefix(),
            };
            let selector = pref.selector.clone().unwrap_or_default();
            objects::<Value>(storage, &prefix)
                .into_iter()
                .filter(|o| {
                    keel_client_kit::labels::matches(
                        &selector,
                        matching::labels_of(Some(o)).as_ref(),
                    )
                })
                .collect()
        }
    };
    if found.is_empty() {
        return match pref.parameter_not_found_action.as_deref() {
            Some("Allow") => Ok(Vec::new()),
            _ => {
                Err("no params found for policy binding with `Deny` parameterNotFoundAction".into())
            }
        };
    }
    Ok(found.into_iter().map(Some).collect())
}

/// Evaluates one policy for one parameter: match conditions, variables, then each validation.
fn evaluate(
    spec: &k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicySpec,
    req: &Request<'_>,
    def: &ResourceDef,
    obj: Option<&Value>,
    param: Option<&Value>,
    namespace: Option<&Value>,
) -> (Vec<Result<Verdict, String>>, AuditNotes) {
    let mut ctx = cel::context();
    let object = match req.operation {
        Operation::Delete => Value::Null,
        _ => obj.cloned().unwrap_or(Value::Null),
    };
    ctx.add_variable_from_value("object", cel::value(&object));
    ctx.add_variable_from_value("oldObject", cel::value(req.old.unwrap_or(&Value::Null)));
    ctx.add_variable_from_value("request", cel::value(&request_value(req, def)));
    ctx.add_variable_from_value("params", cel::value(param.unwrap_or(&Value::Null)));
    ctx.add_variable_from_value(
        "namespaceObject",
        cel::value(namespace.unwrap_or(&Value::Null)),
    );
    let sizes = sizes(&[Some(&object), req.old, param, namespace]);
    with_authorizer(&mut ctx, req, |ctx| {
        // Variables may use the ones before them; one that fails is an error where it is used.
        let mut vars: std::collections::HashMap<cel::objects::Key, Cel> =
            std::collections::HashMap::new();
        ctx.add_variable_from_value(
            "variables",
            Cel::Map(cel::objects::Map {
                map: Arc::new(vars.clone()),
            }),
        );
        for v in spec.variables.iter().flatten() {
            if let Ok(value) = run(&v.expression, ctx, sizes) {
                vars.insert(cel::objects::Key::String(Arc::new(v.name.clone())), value);
                ctx.add_variable_from_value(
                    "variables",
                    Cel::Map(cel::objects::Map {
                        map: Arc::new(vars.clone()),
                    }),
                );
            }
        }
        for c in spec.match_conditions.iter().flatten() {
            match run(&c.expression, ctx, sizes) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => return (vec![Ok(Verdict::Pass)], Vec::new()),
                Ok(_) => {
                    return (
                        vec![Err(format!(
                            "matchCondition '{}' must evaluate to bool",
                            c.name
                        ))],
                        Vec::new(),
                    )
                }
                Err(e) => {
                    return (
                        vec![Err(format!(
                            "matchCondition '{}' resulted in error: {e}",
                            c.name
                        ))],
                        Vec::new(),
                    )
                }
            }
        }
        let mut out = Vec::new();
        for v in spec.validations.iter().flatten() {
            let verdict = match run(&v.expression, ctx, sizes) {
                Ok(Cel::Bool(true)) => Ok(Verdict::Pass),
                Ok(Cel::Bool(false)) => Ok(Verdict::Failed {
                    message: message_of(v, ctx, sizes),
                    reason: v.reason.clone().unwrap_or_else(|| "Invalid".into()),
                }),
                Ok(_) => Err(format!(
                    "validation failed due to: expression '{}' must evaluate to bool",
                    v.expression
                )),
                Err(e) => Err(format!(
                    "expression '{}' resulted in error: {e}",
                    v.expression
                )),
            };
            out.push(verdict);
        }
        // Audit annotations: a string is published, null leaves the key out.
        let notes = spec
            .audit_annotations
            .iter()
            .flatten()
            .map(|a| {
                let value = match run(&a.value_expression, ctx, sizes) {
                    Ok(Cel::Null) => Ok(None),
                    Ok(v) => cel::text(&v).map(|t| Some(t.to_string())).ok_or_else(|| {
                        format!(
                            "valueExpression '{}' resulted in unsupported return type: {}; must be a string or null",
                            a.value_expression,
                            v.type_of()
                        )
                    }),
                    Err(e) => Err(format!(
                        "valueExpression '{}' resulted in error: {e}",
                        a.value_expression
                    )),
                };
                (a.key.clone(), value)
            })
            .collect();
        (out, notes)
    })
}

/// Each audit annotation's key and value (None: the expression gave null).
type AuditNotes = Vec<(String, Result<Option<String>, String>)>;

/// A failed validation's message: its messageExpression's string when that gives a non-empty one on one
/// line, else its message, else `failed expression: <expression>`.
fn message_of(
    v: &k8s_openapi::api::admissionregistration::v1::Validation,
    ctx: &cel::Context<'_>,
    sizes: (u64, u64),
) -> String {
    if let Some(me) = v
        .message_expression
        .as_deref()
        .filter(|m| !m.trim().is_empty())
    {
        if let Ok(value) = run(me, ctx, sizes) {
            if let Some(text) = cel::text(&value) {
                let text = text.trim().to_string();
                if !text.is_empty() && !text.contains('\n') {
                    return text;
                }
            }
        }
    }
    match v.message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => format!("failed expression: {}", v.expression),
    }
}
