//! Field sets of values: what an applied configuration owns, and what changed between two versions of an
//! object (the fields an update takes over and the fields it removed).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::fieldset::{self, FieldSet};
use super::shape::Shape;

/// The fields an update changed (added or modified) and the ones it removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Added or modified paths.
    pub changed: FieldSet,
    /// Paths present before and gone now.
    pub removed: FieldSet,
}

impl Diff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

/// Whether a value has the JSON type a shape walks into.
fn fits(shape: Shape, v: &Value) -> bool {
    (shape.is_object() && v.is_object()) || (shape.is_list() && v.is_array())
}

fn empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// The fields a value sets (what an applier of it owns): leaves, list items, map entries, and empty or
/// null values as themselves.
pub fn owned(v: &Value, shape: Shape) -> FieldSet {
    let mut out = FieldSet::new();
    walk_owned(v, shape, &mut out);
    out
}

fn walk_owned(v: &Value, shape: Shape, out: &mut FieldSet) {
    match v {
        Value::Object(m) if shape.is_object() => {
            for (k, c) in m {
                let (cs, named) = shape.child(k);
                let mut sub = FieldSet::new();
                let leafy = cs.is_leaf() || empty_container(Some(c)) || !fits(cs, c);
                if leafy || !named {
                    sub.member = true;
                }
                if !leafy {
                    walk_owned(c, cs, &mut sub);
                }
                out.put(fieldset::field(k), sub);
            }
        }
        Value::Array(items) if shape.is_list() => {
            let item_shape = shape.item();
            for it in items {
                let mut sub = FieldSet::leaf();
                if fits(item_shape, it) && !empty_container(Some(it)) {
                    walk_owned(it, item_shape, &mut sub);
                }
                out.put(shape.item_element(it), sub);
            }
        }
        _ => {}
    }
}

/// What changed from `old` to `new`. A node that appears or disappears as a whole counts itself too (the `.`
/// of list items, map entries and added structs).
pub fn compare(old: &Value, new: &Value, shape: Shape) -> Diff {
    let (changed, removed) = cmp(Some(old), Some(new), shape);
    Diff { changed, removed }
}

/// Compares one node.
fn cmp(old: Option<&Value>, new: Option<&Value>, shape: Shape) -> (FieldSet, FieldSet) {
    let mut ch = FieldSet::new();
    let mut rm = FieldSet::new();
    // Equal subtrees own nothing new: most of an updated object is unchanged, and comparing is cheaper than
    // walking it with the schema.
    if let (Some(a), Some(b)) = (old, new) {
        if a == b {
            return (ch, rm);
        }
    }
    // Empty or missing on both sides is compared as a value, so `{}` and absent stay distinct.
    let both_empty = empty_container(old) && empty_container(new);
    // A `null` side is walked as empty but, unlike a missing one, does not make the node itself new.
    let granular = !shape.is_leaf()
        && !both_empty
        && old.is_none_or(|o| o.is_null() || fits(shape, o))
        && new.is_none_or(|n| n.is_null() || fits(shape, n));
    if !granular {
        match (old, new) {
            (None, Some(_)) => ch.member = true,
            (Some(_), None) => rm.member = true,
            (Some(a), Some(b)) if a != b => ch.member = true,
            _ => {}
        }
        return (ch, rm);
    }
    if shape.is_object() {
        let om = old.and_then(Value::as_object);
        let nm = new.and_then(Value::as_object);
        let keys: BTreeSet<&String> = om
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(nm.into_iter().flat_map(|m| m.keys()))
            .collect();
        for k in keys {
            let (cs, named) = shape.child(k);
            // Ownership data is never itself owned; skipping it spares callers a copy without it.
            if named && k == "managedFields" {
                continue;
            }
            let (c, r) = cmp(om.and_then(|m| m.get(k)), nm.and_then(|m| m.get(k)), cs);
            ch.put(fieldset::field(k), c);
            rm.put(fieldset::field(k), r);
        }
    } else {
        let oi = index(old, shape);
        let ni = index(new, shape);
        let item_shape = shape.item();
        let elements: BTreeSet<&String> = oi.keys().chain(ni.keys()).collect();
        for e in elements {
            let (c, r) = cmp(oi.get(e).copied(), ni.get(e).copied(), item_shape);
            ch.put(e.clone(), c);
            rm.put(e.clone(), r);
        }
    }
    match (old, new) {
        (None, Some(_)) => ch.member = true,
        (Some(_), None) => rm.member = true,
        _ => {}
    }
    (ch, rm)
}

/// List items by path element (the first of duplicates wins).
fn index(v: Option<&Value>, shape: Shape) -> BTreeMap<String, &Value> {
    let mut m = BTreeMap::new();
    for it in v.and_then(Value::as_array).into_iter().flatten() {
        m.entry(shape.item_element(it)).or_insert(it);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy() -> Shape {
        Shape::of_kind("apps/v1", "Deployment")
    }

    #[test]
    fn owned_fields_of_a_deployment_match_upstream_form() {
        let cfg = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx",
                        "ports": [{"containerPort": 80}],
                        "env": [{"name": "A", "value": "1"}]}]}}}
        });
        let s = owned(&cfg, deploy());
        let want = json!({
            "f:apiVersion": {}, "f:kind": {},
            "f:metadata": {"f:labels": {"f:app": {}}, "f:name": {}},
            "f:spec": {"f:replicas": {}, "f:selector": {},
                "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                        "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}
        });
        assert_eq!(s.to_json(), want);
    }

    #[test]
    fn sets_and_empty_values() {
        let cm = Shape::of_kind("v1", "ConfigMap");
        let s = owned(
            &json!({"metadata": {"finalizers": ["a", "b"], "annotations": {}}}),
            cm,
        );
        assert!(s.has(&["f:metadata", "f:finalizers", "v:\"a\""]));
        assert!(s.has(&["f:metadata", "f:annotations"]));
    }

    #[test]
    fn compare_reports_changes_and_removals() {
        let old = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}}});
        let new = json!({"metadata": {"labels": {"l": "1"}}, "spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "a", "image": "x2"}]}}}});
        let d = compare(&old, &new, deploy());
        let c = "k:{\"name\":\"a\"}";
        let b = "k:{\"name\":\"b\"}";
        assert!(d.changed.has(&["f:spec", "f:replicas"]));
        assert!(d.changed.has(&[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            c,
            "f:image"
        ]));
        assert!(!d
            .changed
            .has(&["f:spec", "f:template", "f:spec", "f:containers", c]));
        assert!(d.changed.has(&["f:metadata", "f:labels"]));
        assert!(d.changed.has(&["f:metadata", "f:labels", "f:l"]));
        // metadata was absent before: added as a whole, as upstream marks a nil struct that appears.
        assert!(d.changed.has(&["f:metadata"]));
        assert!(d
            .removed
            .has(&["f:spec", "f:template", "f:spec", "f:containers", b]));
        assert!(d.removed.has(&[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            b,
            "f:image"
        ]));
        assert!(compare(&old, &old, deploy()).is_empty());
    }
}
