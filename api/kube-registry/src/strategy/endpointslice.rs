//! EndpointSlices (upstream's `pkg/registry/discovery/endpointslice` and discovery/v1 defaults): a port
//! without a name or protocol gets `""` and `TCP`; generation 1 on create, bumped by any change beyond
//! the metadata, or of the labels (a slice has no spec to count).

use serde_json::{json, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::validation::defaults::set_default;

pub(super) struct EndpointSlice;

impl Strategy for EndpointSlice {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(ports) = obj.get_mut("ports").and_then(Value::as_array_mut) else {
            return;
        };
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            // A name is a pointer upstream: only a missing one is defaulted, "" stays "".
            if matches!(p.get("name"), None | Some(Value::Null)) {
                p.insert("name".into(), json!(""));
            }
            set_default(p, "protocol", json!("TCP"));
        }
    }

    fn generation_changes(&self, _def: &ResourceDef, old: &Value, new: &Value) -> bool {
        let without_meta = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        };
        without_meta(old) != without_meta(new)
            || old.pointer("/metadata/labels") != new.pointer("/metadata/labels")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    #[test]
    fn ports_get_a_name_and_a_protocol_and_changes_count_generations() {
        let def = resource::find("discovery.k8s.io", "v1", "endpointslices").expect("slices");
        let mut s = json!({"addressType": "IPv4", "endpoints": [],
                           "ports": [{"port": 80}, {"name": "x", "protocol": "UDP", "port": 53}]});
        EndpointSlice.set_defaults(&def, &mut s);
        assert_eq!(
            s["ports"],
            json!([{"name": "", "protocol": "TCP", "port": 80},
                   {"name": "x", "protocol": "UDP", "port": 53}])
        );
        let mut relabelled = s.clone();
        relabelled["metadata"] = json!({"labels": {"a": "b"}});
        assert!(EndpointSlice.generation_changes(&def, &s, &relabelled));
        let mut annotated = s.clone();
        annotated["metadata"] = json!({"annotations": {"a": "b"}});
        assert!(!EndpointSlice.generation_changes(&def, &s, &annotated));
        let mut moved = s.clone();
        moved["endpoints"] = json!([{"addresses": ["10.0.0.1"]}]);
        assert!(EndpointSlice.generation_changes(&def, &s, &moved));
    }
}
