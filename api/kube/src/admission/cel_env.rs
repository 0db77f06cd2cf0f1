//! The CEL environment of admission: the `request` variable as upstream builds it, cached compilation and
//! evaluation, and webhooks' match conditions.

use keel_kube_registry::cel::{self, Value as Cel};
use serde_json::{json, Value};

use super::request::Request;
use crate::resource::ResourceDef;

/// The request as CEL's `request` variable sees it.
pub(crate) fn request_value(req: &Request<'_>, def: &ResourceDef) -> Value {
    json!({
        "kind": {"group": def.group, "version": def.version, "kind": def.kind},
        "resource": {"group": def.group, "version": def.version, "resource": def.plural},
        "requestKind": {"group": req.requested.group, "version": req.requested.version, "kind": req.requested.kind},
        "requestResource": {"group": req.requested.group, "version": req.requested.version, "resource": req.requested.plural},
        "subResource": req.subresource.unwrap_or(""),
        "name": req.name,
        "namespace": req.namespace.unwrap_or(""),
        "operation": req.operation.as_str(),
        "userInfo": {"username": req.identity.user, "groups": req.identity.groups},
        "dryRun": req.dry_run,
    })
}

/// A webhook's match conditions: whether all hold (upstream's rule: any false one skips the webhook),
/// or why one could not be evaluated.
pub fn match_conditions(
    conditions: &[k8s_openapi::api::admissionregistration::v1::MatchCondition],
    req: &Request<'_>,
    def: &ResourceDef,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, String> {
    let mut ctx = cel::context();
    ctx.add_variable_from_value("object", cel::value(obj.unwrap_or(&Value::Null)));
    ctx.add_variable_from_value("oldObject", cel::value(old.unwrap_or(&Value::Null)));
    ctx.add_variable_from_value("request", cel::value(&request_value(req, def)));
    let sizes = sizes(&[obj, old]);
    let mut errors = Vec::new();
    for c in conditions {
        match run(&c.expression, &ctx, sizes) {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => return Ok(false),
            Ok(_) => errors.push(format!("matchCondition '{}' must evaluate to bool", c.name)),
            Err(e) => errors.push(format!(
                "matchCondition '{}' resulted in error: {e}",
                c.name
            )),
        }
    }
    match errors.len() {
        0 => Ok(true),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// The largest collection and longest string among an evaluation's inputs.
pub(crate) fn sizes(inputs: &[Option<&Value>]) -> (u64, u64) {
    inputs
        .iter()
        .flatten()
        .map(|v| cel::input_sizes(v))
        .fold((0, 0), |(c, t), (c2, t2)| (c.max(c2), t.max(t2)))
}

/// Evaluates `expr` (compiled once per process) in `ctx`, unless it could take more steps on inputs of
/// `sizes` than the per-expression limit (so no expression can hold a request, or a core, for long).
pub(crate) fn run(expr: &str, ctx: &cel::Context<'_>, sizes: (u64, u64)) -> Result<Cel, String> {
    let program = cel::compiled(expr)?;
    let bound = cel::cost_bound(&program, sizes.0, sizes.1);
    if bound > cel::PER_CALL_LIMIT {
        return Err(format!(
            "operation cancelled: cost limit exceeded: up to {bound} steps on these inputs, more than the limit of {}",
            cel::PER_CALL_LIMIT
        ));
    }
    cel::eval(&program, ctx)
}
