//! Kubernetes' CEL authorizer library: the `authorizer` variable asks the API server's authorizer about
//! the requesting user (or `serviceAccount(ns, name)`): `authorizer.group('apps').resource('deployments')
//! .namespace('ns').name('x').check('update').allowed()`, `authorizer.path('/healthz').check('get')`,
//! `authorizer.requestResource.check('delete')`; a Decision answers `allowed()`, `reason()`, `errored()`
//! and `error()`. The authorizer itself is the caller's ([`with_authorizer`]); without one every check
//! errors.

use std::cell::RefCell;
use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, FunctionContext, Value};

use super::typed;

type Result<T> = std::result::Result<T, cel::ExecutionError>;

const CHECK: &str = "kubernetes.authorization.Check";
const DECISION: &str = "kubernetes.authorization.Decision";

/// What one `check(verb)` asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    /// A service account to ask about instead of the requesting user: (namespace, name).
    pub service_account: Option<(String, String)>,
    /// A non-resource path (`path()`), else a resource request.
    pub path: Option<String>,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub verb: String,
}

/// An authorizer's answer: allowed, the reason, or the error it met.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub allowed: bool,
    pub reason: String,
    pub error: Option<String>,
}

/// The authorizer checks run against.
pub type Authorize = Arc<dyn Fn(&Ask) -> Answer + Send + Sync>;

thread_local! {
    static AUTHORIZER: RefCell<Option<Authorize>> = const { RefCell::new(None) };
}

/// Runs `f` (an evaluation on this thread) with `authorize` answering its checks.
pub fn with_authorizer<T>(authorize: Authorize, f: impl FnOnce() -> T) -> T {
    let before = AUTHORIZER.with(|a| a.replace(Some(authorize)));
    let out = f();
    AUTHORIZER.with(|a| *a.borrow_mut() = before);
    out
}

/// The `authorizer` variable; `request` is the request's own resource (`authorizer.requestResource`).
pub fn variable(request: &Ask) -> Value {
    let mut root = check_value(&Ask::default());
    if let Some(f) = typed::fields(&root, CHECK) {
        root = typed::with(f, "requestResource", check_value(request));
    }
    root
}

fn check_value(a: &Ask) -> Value {
    let sa = a
        .service_account
        .as_ref()
        .map(|(ns, n)| format!("{ns}/{n}"))
        .unwrap_or_default();
    typed::make(
        CHECK,
        vec![
            ("serviceAccount", typed::string(sa)),
            ("path", a.path.clone().map_or(Value::Null, typed::string)),
            ("group", typed::string(a.group.as_str())),
            ("resource", typed::string(a.resource.as_str())),
            ("subresource", typed::string(a.subresource.as_str())),
            ("namespace", typed::string(a.namespace.as_str())),
            ("name", typed::string(a.name.as_str())),
        ],
    )
}

fn ask_of(ftx: &FunctionContext, v: &Value) -> Result<Ask> {
    let f = typed::receiver(ftx, v, CHECK)?;
    let sa = typed::text(f, "serviceAccount");
    Ok(Ask {
        service_account: sa
            .split_once('/')
            .map(|(ns, n)| (ns.to_string(), n.to_string())),
        path: match f.get(&cel::objects::Key::String(Arc::new("path".into()))) {
            Some(Value::String(p)) => Some(p.to_string()),
            _ => None,
        },
        group: typed::text(f, "group"),
        resource: typed::text(f, "resource"),
        subresource: typed::text(f, "subresource"),
        namespace: typed::text(f, "namespace"),
        name: typed::text(f, "name"),
        verb: String::new(),
    })
}

fn setter(ftx: &FunctionContext, this: &Value, key: &str, v: Arc<String>) -> Result<Value> {
    let f = typed::receiver(ftx, this, CHECK)?;
    Ok(typed::with(f, key, Value::String(v)))
}

fn group(ftx: &FunctionContext, This(c): This<Value>, g: Arc<String>) -> Result<Value> {
    setter(ftx, &c, "group", g)
}

fn resource(ftx: &FunctionContext, This(c): This<Value>, r: Arc<String>) -> Result<Value> {
    setter(ftx, &c, "resource", r)
}

fn subresource(ftx: &FunctionContext, This(c): This<Value>, s: Arc<String>) -> Result<Value> {
    setter(ftx, &c, "subresource", s)
}

fn namespace(ftx: &FunctionContext, This(c): This<Value>, n: Arc<String>) -> Result<Value> {
    setter(ftx, &c, "namespace", n)
}

fn name(ftx: &FunctionContext, This(c): This<Value>, n: Arc<String>) -> Result<Value> {
    setter(ftx, &c, "name", n)
}

fn path(ftx: &FunctionContext, This(c): This<Value>, p: Arc<String>) -> Result<Value> {
    setter(ftx, &c, "path", p)
}

fn service_account(
    ftx: &FunctionContext,
    This(c): This<Value>,
    ns: Arc<String>,
    n: Arc<String>,
) -> Result<Value> {
    setter(ftx, &c, "serviceAccount", Arc::new(format!("{ns}/{n}")))
}

fn check(ftx: &FunctionContext, This(c): This<Value>, verb: Arc<String>) -> Result<Value> {
    let mut ask = ask_of(ftx, &c)?;
    ask.verb = verb.to_string();
    let answer = AUTHORIZER.with(|a| a.borrow().as_ref().map(|f| f(&ask)));
    let answer = answer.unwrap_or_else(|| Answer {
        allowed: false,
        reason: String::new(),
        error: Some("no authorizer is available here".into()),
    });
    Ok(typed::make(
        DECISION,
        vec![
            ("allowed", Value::Bool(answer.allowed)),
            ("reason", typed::string(answer.reason)),
            ("error", answer.error.map_or(Value::Null, typed::string)),
        ],
    ))
}

fn decision_field(ftx: &FunctionContext, d: &Value, key: &str) -> Result<Value> {
    let f = typed::receiver(ftx, d, DECISION)?;
    Ok(f.get(&cel::objects::Key::String(Arc::new(key.into())))
        .cloned()
        .unwrap_or(Value::Null))
}

fn allowed(ftx: &FunctionContext, This(d): This<Value>) -> Result<Value> {
    decision_field(ftx, &d, "allowed")
}

fn reason(ftx: &FunctionContext, This(d): This<Value>) -> Result<Value> {
    decision_field(ftx, &d, "reason")
}

fn errored(ftx: &FunctionContext, This(d): This<Value>) -> Result<bool> {
    Ok(!matches!(decision_field(ftx, &d, "error")?, Value::Null))
}

fn error(ftx: &FunctionContext, This(d): This<Value>) -> Result<Value> {
    Ok(match decision_field(ftx, &d, "error")? {
        Value::Null => typed::string(""),
        e => e,
    })
}

/// Adds the library's functions to `ctx` (the variable is the caller's to add).
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function("group", group);
    ctx.add_function("resource", resource);
    ctx.add_function("subresource", subresource);
    ctx.add_function("namespace", namespace);
    ctx.add_function("name", name);
    ctx.add_function("path", path);
    ctx.add_function("serviceAccount", service_account);
    ctx.add_function("check", check);
    ctx.add_function("allowed", allowed);
    ctx.add_function("reason", reason);
    ctx.add_function("errored", errored);
    ctx.add_function("error", error);
}
