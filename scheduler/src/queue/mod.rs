//! The scheduling queue, shaped as upstream's: [`active::ActiveQ`] (PrioritySort order),
//! [`backoff::BackoffQ`] (per-pod exponential back-off) and [`unschedulable::Unschedulable`] (waiting
//! for a cluster event), plus pods held by `spec.schedulingGates` (the SchedulingGates PreEnqueue) and
//! the pods being scheduled or bound right now (in flight).
//!
//! A pod no node fits goes to unschedulable, unless a cluster event arrived while it was being tried
//! (then to back-off, so it is retried with what changed). A pod that failed for another reason (a
//! failed bind, an API error) goes to back-off. Cluster events move every unschedulable pod to
//! back-off, or straight to active when its back-off is already over.

pub mod active;
pub mod backoff;
pub mod unschedulable;

use std::collections::HashMap;
use std::time::Instant;

use crate::pod_info::{is_gated, PodInfo};
use active::ActiveQ;
use backoff::{backoff_for, BackoffQ};
use unschedulable::Unschedulable;

/// A pod in the queue and its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    /// The pod, as last seen.
    pub info: PodInfo,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the last attempt failed.
    pub last_failure: Option<Instant>,
    /// The scheduling cycle that popped it last.
    pub cycle: u64,
}

impl QueuedPod {
    fn new(info: PodInfo) -> QueuedPod {
        QueuedPod {
            info,
            attempts: 0,
            last_failure: None,
            cycle: 0,
        }
    }

    /// When its back-off ends (None: it has none).
    pub fn backoff_until(&self) -> Option<Instant> {
        self.last_failure.map(|t| t + backoff_for(self.attempts))
    }
}

/// How many pods each part of the queue holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSizes {
    /// activeQ.
    pub active: usize,
    /// backoffQ.
    pub backoff: usize,
    /// unschedulablePods.
    pub unschedulable: usize,
    /// Held by scheduling gates.
    pub gated: usize,
    /// Being scheduled or bound.
    pub in_flight: usize,
}

/// Active, back-off and unschedulable pods, gated pods and pods in flight.
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    active: ActiveQ,
    backoff: BackoffQ,
    unschedulable: Unschedulable,
    gated: HashMap<String, QueuedPod>,
    in_flight: HashMap<String, QueuedPod>,
    seq: u64,
    cycle: u64,
    move_request_cycle: u64,
}

/// Whether an update of a pod can change where it fits (status and resourceVersion changes cannot;
/// the scheduler's own condition writes must not move the pod).
fn changed_for_scheduling(old: &PodInfo, new: &PodInfo) -> bool {
    old.pod.spec != new.pod.spec
        || old.pod.metadata.labels != new.pod.metadata.labels
        || old.pod.metadata.annotations != new.pod.metadata.annotations
}

impl SchedulingQueue {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn push_active(&mut self, qp: QueuedPod) {
        let seq = self.next_seq();
        self.active.push(qp, seq);
    }

    /// Active if its back-off is over, back-off otherwise.
    fn push_active_or_backoff(&mut self, qp: QueuedPod, now: Instant) {
        match qp.backoff_until() {
            Some(until) if until > now => {
                let seq = self.next_seq();
                self.backoff.push(qp, until, seq);
            }
            _ => self.push_active(qp),
        }
    }

    /// A pending pod this scheduler is responsible for, new or updated.
    pub fn add(&mut self, info: PodInfo, now: Instant) {
        let key = info.key.clone();
        if let Some(qp) = self.in_flight.get_mut(&key) {
            qp.info = info;
            return;
        }
        if let Some(qp) = self.active.get_mut(&key) {
            qp.info = info;
            return;
        }
        if let Some(qp) = self.backoff.get_mut(&key) {
            qp.info = info;
            return;
        }
        if let Some(qp) = self.unschedulable.get_mut(&key) {
            if changed_for_scheduling(&qp.info, &info) {
                if let Some(mut qp) = self.unschedulable.remove(&key) {
                    qp.info = info;
                    self.place_ungated(qp, now);
                }
            } else {
                qp.info = info;
            }
            return;
        }
        let qp = match self.gated.remove(&key) {
            Some(mut qp) => {
                qp.info = info;
                qp
            }
            None => QueuedPod::new(info),
        };
        self.place_ungated(qp, now);
    }

    fn place_ungated(&mut self, qp: QueuedPod, now: Instant) {
        if is_gated(&qp.info.pod) {
            self.gated.insert(qp.info.key.clone(), qp);
        } else {
            self.push_active_or_backoff(qp, now);
        }
    }

    /// Forgets `key` (deleted, bound, or no longer this scheduler's).
    pub fn delete(&mut self, key: &str) {
        self.active.remove(key);
        self.backoff.remove(key);
        self.unschedulable.remove(key);
        self.gated.remove(key);
        self.in_flight.remove(key);
    }

    /// The next pod to schedule; it stays in flight until [`SchedulingQueue::done`] or a requeue.
    pub fn pop(&mut self) -> Option<QueuedPod> {
        let mut qp = self.active.pop()?;
        self.cycle += 1;
        qp.attempts += 1;
        qp.cycle = self.cycle;
        self.in_flight.insert(qp.info.key.clone(), qp.clone());
        Some(qp)
    }

    /// The in-flight pod `key` was bound (or is gone): it leaves the queue.
    pub fn done(&mut self, key: &str) {
        self.in_flight.remove(key);
    }

    /// The in-flight pod `key` fits no node: it waits for a cluster event (or backs off, when one came
    /// while it was tried).
    pub fn requeue_unschedulable(&mut self, key: &str, now: Instant) {
        let Some(mut qp) = self.in_flight.remove(key) else {
            return;
        };
        qp.last_failure = Some(now);
        if self.move_request_cycle >= qp.cycle {
            let until = qp.backoff_until().unwrap_or(now);
            let seq = self.next_seq();
            self.backoff.push(qp, until, seq);
        } else {
            self.unschedulable.push(qp, now);
        }
    }

    /// The in-flight pod `key` failed for another reason (binding, API): it backs off.
    pub fn requeue_after_error(&mut self, key: &str, now: Instant) {
        let Some(mut qp) = self.in_flight.remove(key) else {
            return;
        };
        qp.last_failure = Some(now);
        let until = qp.backoff_until().unwrap_or(now);
        let seq = self.next_seq();
        self.backoff.push(qp, until, seq);
    }

    /// A cluster event that may make unschedulable pods fit: all of them move.
    pub fn move_all(&mut self, now: Instant) {
        self.move_request_cycle = self.cycle;
        for qp in self.unschedulable.drain() {
            self.push_active_or_backoff(qp, now);
        }
    }

    /// Moves pods whose back-off is over to active (upstream runs it every second), and pods parked as
    /// unschedulable for longer than five minutes back to the queue.
    pub fn flush(&mut self, now: Instant) {
        for qp in self.backoff.pop_expired(now) {
            self.push_active(qp);
        }
        for qp in self.unschedulable.pop_stale(now) {
            self.push_active_or_backoff(qp, now);
        }
    }

    /// Keys of every pod the queue holds.
    pub fn keys(&self) -> Vec<String> {
        self.active
            .keys()
            .chain(self.backoff.keys())
            .chain(self.unschedulable.keys())
            .chain(self.gated.keys())
            .chain(self.in_flight.keys())
            .cloned()
            .collect()
    }

    /// The in-flight pod `key`.
    pub fn in_flight(&self, key: &str) -> Option<&QueuedPod> {
        self.in_flight.get(key)
    }

    /// Whether `key` is in flight.
    pub fn is_in_flight(&self, key: &str) -> bool {
        self.in_flight.contains_key(key)
    }

    /// The sizes of the queue's parts.
    pub fn sizes(&self) -> QueueSizes {
        QueueSizes {
            active: self.active.len(),
            backoff: self.backoff.len(),
            unschedulable: self.unschedulable.len(),
            gated: self.gated.len(),
            in_flight: self.in_flight.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn info(name: &str, priority: i32, gated: bool) -> PodInfo {
        let gates = if gated {
            serde_json::json!([{"name": "wait"}])
        } else {
            serde_json::json!(null)
        };
        PodInfo::new(Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "d"},
                "spec": {"priority": priority, "schedulingGates": gates, "containers": [{"name": "c"}]},
            }))
            .unwrap(),
        ))
    }

    #[test]
    fn higher_priority_first_then_older() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add(info("low", 0, false), now);
        q.add(info("high", 100, false), now);
        q.add(info("low2", 0, false), now);
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|p| p.info.key)).collect();
        assert_eq!(order, vec!["d/high", "d/low", "d/low2"]);
    }

    #[test]
    fn gated_pods_wait_until_their_gates_are_gone() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add(info("g", 0, true), now);
        assert!(q.pop().is_none());
        assert_eq!(q.sizes().gated, 1);
        q.add(info("g", 0, false), now);
        assert_eq!(q.pop().map(|p| p.info.key).as_deref(), Some("d/g"));
    }

    #[test]
    fn unschedulable_pods_move_on_events_through_their_back_off() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add(info("p", 0, false), now);
        q.pop();
        q.requeue_unschedulable("d/p", now);
        assert_eq!(q.sizes().unschedulable, 1);
        // An event within the back-off sends it to back-off, then to active once the second is over.
        q.move_all(now);
        assert_eq!(q.sizes().backoff, 1);
        q.flush(now + Duration::from_millis(500));
        assert!(q.pop().is_none());
        q.flush(now + Duration::from_secs(1));
        let p = q.pop().unwrap();
        assert_eq!(p.attempts, 2);
        // Nothing happens for five minutes: it is retried anyway.
        q.requeue_unschedulable("d/p", now);
        q.flush(now + Duration::from_secs(200));
        assert_eq!(q.sizes().unschedulable, 1);
        q.flush(now + Duration::from_secs(301));
        assert_eq!(q.sizes().active, 1);
    }

    #[test]
    fn an_event_during_the_attempt_means_back_off_not_unschedulable() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add(info("p", 0, false), now);
        q.pop();
        q.move_all(now);
        q.requeue_unschedulable("d/p", now);
        assert_eq!(q.sizes().backoff, 1);
    }

    #[test]
    fn status_updates_do_not_move_an_unschedulable_pod() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add(info("p", 0, false), now);
        q.pop();
        q.requeue_unschedulable("d/p", now);
        q.add(info("p", 0, false), now);
        assert_eq!(q.sizes().unschedulable, 1);
        q.delete("d/p");
        assert_eq!(q.sizes(), QueueSizes::default());
    }
}
