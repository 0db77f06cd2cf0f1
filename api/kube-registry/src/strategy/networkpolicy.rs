//! NetworkPolicies (upstream's `pkg/apis/networking/v1` defaults): every port's protocol is TCP unless
//! given, and a policy without `policyTypes` is an Ingress policy, and an Egress one too when it has egress
//! rules. Generation counts spec changes (the resource table's `gen`).

use serde_json::{json, Value};

use super::Strategy;
use crate::resource::ResourceDef;
use crate::validation::defaults::set_default;

pub(super) struct NetworkPolicy;

impl Strategy for NetworkPolicy {
    fn set_defaults(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        for rules in ["ingress", "egress"] {
            let Some(list) = spec.get_mut(rules).and_then(Value::as_array_mut) else {
                continue;
            };
            for rule in list {
                let ports = rule.get_mut("ports").and_then(Value::as_array_mut);
                for port in ports.into_iter().flatten() {
                    if let Some(p) = port.as_object_mut() {
                        set_default(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
        let none = spec
            .get("policyTypes")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if none {
            let egress = spec
                .get("egress")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty());
            let types = if egress {
                json!(["Ingress", "Egress"])
            } else {
                json!(["Ingress"])
            };
            spec.insert("policyTypes".into(), types);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource;

    fn defaulted(mut v: Value) -> Value {
        let def = resource::find("networking.k8s.io", "v1", "networkpolicies").expect("def");
        NetworkPolicy.set_defaults(&def, &mut v);
        v
    }

    #[test]
    fn policy_types_and_port_protocols_as_upstream() {
        let v = defaulted(json!({"spec": {"podSelector": {}}}));
        assert_eq!(v["spec"]["policyTypes"], json!(["Ingress"]));
        let v = defaulted(
            json!({"spec": {"egress": [{"ports": [{"port": 53}, {"port": 53, "protocol": "UDP"}]}]}}),
        );
        assert_eq!(v["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(
            v["spec"]["egress"][0]["ports"],
            json!([{"port": 53, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}])
        );
        let v = defaulted(json!({"spec": {"policyTypes": ["Egress"]}}));
        assert_eq!(v["spec"]["policyTypes"], json!(["Egress"]));
    }
}
