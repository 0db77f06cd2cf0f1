//! Kubernetes' CEL string formatting: `'%s has %d replicas'.format([name, n])` with `%s`, `%d`, `%f`
//! (`%.2f`), `%e`, `%b`, `%o`, `%x`, `%X` and `%%`, as cel-go's strings extension formats.

use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, FunctionContext, Value};

type Result<T> = std::result::Result<T, cel::ExecutionError>;

/// A value as `%s` writes it (strings inside lists and maps quoted).
fn text(v: &Value, nested: bool) -> String {
    match v {
        Value::String(s) if nested => format!("{s:?}"),
        Value::String(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::List(l) => format!(
            "[{}]",
            l.iter()
                .map(|i| text(i, true))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Map(m) => {
            let mut entries: Vec<String> = m
                .map
                .iter()
                .map(|(k, v)| format!("{}: {}", text(&Value::from(k.clone()), true), text(v, true)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(", "))
        }
        other => format!("{other:?}"),
    }
}

fn integer(ftx: &FunctionContext, v: &Value, verb: char) -> Result<i128> {
    match v {
        Value::Int(i) => Ok(i128::from(*i)),
        Value::UInt(u) => Ok(i128::from(*u)),
        _ => Err(ftx.error(format!("error during formatting: %{verb} takes an integer"))),
    }
}

fn float(ftx: &FunctionContext, v: &Value, verb: char) -> Result<f64> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Int(i) => Ok(*i as f64),
        Value::UInt(u) => Ok(*u as f64),
        _ => Err(ftx.error(format!("error during formatting: %{verb} takes a number"))),
    }
}

/// Go's `%e`: one digit, `precision` decimals, a signed exponent of at least two digits.
fn scientific(f: f64, precision: usize) -> String {
    let s = format!("{f:.precision$e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

fn format(
    ftx: &FunctionContext,
    This(pattern): This<Arc<String>>,
    args: Arc<Vec<Value>>,
) -> Result<Arc<String>> {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    let mut next = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut digits = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(*d);
                chars.next();
            }
            precision = digits.parse().ok();
        }
        let Some(verb) = chars.next() else {
            return Err(ftx.error("error during formatting: a lone % at the end"));
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let arg = args.get(next).ok_or_else(|| {
            ftx.error(format!(
                "error during formatting: index {next} out of range"
            ))
        })?;
        next += 1;
        match verb {
            's' => out.push_str(&text(arg, false)),
            'd' => out.push_str(&integer(ftx, arg, verb)?.to_string()),
            'f' => out.push_str(&format!(
                "{:.*}",
                precision.unwrap_or(6),
                float(ftx, arg, verb)?
            )),
            'e' => out.push_str(&scientific(float(ftx, arg, verb)?, precision.unwrap_or(6))),
            'b' => out.push_str(&format!("{:b}", integer(ftx, arg, verb)?)),
            'o' => out.push_str(&format!("{:o}", integer(ftx, arg, verb)?)),
            'x' | 'X' => {
                let hex = match arg {
                    Value::String(s) => s.bytes().map(|b| format!("{b:02x}")).collect(),
                    Value::Bytes(b) => b.iter().map(|b| format!("{b:02x}")).collect(),
                    v => format!("{:x}", integer(ftx, v, verb)?),
                };
                out.push_str(&if verb == 'X' { hex.to_uppercase() } else { hex });
            }
            other => {
                return Err(ftx.error(format!(
                    "error during formatting: unrecognized formatting clause \"{other}\""
                )))
            }
        }
    }
    Ok(Arc::new(out))
}

/// Adds the function to `ctx`.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function("format", format);
}
