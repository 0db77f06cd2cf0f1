//! Conversion between served versions and the stored form: `events.k8s.io/v1` Events are stored as core
//! `v1` Events (one storage, as upstream), with their fields renamed both ways; autoscaling/v1
//! HorizontalPodAutoscalers are views of the stored autoscaling/v2 ones ([`hpa_v1`]); custom objects are stored
//! in their CRD's storage version and served in any served version (conversion strategy `None`: only
//! `apiVersion` changes), with schema defaults applied on read as upstream does.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::resource::{self, ResourceDef};

pub mod hpa_v1;

/// (events.k8s.io/v1 field, core/v1 field)
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn is_events_v1(def: &ResourceDef) -> bool {
    def.group == "events.k8s.io"
}

fn is_hpa_v1(def: &ResourceDef) -> bool {
    def.group == "autoscaling" && def.version == "v1" && def.kind == "HorizontalPodAutoscaler"
}

fn rename(obj: &mut Value, forward: bool) {
    let Some(m) = obj.as_object_mut() else { return };
    let mut moved = Map::new();
    for (v1, core) in EVENT_FIELDS {
        let (from, to) = if forward { (v1, core) } else { (core, v1) };
        if let Some(v) = m.remove(*from) {
            moved.insert((*to).to_string(), v);
        }
    }
    m.extend(moved);
}

/// The definition objects of `def` are validated and stored with (events.k8s.io Events are core Events).
pub fn storage_def(def: &Arc<ResourceDef>) -> Arc<ResourceDef> {
    if is_events_v1(def) {
        resource::find("", "v1", "events").unwrap_or_else(|| def.clone())
    } else if is_hpa_v1(def) {
        resource::find("autoscaling", "v2", "horizontalpodautoscalers")
            .unwrap_or_else(|| def.clone())
    } else {
        def.clone()
    }
}

/// Turns an object as the client sent it into its stored form.
pub fn to_storage(def: &ResourceDef, mut obj: Value) -> Value {
    if let Some(c) = &def.custom {
        // Another version of a CRD converted by webhook stays as sent: the API layer calls the webhook.
        if c.conversion_webhook.is_some() && c.storage_version != def.version {
            return obj;
        }
        if let Some(m) = obj.as_object_mut() {
            let av = format!("{}/{}", def.group, c.storage_version);
            m.insert("apiVersion".into(), Value::String(av));
        }
        return obj;
    }
    if is_hpa_v1(def) {
        return hpa_v1::from_v1(obj);
    }
    if is_events_v1(def) {
        rename(&mut obj, true);
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), Value::String("v1".into()));
            m.insert("kind".into(), Value::String("Event".into()));
        }
    }
    obj
}

/// Turns a stored object into the version `def` serves.
pub fn from_storage(def: &ResourceDef, mut obj: Value) -> Value {
    if let Some(c) = &def.custom {
        let served = def.api_version();
        // An object of another version of a CRD converted by webhook keeps its version until the API
        // layer's webhook call; defaults apply to the served version only.
        if c.conversion_webhook.is_some()
            && obj.get("apiVersion").and_then(Value::as_str) != Some(served.as_str())
        {
            return obj;
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), Value::String(served));
        }
        if let Some(s) = &c.schema {
            super::crd::default::apply(s, &mut obj);
        }
        return obj;
    }
    if is_hpa_v1(def) {
        return hpa_v1::to_v1(obj);
    }
    if is_events_v1(def) {
        rename(&mut obj, false);
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), Value::String(def.api_version()));
            m.insert("kind".into(), Value::String(def.kind.to_string()));
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;
    use serde_json::json;

    #[test]
    fn events_round_trip() {
        let def = resource::BUILTIN
            .iter()
            .find(|r| r.group == "events.k8s.io")
            .expect("events.k8s.io");
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "hi",
                        "regarding": {"kind": "Pod", "name": "p"}, "reason": "Started"});
        let stored = to_storage(def, v1.clone());
        assert_eq!(stored["message"], "hi");
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(from_storage(def, stored), v1);
    }
}
