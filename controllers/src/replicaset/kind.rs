//! The kinds whose pods the replica logic keeps: apps/v1 ReplicaSets, and core/v1
//! ReplicationControllers seen as ReplicaSets (upstream's replication manager runs the ReplicaSet
//! controller over the same conversion: a label map becomes `matchLabels`).

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::{
    ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::core::v1::{
    ReplicationController, ReplicationControllerCondition, ReplicationControllerSpec,
    ReplicationControllerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A kind the replica logic manages, with what differs between them.
pub trait Replicated:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    /// The kind in owner references.
    const KIND: &'static str;
    /// The apiVersion in owner references.
    const API_VERSION: &'static str;
    /// The controller's name (upstream's) and the component of its Events.
    const CONTROLLER: &'static str;
    /// The component its Events are reported by.
    const COMPONENT: &'static str;

    /// The object as a ReplicaSet: metadata, spec and status carried over.
    fn as_replica_set(&self) -> ReplicaSet;

    /// Replaces the status with one computed as a ReplicaSet's.
    fn set_status(&mut self, status: ReplicaSetStatus);
}

impl Replicated for ReplicaSet {
    const KIND: &'static str = "ReplicaSet";
    const API_VERSION: &'static str = "apps/v1";
    const CONTROLLER: &'static str = "replicaset";
    const COMPONENT: &'static str = "replicaset-controller";

    fn as_replica_set(&self) -> ReplicaSet {
        self.clone()
    }

    fn set_status(&mut self, status: ReplicaSetStatus) {
        self.status = Some(status);
    }
}

fn rs_spec(spec: &ReplicationControllerSpec) -> ReplicaSetSpec {
    ReplicaSetSpec {
        replicas: spec.replicas,
        min_ready_seconds: spec.min_ready_seconds,
        selector: LabelSelector {
            match_labels: spec.selector.clone(),
            match_expressions: None,
        },
        template: spec.template.clone(),
    }
}

fn rs_status(s: &ReplicationControllerStatus) -> ReplicaSetStatus {
    ReplicaSetStatus {
        replicas: s.replicas,
        fully_labeled_replicas: s.fully_labeled_replicas,
        ready_replicas: s.ready_replicas,
        available_replicas: s.available_replicas,
        observed_generation: s.observed_generation,
        conditions: s.conditions.as_ref().map(|cs| {
            cs.iter()
                .map(|c| ReplicaSetCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: c.last_transition_time.clone(),
                })
                .collect()
        }),
    }
}

fn rc_status(s: ReplicaSetStatus) -> ReplicationControllerStatus {
    ReplicationControllerStatus {
        replicas: s.replicas,
        fully_labeled_replicas: s.fully_labeled_replicas,
        ready_replicas: s.ready_replicas,
        available_replicas: s.available_replicas,
        observed_generation: s.observed_generation,
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .map(|c| ReplicationControllerCondition {
                    type_: c.type_,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    last_transition_time: c.last_transition_time,
                })
                .collect()
        }),
    }
}

impl Replicated for ReplicationController {
    const KIND: &'static str = "ReplicationController";
    const API_VERSION: &'static str = "v1";
    const CONTROLLER: &'static str = "replicationcontroller";
    const COMPONENT: &'static str = "replication-controller";

    fn as_replica_set(&self) -> ReplicaSet {
        ReplicaSet {
            metadata: self.metadata.clone(),
            spec: self.spec.as_ref().map(rs_spec),
            status: self.status.as_ref().map(rs_status),
        }
    }

    fn set_status(&mut self, status: ReplicaSetStatus) {
        self.status = Some(rc_status(status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_controller_converts_to_a_replica_set_and_its_status_back() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let rc = ReplicationController {
            spec: Some(ReplicationControllerSpec {
                replicas: Some(3),
                selector: Some(labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let rs = rc.as_replica_set();
        let spec = rs.spec.clone().unwrap_or_default();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.selector.match_labels, Some(labels));
        let mut back = rc.clone();
        let status = ReplicaSetStatus {
            replicas: 2,
            ready_replicas: Some(1),
            observed_generation: Some(4),
            ..Default::default()
        };
        back.set_status(status.clone());
        assert_eq!(back.as_replica_set().status, Some(status));
    }
}
