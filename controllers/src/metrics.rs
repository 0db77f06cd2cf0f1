//! The controller manager's metrics, in upstream's workqueue names with `name` = the controller:
//! reconciles handed to a worker (`workqueue_adds_total`), failures sent back for a retry
//! (`workqueue_retries_total`), how long reconciles take (`workqueue_work_duration_seconds`), how many
//! run now (`workqueue_unfinished_work`), and how many objects wait out a back-off
//! (`workqueue_depth{…, queue="backoff"}`). Triggers that kube-runtime has queued but not yet handed
//! to a worker are inside its scheduler and not counted. The handles are shared: the runner updates
//! them, whoever serves `/metrics` registers them once with [`Metrics::register`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The controller a series belongs to.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// Upstream's controller name.
    pub name: &'static str,
}

/// The controller and which of its queues.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Upstream's controller name.
    pub name: &'static str,
    /// `backoff`: objects whose last reconcile failed and that wait for their retry.
    pub queue: &'static str,
}

/// The controllers' metric handles.
#[derive(Debug, Clone)]
pub struct Metrics {
    adds: Family<NameLabel, Counter>,
    retries: Family<NameLabel, Counter>,
    work: Family<NameLabel, Histogram>,
    unfinished: Family<NameLabel, Gauge>,
    depth: Family<QueueLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            adds: Family::default(),
            retries: Family::default(),
            // Upstream: 10 ns growing tenfold, 10 buckets (up to 10 s).
            work: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e-8, 10.0, 10))
            }),
            unfinished: Family::default(),
            depth: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under `workqueue_` in `r`.
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("workqueue");
        r.register(
            "adds",
            "Total number of reconciles handed to a worker, by controller",
            self.adds.clone(),
        );
        r.register(
            "retries",
            "Total number of failed reconciles sent back for a retry, by controller",
            self.retries.clone(),
        );
        r.register(
            "work_duration_seconds",
            "How long a reconcile takes, in seconds, by controller",
            self.work.clone(),
        );
        r.register(
            "unfinished_work",
            "Reconciles running now, by controller",
            self.unfinished.clone(),
        );
        r.register(
            "depth",
            "Objects waiting in a controller's queue (backoff: failed, waiting for the retry)",
            self.depth.clone(),
        );
    }

    /// Marks a reconcile of controller `name` started; the guard ends it.
    pub fn started(&self, name: &'static str) -> Running {
        let label = NameLabel { name };
        self.adds.get_or_create(&label).inc();
        let unfinished = self.unfinished.get_or_create(&label).clone();
        unfinished.inc();
        Running {
            work: self.work.get_or_create(&label).clone(),
            unfinished,
            start: std::time::Instant::now(),
        }
    }

    /// Counts a failed reconcile of `name` that will be retried.
    pub fn retried(&self, name: &'static str) {
        self.retries.get_or_create(&NameLabel { name }).inc();
    }

    /// Sets how many objects of `name` wait out a back-off.
    pub fn backoff_depth(&self, name: &'static str, n: usize) {
        self.depth
            .get_or_create(&QueueLabel {
                name,
                queue: "backoff",
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// One running reconcile: observed and no longer unfinished when dropped (also when cancelled).
pub struct Running {
    work: Histogram,
    unfinished: Gauge,
    start: std::time::Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.work.observe(self.start.elapsed().as_secs_f64());
        self.unfinished.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_is_counted_timed_and_finished() {
        let m = Metrics::default();
        let mut r = Registry::default();
        m.register(&mut r);
        let running = m.started("deployment");
        let text = |r: &Registry| {
            let mut s = String::new();
            prometheus_client::encoding::text::encode(&mut s, r).unwrap();
            s
        };
        assert!(text(&r).contains("workqueue_unfinished_work{name=\"deployment\"} 1"));
        drop(running);
        m.retried("deployment");
        m.backoff_depth("deployment", 2);
        let t = text(&r);
        assert!(
            t.contains("workqueue_adds_total{name=\"deployment\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("workqueue_retries_total{name=\"deployment\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("workqueue_unfinished_work{name=\"deployment\"} 0"),
            "{t}"
        );
        assert!(
            t.contains("workqueue_work_duration_seconds_count{name=\"deployment\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("workqueue_depth{name=\"deployment\",queue=\"backoff\"} 2"),
            "{t}"
        );
    }
}
