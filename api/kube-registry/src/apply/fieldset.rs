//! Sets of field paths, as `metadata.managedFields[].fieldsV1` holds them.
//!
//! A set is a tree keyed by path elements in their serialized form: `f:<field>` (a named field or map key),
//! `k:{"key":value,...}` (a list-map item, key fields sorted by name), `v:<json>` (a set-list item). A node
//! that is itself in the set (a member) is a leaf `{}` when it has no children, otherwise it carries `".": {}`.
//! Keeping the serialized element as the key makes the JSON form and the set the same shape, and `BTreeMap`
//! order (`.` < `f:` < `k:` < `v:`) is upstream's serialization order.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Why a `fieldsV1` document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldSetError {
    /// A node that is not a JSON object.
    #[error("fieldsV1 node at {0:?} is not an object")]
    NotObject(String),
    /// A key with an unknown prefix.
    #[error("fieldsV1 has an unknown path element {0:?}")]
    BadElement(String),
}

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    /// Whether the path leading to this node is itself in the set.
    pub member: bool,
    /// Children by serialized path element.
    pub children: BTreeMap<String, FieldSet>,
}

/// A path element for a named field or map key.
pub fn field(name: &str) -> String {
    format!("f:{name}")
}

/// A path element for a set item.
pub fn value(v: &Value) -> String {
    format!("v:{v}")
}

/// A path element for a list-map item from its key fields (serde_json maps keep keys sorted).
pub fn key(fields: Map<String, Value>) -> String {
    format!("k:{}", Value::Object(fields))
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding only its own node (a leaf).
    pub fn leaf() -> Self {
        FieldSet {
            member: true,
            children: BTreeMap::new(),
        }
    }

    /// Whether no path is in the set.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// The child for an element, created if missing.
    pub fn child(&mut self, element: String) -> &mut FieldSet {
        self.children.entry(element).or_default()
    }

    /// Adds a child subtree unless it is empty.
    pub fn put(&mut self, element: String, sub: FieldSet) {
        if !sub.is_empty() {
            self.child(element).union_with(&sub);
        }
    }

    /// Inserts one path as a member.
    pub fn insert(&mut self, path: &[&str]) {
        let mut node = self;
        for e in path {
            node = node.child((*e).to_string());
        }
        node.member = true;
    }

    /// Whether a path is a member.
    pub fn has(&self, path: &[&str]) -> bool {
        let mut node = self;
        for e in path {
            match node.children.get(*e) {
                Some(n) => node = n,
                None => return false,
            }
        }
        node.member
    }

    /// Adds every path of `other`.
    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, v) in &other.children {
            match self.children.get_mut(k) {
                Some(mine) => mine.union_with(v),
                None => {
                    self.children.insert(k.clone(), v.clone());
                }
            }
        }
    }

    /// The paths of `self` that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = v.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Whether the sets share any path.
    pub fn intersects(&self, other: &FieldSet) -> bool {
        if self.member && other.member {
            return true;
        }
        self.children
            .iter()
            .any(|(k, v)| other.children.get(k).is_some_and(|o| v.intersects(o)))
    }

    /// The same set with every named-field node (`f:`) a member, so that pruning a field's last owned
    /// child removes the field as well.
    pub fn with_named_fields(&self) -> FieldSet {
        let mut out = FieldSet {
            member: self.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let mut c = v.with_named_fields();
            if k.starts_with("f:") {
                c.member = true;
            }
            out.children.insert(k.clone(), c);
        }
        out
    }

    /// Every member path, as lists of serialized elements, in set order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect(&mut prefix, &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON form.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, v) in &self.children {
            m.insert(k.clone(), v.to_json());
        }
        Value::Object(m)
    }

    /// Reads the `fieldsV1` JSON form.
    pub fn from_json(v: &Value) -> Result<FieldSet, FieldSetError> {
        Self::read(v, "")
    }

    fn read(v: &Value, at: &str) -> Result<FieldSet, FieldSetError> {
        let m = v
            .as_object()
            .ok_or_else(|| FieldSetError::NotObject(at.to_string()))?;
        let mut out = FieldSet::new();
        for (k, child) in m {
            if k == "." {
                out.member = true;
                continue;
            }
            if !(k.starts_with("f:")
                || k.starts_with("k:")
                || k.starts_with("v:")
                || k.starts_with("i:"))
            {
                return Err(FieldSetError::BadElement(k.clone()));
            }
            let mut c = Self::read(child, k)?;
            if c.children.is_empty() {
                c.member = true;
            }
            out.children.insert(k.clone(), c);
        }
        Ok(out)
    }
}

/// A path as upstream prints it in conflict messages: `.spec.replicas`,
/// `.spec.template.spec.containers[name="c"].image`, `.metadata.finalizers[="x"]`.
pub fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            match serde_json::from_str::<Map<String, Value>>(k) {
                Ok(m) => {
                    let parts: Vec<String> = m.iter().map(|(n, v)| format!("{n}={v}")).collect();
                    out.push_str(&format!("[{}]", parts.join(",")));
                }
                Err(_) => out.push_str(&format!("[{k}]")),
            }
        } else if let Some(v) = e.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(i) = e.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        } else {
            out.push_str(e);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trip_keeps_dot_and_leaves() {
        let j = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                       "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}});
        let s = FieldSet::from_json(&j).expect("parse");
        assert!(s.has(&["f:metadata", "f:labels"]));
        assert!(s.has(&["f:metadata", "f:labels", "f:app"]));
        assert!(!s.has(&["f:metadata"]));
        assert!(s.has(&["f:spec", "f:containers", "k:{\"name\":\"c\"}"]));
        assert_eq!(s.to_json(), j);
        assert_eq!(
            serde_json::to_string(&s.to_json()).expect("json"),
            r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{}}}}}"#
        );
        assert!(FieldSet::from_json(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_json(&json!({"f:y": 1})).is_err());
    }

    #[test]
    fn union_difference_intersection() {
        let mut a = FieldSet::new();
        a.insert(&["f:spec", "f:replicas"]);
        a.insert(&["f:spec", "f:paused"]);
        let mut b = FieldSet::new();
        b.insert(&["f:spec", "f:replicas"]);
        b.insert(&["f:metadata", "f:labels", "f:x"]);
        let d = a.difference(&b);
        assert_eq!(
            d.paths(),
            vec![vec!["f:spec".to_string(), "f:paused".into()]]
        );
        let i = a.intersection(&b);
        assert_eq!(
            i.paths(),
            vec![vec!["f:spec".to_string(), "f:replicas".into()]]
        );
        assert!(a.intersects(&b));
        assert!(!d.intersects(&b));
        let mut u = a.clone();
        u.union_with(&b);
        assert_eq!(u.paths().len(), 3);
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn named_fields_become_members() {
        let mut a = FieldSet::new();
        a.insert(&["f:spec", "f:containers", "k:{\"name\":\"c\"}", "f:image"]);
        let n = a.with_named_fields();
        assert!(n.has(&["f:spec"]));
        assert!(n.has(&["f:spec", "f:containers"]));
        assert!(!n.has(&["f:spec", "f:containers", "k:{\"name\":\"c\"}"]));
    }

    #[test]
    fn paths_print_like_upstream() {
        let p = vec![
            field("spec"),
            field("template"),
            field("spec"),
            field("containers"),
            key(json!({"name": "c"})
                .as_object()
                .cloned()
                .unwrap_or_default()),
            field("image"),
        ];
        assert_eq!(
            path_string(&p),
            ".spec.template.spec.containers[name=\"c\"].image"
        );
        let ports = key(json!({"protocol": "TCP", "containerPort": 80})
            .as_object()
            .cloned()
            .unwrap_or_default());
        assert_eq!(ports, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}");
        assert_eq!(path_string(&[ports]), "[containerPort=80,protocol=\"TCP\"]");
        assert_eq!(
            path_string(&[field("metadata"), field("finalizers"), value(&json!("x"))]),
            ".metadata.finalizers[=\"x\"]"
        );
    }
}
