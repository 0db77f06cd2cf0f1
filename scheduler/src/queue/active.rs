//! activeQ: the pods ready to be tried, ordered as PrioritySort orders them (higher `spec.priority`
//! first, then the one queued earlier).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use super::QueuedPod;

type Order = (Reverse<i32>, u64);

/// Pods waiting for a scheduling attempt.
#[derive(Debug, Default)]
pub struct ActiveQ {
    order: BTreeMap<Order, String>,
    pods: HashMap<String, (Order, QueuedPod)>,
}

impl ActiveQ {
    /// Queues `qp` behind the pods of its priority queued before (`seq` is its enqueue order).
    pub fn push(&mut self, qp: QueuedPod, seq: u64) {
        self.remove(&qp.info.key);
        let order = (Reverse(qp.info.priority), seq);
        self.order.insert(order, qp.info.key.clone());
        self.pods.insert(qp.info.key.clone(), (order, qp));
    }

    /// The first pod in PrioritySort order.
    pub fn pop(&mut self) -> Option<QueuedPod> {
        let (_, key) = self.order.pop_first()?;
        self.pods.remove(&key).map(|(_, qp)| qp)
    }

    /// Takes `key` out.
    pub fn remove(&mut self, key: &str) -> Option<QueuedPod> {
        let (order, qp) = self.pods.remove(key)?;
        self.order.remove(&order);
        Some(qp)
    }

    /// The queued pod `key`, to update in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut QueuedPod> {
        self.pods.get_mut(key).map(|(_, qp)| qp)
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
