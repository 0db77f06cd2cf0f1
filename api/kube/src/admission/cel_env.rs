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

/// Adds the `authorizer` variable (its `requestResource` is the request's) and runs `f` with its checks
/// answered by the API server's authorizer for the requesting user, or the service account a check names.
pub(crate) fn with_authorizer<'c, T>(
    ctx: &mut cel::Context<'c>,
    req: &Request<'_>,
    f: impl FnOnce(&mut cel::Context<'c>) -> T,
) -> T {
    use cel::authz::{Answer, Ask};
    let own = Ask {
        group: req.requested.group.to_string(),
        resource: req.requested.plural.to_string(),
        subresource: req.subresource.unwrap_or("").to_string(),
        namespace: req.namespace.unwrap_or("").to_string(),
        name: req.name.to_string(),
        ..Ask::default()
    };
    ctx.add_variable_from_value("authorizer", cel::authz::variable(&own));
    let Some(authz) = req.authz.cloned() else {
        return f(ctx);
    };
    let user = req.identity.clone();
    let answer: cel::authz::Authorize = std::sync::Arc::new(move |a: &Ask| {
        let who = match &a.service_account {
            Some((ns, name)) => crate::authn::Identity {
                user: format!("system:serviceaccount:{ns}:{name}"),
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".into(),
                ],
            },
            None => user.clone(),
        };
        let attrs = match &a.path {
            Some(path) => crate::authz::attributes::Attributes {
                user: who,
                verb: a.verb.clone(),
                resource: None,
                path: path.clone(),
            },
            None => crate::authz::attributes::Attributes::resource(
                &who,
                &a.verb,
                crate::authz::attributes::ResourceAttributes {
                    group: a.group.clone(),
                    version: "*".into(),
                    resource: a.resource.clone(),
                    subresource: (!a.subresource.is_empty()).then(|| a.subresource.clone()),
                    namespace: a.namespace.clone(),
                    name: (!a.name.is_empty()).then(|| a.name.clone()),
                },
            ),
        };
        let v = authz.authorize(&attrs);
        Answer {
            allowed: v.allowed,
            reason: v.reason,
            error: None,
        }
    });
    cel::authz::with_authorizer(answer, || f(ctx))
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
    with_authorizer(&mut ctx, req, |ctx| conditions_hold(conditions, ctx, sizes))
}

fn conditions_hold(
    conditions: &[k8s_openapi::api::admissionregistration::v1::MatchCondition],
    ctx: &cel::Context<'_>,
    sizes: (u64, u64),
) -> Result<bool, String> {
    let mut errors = Vec::new();
    for c in conditions {
        match run(&c.expression, ctx, sizes) {
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
