//! `GET /metrics`: the API server's Prometheus metrics, named, labelled and bucketed as kube-apiserver 1.32
//! names them (`k8s.io/apiserver/pkg/endpoints/metrics`, `pkg/storage/etcd3/metrics`), served in the
//! Prometheus text format (0.0.4) as kube-apiserver serves it.
//!
//! - Requests: [`RequestMeasure::of`] labels a request the way upstream's RequestInfo, `CleanScope` and
//!   `cleanVerb` do (LIST vs GET by scope, WATCH from `?watch` or a `/watch/` path, APPLY for apply
//!   patches, CONNECT for `log`/`exec`/`attach`/`portforward`/`proxy`, `other` for unknown methods; a
//!   collection DELETE is `DELETE`, as upstream reports it). Only requests for served resources and a few
//!   fixed non-resource paths are recorded, so a client cannot grow the label sets with made-up paths.
//! - A request is recorded when its answer is ready; a long-running one (watch, `log`, the streams, node
//!   `proxy`) when its body ends, as upstream records a WATCH for the whole watch, and it counts in
//!   `apiserver_longrunning_requests` meanwhile instead of in the in-flight gauge.
//! - Store calls: [`StoreCalls`] is fed by [`crate::storage::Storage`], the API server's one way into the
//!   store; `type` is the resource of the key (`pods`, `deployments.apps`).
//! - Computed on scrape: object counts per resource (a count-only range per resource prefix) and the
//!   process' figures from `/proc/self`.
//!
//! The hot path is a read lock on each family's map plus atomics; label values are borrowed from the
//! resource table where they can be.
//!
//! - `request`: how a request is labelled; `process`: `/proc/self`; `text`: the 0.0.4 text format.

mod process;
mod request;

use std::borrow::Cow;
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(crate) use request::RequestMeasure;

use crate::crd::registry::Registry as Served;
use crate::resource::Str;
use crate::storage::Storage;
use keel_store::exposition::prometheus_text;
use process::ProcessFigures;
use request::RequestLabels;

/// The Content-Type of the exposition (Prometheus text format 0.0.4, as kube-apiserver answers).
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

use crate::exposition::{histogram, label, HistogramFamily};

/// `apiserver_request_total` labels: the answer's code and the request's (the encoder can only flatten a
/// set last, so `code` comes first; label order means nothing to Prometheus).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: u16,
    #[prometheus(flatten)]
    request: RequestLabels,
}

/// `apiserver_longrunning_requests` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LongRunningLabels {
    verb: &'static str,
    group: Str,
    version: Str,
    resource: Str,
    subresource: Str,
    scope: &'static str,
    component: &'static str,
}

/// The in-flight gauge's two kinds, as upstream names them.
const KINDS: [&str; 2] = ["readOnly", "mutating"];

/// Requests in flight per kind and the most seen in the current second (upstream's watermark).
#[derive(Debug, Default)]
struct InflightCounts {
    current: [AtomicI64; 2],
    watermark: [AtomicI64; 2],
    /// The previous second's maximum, which the gauge shows.
    shown: [AtomicI64; 2],
}

/// `apiserver_current_inflight_requests`, read from the shown watermarks on each scrape.
#[derive(Debug)]
struct InflightGauge(Arc<InflightCounts>);

impl Collector for InflightGauge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family: Family<Vec<(&'static str, &'static str)>, Gauge> = Family::default();
        for (i, kind) in KINDS.iter().enumerate() {
            family
                .get_or_create(&vec![("request_kind", *kind)])
                .set(self.0.shown[i].load(Ordering::Relaxed));
        }
        let m = encoder.encode_descriptor(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
            None,
            family.metric_type(),
        )?;
        family.encode(m)
    }
}

/// One request in flight; dropping it ends it.
#[derive(Debug)]
pub struct InFlight {
    counts: Arc<InflightCounts>,
    kind: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counts.current[self.kind].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Object counts per resource, counted in the store on each scrape (`apiserver_storage_objects`).
struct ObjectCounts {
    storage: Storage,
    served: Arc<Served>,
}

impl std::fmt::Debug for ObjectCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectCounts")
    }
}

impl Collector for ObjectCounts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family: Family<Vec<(&'static str, String)>, Gauge> = Family::default();
        let mut seen = HashSet::new();
        for def in self.served.all() {
            let name = def.qualified();
            if !seen.insert(name.clone()) {
                continue;
            }
            // Upstream shows -1 when the count cannot be read.
            let n = self.storage.count(def.prefix().as_bytes()).unwrap_or(-1);
            family
                .get_or_create(&vec![("resource", label(Cow::Owned(name)).into_owned())])
                .set(n);
        }
        let m = encoder.encode_descriptor(
            "apiserver_storage_objects",
            "Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
            None,
            family.metric_type(),
        )?;
        family.encode(m)
    }
}

/// Every metric of one API server and the registry `/metrics` encodes.
#[derive(Debug)]
pub struct Metrics {
    requests: Family<CodeLabels, Counter>,
    durations: HistogramFamily<RequestLabels>,
    long_running: Family<LongRunningLabels, Gauge>,
    inflight: Arc<InflightCounts>,
    // Behind a lock so the member's other components (the scheduler) can add theirs once started.
    registry: std::sync::Mutex<Registry>,
}

impl Metrics {
    /// The metrics of the API server over `storage` (whose store calls it shows) serving `served`.
    pub fn new(storage: &Storage, served: Arc<Served>) -> Self {
        let requests: Family<CodeLabels, Counter> = Family::default();
        let durations: HistogramFamily<RequestLabels> = Family::new_with_constructor(histogram);
        let long_running: Family<LongRunningLabels, Gauge> = Family::default();
        let inflight = Arc::new(InflightCounts::default());
        // The registry ends each help text with a period; collectors' texts are written as they are.
        let mut r = Registry::default();
        r.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        r.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        r.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way",
            long_running.clone(),
        );
        r.register_collector(Box::new(InflightGauge(inflight.clone())));
        r.register_collector(Box::new(ObjectCounts {
            storage: storage.clone(),
            served,
        }));
        storage.calls().register(&mut r);
        r.register_collector(Box::new(ProcessFigures));
        Metrics {
            requests,
            durations,
            long_running,
            inflight,
            registry: std::sync::Mutex::new(r),
        }
    }

    /// Counts a request in flight until the returned guard drops (not for long-running requests).
    pub fn in_flight(&self, read_only: bool) -> InFlight {
        let kind = usize::from(!read_only);
        let now = self.inflight.current[kind].fetch_add(1, Ordering::Relaxed) + 1;
        self.inflight.watermark[kind].fetch_max(now, Ordering::Relaxed);
        InFlight {
            counts: self.inflight.clone(),
            kind,
        }
    }

    /// Records the answer to a request that began at `start`: now, or for a long-running request that
    /// succeeded, when its body ends (it counts as long-running until then).
    pub fn finish(
        self: &Arc<Self>,
        info: RequestMeasure,
        resp: Response,
        start: Instant,
    ) -> Response {
        let code = resp.status().as_u16();
        if !(info.long_running && resp.status().is_success()) {
            self.observe(info.labels, code, start.elapsed());
            return resp;
        }
        let l = &info.labels;
        let running = LongRunningLabels {
            verb: l.verb,
            group: l.group.clone(),
            version: l.version.clone(),
            resource: l.resource.clone(),
            subresource: l.subresource.clone(),
            scope: l.scope,
            component: l.component,
        };
        self.long_running.get_or_create(&running).inc();
        let done = Done {
            metrics: self.clone(),
            labels: Some(info.labels),
            running,
            code,
            start,
        };
        resp.map(|inner| Body::new(Tracked { inner, _done: done }))
    }

    fn observe(&self, labels: RequestLabels, code: u16, took: Duration) {
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.requests
            .get_or_create(&CodeLabels {
                code,
                request: labels,
            })
            .inc();
    }

    /// Moves the in-flight watermarks into the gauge once a second until `stop`, as upstream's
    /// maintenance loop does.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            for k in 0..KINDS.len() {
                let now = self.inflight.current[k].load(Ordering::Relaxed);
                let max = self.inflight.watermark[k].swap(now, Ordering::Relaxed);
                self.inflight.shown[k].store(max, Ordering::Relaxed);
            }
        }
    }

    /// Lets another component of this member register its metrics in the same `/metrics`.
    pub fn register_more(&self, f: impl FnOnce(&mut Registry)) {
        let mut r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut r);
    }

    /// The exposition in the Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a String cannot fail; a collector's error only cuts the text short.
        if let Err(e) = prometheus_client::encoding::text::encode_registry(&mut out, &registry) {
            tracing::warn!(error = %e, "encoding /metrics failed part way");
        }
        prometheus_text(&out)
    }
}

/// Records a long-running request when its body is dropped (ended, or the client went away).
struct Done {
    metrics: Arc<Metrics>,
    labels: Option<RequestLabels>,
    running: LongRunningLabels,
    code: u16,
    start: Instant,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.metrics.long_running.get_or_create(&self.running).dec();
        if let Some(labels) = self.labels.take() {
            self.metrics
                .observe(labels, self.code, self.start.elapsed());
        }
    }
}

/// A response body that records its request when it is dropped.
struct Tracked {
    inner: Body,
    _done: Done,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
