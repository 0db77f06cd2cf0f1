//! Kubernetes' CEL libraries, the parts keel has: strings (`lowerAscii`, `upperAscii`, `trim`, `split`,
//! `join`, `replace`, `indexOf`, `lastIndexOf`), lists (`isSorted`, `sum`, `indexOf`), regex (`find`,
//! `findAll`) and IP addresses (`isIP`, `isCIDR`).

use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, FunctionContext, Value};

type Result<T> = std::result::Result<T, cel::ExecutionError>;

fn lower_ascii(This(s): This<Arc<String>>) -> String {
    s.to_ascii_lowercase()
}

fn upper_ascii(This(s): This<Arc<String>>) -> String {
    s.to_ascii_uppercase()
}

fn trim(This(s): This<Arc<String>>) -> String {
    s.trim().to_string()
}

fn split(This(s): This<Arc<String>>, sep: Arc<String>) -> Arc<Vec<Value>> {
    Arc::new(
        s.split(sep.as_str())
            .map(|p| Value::String(Arc::new(p.to_string())))
            .collect(),
    )
}

fn replace(This(s): This<Arc<String>>, from: Arc<String>, to: Arc<String>) -> String {
    s.replace(from.as_str(), to.as_str())
}

fn join(
    ftx: &FunctionContext,
    This(list): This<Arc<Vec<Value>>>,
    Arguments(args): Arguments,
) -> Result<Arc<String>> {
    let sep = match args.first() {
        Some(Value::String(s)) => s.to_string(),
        Some(_) => return Err(ftx.error("join: the separator must be a string")),
        None => String::new(),
    };
    let parts: Vec<String> = list
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.to_string()),
            _ => Err(ftx.error("join: the list must hold strings")),
        })
        .collect::<Result<_>>()?;
    Ok(Arc::new(parts.join(&sep)))
}

fn index_of(ftx: &FunctionContext, This(this): This<Value>, needle: Value) -> Result<i64> {
    find_index(ftx, this, needle, false)
}

fn last_index_of(ftx: &FunctionContext, This(this): This<Value>, needle: Value) -> Result<i64> {
    find_index(ftx, this, needle, true)
}

fn find_index(ftx: &FunctionContext, this: Value, needle: Value, last: bool) -> Result<i64> {
    match (this, needle) {
        (Value::String(s), Value::String(n)) => {
            let at = if last {
                s.rfind(n.as_str())
            } else {
                s.find(n.as_str())
            };
            // Kubernetes counts code points, not bytes.
            Ok(at.map_or(-1, |b| s[..b].chars().count() as i64))
        }
        (Value::List(l), n) => {
            let at = if last {
                l.iter().rposition(|v| *v == n)
            } else {
                l.iter().position(|v| *v == n)
            };
            Ok(at.map_or(-1, |i| i as i64))
        }
        _ => Err(ftx.error("indexOf: unsupported target")),
    }
}

fn is_sorted(ftx: &FunctionContext, This(list): This<Arc<Vec<Value>>>) -> Result<bool> {
    for w in list.windows(2) {
        match w[0].partial_cmp(&w[1]) {
            Some(std::cmp::Ordering::Greater) => return Ok(false),
            Some(_) => {}
            None => return Err(ftx.error("isSorted: the list's items do not compare")),
        }
    }
    Ok(true)
}

fn sum(ftx: &FunctionContext, This(list): This<Arc<Vec<Value>>>) -> Result<Value> {
    let mut acc = Value::Int(0);
    for (i, v) in list.iter().enumerate() {
        acc = match (acc, v) {
            (Value::Int(a), Value::Int(b)) => Value::Int(
                a.checked_add(*b)
                    .ok_or_else(|| ftx.error("sum: integer overflow"))?,
            ),
            (Value::Int(a), Value::Float(b)) if i == 0 => Value::Float(a as f64 + b),
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Int(a), Value::UInt(b)) if i == 0 => Value::UInt(a as u64 + b),
            (Value::UInt(a), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| ftx.error("sum: integer overflow"))?,
            ),
            _ => return Err(ftx.error("sum: the list must hold numbers of one type")),
        };
    }
    Ok(acc)
}

fn find(ftx: &FunctionContext, This(s): This<Arc<String>>, re: Arc<String>) -> Result<Arc<String>> {
    let re = regex::Regex::new(&re).map_err(|e| ftx.error(e))?;
    Ok(Arc::new(
        re.find(&s)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    ))
}

fn find_all(ftx: &FunctionContext, This(s): This<Arc<String>>, re: Arc<String>) -> Result<Value> {
    let re = regex::Regex::new(&re).map_err(|e| ftx.error(e))?;
    Ok(Value::List(Arc::new(
        re.find_iter(&s)
            .map(|m| Value::String(Arc::new(m.as_str().to_string())))
            .collect(),
    )))
}

fn is_ip(s: Arc<String>) -> bool {
    // Kubernetes' library refuses IPv4-mapped IPv6 and zones; Rust's parser refuses zones too.
    s.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| !matches!(ip, std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some()))
}

fn is_cidr(s: Arc<String>) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

/// Adds the libraries to `ctx`.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function("lowerAscii", lower_ascii);
    ctx.add_function("upperAscii", upper_ascii);
    ctx.add_function("trim", trim);
    ctx.add_function("split", split);
    ctx.add_function("join", join);
    ctx.add_function("replace", replace);
    ctx.add_function("indexOf", index_of);
    ctx.add_function("lastIndexOf", last_index_of);
    ctx.add_function("isSorted", is_sorted);
    ctx.add_function("sum", sum);
    ctx.add_function("find", find);
    ctx.add_function("findAll", find_all);
    ctx.add_function("isIP", is_ip);
    ctx.add_function("isCIDR", is_cidr);
}
