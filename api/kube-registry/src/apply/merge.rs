//! Merging an applied configuration into a live object, and removing the fields an applier dropped.
//!
//! Maps and structs merge per key, list maps per item key, sets per value; atomic values are replaced.
//! A `null` in the configuration removes the field.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::FieldSet;
use super::shape::Shape;

/// `live` with `config` merged in.
pub fn merge(live: &Value, config: &Value, shape: Shape) -> Value {
    merge_value(Some(live.clone()), config, shape)
}

fn merge_value(live: Option<Value>, config: &Value, shape: Shape) -> Value {
    match (live, config) {
        (live, Value::Object(c)) if shape.is_object() => {
            let mut out = match live {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            for (k, v) in c {
                if v.is_null() {
                    out.remove(k);
                    continue;
                }
                let (cs, _) = shape.child(k);
                let merged = merge_value(out.remove(k), v, cs);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(c)) if shape.is_list() => {
            Value::Array(merge_list(l, c, shape))
        }
        (_, other) => strip_nulls(other),
    }
}

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Merges list items by their element (key or value): live-only items keep their place, configured items
/// come in the configuration's order.
fn merge_list(live: Vec<Value>, config: &[Value], shape: Shape) -> Vec<Value> {
    let item_shape = shape.item();
    let live_el: Vec<String> = live.iter().map(|i| shape.item_element(i)).collect();
    let cfg_el: Vec<String> = config.iter().map(|i| shape.item_element(i)).collect();
    let in_cfg: HashSet<&String> = cfg_el.iter().collect();
    let mut live_by: BTreeMap<&String, Value> = BTreeMap::new();
    for (e, v) in live_el.iter().zip(live) {
        live_by.entry(e).or_insert(v);
    }
    let mut emitted: HashSet<&String> = HashSet::new();
    let mut out = Vec::with_capacity(live_el.len().max(config.len()));
    let (mut i, mut j) = (0, 0);
    while i < live_el.len() || j < config.len() {
        if i < live_el.len() {
            let e = &live_el[i];
            if emitted.contains(e) {
                i += 1;
                continue;
            }
            if !in_cfg.contains(e) {
                if let Some(v) = live_by.remove(e) {
                    out.push(v);
                }
                emitted.insert(e);
                i += 1;
                continue;
            }
        }
        if j < config.len() {
            let e = &cfg_el[j];
            j += 1;
            if !emitted.insert(e) {
                continue;
            }
            out.push(merge_value(live_by.remove(e), &config[j - 1], item_shape));
        } else {
            i += 1;
        }
    }
    out
}

/// Removes from `obj` every member path of `set` (fields, map entries, list items).
pub fn remove_items(obj: &mut Value, set: &FieldSet, shape: Shape) {
    match obj {
        Value::Object(m) if shape.is_object() => {
            for (el, sub) in &set.children {
                let Some(k) = el.strip_prefix("f:") else {
                    continue;
                };
                if sub.member {
                    m.remove(k);
                } else if let Some(child) = m.get_mut(k) {
                    remove_items(child, sub, shape.child(k).0);
                }
            }
        }
        Value::Array(items) if shape.is_list() => {
            let item_shape = shape.item();
            items.retain_mut(|it| match set.children.get(&shape.item_element(it)) {
                Some(sub) if sub.member => false,
                Some(sub) => {
                    remove_items(it, sub, item_shape);
                    true
                }
                None => true,
            });
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::diff::owned;
    use serde_json::json;

    fn deploy() -> Shape {
        Shape::of_kind("apps/v1", "Deployment")
    }

    fn pod_spec(containers: Value) -> Value {
        json!({"spec": {"template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn list_map_merges_by_key_and_keeps_live_only_items() {
        let live = pod_spec(json!([
            {"name": "a", "image": "x", "imagePullPolicy": "Always"},
            {"name": "side", "image": "s"}
        ]));
        let cfg = pod_spec(json!([{"name": "b", "image": "y"}, {"name": "a", "image": "x2"}]));
        let out = merge(&live, &cfg, deploy());
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "b", "image": "y"},
                {"name": "a", "image": "x2", "imagePullPolicy": "Always"},
                {"name": "side", "image": "s"}
            ])
        );
    }

    #[test]
    fn sets_union_atomic_lists_and_scalars_replace_nested_maps_merge() {
        let live = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"old": "1"}},
                "template": {"spec": {"containers": [{"name": "c", "args": ["1", "2"]}]}}}});
        let cfg = json!({"metadata": {"finalizers": ["c", "a"], "labels": {"y": "3"}},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"new": "1"}},
                "template": {"spec": {"containers": [{"name": "c", "args": ["3"]}]}}}});
        let out = merge(&live, &cfg, deploy());
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        assert_eq!(out["metadata"]["labels"], json!({"x": "1", "y": "3"}));
        assert_eq!(out["spec"]["replicas"], 4);
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {"new": "1"}})
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["3"])
        );
    }

    #[test]
    fn null_removes_and_remove_items_drops_members() {
        let live = json!({"metadata": {"labels": {"x": "1", "y": "2"}}});
        let out = merge(
            &live,
            &json!({"metadata": {"labels": {"x": null}}}),
            deploy(),
        );
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));

        let mut obj = pod_spec(json!([
            {"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}, {"name": "F", "value": "2"}]},
            {"name": "b", "image": "y"}
        ]));
        let mut set = FieldSet::new();
        let a = "k:{\"name\":\"a\"}";
        set.insert(&[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            "k:{\"name\":\"b\"}",
        ]);
        set.insert(&[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            a,
            "f:env",
            "k:{\"name\":\"F\"}",
        ]);
        remove_items(&mut obj, &set, deploy());
        assert_eq!(
            obj,
            pod_spec(json!([{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]}]))
        );
        // The set of what is left matches what the object now holds.
        assert!(owned(&obj, deploy()).has(&["f:spec", "f:template", "f:spec", "f:containers", a]));
    }
}
