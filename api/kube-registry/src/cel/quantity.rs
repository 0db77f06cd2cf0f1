//! Kubernetes' CEL quantity library: `quantity("1.5Gi")`, `isQuantity(s)`, and on a Quantity `sign()`,
//! `isInteger()`, `asInteger()`, `asApproximateFloat()`, `add(q|int)`, `sub(q|int)`,
//! `isGreaterThan(q)`, `isLessThan(q)` and `compareTo(q)`. Values are exact (client-kit's Quantity).

use std::cmp::Ordering;

use cel::extractors::This;
use cel::{Context, FunctionContext, Value};
use keel_client_kit::quantity::Quantity;

use super::typed;

type Result<T> = std::result::Result<T, cel::ExecutionError>;

const KIND: &str = "kubernetes.Quantity";

fn wrap(q: Quantity) -> Value {
    typed::make(KIND, vec![("value", typed::string(q.to_string()))])
}

fn unwrap(ftx: &FunctionContext, v: &Value) -> Result<Quantity> {
    let f = typed::receiver(ftx, v, KIND)?;
    Quantity::parse(&typed::text(f, "value")).ok_or_else(|| ftx.error("invalid quantity"))
}

fn quantity(ftx: &FunctionContext, s: std::sync::Arc<String>) -> Result<Value> {
    Quantity::parse(&s)
        .map(wrap)
        .ok_or_else(|| ftx.error(format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {s:?}")))
}

fn is_quantity(s: std::sync::Arc<String>) -> bool {
    Quantity::parse(&s).is_some()
}

fn sign(ftx: &FunctionContext, This(q): This<Value>) -> Result<i64> {
    let q = unwrap(ftx, &q)?;
    Ok(if q.is_zero() {
        0
    } else if q.is_negative() {
        -1
    } else {
        1
    })
}

fn is_integer(ftx: &FunctionContext, This(q): This<Value>) -> Result<bool> {
    Ok(unwrap(ftx, &q)?.is_whole())
}

fn as_integer(ftx: &FunctionContext, This(q): This<Value>) -> Result<i64> {
    let q = unwrap(ftx, &q)?;
    if !q.is_whole() {
        return Err(ftx.error("cannot convert value to integer"));
    }
    i64::try_from(q.milli() / 1000).map_err(|_| ftx.error("cannot convert value to integer"))
}

fn as_approximate_float(ftx: &FunctionContext, This(q): This<Value>) -> Result<f64> {
    Ok(unwrap(ftx, &q)?.milli() as f64 / 1000.0)
}

/// The argument as a Quantity: another Quantity or an int.
fn operand(ftx: &FunctionContext, v: &Value) -> Result<Quantity> {
    match v {
        Value::Int(i) => Ok(Quantity::count(*i)),
        other => unwrap(ftx, other),
    }
}

fn add(ftx: &FunctionContext, This(q): This<Value>, other: Value) -> Result<Value> {
    Ok(wrap(unwrap(ftx, &q)?.plus(operand(ftx, &other)?)))
}

fn sub(ftx: &FunctionContext, This(q): This<Value>, other: Value) -> Result<Value> {
    Ok(wrap(unwrap(ftx, &q)?.minus(operand(ftx, &other)?)))
}

fn compare(ftx: &FunctionContext, q: &Value, other: &Value) -> Result<Ordering> {
    Ok(unwrap(ftx, q)?.cmp(&unwrap(ftx, other)?))
}

fn is_greater_than(ftx: &FunctionContext, This(q): This<Value>, other: Value) -> Result<bool> {
    Ok(compare(ftx, &q, &other)? == Ordering::Greater)
}

fn is_less_than(ftx: &FunctionContext, This(q): This<Value>, other: Value) -> Result<bool> {
    Ok(compare(ftx, &q, &other)? == Ordering::Less)
}

fn compare_to(ftx: &FunctionContext, This(q): This<Value>, other: Value) -> Result<i64> {
    Ok(match compare(ftx, &q, &other)? {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

/// Adds the library to `ctx`.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function("quantity", quantity);
    ctx.add_function("isQuantity", is_quantity);
    ctx.add_function("sign", sign);
    ctx.add_function("isInteger", is_integer);
    ctx.add_function("asInteger", as_integer);
    ctx.add_function("asApproximateFloat", as_approximate_float);
    ctx.add_function("add", add);
    ctx.add_function("sub", sub);
    ctx.add_function("isGreaterThan", is_greater_than);
    ctx.add_function("isLessThan", is_less_than);
    ctx.add_function("compareTo", compare_to);
}
