//! What the Ingress controller counts, per Ingress and backend: requests by status code and their
//! latency (`keel_agent_ingress_requests_total`, `keel_agent_ingress_request_duration_seconds`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// One Ingress's, backend's and status code's requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `namespace/name` of the Ingress that routed it ("" when none did).
    pub ingress: String,
    /// `namespace/service:port` ("" when none).
    pub backend: String,
    /// The HTTP status answered.
    pub code: u16,
}

/// One Ingress's and backend's latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    /// As [`RequestLabels::ingress`].
    pub ingress: String,
    /// As [`RequestLabels::backend`].
    pub backend: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms to ~16 s, doubling.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 15,
    ))
}

/// The controller's counters (shared with the agent's `/metrics`).
#[derive(Debug)]
pub struct IngressStats {
    requests: Family<RequestLabels, Counter>,
    latency: Family<BackendLabels, Histogram, fn() -> Histogram>,
}

impl Default for IngressStats {
    fn default() -> IngressStats {
        IngressStats {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl IngressStats {
    /// The counter and histogram of one Ingress, backend and status code, to keep and reuse.
    pub fn handles(&self, ingress: &str, backend: &str, code: u16) -> (Counter, Histogram) {
        let requests = self
            .requests
            .get_or_create(&RequestLabels {
                ingress: ingress.to_string(),
                backend: backend.to_string(),
                code,
            })
            .clone();
        let latency = self
            .latency
            .get_or_create(&BackendLabels {
                ingress: ingress.to_string(),
                backend: backend.to_string(),
            })
            .clone();
        (requests, latency)
    }

    /// Adds the families to `r` (the agent's registry, prefix `keel_agent`).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "ingress_requests",
            "Requests the Ingress controller answered, by Ingress, backend and status code",
            self.requests.clone(),
        );
        r.register_with_unit(
            "ingress_request_duration",
            "Time from a request's arrival to its response headers, by Ingress and backend",
            Unit::Seconds,
            self.latency.clone(),
        );
    }
}
