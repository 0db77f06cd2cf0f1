//! Strategic merge patch (`application/strategic-merge-patch+json`) for built-in kinds.
//!
//! Like a JSON merge patch (maps merge, `null` deletes), except where a field's patch strategy says otherwise:
//! lists with strategy `merge` merge their items by the patch merge key (containers by `name`, ports by
//! `containerPort`, ...) or, for primitives, as a set; other lists are replaced. The per-field metadata comes
//! from the generated schema (the same table the protobuf decoder uses). Directives: `$patch`
//! (`replace`/`merge`/`delete`, in maps and in list items), `$retainKeys`, `$deleteFromPrimitiveList/<field>`
//! and `$setElementOrder/<field>`.

use serde_json::{Map, Value};

use crate::protobuf::schema::{messages, Field, FieldType, Message};

/// Why a strategic merge patch cannot be applied (a 400 or 422 for the caller).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PatchError(pub String);

fn err(s: impl Into<String>) -> PatchError {
    PatchError(s.into())
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const ORDER: &str = "$setElementOrder/";

fn message(name: &str) -> Option<&'static Message> {
    messages().get(name)
}

/// The message type of a field's values (a list's items, a map's values, or the field itself).
fn value_message(field: Option<&Field>) -> Option<&'static Message> {
    match field.map(|f| &f.ty) {
        Some(FieldType::Message(n)) => message(n),
        Some(FieldType::Map(inner)) => match inner.as_ref() {
            FieldType::Message(n) => message(n),
            _ => None,
        },
        _ => None,
    }
}

/// Removes directives from a value that replaces rather than merges.
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|i| i.get(PATCH).is_none())
                .map(strip)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Applies `patch` to `original`, whose type is the message `root` (e.g. `api.apps.v1.Deployment`).
pub fn apply(original: Value, patch: &Value, root: &str) -> Result<Value, PatchError> {
    let Value::Object(p) = patch else {
        return Err(err("a strategic merge patch must be a JSON object"));
    };
    let orig = match original {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Ok(merge_map(orig, p, message(root))?.unwrap_or(Value::Object(Map::new())))
}

/// Merges a map; `None` means the patch deleted it.
fn merge_map(
    mut orig: Map<String, Value>,
    patch: &Map<String, Value>,
    msg: Option<&Message>,
) -> Result<Option<Value>, PatchError> {
    match patch.get(PATCH).and_then(Value::as_str) {
        Some("replace") => return Ok(Some(strip(&Value::Object(patch.clone())))),
        Some("delete") => return Ok(None),
        Some("merge") | None => {}
        Some(other) => return Err(err(format!("unknown patch type: {other}"))),
    }
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_FROM) {
            let remove = v
                .as_array()
                .ok_or_else(|| err(format!("{k} must be a list")))?;
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
        } else if let Some(field) = k.strip_prefix(ORDER) {
            let order = v
                .as_array()
                .ok_or_else(|| err(format!("{k} must be a list")))?;
            orders.push((field.to_string(), order.clone()));
        }
    }
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        let field = msg.and_then(|m| m.by_json(k));
        if v.is_null() {
            orig.remove(k);
            continue;
        }
        let merged = match (orig.remove(k), v) {
            (Some(Value::Object(o)), Value::Object(p)) => merge_object_field(o, p, field)?,
            (Some(Value::Array(o)), Value::Array(p)) => Some(merge_list(o, p, field)?),
            (None, Value::Object(p)) => merge_object_field(Map::new(), p, field)?,
            (None, Value::Array(p)) => Some(merge_list(Vec::new(), p, field)?),
            (_, other) => Some(strip(other)),
        };
        if let Some(m) = merged {
            orig.insert(k.clone(), m);
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keep: Vec<&str> = retain
            .as_array()
            .ok_or_else(|| err("$retainKeys must be a list"))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (field, order) in orders {
        let meta = msg.and_then(|m| m.by_json(&field));
        if let Some(Value::Array(list)) = orig.get_mut(&field) {
            reorder(
                list,
                &order,
                meta.and_then(|f| f.patch_merge_key.as_deref()),
            );
        }
    }
    Ok(Some(Value::Object(orig)))
}

/// A map-valued field: a message (recurse), a map of messages (merge each entry), or free-form (merge patch).
fn merge_object_field(
    orig: Map<String, Value>,
    patch: &Map<String, Value>,
    field: Option<&Field>,
) -> Result<Option<Value>, PatchError> {
    if let Some(f) = field {
        if let FieldType::Map(inner) = &f.ty {
            match patch.get(PATCH).and_then(Value::as_str) {
                Some("replace") => return Ok(Some(strip(&Value::Object(patch.clone())))),
                Some("delete") => return Ok(None),
                Some("merge") | None => {}
                Some(other) => return Err(err(format!("unknown patch type: {other}"))),
            }
            let mut out = orig;
            let inner_msg = match inner.as_ref() {
                FieldType::Message(n) => message(n),
                _ => None,
            };
            for (k, v) in patch {
                if k.starts_with('$') {
                    continue;
                }
                match (out.remove(k), v) {
                    (_, Value::Null) => {}
                    (Some(Value::Object(o)), Value::Object(p)) if inner_msg.is_some() => {
                        if let Some(m) = merge_map(o, p, inner_msg)? {
                            out.insert(k.clone(), m);
                        }
                    }
                    (_, other) => {
                        out.insert(k.clone(), strip(other));
                    }
                }
            }
            return Ok(Some(Value::Object(out)));
        }
    }
    merge_map(orig, patch, value_message(field))
}

fn key_of<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item.get(key)
}

fn merge_list(
    orig: Vec<Value>,
    patch: &[Value],
    field: Option<&Field>,
) -> Result<Value, PatchError> {
    // An item `{"$patch": "replace"}` replaces the whole list with the rest of the patch's items.
    if patch
        .iter()
        .any(|i| i.get(PATCH).and_then(Value::as_str) == Some("replace"))
    {
        return Ok(strip(&Value::Array(patch.to_vec())));
    }
    let Some(f) = field.filter(|f| f.merges()) else {
        return Ok(strip(&Value::Array(patch.to_vec())));
    };
    match f.patch_merge_key.as_deref() {
        None => {
            // A set of primitives: union, original order first.
            let mut out = orig;
            for p in patch {
                if !out.contains(p) {
                    out.push(p.clone());
                }
            }
            Ok(Value::Array(out))
        }
        Some(key) => {
            let item_msg = value_message(Some(f));
            let mut out = orig;
            for p in patch {
                let Value::Object(pm) = p else {
                    return Err(err(format!(
                        "items of a list merged by {key:?} must be objects"
                    )));
                };
                let Some(k) = key_of(p, key).cloned() else {
                    return Err(err(format!(
                        "map: {p} does not contain declared merge key: {key}"
                    )));
                };
                let pos = out.iter().position(|o| key_of(o, key) == Some(&k));
                let deleting = pm.get(PATCH).and_then(Value::as_str) == Some("delete");
                match (pos, deleting) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        let o = match out.remove(i) {
                            Value::Object(m) => m,
                            _ => Map::new(),
                        };
                        if let Some(m) = merge_map(o, pm, item_msg)? {
                            out.insert(i, m);
                        }
                    }
                    (None, false) => {
                        if let Some(m) = merge_map(Map::new(), pm, item_msg)? {
                            out.push(m);
                        }
                    }
                }
            }
            Ok(Value::Array(out))
        }
    }
}

/// `$setElementOrder`: listed items first in the given order, then the others as they were.
fn reorder(list: &mut Vec<Value>, order: &[Value], key: Option<&str>) {
    let ident = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let mut rest = std::mem::take(list);
    for o in order {
        let want = ident(o);
        if let Some(i) = rest.iter().position(|v| ident(v) == want) {
            list.push(rest.remove(i));
        }
    }
    list.extend(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DEPLOY: &str = "api.apps.v1.Deployment";

    fn deployment() -> Value {
        json!({"metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a"]},
               "spec": {"replicas": 1, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
                        "template": {"spec": {"containers": [
                            {"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                            {"name": "sidecar", "image": "busybox"}]}}}})
    }

    #[test]
    fn containers_merge_by_name_and_keep_unmentioned_fields() {
        let p = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "sidecar"}],
            "containers": [{"name": "c", "image": "nginx:1.26"}]}}}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "nginx:1.26");
        assert_eq!(c[0]["ports"][0]["containerPort"], 80, "ports kept");
        assert_eq!(c[1]["name"], "sidecar");
    }

    #[test]
    fn list_items_deleted_added_and_env_merged() {
        let p = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar", "$patch": "delete"},
            {"name": "c", "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}]},
            {"name": "new", "image": "x"}]}}}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        let c = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("list")
            .clone();
        let names: Vec<&str> = c.iter().filter_map(|x| x["name"].as_str()).collect();
        assert_eq!(names, vec!["c", "new"]);
        assert_eq!(
            c[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}])
        );
    }

    #[test]
    fn primitive_set_lists_union_and_delete_from_primitive_list() {
        let p = json!({"metadata": {"finalizers": ["b", "a"]}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        let p = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        let out = apply(out, &p, DEPLOY).expect("patch");
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn replace_and_retain_keys_directives() {
        let p = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let p = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        assert_eq!(out["metadata"]["labels"], json!({"only": "this"}));
        let p = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "x"}]}}}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "solo", "image": "x"}])
        );
    }

    #[test]
    fn nulls_delete_and_non_merge_lists_replace() {
        let p = json!({"metadata": {"labels": {"app": null, "tier": "fe"}},
                       "spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["x"]}]}}}});
        let out = apply(deployment(), &p, DEPLOY).expect("patch");
        assert_eq!(out["metadata"]["labels"], json!({"tier": "fe"}));
        let p2 =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["y"]}]}}}});
        let out = apply(out, &p2, DEPLOY).expect("patch");
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["y"])
        );
    }

    #[test]
    fn bad_patches_are_errors() {
        assert!(apply(deployment(), &json!([1]), DEPLOY).is_err());
        let no_key = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        assert!(apply(deployment(), &no_key, DEPLOY).is_err());
        let bad = json!({"metadata": {"$patch": "explode"}});
        assert!(apply(deployment(), &bad, DEPLOY).is_err());
    }
}
