//! Values of Kubernetes' CEL object types (Quantity, URL, the authorizer's checks and decisions) in a
//! CEL implementation without opaque types: a map whose `@type` entry names the type, so functions can
//! recognise their receiver and refuse anything else.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{FunctionContext, Value};

/// The key naming a typed value's type.
const TYPE_KEY: &str = "@type";

/// A typed value of `kind` with `fields`.
pub(super) fn make(kind: &str, fields: Vec<(&str, Value)>) -> Value {
    let mut map: HashMap<Key, Value> = fields
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k.to_string())), v))
        .collect();
    map.insert(
        Key::String(Arc::new(TYPE_KEY.into())),
        Value::String(Arc::new(kind.into())),
    );
    Value::Map(Map { map: Arc::new(map) })
}

/// The fields of `v` if it is a typed value of `kind`.
pub(super) fn fields<'a>(v: &'a Value, kind: &str) -> Option<&'a HashMap<Key, Value>> {
    let Value::Map(m) = v else { return None };
    match m.map.get(&Key::String(Arc::new(TYPE_KEY.into()))) {
        Some(Value::String(k)) if k.as_str() == kind => Some(&m.map),
        _ => None,
    }
}

/// The typed value's fields, or upstream-style `no such overload` for any other receiver.
pub(super) fn receiver<'a>(
    ftx: &FunctionContext,
    v: &'a Value,
    kind: &str,
) -> Result<&'a HashMap<Key, Value>, cel::ExecutionError> {
    fields(v, kind)
        .ok_or_else(|| ftx.error(format!("no such overload: {} on this value", ftx.name)))
}

/// A string field of a typed value ("" when absent).
pub(super) fn text(f: &HashMap<Key, Value>, key: &str) -> String {
    match f.get(&Key::String(Arc::new(key.into()))) {
        Some(Value::String(s)) => s.to_string(),
        _ => String::new(),
    }
}

/// `f` with `key` set to `v`, as a new typed value of `kind`.
pub(super) fn with(f: &HashMap<Key, Value>, key: &str, v: Value) -> Value {
    let mut map = f.clone();
    map.insert(Key::String(Arc::new(key.into())), v);
    Value::Map(Map { map: Arc::new(map) })
}

/// A CEL string.
pub(super) fn string(s: impl Into<String>) -> Value {
    Value::String(Arc::new(s.into()))
}
