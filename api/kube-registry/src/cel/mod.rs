//! CEL as Kubernetes uses it (ValidatingAdmissionPolicies, webhook match conditions): the `cel` crate's
//! language and standard functions, with Kubernetes' string, list, sets, regex, IP and CIDR, quantity,
//! URL, format and authorizer libraries added, and upstream's bounds on what an expression may be.

pub mod authz;
mod format;
mod library;
mod network;
mod quantity;
mod sets;
mod typed;
mod url;

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
    quantity::register(&mut ctx);
    network::register(&mut ctx);
    sets::register(&mut ctx);
    format::register(&mut ctx);
    url::register(&mut ctx);
    authz::register(&mut ctx);
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
    fn quantities_compare_and_add_exactly() {
        let o = serde_json::json!({"limits": {"memory": "1536Mi", "cpu": "500m"}});
        for (expr, want) in [
            (
                "quantity(object.limits.memory).isGreaterThan(quantity('1Gi'))",
                true,
            ),
            (
                "quantity(object.limits.memory).isLessThan(quantity('1.5Gi'))",
                false,
            ),
            (
                "quantity(object.limits.memory).compareTo(quantity('1536Mi')) == 0",
                true,
            ),
            (
                "quantity(object.limits.cpu).add(quantity('500m')).asInteger() == 1",
                true,
            ),
            ("quantity(object.limits.cpu).isInteger()", false),
            ("quantity('2').sub(3).sign() == -1", true),
            ("isQuantity('1.5Gi') && !isQuantity('1.5 Gi')", true),
            (
                "quantity(object.limits.cpu).asApproximateFloat() == 0.5",
                true,
            ),
        ] {
            assert_eq!(run(expr, o.clone()), Ok(Value::Bool(want)), "{expr}");
        }
        assert!(run("quantity('bad')", o.clone()).is_err());
        assert!(run("'1Gi'.isGreaterThan(quantity('1'))", o).is_err());
    }

    #[test]
    fn ips_cidrs_and_sets() {
        let o = serde_json::json!({"ip": "10.1.2.3", "net": "10.0.0.0/8", "tags": ["a", "b", "b"]});
        for expr in [
            "ip(object.ip).family() == 4 && ip('::1').isLoopback() && ip('::').isUnspecified()",
            "ip('169.254.1.1').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()",
            "ip('224.0.0.5').isLinkLocalMulticast() && ip('10.1.2.3').isGlobalUnicast()",
            "!ip('255.255.255.255').isGlobalUnicast() && ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')",
            "cidr(object.net).containsIP(object.ip) && cidr(object.net).containsIP(ip('10.9.9.9'))",
            "!cidr(object.net).containsIP('11.0.0.1') && cidr(object.net).containsCIDR('10.1.0.0/16')",
            "!cidr('10.1.0.0/16').containsCIDR(cidr(object.net)) && cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8')",
            "cidr(object.net).prefixLength() == 8 && string(cidr('10.0.0.0/8').ip()) == '10.0.0.0'",
            "string(ip('10.1.2.3')) == '10.1.2.3' && string(5) == '5'",
            "sets.contains(object.tags, ['a']) && !sets.contains(object.tags, ['c'])",
            "sets.equivalent(object.tags, ['b', 'a']) && sets.intersects(object.tags, ['c', 'b'])",
            "'abc'.contains('b') && [1, 2].contains(2)",
            "'%s has %d replicas (%.1f%%)'.format([object.ip, 3, 12.345]) == '10.1.2.3 has 3 replicas (12.3%)'",
            "'%x %X %o %b %e'.format([255, 'hi', 8, 5, 1234.5]) == 'ff 6869 10 101 1.234500e+03'",
            "'%s'.format([object.tags]) == '[\"a\", \"b\", \"b\"]'",
        ] {
            assert_eq!(run(expr, o.clone()), Ok(Value::Bool(true)), "{expr}");
        }
        assert!(run("ip('::ffff:1.2.3.4')", o.clone()).is_err());
        assert!(run("cidr('10.0.0.0/33')", o).is_err());
    }

    #[test]
    fn urls_split_as_go_does() {
        let o = serde_json::json!({"u": "https://user@example.com:8443/a%20b/c?x=1&x=2&y=3"});
        for (expr, want) in [
            ("url(object.u).getScheme()", "https"),
            ("url(object.u).getHost()", "example.com:8443"),
            ("url(object.u).getHostname()", "example.com"),
            ("url(object.u).getPort()", "8443"),
            ("url(object.u).getEscapedPath()", "/a%20b/c"),
            ("url('https://[::1]:80/').getHostname()", "::1"),
            ("url('/healthz').getEscapedPath()", "/healthz"),
        ] {
            assert_eq!(
                run(expr, o.clone()),
                Ok(Value::String(Arc::new(want.into()))),
                "{expr}"
            );
        }
        assert_eq!(
            run(
                "url(object.u).getQuery()['x'] == ['1', '2'] && isURL('/p') && !isURL('not a url')",
                o
            ),
            Ok(Value::Bool(true))
        );
    }

    #[test]
    fn the_authorizer_answers_through_the_callers_function() {
        let request = authz::Ask {
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ..Default::default()
        };
        let p = compile(
            "authorizer.group('apps').resource('deployments').namespace('ns').check('delete').allowed() \
             && !authorizer.requestResource.check('escalate').allowed() \
             && authorizer.path('/healthz').check('get').reason() == 'path ok' \
             && authorizer.serviceAccount('kube-system', 'bot').group('').resource('pods').check('list').allowed()",
        )
        .unwrap();
        let mut ctx = context();
        ctx.add_variable_from_value("authorizer", authz::variable(&request));
        let answer: authz::Authorize = Arc::new(move |a: &authz::Ask| {
            let allowed = a.verb != "escalate";
            authz::Answer {
                allowed,
                reason: if a.path.is_some() {
                    "path ok".into()
                } else {
                    String::new()
                },
                error: None,
            }
        });
        let got = authz::with_authorizer(answer, || eval(&p, &ctx));
        assert_eq!(got, Ok(Value::Bool(true)));
        // Without an authorizer, a check errors rather than allowing.
        let p = compile("authorizer.path('/x').check('get').errored()").unwrap();
        assert_eq!(eval(&p, &ctx), Ok(Value::Bool(true)));
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

/// The most evaluation steps an expression may take on one request (upstream's per-expression limit,
/// counted here as an upper bound before evaluating rather than as the steps taken).
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// An upper bound of the steps `program` takes on inputs whose largest list or map has `collection`
/// items and whose longest string has `text` characters: its nodes, times that many iterations for
/// each level of nested comprehension (`all`, `exists`, `map`, `filter`), strings counting as
/// collections only when the expression splits or scans them into lists.
pub fn cost_bound(program: &Program, collection: u64, text: u64) -> u64 {
    fn walk(e: &ast::IdedExpr, depth: u32, nodes: &mut u64, deepest: &mut u32, splits: &mut bool) {
        use ast::{EntryExpr, Expr};
        *nodes += 1;
        *deepest = (*deepest).max(depth);
        match &e.expr {
            Expr::Call(c) => {
                if matches!(c.func_name.as_str(), "split" | "findAll") {
                    *splits = true;
                }
                if let Some(t) = &c.target {
                    walk(t, depth, nodes, deepest, splits);
                }
                for a in &c.args {
                    walk(a, depth, nodes, deepest, splits);
                }
            }
            Expr::Comprehension(c) => {
                walk(&c.iter_range, depth, nodes, deepest, splits);
                walk(&c.accu_init, depth, nodes, deepest, splits);
                for x in [&c.loop_cond, &c.loop_step, &c.result] {
                    walk(x, depth + 1, nodes, deepest, splits);
                }
            }
            Expr::Select(s) => walk(&s.operand, depth, nodes, deepest, splits),
            Expr::List(l) => l
                .elements
                .iter()
                .for_each(|x| walk(x, depth, nodes, deepest, splits)),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        walk(&me.key, depth, nodes, deepest, splits);
                        walk(&me.value, depth, nodes, deepest, splits);
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        walk(&f.value, depth, nodes, deepest, splits);
                    }
                }
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    let (mut nodes, mut deepest, mut splits) = (0u64, 0u32, false);
    walk(
        program.expression(),
        0,
        &mut nodes,
        &mut deepest,
        &mut splits,
    );
    let per_level = if splits {
        collection.max(text)
    } else {
        collection
    }
    .saturating_add(1);
    nodes.saturating_mul(per_level.saturating_pow(deepest))
}

/// The largest list or map size and the longest string in `v`.
pub fn input_sizes(v: &serde_json::Value) -> (u64, u64) {
    match v {
        serde_json::Value::String(s) => (0, s.chars().count() as u64),
        serde_json::Value::Array(a) => a
            .iter()
            .map(input_sizes)
            .fold((a.len() as u64, 0), |(c, t), (c2, t2)| {
                (c.max(c2), t.max(t2))
            }),
        serde_json::Value::Object(m) => m
            .values()
            .map(input_sizes)
            .fold((m.len() as u64, 0), |(c, t), (c2, t2)| {
                (c.max(c2), t.max(t2))
            }),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod cost_tests {
    use super::*;

    #[test]
    fn nested_comprehensions_over_large_inputs_are_bounded() {
        let flat = compile("object.spec.replicas <= 5").unwrap_or_else(|e| panic!("{e}"));
        assert!(cost_bound(&flat, 1_000_000, 1_000_000) < 100);
        let nested = compile("object.items.all(a, object.items.all(b, a != b || a == b))")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(cost_bound(&nested, 10, 0) < PER_CALL_LIMIT);
        assert!(cost_bound(&nested, 10_000, 0) > PER_CALL_LIMIT);
        let split =
            compile("object.data.v.split(',').all(x, x != '')").unwrap_or_else(|e| panic!("{e}"));
        assert!(cost_bound(&split, 3, 5_000_000) > PER_CALL_LIMIT);
        assert_eq!(
            input_sizes(&serde_json::json!({"a": [1, 2, 3], "b": "xyz1"})),
            (3, 4)
        );
    }
}
