//! Reading and writing the common parts of any object held as JSON: `metadata` fields, timestamps.

use serde_json::{Map, Value};

/// `metadata` of an object, created empty if missing.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let m = force_object(obj)
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    force_object(m)
}

/// `v` as a map, replaced by an empty one first if it is not an object.
fn force_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        // Made an object just above.
        _ => unreachable!("force_object: not an object after replacing it"),
    }
}

/// A string field of `metadata`, "" when absent.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata.name`.
pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

/// `metadata.namespace`.
pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

/// `metadata.uid`.
pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

/// `metadata.labels` as pairs.
pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

/// The strings of a JSON string list (none when `list` is missing or not a list; other items skipped).
pub fn strings(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    strings(obj.get("metadata").and_then(|m| m.get("finalizers")))
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// Sets `metadata.resourceVersion` to a revision.
pub fn set_resource_version(obj: &mut Value, rev: i64) {
    meta_mut(obj).insert("resourceVersion".into(), Value::String(rev.to_string()));
}

/// Removes `metadata.resourceVersion` (it is never stored).
pub fn clear_resource_version(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
}

/// The resourceVersion a client sent, if any; a non-number is a 400 for the caller.
pub fn resource_version(obj: &Value) -> Option<&str> {
    let rv = meta_str(obj, "resourceVersion");
    (!rv.is_empty()).then_some(rv)
}

/// Now as Kubernetes writes timestamps: RFC 3339, whole seconds, `Z`.
pub fn now_rfc3339() -> String {
    timestamp(jiff::Timestamp::now())
}

/// A timestamp in Kubernetes' format.
pub fn timestamp(t: jiff::Timestamp) -> String {
    let secs = t.as_second();
    jiff::Timestamp::from_second(secs)
        .unwrap_or(t)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Parses a Kubernetes timestamp.
pub fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse::<jiff::Timestamp>().ok()
}

/// A fresh UID (UUID v4).
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The value at a dotted path (`spec.nodeName`), if present.
pub fn path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in dotted.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_have_second_precision() {
        let t: jiff::Timestamp = "2026-12-02T10:11:12.987Z".parse().expect("ts");
        assert_eq!(timestamp(t), "2026-12-02T10:11:12Z");
    }

    #[test]
    fn resource_version_round_trip() {
        let mut o = json!({"metadata": {"name": "a"}});
        set_resource_version(&mut o, 42);
        assert_eq!(resource_version(&o), Some("42"));
        clear_resource_version(&mut o);
        assert_eq!(resource_version(&o), None);
        assert_eq!(name(&o), "a");
    }
}
