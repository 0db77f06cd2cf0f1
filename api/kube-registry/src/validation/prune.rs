//! Unknown fields: upstream's decoder drops them, and with `fieldValidation=Strict` (kubectl's default)
//! refuses the request, with `Warn` answers a warning per field. The known fields of every served kind come
//! from the generated schema table.

use serde_json::Value;

use crate::protobuf::schema::{is_wrapper, messages, FieldType, Message};

fn walk(v: &mut Value, msg: &Message, path: &str, unknown: &mut Vec<String>) {
    let Some(obj) = v.as_object_mut() else { return };
    let mut drop = Vec::new();
    for (k, child) in obj.iter_mut() {
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let Some(field) = msg.by_json(k) else {
            if !(path.is_empty() && (k == "apiVersion" || k == "kind")) {
                unknown.push(here);
                drop.push(k.clone());
            }
            continue;
        };
        let target = match &field.ty {
            FieldType::Message(n) => Some((n.as_str(), false)),
            FieldType::Map(inner) => match inner.as_ref() {
                FieldType::Message(n) => Some((n.as_str(), true)),
                _ => None,
            },
            _ => None,
        };
        let Some((name, is_map)) = target else {
            continue;
        };
        if is_wrapper(name) {
            continue;
        }
        let Some(sub) = messages().get(name) else {
            continue;
        };
        match (child, field.repeated, is_map) {
            (Value::Array(items), true, _) => {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item, sub, &format!("{here}[{i}]"), unknown);
                }
            }
            (Value::Object(entries), _, true) => {
                for (key, item) in entries.iter_mut() {
                    walk(item, sub, &format!("{here}[{key}]"), unknown);
                }
            }
            (child, false, false) => walk(child, sub, &here, unknown),
            _ => {}
        }
    }
    for k in drop {
        obj.remove(&k);
    }
}

/// Removes fields the kind does not have; returns their paths (`spec.replicaz`).
pub fn prune(obj: &mut Value, root: &str) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(msg) = messages().get(root) {
        walk(obj, msg, "", &mut unknown);
    }
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_found_and_dropped() {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "labels": {"a": "b"}, "bogus": 1,
                         "managedFields": [{"fieldsV1": {"f:spec": {}}}]},
            "spec": {"replicaz": 3, "template": {"spec": {"containers": [{"name": "c", "imag": "x",
                     "resources": {"limits": {"cpu": "1"}}}]}}}});
        let unknown = prune(&mut d, "api.apps.v1.Deployment");
        assert_eq!(
            unknown,
            vec![
                "metadata.bogus",
                "spec.replicaz",
                "spec.template.spec.containers[0].imag"
            ]
        );
        assert!(d["spec"].get("replicaz").is_none());
        assert_eq!(d["metadata"]["labels"]["a"], "b");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "1"
        );
        assert_eq!(
            d["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"],
            json!({})
        );
    }

    #[test]
    fn inlined_fields_are_known() {
        // Go's `json:",inline"` structs: a Volume's source, a Probe's handler, a key selector's name.
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"volumes": [{"name": "v", "emptyDir": {}}, {"name": "c", "configMap": {"name": "cm"}}],
                     "containers": [{"name": "c", "image": "x",
                        "livenessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5},
                        "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}]}});
        let mut pruned = pod.clone();
        assert_eq!(prune(&mut pruned, "api.core.v1.Pod"), Vec::<String>::new());
        assert_eq!(pruned, pod);
    }
}

/// Paths of keys that appear twice in the same JSON object (`spec.replicas`); the parsed value keeps the
/// last one, as upstream's non-strict decoding does.
pub fn duplicate_fields(json: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    struct Walk<'a> {
        path: String,
        out: &'a mut Vec<String>,
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    out: self.out,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = if self.path.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", self.path)
                };
                if !seen.insert(key) {
                    self.out.push(path.clone());
                }
                map.next_value_seed(Walk {
                    path,
                    out: self.out,
                })?;
            }
            Ok(())
        }
    }

    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(json);
    let _ = Walk {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut de);
    out
}

#[cfg(test)]
mod duplicate_tests {
    use super::duplicate_fields;

    #[test]
    fn finds_duplicates_with_paths() {
        let d = duplicate_fields(
            br#"{"a":1,"spec":{"replicas":1,"replicas":2,"l":[{"x":1,"x":2}]},"a":3}"#,
        );
        assert_eq!(d, vec!["spec.replicas", "spec.l[0].x", "a"]);
        assert!(duplicate_fields(br#"{"a":{"b":1},"c":{"b":2}}"#).is_empty());
    }
}
