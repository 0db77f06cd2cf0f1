//! `status.typeChecking` of ValidatingAdmissionPolicies, kept by the Raft leader as upstream's status
//! controller does: for a policy whose `generation` is past its `status.observedGeneration`, each
//! validation's `expression` and `messageExpression` is checked against the kinds its resource rules name
//! (wildcards skipped, at most 10 kinds): a field of `object` or `oldObject` the kind's schema does not
//! have, and a variable CEL does not declare, are warnings, one line per kind. Warnings never refuse
//! anything; they tell the policy's author what will fail when it is evaluated.
//!
//! keel's check is a static walk of the expression (field selections rooted at `object`/`oldObject`,
//! identifiers), not CEL's full type checker: type mismatches (`'_==_' applied to (string, int)`) are not
//! found, and positions are not printed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use keel_kube_registry::cel;
use keel_kube_registry::cel::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::{json, Value};
use tracing::debug;

use crate::crd::registry::Registry;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::ApiError;
use crate::storage::{prefix_end, Storage, WriteOutcome};

const POLICIES: &str = "/registry/validatingadmissionpolicies/";
/// How often the leader looks for policies to check.
const PERIOD: Duration = Duration::from_secs(1);
/// At most this many kinds are checked per policy (upstream's cap).
const MAX_KINDS: usize = 10;

/// What an expression's walk found: field paths read from `object`/`oldObject`, and free identifiers.
#[derive(Default)]
struct Reads {
    paths: Vec<Vec<String>>,
    idents: BTreeSet<String>,
}

/// The selection chain `root.a.b` of `e`, if it is one.
fn chain(e: &IdedExpr) -> Option<(String, Vec<String>)> {
    match &e.expr {
        Expr::Ident(name) => Some((name.clone(), Vec::new())),
        Expr::Select(s) => {
            let (root, mut path) = chain(&s.operand)?;
            path.push(s.field.clone());
            Some((root, path))
        }
        _ => None,
    }
}

fn walk(e: &IdedExpr, bound: &mut Vec<String>, out: &mut Reads) {
    match &e.expr {
        Expr::Ident(name) => {
            if !bound.contains(name) {
                out.idents.insert(name.clone());
            }
        }
        Expr::Select(s) => {
            if let Some((root, path)) = chain(e) {
                if (root == "object" || root == "oldObject") && !bound.contains(&root) {
                    out.paths.push(path);
                }
            }
            walk(&s.operand, bound, out);
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                walk(t, bound, out);
            }
            for a in &c.args {
                walk(a, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, out);
            walk(&c.accu_init, bound, out);
            let n = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, out);
            walk(&c.loop_step, bound, out);
            walk(&c.result, bound, out);
            bound.truncate(n);
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, bound, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    walk(&me.key, bound, out);
                    walk(&me.value, bound, out);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    walk(&f.value, bound, out);
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// The first field of `path` the kind's schema does not have, if any (maps, lists and fields that keep
/// unknown content end the check: their keys are data).
fn missing_field(def: &ResourceDef, path: &[String]) -> Option<String> {
    use keel_kube_model::protobuf::schema::{message_for, messages, FieldType};
    if let Some(c) = &def.custom {
        let mut schema = c.schema.clone()?;
        for seg in path {
            if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
                return None;
            }
            if matches!(seg.as_str(), "metadata" | "apiVersion" | "kind")
                && schema.properties.is_none()
            {
                return None;
            }
            let props = schema.properties.as_ref()?;
            match props.get(seg) {
                Some(next) => schema = next.clone(),
                None if matches!(seg.as_str(), "metadata" | "apiVersion" | "kind") => return None,
                None => return Some(seg.clone()),
            }
        }
        return None;
    }
    let mut msg = message_for(&def.api_version(), &def.kind)?;
    for seg in path {
        let m = messages().get(&msg)?;
        let Some(f) = m.by_json(seg) else {
            return Some(seg.clone());
        };
        match (&f.ty, f.repeated) {
            (FieldType::Message(next), false)
                if !keel_kube_model::protobuf::schema::is_wrapper(next) =>
            {
                msg = next.clone();
            }
            _ => return None,
        }
    }
    None
}

/// `group/version, Kind=Kind`, as Go prints a GroupVersionKind.
fn gvk(def: &ResourceDef) -> String {
    format!("{}, Kind={}", def.api_version(), def.kind)
}

/// The kinds a policy's resource rules name, without wildcards, sorted, at most [`MAX_KINDS`].
fn kinds(registry: &Registry, policy: &Value) -> Vec<Arc<ResourceDef>> {
    let rules = object::path(policy, "spec.matchConstraints.resourceRules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let list = |r: &Value, k: &str| -> Vec<String> {
        r.get(k)
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: Vec<Arc<ResourceDef>> = Vec::new();
    for r in &rules {
        for g in list(r, "apiGroups").iter().filter(|g| *g != "*") {
            for v in list(r, "apiVersions").iter().filter(|v| *v != "*") {
                for res in list(r, "resources")
                    .iter()
                    .filter(|x| *x != "*" && !x.contains('/'))
                {
                    if let Some(d) = registry.find(g, v, res) {
                        if !out
                            .iter()
                            .any(|o| o.api_version() == d.api_version() && o.kind == d.kind)
                        {
                            out.push(d);
                        }
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| {
        (a.group.as_ref(), a.version.as_ref(), a.kind.as_ref()).cmp(&(
            b.group.as_ref(),
            b.version.as_ref(),
            b.kind.as_ref(),
        ))
    });
    out.truncate(MAX_KINDS);
    out
}

/// The warning for one expression, if any: a line per kind it has a problem with.
fn check(expr: &str, kinds: &[Arc<ResourceDef>], has_params: bool) -> Option<String> {
    let program = cel::compiled(expr).ok()?;
    let mut reads = Reads::default();
    walk(program.expression(), &mut Vec::new(), &mut reads);
    let mut declared = vec![
        "object",
        "oldObject",
        "request",
        "namespaceObject",
        "variables",
        "authorizer",
        // The receivers of library functions (`ip.isCanonical`, `sets.contains`).
        "ip",
        "sets",
    ];
    if has_params {
        declared.push("params");
    }
    let undeclared: Vec<&String> = reads
        .idents
        .iter()
        .filter(|i| !declared.contains(&i.as_str()))
        .collect();
    let mut lines = String::new();
    for def in kinds {
        let mut problems: Vec<String> = undeclared
            .iter()
            .map(|i| format!("undeclared reference to '{i}'"))
            .collect();
        for p in &reads.paths {
            if let Some(f) = missing_field(def, p) {
                let msg = format!("undefined field '{f}'");
                if !problems.contains(&msg) {
                    problems.push(msg);
                }
            }
        }
        for p in problems {
            lines.push_str(&format!("{}: ERROR: <input>: {p}\n", gvk(def)));
        }
    }
    (!lines.is_empty()).then_some(lines)
}

/// The `typeChecking` status of a policy.
pub fn type_checking(registry: &Registry, policy: &Value) -> Value {
    let kinds = kinds(registry, policy);
    let has_params = object::path(policy, "spec.paramKind").is_some_and(|p| !p.is_null());
    let mut warnings = Vec::new();
    let validations = object::path(policy, "spec.validations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, v) in validations.iter().enumerate() {
        for field in ["expression", "messageExpression"] {
            let Some(expr) = v
                .get(field)
                .and_then(Value::as_str)
                .filter(|e| !e.is_empty())
            else {
                continue;
            };
            if let Some(w) = check(expr, &kinds, has_params) {
                warnings.push(
                    json!({"fieldRef": format!("spec.validations[{i}].{field}"), "warning": w}),
                );
            }
        }
    }
    json!({"expressionWarnings": warnings})
}

/// One pass: every policy not yet checked at its generation gets its status.
async fn reconcile(storage: &Storage, registry: &Registry) -> Result<(), ApiError> {
    let page = storage.range(POLICIES.as_bytes(), &prefix_end(POLICIES.as_bytes()), 0, 0)?;
    for (key, st) in page.items {
        let generation = object::path(&st.object, "metadata.generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let observed = object::path(&st.object, "status.observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if generation <= observed {
            continue;
        }
        let mut updated = st.object.clone();
        let mut status = updated.get("status").cloned().unwrap_or_else(|| json!({}));
        status["observedGeneration"] = json!(generation);
        status["typeChecking"] = type_checking(registry, &st.object);
        updated["status"] = status;
        let key = String::from_utf8_lossy(&key).to_string();
        match storage.put_if(&key, &updated, st.mod_revision).await? {
            WriteOutcome::Done(_) => {
                debug!(policy = %object::name(&st.object), "type checking written")
            }
            // Changed meanwhile: the next pass checks the new generation.
            WriteOutcome::Lost(_) => {}
        }
    }
    Ok(())
}

/// Runs the checks while this member leads.
pub(crate) async fn run(
    storage: Storage,
    registry: Arc<Registry>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let wake = Arc::new(tokio::sync::Notify::new());
    let st = &storage;
    let reg = &registry;
    crate::leader::while_leading_woken(st, "policy type checking", PERIOD, stop, &wake, || {
        reconcile(st, reg)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_variables_are_warned_per_kind() {
        let registry = Registry::default();
        let policy = json!({"spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["deployments", "*"]}]},
            "validations": [
                {"expression": "object.spec.replicaz <= 5"},
                {"expression": "object.spec.replicas <= 5 && object.metadata.labels.all(k, k != 'x')",
                 "messageExpression": "'too many: ' + string(objekt.spec.replicas)"}]}});
        let tc = type_checking(&registry, &policy);
        let w = tc["expressionWarnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(w.len(), 2, "{tc}");
        assert_eq!(w[0]["fieldRef"], "spec.validations[0].expression");
        assert_eq!(
            w[0]["warning"],
            "apps/v1, Kind=Deployment: ERROR: <input>: undefined field 'replicaz'\n"
        );
        assert_eq!(w[1]["fieldRef"], "spec.validations[1].messageExpression");
        assert!(w[1]["warning"]
            .as_str()
            .unwrap_or("")
            .contains("undeclared reference to 'objekt'"));
    }
}
