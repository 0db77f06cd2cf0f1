//! NodeRestriction: what an agent (`system:node:<name>`) may write is limited to its own Node, its own
//! Lease, its pods' status and mirror pods bound to it, as upstream's admission plugin does. Reads are the
//! Node authorizer's business (`authz::node`).

use serde_json::Value;

use crate::authn::Identity;
use crate::authz::node::node_name;
use crate::object;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Target};

/// A write's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// The label prefix only administrators may set on Nodes.
const RESTRICTED_LABELS: &str = "node-restriction.kubernetes.io/";
/// Where agents publish the cluster DNS resolver (the Service, and one EndpointSlice per node).
const DNS_NAMESPACE: &str = "kube-system";
const DNS_SERVICE: &str = "kube-dns";
/// The annotation that marks a mirror pod.
const MIRROR: &str = "kubernetes.io/config.mirror";

/// Refuses an agent's write outside its own objects; anyone else passes.
pub fn admit(
    user: &Identity,
    def: &ResourceDef,
    subresource: Option<&str>,
    op: Operation,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(node) = node_name(user) else {
        return Ok(());
    };
    let obj = new.or(old);
    let name = obj.map(object::name).unwrap_or("");
    let refuse = |why: String| {
        let target = Target::new(&def.group, &def.plural, name);
        ApiError::Forbidden {
            message: format!("{} {name:?} is forbidden: {why}", target.qualified()),
            target,
        }
    };
    let bound_here = |v: Option<&Value>| {
        v.and_then(|p| object::path(p, "spec.nodeName"))
            .and_then(Value::as_str)
            == Some(node)
    };
    match (def.group.as_ref(), def.plural.as_ref()) {
        ("", "pods") => match (subresource, op) {
            (None, Operation::Create) => {
                let mirror = new
                    .and_then(|p| object::path(p, "metadata.annotations"))
                    .and_then(|a| a.get(MIRROR))
                    .is_some();
                if !mirror {
                    return Err(refuse(format!(
                        "pod does not have \"{MIRROR}\" annotation, node {node:?} can only create mirror pods"
                    )));
                }
                if !bound_here(new) {
                    return Err(refuse(format!(
                        "node {node:?} can only create pods with spec.nodeName set to itself"
                    )));
                }
                Ok(())
            }
            (None, Operation::Delete) if !bound_here(old) => Err(refuse(format!(
                "node {node:?} can only delete pods with spec.nodeName set to itself"
            ))),
            (None, Operation::Delete) => Ok(()),
            (None, Operation::Update) => Err(refuse(format!(
                "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
            ))),
            (Some("status"), _) if !bound_here(old) => Err(refuse(format!(
                "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
            ))),
            (Some("status") | Some("eviction"), _) => Ok(()),
            (Some(other), _) => Err(refuse(format!(
                "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
            ))),
        },
        ("", "nodes") => {
            if name != node {
                return Err(refuse(format!("node {node:?} is not allowed to modify node {name:?}")));
            }
            let labels = |v: Option<&Value>| -> Vec<(String, String)> {
                v.and_then(|o| object::path(o, "metadata.labels"))
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter(|(k, _)| k.contains(RESTRICTED_LABELS))
                            .map(|(k, v)| (k.clone(), v.to_string()))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if op != Operation::Delete && labels(new) != labels(old) {
                let mut keys: Vec<String> = labels(new).into_iter().map(|(k, _)| k).collect();
                keys.extend(labels(old).into_iter().map(|(k, _)| k));
                keys.sort();
                keys.dedup();
                return Err(refuse(format!(
                    "is not allowed to modify labels: {}",
                    keys.join(", ")
                )));
            }
            Ok(())
        }
        ("coordination.k8s.io", "leases") => {
            let ns = obj.map(object::namespace).unwrap_or("");
            if ns == "kube-node-lease" && name != node {
                return Err(refuse(
                    "can only access node lease with the same name as the requesting node".into(),
                ));
            }
            Ok(())
        }
        // The agent's local-path provisioner makes the volumes of its own node, and only those.
        ("", "persistentvolumes") => {
            if op == Operation::Create && !obj.is_some_and(|v| crate::authz::node::local_path_on(v, node)) {
                return Err(refuse(format!(
                    "node {node:?} can only create local-path volumes (provisioned by keel.io/local-path) bound to itself by node affinity"
                )));
            }
            Ok(())
        }
        // keel's agents publish their cluster DNS resolver (the `keel:agent-dns` Role allows the
        // verbs): the shared Service, created once, and each node's own EndpointSlice.
        ("", "services") => {
            let ns = obj.map(object::namespace).unwrap_or("");
            if op != Operation::Create || ns != DNS_NAMESPACE || name != DNS_SERVICE {
                return Err(refuse(format!(
                    "node {node:?} can only create the cluster DNS Service {DNS_NAMESPACE}/{DNS_SERVICE}"
                )));
            }
            Ok(())
        }
        ("discovery.k8s.io", "endpointslices") => {
            let ns = obj.map(object::namespace).unwrap_or("");
            let own = format!("{DNS_SERVICE}-{node}");
            let service = obj
                .and_then(|o| object::path(o, "metadata.labels"))
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .and_then(Value::as_str);
            if ns != DNS_NAMESPACE || name != own || service != Some(DNS_SERVICE) {
                return Err(refuse(format!(
                    "node {node:?} can only write its own cluster DNS EndpointSlice {DNS_NAMESPACE}/{own} (for Service {DNS_SERVICE})"
                )));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent() -> Identity {
        Identity {
            user: "system:node:w1".into(),
            groups: vec!["system:nodes".into()],
        }
    }

    #[test]
    fn an_agent_writes_only_its_own() {
        let pods = crate::resource::find("", "v1", "pods").expect("pods");
        let nodes = crate::resource::find("", "v1", "nodes").expect("nodes");
        let mine = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "w1"}});
        let theirs = json!({"metadata": {"name": "q"}, "spec": {"nodeName": "w2"}});
        assert!(admit(
            &agent(),
            &pods,
            Some("status"),
            Operation::Update,
            Some(&mine),
            Some(&mine)
        )
        .is_ok());
        let e = admit(
            &agent(),
            &pods,
            Some("status"),
            Operation::Update,
            Some(&theirs),
            Some(&theirs),
        )
        .expect_err("other node's pod");
        assert!(
            e.to_string()
                .contains("can only update pod status for pods with spec.nodeName set to itself"),
            "{e}"
        );
        assert!(admit(&agent(), &pods, None, Operation::Create, None, Some(&mine)).is_err());
        let node = json!({"metadata": {"name": "w2"}});
        assert!(admit(
            &agent(),
            &nodes,
            None,
            Operation::Update,
            Some(&node),
            Some(&node)
        )
        .is_err());
        let own = json!({"metadata": {"name": "w1", "labels": {"node-restriction.kubernetes.io/x": "y"}}});
        assert!(admit(
            &agent(),
            &nodes,
            None,
            Operation::Update,
            Some(&json!({"metadata": {"name": "w1"}})),
            Some(&own)
        )
        .is_err());
        let mirror = json!({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}},
                            "spec": {"nodeName": "w1"}});
        assert!(
            admit(
                &agent(),
                &pods,
                None,
                Operation::Create,
                None,
                Some(&mirror)
            )
            .is_ok(),
            "its own mirror pod"
        );
        let services = crate::resource::find("", "v1", "services").expect("services");
        let slices =
            crate::resource::find("discovery.k8s.io", "v1", "endpointslices").expect("slices");
        let dns = json!({"metadata": {"name": "kube-dns", "namespace": "kube-system"}});
        let create =
            |def, obj: &Value| admit(&agent(), def, None, Operation::Create, None, Some(obj));
        assert!(create(&services, &dns).is_ok(), "the cluster DNS Service");
        let other = json!({"metadata": {"name": "web", "namespace": "kube-system"}});
        let e = create(&services, &other).expect_err("another Service");
        assert!(
            e.to_string()
                .contains("can only create the cluster DNS Service kube-system/kube-dns"),
            "{e}"
        );
        assert!(admit(
            &agent(),
            &services,
            None,
            Operation::Update,
            Some(&dns),
            Some(&dns)
        )
        .is_err());
        let slice = |name: &str, service: &str| {
            json!({"metadata": {"name": name, "namespace": "kube-system",
                                "labels": {"kubernetes.io/service-name": service}}})
        };
        assert!(
            create(&slices, &slice("kube-dns-w1", "kube-dns")).is_ok(),
            "its own slice"
        );
        for (name, service) in [("kube-dns-w2", "kube-dns"), ("kube-dns-w1", "web")] {
            let e = create(&slices, &slice(name, service)).expect_err("not its own slice");
            assert!(
                e.to_string().contains(
                    "can only write its own cluster DNS EndpointSlice kube-system/kube-dns-w1"
                ),
                "{e}"
            );
        }
        let admin = Identity {
            user: "admin".into(),
            groups: vec![],
        };
        assert!(admit(&admin, &pods, None, Operation::Create, None, Some(&theirs)).is_ok());
    }
}
