//! upstream's `apiserver_admission_webhook_*` metrics: call latency, calls by answer code, refusals by
//! cause, and calls passed over under failurePolicy Ignore.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::hook::Phase;
use crate::exposition::label;
use crate::resource::Str;

/// Upstream's buckets for webhook latency.
const BUCKETS: [f64; 8] = [0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0];

fn latency() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    name: Str,
    r#type: &'static str,
    operation: &'static str,
    rejected: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    name: Str,
    r#type: &'static str,
    operation: &'static str,
    code: u16,
    rejected: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    name: Str,
    r#type: &'static str,
    operation: &'static str,
    error_type: &'static str,
    rejection_code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailOpenLabels {
    name: Str,
    r#type: &'static str,
}

/// The webhook metrics, registered into the API server's `/metrics`.
#[derive(Clone)]
pub struct WebhookMetrics {
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
    requests: Family<RequestLabels, Counter>,
    // Upstream's names for these two end in `_count`; the encoder would add `_total` to a counter, so
    // they are exposed as gauges that only grow, under upstream's exact names.
    rejections: Family<RejectionLabels, Gauge>,
    fail_open: Family<FailOpenLabels, Gauge>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        WebhookMetrics {
            durations: Family::new_with_constructor(latency),
            requests: Family::default(),
            rejections: Family::default(),
            fail_open: Family::default(),
        }
    }
}

fn op(o: &str) -> &'static str {
    match o {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        _ => "CONNECT",
    }
}

fn name(n: &str) -> Str {
    label(Str::Owned(n.to_string()))
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

impl WebhookMetrics {
    /// Adds the families to `r` under upstream's names.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "apiserver_admission_webhook_admission_duration_seconds",
            "How long admission webhook calls took, by webhook, type (admit or validating), operation and whether the request was refused",
            self.durations.clone(),
        );
        r.register(
            "apiserver_admission_webhook_request",
            "Admission webhook calls, by webhook, type, operation, answer code (600 for anything above) and whether the request was refused",
            self.requests.clone(),
        );
        r.register(
            "apiserver_admission_webhook_rejection_count",
            "Requests refused by admission webhooks, by webhook, type, operation, cause (no_error for a denial, calling_webhook_error, apiserver_internal_error) and code",
            self.rejections.clone(),
        );
        r.register(
            "apiserver_admission_webhook_fail_open_count",
            "Admission webhook calls that failed and were passed over (failurePolicy Ignore), by webhook and type",
            self.fail_open.clone(),
        );
    }

    /// One call's latency and answer.
    pub fn observe(
        &self,
        webhook: &str,
        phase: Phase,
        operation: &str,
        rejected: bool,
        code: u16,
        took: Duration,
    ) {
        let t = phase.metric_type();
        self.durations
            .get_or_create(&DurationLabels {
                name: name(webhook),
                r#type: t,
                operation: op(operation),
                rejected: yes_no(rejected),
            })
            .observe(took.as_secs_f64());
        self.requests
            .get_or_create(&RequestLabels {
                name: name(webhook),
                r#type: t,
                operation: op(operation),
                code: code.min(600),
                rejected: yes_no(rejected),
            })
            .inc();
    }

    /// One refusal, by cause.
    pub fn rejected(
        &self,
        webhook: &str,
        phase: Phase,
        operation: &str,
        error_type: &'static str,
        code: u16,
    ) {
        self.rejections
            .get_or_create(&RejectionLabels {
                name: name(webhook),
                r#type: phase.metric_type(),
                operation: op(operation),
                error_type,
                rejection_code: code.min(600),
            })
            .inc();
    }

    /// One call passed over under failurePolicy Ignore.
    pub fn failed_open(&self, webhook: &str, phase: Phase) {
        self.fail_open
            .get_or_create(&FailOpenLabels {
                name: name(webhook),
                r#type: phase.metric_type(),
            })
            .inc();
    }
}
