//! unschedulablePods: pods no node fits. They wait for a cluster event that may change that (a node
//! added or changed, a pod deleted) or, at the latest, [`MAX_UNSCHEDULABLE`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::QueuedPod;

/// How long a pod stays here without an event (upstream's `DefaultPodMaxInUnschedulablePodsDuration`).
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// Pods waiting for the cluster to change.
#[derive(Debug, Default)]
pub struct Unschedulable {
    pods: HashMap<String, (Instant, QueuedPod)>,
}

impl Unschedulable {
    /// Parks `qp` as of `now`.
    pub fn push(&mut self, qp: QueuedPod, now: Instant) {
        self.pods.insert(qp.info.key.clone(), (now, qp));
    }

    /// Takes `key` out.
    pub fn remove(&mut self, key: &str) -> Option<QueuedPod> {
        self.pods.remove(key).map(|(_, qp)| qp)
    }

    /// The parked pod `key`, to update in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut QueuedPod> {
        self.pods.get_mut(key).map(|(_, qp)| qp)
    }

    /// Takes every pod out.
    pub fn drain(&mut self) -> Vec<QueuedPod> {
        self.pods.drain().map(|(_, (_, qp))| qp).collect()
    }

    /// Takes out the pods parked for longer than [`MAX_UNSCHEDULABLE`] by `now`.
    pub fn pop_stale(&mut self, now: Instant) -> Vec<QueuedPod> {
        let stale: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, (since, _))| now.duration_since(*since) > MAX_UNSCHEDULABLE)
            .map(|(k, _)| k.clone())
            .collect();
        stale.iter().filter_map(|k| self.remove(k)).collect()
    }

    /// How many pods wait.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod waits.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Keys of the pods here.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.pods.keys()
    }
}
