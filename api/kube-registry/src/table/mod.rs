//! `meta.k8s.io/v1` Table answers for `kubectl get`: columns per kind, one row per object, and the row's
//! object as `PartialObjectMetadata`, the full object, or nothing (`includeObject`).

pub mod autoscaling;
mod column;
pub mod printers;
pub mod runtime;
pub mod storage;

use serde_json::{json, Map, Value};

use super::resource::ResourceDef;

/// Content type of a Table answer.
pub const CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the query parameter; unknown values are a 400 for the caller.
    pub fn parse(s: Option<&str>) -> Result<Self, String> {
        match s {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => Err(format!(
                "includeObject: unsupported value {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            )),
        }
    }
}

/// Whether an Accept header asks for a Table (`as=Table;g=meta.k8s.io`).
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let p = part.replace(' ', "");
        p.contains("as=Table") && p.contains("g=meta.k8s.io")
    })
}

/// The column definitions of a resource.
pub fn column_definitions(def: &ResourceDef) -> Value {
    if let Some(c) = &def.custom {
        return super::crd::printer::column_definitions(c);
    }
    let cols: Vec<Value> = printers::columns(def.printer)
        .into_iter()
        .map(|c| {
            let format = if c.name == "Name" { "name" } else { "" };
            json!({"name": c.name, "type": c.kind, "format": format,
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    Value::Array(cols)
}

/// One row for an object.
pub fn row(def: &ResourceDef, obj: &Value, include: IncludeObject) -> Value {
    let mut r = Map::new();
    let cells = match &def.custom {
        Some(c) => super::crd::printer::cells(c, obj),
        None => printers::cells(def.printer, obj),
    };
    r.insert("cells".into(), Value::Array(cells));
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            r.insert(
                "object".into(),
                json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
            );
        }
        IncludeObject::Object => {
            r.insert("object".into(), obj.clone());
        }
    }
    Value::Object(r)
}

/// A Table of objects; `list_meta` becomes the Table's metadata (resourceVersion, continue).
pub fn table(
    def: &ResourceDef,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    let rows: Vec<Value> = objects.iter().map(|o| row(def, o, include)).collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "rows": rows,
    });
    if with_columns {
        t["columnDefinitions"] = column_definitions(def);
    } else {
        t["columnDefinitions"] = Value::Null;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn kubectl_accept_wants_table() {
        assert!(wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"));
        assert!(!wants_table("application/json"));
    }

    #[test]
    fn rows_carry_partial_metadata() {
        let def = &resource::find("", "v1", "configmaps").expect("cm");
        let cm = json!({"metadata": {"name": "a", "namespace": "d", "labels": {"x": "y"}}, "data": {"k": "v"}});
        let t = table(
            def,
            &[cm],
            json!({"resourceVersion": "5"}),
            IncludeObject::Metadata,
            true,
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "d");
        assert_eq!(t["rows"][0]["cells"][1], 1);
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
    }
}
