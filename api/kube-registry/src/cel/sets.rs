//! Kubernetes' CEL sets library on lists: `sets.contains(a, b)` (every item of b is in a),
//! `sets.equivalent(a, b)` (the same items, ignoring order and repeats) and `sets.intersects(a, b)`.
//! `contains` on anything else keeps its standard meaning.

use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, FunctionContext, Value};

use super::typed;

type Result<T> = std::result::Result<T, cel::ExecutionError>;

const SETS: &str = "sets";

/// A list argument.
type List = Arc<Vec<Value>>;

fn lists(ftx: &FunctionContext, args: &[Value]) -> Result<(List, List)> {
    match args {
        [Value::List(a), Value::List(b)] => Ok((a.clone(), b.clone())),
        _ => Err(ftx.error(format!("sets.{} takes two lists", ftx.name))),
    }
}

fn contains(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> Result<Value> {
    if typed::fields(&this, SETS).is_some() {
        let (a, b) = lists(ftx, &args)?;
        return Ok(Value::Bool(b.iter().all(|x| a.contains(x))));
    }
    match args.first() {
        Some(arg) => cel::functions::contains(This(this), arg.clone()),
        None => Err(ftx.error("contains takes one argument")),
    }
}

fn equivalent(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> Result<bool> {
    typed::receiver(ftx, &this, SETS)?;
    let (a, b) = lists(ftx, &args)?;
    Ok(a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x)))
}

fn intersects(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> Result<bool> {
    typed::receiver(ftx, &this, SETS)?;
    let (a, b) = lists(ftx, &args)?;
    Ok(a.iter().any(|x| b.contains(x)))
}

/// Adds the library to `ctx`.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_variable_from_value("sets", typed::make(SETS, Vec::new()));
    ctx.add_function("contains", contains);
    ctx.add_function("equivalent", equivalent);
    ctx.add_function("intersects", intersects);
}
