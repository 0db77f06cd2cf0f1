//! CEL as Kubernetes uses it (ValidatingAdmissionPolicies, webhook match conditions): the `cel` crate's
//! language and standard functions, with Kubernetes' string, list, regex and IP libraries added, and
//! upstream's bounds on what an expression may be.

mod library;

use std::sync::Arc;

pub use cel::common::ast;
pub use cel::{objects, Context, Program, Value};

/// The longest expression accepted (upstream's bound on a CEL expression's length).
pub const MAX_EXPRESSION_LEN: usize = 5 * 1024;

/// An expression compiled, or why it does not compile (the text upstream puts after `compilation
/// failed: `).
pub fn compile(expr: &str) -> Result<Program, String> {
    if expr.len() > MAX_EXPRESSION_LEN {
        return Err(format!(
            "expression is too long: {} bytes, at most {MAX_EXPRESSION_LEN}",
            expr.len()
        ));
    }
    Program::compile(expr).map_err(|e| e.to_string().trim().replace('\n', " "))
}

/// `expr` compiled, from a cache of what this process compiled before (parsing costs far more than a
/// typical evaluation, and policies evaluate the same expressions on every request).
pub fn compiled(expr: &str) -> Result<Arc<Program>, String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Program>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(expr) {
        return Ok(p.clone());
    }
    let p = Arc::new(compile(expr)?);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    // Expressions come from stored policies; a cache that somehow grows large starts again.
    if c.len() >= 4096 {
        c.clear();
    }
    c.insert(expr.to_string(), p.clone());
    Ok(p)
}

/// A context with the standard functions and Kubernetes' libraries, and no variables.
pub fn context() -> Context<'static> {
    let mut ctx = Context::default();
    library::register(&mut ctx);
    ctx
}

/// A JSON value as CEL sees it.
pub fn value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(value).collect())),
        serde_json::Value::Object(m) => {
            let map: std::collections::HashMap<cel::objects::Key, Value> = m
                .iter()
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), value(v)))
                .collect();
            Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// Evaluates `program` in `ctx`.
pub fn eval(program: &Program, ctx: &Context<'_>) -> Result<Value, String> {
    program.execute(ctx).map_err(|e| e.to_string())
}

/// A result as text, for messages and errors (`"a"` prints as `a`).
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(expr: &str, object: serde_json::Value) -> Result<Value, String> {
        let p = compile(expr)?;
        let mut ctx = context();
        ctx.add_variable_from_value("object", value(&object));
        eval(&p, &ctx)
    }

    #[test]
    fn policies_read_objects_and_use_kubernetes_libraries() {
        let d = serde_json::json!({"spec": {"replicas": 3}, "metadata": {"name": "Web-App", "labels": {"a": "b"}}});
        assert_eq!(
            run("object.spec.replicas <= 5", d.clone()),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("object.metadata.name.lowerAscii() == 'web-app'", d.clone()),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("has(object.metadata.labels.a)", d.clone()),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("'a,b,c'.split(',').size() == 3", d.clone()),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("[1, 2, 3].isSorted() && [1, 2].sum() == 3", d.clone()),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run(
                "isIP('10.0.0.1') && !isIP('x') && isCIDR('10.0.0.0/8')",
                d.clone()
            ),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("'abc123'.find('[0-9]+') == '123'", d.clone()),
            Ok(Value::Bool(true))
        );
        assert!(compile("object.spec.replicas <").is_err());
    }
}
