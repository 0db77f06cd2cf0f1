//! The cluster objects besides nodes and pods that plugins read: namespaces (InterPodAffinity's
//! namespaceSelector), the workloads and Services whose selectors give PodTopologySpread its default
//! constraints, PodDisruptionBudgets (preemption prefers victims whose eviction violates none), and
//! the claims, volumes and StorageClasses the volume plugins read.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Resource;

use crate::informer::Change;

/// Objects of one kind by `namespace/name` (`name` for cluster-scoped kinds).
pub type ByKey<K> = BTreeMap<String, Arc<K>>;

/// Every watched kind other than Node and Pod.
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    /// Namespaces by name.
    pub namespaces: ByKey<Namespace>,
    /// Services.
    pub services: ByKey<Service>,
    /// ReplicaSets.
    pub replica_sets: ByKey<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: ByKey<StatefulSet>,
    /// ReplicationControllers.
    pub replication_controllers: ByKey<ReplicationController>,
    /// PodDisruptionBudgets.
    pub pdbs: ByKey<PodDisruptionBudget>,
    /// PersistentVolumeClaims (VolumeBinding, VolumeRestrictions, VolumeZone).
    pub claims: ByKey<PersistentVolumeClaim>,
    /// PersistentVolumes by name.
    pub volumes: ByKey<PersistentVolume>,
    /// StorageClasses by name.
    pub classes: ByKey<StorageClass>,
}

/// A kind kept in [`ClusterObjects`].
pub trait ClusterKind: Resource<DynamicType = ()> + Sized {
    /// Where objects of this kind live.
    fn slot(objects: &mut ClusterObjects) -> &mut ByKey<Self>;
}

macro_rules! cluster_kind {
    ($kind:ty, $field:ident) => {
        impl ClusterKind for $kind {
            fn slot(objects: &mut ClusterObjects) -> &mut ByKey<Self> {
                &mut objects.$field
            }
        }
    };
}

cluster_kind!(Namespace, namespaces);
cluster_kind!(Service, services);
cluster_kind!(ReplicaSet, replica_sets);
cluster_kind!(StatefulSet, stateful_sets);
cluster_kind!(ReplicationController, replication_controllers);
cluster_kind!(PodDisruptionBudget, pdbs);
cluster_kind!(PersistentVolumeClaim, claims);
cluster_kind!(PersistentVolume, volumes);
cluster_kind!(StorageClass, classes);

/// `namespace/name`, or `name` for a cluster-scoped object.
pub fn key_of<K: Resource>(o: &K) -> String {
    let meta = o.meta();
    let name = meta.name.as_deref().unwrap_or("");
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

impl ClusterObjects {
    /// Applies one watch change of kind `K`.
    pub fn apply<K: ClusterKind>(&mut self, change: Change<K>) {
        let slot = K::slot(self);
        match change {
            Change::Applied(o) => {
                slot.insert(key_of(&o), Arc::new(o));
            }
            Change::Deleted(o) => {
                slot.remove(&key_of(&o));
            }
            Change::Listed(all) => {
                *slot = all.into_iter().map(|o| (key_of(&o), Arc::new(o))).collect();
            }
        }
    }

    /// The labels of namespace `name` (None when the scheduler has not seen it).
    pub fn namespace_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces
            .get(name)
            .map(|n| n.metadata.labels.as_ref().unwrap_or(&EMPTY))
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();
