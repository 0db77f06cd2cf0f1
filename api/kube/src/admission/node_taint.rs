//! The TaintNodesByCondition admission plugin: every Node is created with the
//! `node.kubernetes.io/not-ready:NoSchedule` taint, so no pod is scheduled to it before the node-lifecycle
//! controller has seen its conditions (the controller takes the taint off once the node is Ready).

use serde_json::{json, Value};

use crate::resource::ResourceDef;

/// The taint's key (upstream's `v1.TaintNodeNotReady`).
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Adds the not-ready NoSchedule taint to a Node being created unless one with that key and effect is
/// there (upstream's `MatchTaint`: key and effect, the value does not count). Runs after the field
/// manager, as upstream's mutating admission does, so the taint is nobody's managed field.
pub fn admit_create(def: &ResourceDef, obj: &mut Value) {
    if !(def.group.is_empty() && def.plural == "nodes") {
        return;
    }
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if !taints.is_array() {
        *taints = json!([]);
    }
    let Some(list) = taints.as_array_mut() else {
        return;
    };
    let present = list.iter().any(|t| {
        t.get("key").and_then(Value::as_str) == Some(NOT_READY)
            && t.get("effect").and_then(Value::as_str) == Some("NoSchedule")
    });
    if !present {
        list.push(json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn admitted(group: &str, plural: &str, mut v: Value) -> Value {
        let def = resource::find(group, "v1", plural).expect("def");
        admit_create(&def, &mut v);
        v
    }

    #[test]
    fn a_new_node_gets_the_not_ready_taint_once() {
        let v = admitted("", "nodes", json!({"metadata": {"name": "n"}}));
        assert_eq!(
            v["spec"]["taints"],
            json!([{"key": NOT_READY, "effect": "NoSchedule"}])
        );
        let other = json!({"key": "a", "value": "b", "effect": "NoExecute"});
        let v = admitted("", "nodes", json!({"spec": {"taints": [other.clone()]}}));
        assert_eq!(
            v["spec"]["taints"],
            json!([other, {"key": NOT_READY, "effect": "NoSchedule"}])
        );
        let own = json!({"key": NOT_READY, "value": "x", "effect": "NoSchedule"});
        let v = admitted("", "nodes", json!({"spec": {"taints": [own.clone()]}}));
        assert_eq!(v["spec"]["taints"], json!([own]));
    }

    #[test]
    fn other_kinds_are_left_alone() {
        let v = admitted("", "pods", json!({"spec": {}}));
        assert_eq!(v, json!({"spec": {}}));
    }
}
