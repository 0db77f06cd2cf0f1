//! `kubectl get` columns of custom resources: Name, then the version's `additionalPrinterColumns`
//! (JSONPath, evaluated with `jsonpath-rust`), or Age when it declares none, with upstream's cell
//! rules (`integer`/`number`/`boolean`/`string` typed values, `date` shown as an age, missing = none).

use jsonpath_rust::JsonPath;
use serde_json::{json, Value};

use super::Custom;
use crate::age;
use crate::object;

/// Why a column's JSONPath cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSONPath {0:?}")]
pub struct BadPath(pub String);

/// Turns a Kubernetes-style JSONPath (`.spec.replicas`, `{.spec.x}`) into an RFC 9535 query (`$.spec.x`).
pub fn compile(path: &str) -> Result<String, BadPath> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(p)
        .trim();
    if !(p.starts_with('.') || p.starts_with('[')) {
        return Err(BadPath(path.to_string()));
    }
    // Kubernetes filters are written `?(@.x=="y")`; RFC 9535 accepts them with or without parentheses.
    let q = format!("${p}");
    json!({}).query(&q).map_err(|_| BadPath(path.to_string()))?;
    Ok(q)
}

/// The first value a column's path selects in `obj`.
fn first<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let q = compile(path).ok()?;
    obj.query(&q).ok()?.into_iter().next()
}

fn age_column() -> (String, String, String, i32, String) {
    (
        "Age".into(),
        "date".into(),
        String::new(),
        0,
        ".metadata.creationTimestamp".into(),
    )
}

/// (name, type, format, priority, jsonPath) of each column after Name.
fn columns(c: &Custom) -> Vec<(String, String, String, i32, String)> {
    if c.columns.is_empty() {
        return vec![age_column()];
    }
    c.columns
        .iter()
        .map(|col| {
            (
                col.name.clone(),
                col.type_.clone(),
                col.format.clone().unwrap_or_default(),
                col.priority.unwrap_or(0),
                col.json_path.clone(),
            )
        })
        .collect()
}

/// Table column definitions.
pub fn column_definitions(c: &Custom) -> Value {
    let mut out = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    })];
    let descriptions: Vec<String> = if c.columns.is_empty() {
        vec![
            "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp"
                .into(),
        ]
    } else {
        c.columns
            .iter()
            .map(|col| {
                col.description.clone().unwrap_or_else(|| {
                    format!(
                        "Custom resource definition column (in JSONPath format): {}",
                        col.json_path
                    )
                })
            })
            .collect()
    };
    for ((name, ty, format, priority, _), d) in columns(c).into_iter().zip(descriptions) {
        out.push(
            json!({"name": name, "type": ty, "format": format, "priority": priority,
                        "description": d}),
        );
    }
    Value::Array(out)
}

fn cell(ty: &str, v: Option<&Value>) -> Value {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match (ty, v) {
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("string", Value::String(s)) => json!(s),
        // A string column prints any other value as JSON text, as upstream's JSONPath printer does.
        ("string", other) => json!(other.to_string()),
        ("date", Value::String(_)) => {
            if v.as_str().and_then(object::parse_time).is_some() {
                json!(age::since(Some(v)))
            } else {
                json!("<invalid>")
            }
        }
        _ => Value::Null,
    }
}

/// The cells of one object's row.
pub fn cells(c: &Custom, obj: &Value) -> Vec<Value> {
    let mut out = vec![json!(object::name(obj))];
    for (_, ty, _, _, path) in columns(c) {
        out.push(cell(&ty, first(obj, &path)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn custom(cols: Value) -> Custom {
        Custom {
            crd_name: "widgets.example.com".into(),
            crd_uid: "u".into(),
            crd_generation: 1,
            storage_version: "v1".into(),
            schema: None,
            columns: serde_json::from_value(cols).expect("columns"),
            scale: None,
            list_kind: "WidgetList".into(),
            terminating: false,
            selectable: vec![],
            conversion_webhook: None,
        }
    }

    #[test]
    fn cells_follow_column_types() {
        let c = custom(json!([
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
            {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
            {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
            {"name": "Ports", "type": "string", "jsonPath": ".spec.ports"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing", "priority": 1},
            {"name": "Since", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]));
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"replicas": 3, "ratio": 2, "on": true, "color": "red", "ports": [80]},
            "status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let cells = cells(&c, &obj);
        assert_eq!(
            cells[..7],
            [
                json!("w"),
                json!(3),
                json!(2.0),
                json!(true),
                json!("red"),
                json!("[80]"),
                json!("True")
            ]
        );
        assert_eq!(cells[7], Value::Null);
        assert!(
            cells[8]
                .as_str()
                .is_some_and(|s| s.ends_with('y') || s.ends_with('d')),
            "{:?}",
            cells[8]
        );
        let defs = column_definitions(&c);
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(defs[7]["priority"], 1);
    }

    #[test]
    fn no_columns_means_age() {
        let c = custom(json!([]));
        let defs = column_definitions(&c);
        assert_eq!(defs[1]["name"], "Age");
        assert_eq!(defs[1]["type"], "date");
        assert!(compile("spec.x").is_err());
        assert!(compile("{.spec.x}").is_ok());
    }
}
