//! How server-side apply treats each part of an object, from the generated schema table: named-field structs,
//! string-keyed maps, list maps (items identified by key fields), sets, and atomic values.
//!
//! List semantics come from `x-kubernetes-list-type`/`-list-map-keys`; where a built-in list has none, the
//! strategic-merge-patch markers decide, as upstream's schema conversion does (strategy `merge` with a merge
//! key is a list map, without one a set; everything else is atomic). Kinds without a schema are "deduced":
//! objects merge per key, lists are atomic.

use serde_json::{Map, Value};

use super::fieldset;
use crate::protobuf::schema::{self, Field, FieldType, Message};

/// Messages upstream marks `+structType=atomic`: replaced and owned as a whole.
const ATOMIC_STRUCTS: &[&str] = &[
    "apimachinery.pkg.apis.meta.v1.LabelSelector",
    "api.core.v1.ObjectReference",
    "api.core.v1.LocalObjectReference",
    "api.core.v1.TypedLocalObjectReference",
    "api.core.v1.TypedObjectReference",
    "api.core.v1.NodeSelector",
    "api.core.v1.NodeSelectorTerm",
    "api.core.v1.ConfigMapKeySelector",
    "api.core.v1.SecretKeySelector",
    "api.core.v1.ObjectFieldSelector",
    "api.core.v1.ResourceFieldSelector",
];

/// Struct fields Go always serializes (value, not pointer, fields), by path from the object: upstream compares
/// a create against the zero object of the kind, where these are present and empty, so they are not marked as
/// added themselves.
const VALUE_STRUCTS: &[&str] = &[
    "metadata",
    "spec",
    "status",
    "template",
    "template.metadata",
    "template.spec",
    "spec.template",
    "spec.template.metadata",
    "spec.template.spec",
    "spec.strategy",
    "spec.updateStrategy",
    "spec.jobTemplate",
    "spec.jobTemplate.metadata",
    "spec.jobTemplate.spec",
    "spec.jobTemplate.spec.template",
    "spec.jobTemplate.spec.template.metadata",
    "spec.jobTemplate.spec.template.spec",
    "status.loadBalancer",
    "status.daemonEndpoints",
    "status.daemonEndpoints.kubeletEndpoint",
    "status.nodeInfo",
];

/// Lists Go always serializes (no `omitempty`): `null` in the zero object, so not marked as added themselves.
const NULL_LISTS: &[&str] = &[
    "spec.containers",
    "template.spec.containers",
    "spec.template.spec.containers",
    "spec.jobTemplate.spec.template.spec.containers",
    "endpoints",
    "rules",
];

/// What a value's elements are.
#[derive(Debug, Clone, Copy)]
pub enum Elem {
    /// An object with named fields.
    Struct(&'static Message),
    /// Anything replaced as a whole.
    Leaf,
    /// No schema.
    Deduced,
}

/// How a value merges and is owned.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// An object with named fields.
    Struct(&'static Message),
    /// A string-keyed map of `Elem`s (labels, data, ...).
    Map(Elem),
    /// A list whose items are identified by these key fields.
    ListMap(&'static [String], Elem),
    /// A list of distinct primitive values.
    Set,
    /// Replaced and owned as a whole.
    Leaf,
    /// No schema: objects are maps of deduced values, everything else is a leaf.
    Deduced,
}

impl Shape {
    /// The shape of a served kind's top-level object.
    pub fn of_kind(api_version: &str, kind: &str) -> Shape {
        match schema::message_for(api_version, kind).and_then(|n| schema::messages().get(&n)) {
            Some(m) => Shape::Struct(m),
            None => Shape::Deduced,
        }
    }

    /// The zero object of a kind as upstream's typed objects serialize it: its value structs, empty.
    pub fn zero_object(&self) -> Value {
        let mut out = Value::Object(Map::new());
        let paths = VALUE_STRUCTS.iter().map(|p| (p, false));
        'paths: for (path, list) in paths.chain(NULL_LISTS.iter().map(|p| (p, true))) {
            let mut shape = *self;
            let mut node = &mut out;
            let parts: Vec<&str> = path.split('.').collect();
            for (i, part) in parts.iter().enumerate() {
                let (child, named) = shape.child(part);
                let last_list = list && i + 1 == parts.len();
                let fits = if last_list {
                    child.is_list()
                } else {
                    matches!(child, Shape::Struct(_))
                };
                if !named || !fits {
                    continue 'paths;
                }
                shape = child;
                let Some(m) = node.as_object_mut() else {
                    continue 'paths;
                };
                let empty = if last_list {
                    Value::Null
                } else {
                    Value::Object(Map::new())
                };
                node = m.entry(part.to_string()).or_insert(empty);
            }
        }
        out
    }

    /// The shape of the child `key` of an object of this shape, and whether `key` is a named field.
    pub fn child(&self, key: &str) -> (Shape, bool) {
        match self {
            Shape::Struct(m) => match m.by_json(key) {
                Some(f) => (of_field(f), true),
                None => (Shape::Deduced, false),
            },
            Shape::Map(e) => (of_elem(*e), false),
            _ => (Shape::Deduced, false),
        }
    }

    /// The shape of an item of a list of this shape.
    pub fn item(&self) -> Shape {
        match self {
            Shape::ListMap(_, e) => of_elem(*e),
            _ => Shape::Leaf,
        }
    }

    /// Whether values of this shape are replaced and owned as a whole.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Shape::Leaf)
    }

    /// Whether this shape merges objects.
    pub fn is_object(&self) -> bool {
        matches!(self, Shape::Struct(_) | Shape::Map(_) | Shape::Deduced)
    }

    /// Whether this shape merges lists item by item.
    pub fn is_list(&self) -> bool {
        matches!(self, Shape::ListMap(..) | Shape::Set)
    }

    /// The path element of a list item (`k:` for list maps, `v:` for sets).
    pub fn item_element(&self, item: &Value) -> String {
        match self {
            Shape::ListMap(keys, _) => {
                let mut m = Map::new();
                if let Some(obj) = item.as_object() {
                    for k in keys.iter() {
                        match obj.get(k) {
                            Some(v) => {
                                m.insert(k.clone(), v.clone());
                            }
                            // Upstream fills a missing `protocol` key with its schema default.
                            None if k == "protocol" => {
                                m.insert(k.clone(), Value::String("TCP".into()));
                            }
                            None => {}
                        }
                    }
                }
                if m.is_empty() {
                    fieldset::value(item)
                } else {
                    fieldset::key(m)
                }
            }
            _ => fieldset::value(item),
        }
    }
}

fn of_elem(e: Elem) -> Shape {
    match e {
        Elem::Struct(m) => Shape::Struct(m),
        Elem::Leaf => Shape::Leaf,
        Elem::Deduced => Shape::Deduced,
    }
}

fn elem_of(ty: &FieldType) -> Elem {
    match ty {
        FieldType::Message(n) if schema::is_wrapper(n) || ATOMIC_STRUCTS.contains(&n.as_str()) => {
            Elem::Leaf
        }
        FieldType::Message(n) => match schema::messages().get(n) {
            Some(m) => Elem::Struct(m),
            None => Elem::Deduced,
        },
        _ => Elem::Leaf,
    }
}

fn of_field(f: &'static Field) -> Shape {
    if f.repeated {
        let merges = f.merges();
        return match (f.list_type.as_deref(), f.patch_merge_key.as_deref()) {
            (Some("atomic"), _) => Shape::Leaf,
            (Some("set"), _) => Shape::Set,
            (Some("map"), _) if !f.list_map_keys.is_empty() => {
                Shape::ListMap(&f.list_map_keys, elem_of(&f.ty))
            }
            (None, Some(_)) if merges => {
                Shape::ListMap(std::slice::from_ref(pmk(f)), elem_of(&f.ty))
            }
            (None, None) if merges => Shape::Set,
            _ => Shape::Leaf,
        };
    }
    match &f.ty {
        FieldType::Map(inner) => {
            if f.map_type.as_deref() == Some("atomic") {
                Shape::Leaf
            } else {
                Shape::Map(elem_of(inner))
            }
        }
        FieldType::Message(n) if schema::is_wrapper(n) => {
            // RawExtension and FieldsV1 hold free-form JSON; the rest are scalars.
            Shape::Leaf
        }
        ty => of_elem(elem_of(ty)),
    }
}

/// The merge key of a field known to have one.
fn pmk(f: &'static Field) -> &'static String {
    static EMPTY: String = String::new();
    f.patch_merge_key.as_ref().unwrap_or(&EMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deployment_shapes() {
        let d = Shape::of_kind("apps/v1", "Deployment");
        let (spec, named) = d.child("spec");
        assert!(named);
        assert!(spec.child("selector").0.is_leaf());
        assert!(spec.child("replicas").0.is_leaf());
        let pod = spec.child("template").0.child("spec").0;
        let containers = pod.child("containers").0;
        assert!(matches!(containers, Shape::ListMap(k, _) if k == ["name"]));
        assert_eq!(
            containers.item_element(&json!({"name": "c", "image": "x"})),
            "k:{\"name\":\"c\"}"
        );
        let ports = containers.item().child("ports").0;
        assert_eq!(
            ports.item_element(&json!({"containerPort": 80})),
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}"
        );
        assert!(pod.child("nodeSelector").0.is_leaf());
        let meta = d.child("metadata").0;
        assert!(matches!(meta.child("labels").0, Shape::Map(Elem::Leaf)));
        assert!(matches!(meta.child("finalizers").0, Shape::Set));
        assert!(matches!(Shape::of_kind("x.io/v1", "Foo"), Shape::Deduced));
        assert_eq!(
            d.zero_object(),
            json!({"metadata": {}, "status": {}, "spec": {"strategy": {},
                "template": {"metadata": {}, "spec": {"containers": null}}}})
        );
        assert_eq!(
            Shape::of_kind("v1", "ConfigMap").zero_object(),
            json!({"metadata": {}})
        );
    }
}
