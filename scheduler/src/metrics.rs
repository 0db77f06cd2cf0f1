//! The scheduler's metrics, named and bucketed as kube-scheduler's: attempts by result and their
//! duration, pending pods per queue, preemption attempts and victims. The handles are shared: the
//! scheduler updates them, whoever serves `/metrics` registers them once with [`Metrics::register`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::queue::QueueSizes;

/// `result` and `profile` of one scheduling attempt.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// `scheduled`, `unschedulable` or `error`.
    pub result: &'static str,
    /// The scheduler profile (its schedulerName).
    pub profile: String,
}

/// `queue` of the pending-pods gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `active`, `backoff`, `unschedulable` or `gated`.
    pub queue: &'static str,
}

/// The scheduler's metric handles.
#[derive(Debug, Clone)]
pub struct Metrics {
    attempts: Family<AttemptLabels, Counter>,
    attempt_duration: Family<AttemptLabels, Histogram>,
    pending: Family<QueueLabels, Gauge>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            attempts: Family::default(),
            // Upstream: 1 ms doubling, 15 buckets.
            attempt_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            }),
            pending: Family::default(),
            preemption_attempts: Counter::default(),
            // Upstream: 1 doubling, 7 buckets.
            preemption_victims: Histogram::new(exponential_buckets(1.0, 2.0, 7)),
        }
    }
}

impl Metrics {
    /// Registers every metric under `scheduler_` in `r`.
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("scheduler");
        r.register(
            "schedule_attempts",
            "Number of attempts to schedule pods, by the result",
            self.attempts.clone(),
        );
        r.register(
            "scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            self.attempt_duration.clone(),
        );
        r.register(
            "pending_pods",
            "Number of pending pods, by the queue type",
            self.pending.clone(),
        );
        r.register(
            "preemption_attempts",
            "Total preemption attempts in the cluster till now",
            self.preemption_attempts.clone(),
        );
        r.register(
            "preemption_victims",
            "Number of selected preemption victims",
            self.preemption_victims.clone(),
        );
    }

    /// Counts one attempt that ended with `result` after `secs`.
    pub fn attempt(&self, profile: &str, result: &'static str, secs: f64) {
        let labels = AttemptLabels {
            result,
            profile: profile.to_string(),
        };
        self.attempts.get_or_create(&labels).inc();
        self.attempt_duration.get_or_create(&labels).observe(secs);
    }

    /// Counts one preemption attempt and, when it chose a node, its victims.
    pub fn preemption(&self, victims: Option<usize>) {
        self.preemption_attempts.inc();
        if let Some(n) = victims {
            self.preemption_victims.observe(n as f64);
        }
    }

    /// Sets the pending-pods gauges.
    pub fn queue(&self, s: QueueSizes) {
        for (queue, n) in [
            ("active", s.active),
            ("backoff", s.backoff),
            ("unschedulable", s.unschedulable),
            ("gated", s.gated),
        ] {
            self.pending
                .get_or_create(&QueueLabels { queue })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_in_the_text() {
        let m = Metrics::default();
        m.attempt("default-scheduler", "scheduled", 0.003);
        m.preemption(Some(2));
        m.queue(QueueSizes {
            active: 3,
            ..Default::default()
        });
        let mut r = Registry::default();
        m.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(text.contains(
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 1"
        ), "{text}");
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.004\",result=\"scheduled\",profile=\"default-scheduler\"} 1")
            || text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{result=\"scheduled\",profile=\"default-scheduler\",le=\"0.004\"} 1"), "{text}");
        assert!(
            text.contains("scheduler_pending_pods{queue=\"active\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("scheduler_preemption_attempts_total 1"),
            "{text}"
        );
        assert!(
            text.contains("scheduler_preemption_victims_count 1"),
            "{text}"
        );
    }
}
