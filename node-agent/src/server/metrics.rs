//! `GET /metrics`: the agent's counters in the Prometheus text format, built from the live atomics
//! on every scrape (netprog's table syncs, the cluster resolver's queries).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use prometheus_client::registry::Unit;

use crate::dns::DnsStats;

/// The sources `/metrics` reads.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// netprog's counters (None: `--disable-kube-proxy`).
    pub netprog: Option<Arc<keel_netprog::Stats>>,
    /// The resolver's counters (None: `--disable-dns`).
    pub dns: Option<Arc<DnsStats>>,
    /// The Ingress controller's counters (None: `--disable-ingress`).
    pub ingress: Option<Arc<crate::ingress::IngressStats>>,
}

fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(v);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: u64) {
    let g = Gauge::<i64>::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    r.register(name, help, g);
}

/// A histogram read from netprog's snapshot at scrape time.
#[derive(Debug)]
struct SnapshotHistogram(keel_netprog::latency::Snapshot);

impl TypedMetric for SnapshotHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SnapshotHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.0.sum, self.0.count, &self.0.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The exposition text.
pub fn render(s: &Sources) -> String {
    let mut r = Registry::with_prefix("keel_agent");
    if let Some(i) = &s.ingress {
        i.register(&mut r);
    }
    if let Some(n) = &s.netprog {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut r,
            "proxy_syncs",
            "nftables transactions applied",
            get(&n.syncs),
        );
        counter(
            &mut r,
            "proxy_sync_failures",
            "nftables transactions nft refused or could not run (the previous table stays in force)",
            get(&n.failures),
        );
        gauge(
            &mut r,
            "proxy_last_sync_microseconds",
            "How long the last successful nft transaction took",
            get(&n.last_apply_micros),
        );
        gauge(
            &mut r,
            "proxy_service_ports",
            "Service ports with endpoints in the table",
            get(&n.services),
        );
        gauge(
            &mut r,
            "proxy_endpoint_chains",
            "Endpoint chains in the table",
            get(&n.endpoints),
        );
        gauge(
            &mut r,
            "proxy_pod_routes",
            "Routes to other nodes' pod subnets",
            get(&n.routes),
        );
        gauge(
            &mut r,
            "proxy_script_bytes",
            "Size of the last applied nft script",
            get(&n.script_bytes),
        );
        gauge(
            &mut r,
            "proxy_isolated_pods",
            "This node's pods that some NetworkPolicy isolates",
            get(&n.isolated_pods),
        );
        r.register_with_unit(
            "proxy_network_programming_duration",
            "From the change that caused an EndpointSlice write (its last-change-trigger-time) to its rules in force",
            Unit::Seconds,
            SnapshotHistogram(n.programming.snapshot()),
        );
        let failing = n.last_error.lock().map(|e| e.is_some()).unwrap_or(false);
        gauge(
            &mut r,
            "proxy_sync_failing",
            "1 while the last sync failed",
            u64::from(failing),
        );
    }
    if let Some(d) = &s.dns {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut r,
            "dns_queries",
            "DNS packets received (UDP and TCP)",
            get(&d.queries),
        );
        let replies = Family::<Vec<(String, String)>, Counter>::default();
        for (rcode, a) in [
            ("NOERROR", &d.noerror),
            ("NXDOMAIN", &d.nxdomain),
            ("SERVFAIL", &d.servfail),
            ("FORMERR", &d.formerr),
            ("REFUSED", &d.refused),
            ("other", &d.other_rcode),
        ] {
            replies
                .get_or_create(&vec![("rcode".to_string(), rcode.to_string())])
                .inc_by(get(a));
        }
        r.register("dns_replies", "DNS replies sent, by rcode", replies);
        counter(
            &mut r,
            "dns_forwarded",
            "Questions forwarded to the upstream resolvers",
            get(&d.forwarded),
        );
        counter(
            &mut r,
            "dns_upstream_failures",
            "Forwarded questions no upstream answered",
            get(&d.upstream_failures),
        );
        counter(
            &mut r,
            "dns_truncated",
            "UDP replies truncated for a TCP retry",
            get(&d.truncated),
        );
        counter(
            &mut r,
            "dns_dropped",
            "DNS packets not answered",
            get(&d.dropped),
        );
    }
    let sessions = Family::<Vec<(String, String)>, Counter>::default();
    if let Ok(m) = super::ws::SESSIONS.lock() {
        for ((kind, transport, protocol), n) in m.iter() {
            sessions
                .get_or_create(&vec![
                    ("kind".to_string(), kind.clone()),
                    ("transport".to_string(), transport.clone()),
                    ("protocol".to_string(), protocol.clone()),
                ])
                .inc_by(*n);
        }
    }
    r.register(
        "stream_sessions",
        "exec, attach and port-forward sessions past their upgrade, by transport (websocket: translated to the runtime's SPDY; spdy: relayed) and protocol",
        sessions,
    );
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_labels_are_exposed() {
        let n = Arc::new(keel_netprog::Stats::default());
        n.syncs.store(3, Ordering::Relaxed);
        n.programming.observe(0.7);
        let d = Arc::new(DnsStats::default());
        d.nxdomain.store(2, Ordering::Relaxed);
        let i = Arc::new(crate::ingress::IngressStats::default());
        let (requests, latency) = i.handles("ns/web", "ns/web:80", 200);
        requests.inc();
        latency.observe(0.002);
        let text = render(&Sources {
            netprog: Some(n),
            dns: Some(d),
            ingress: Some(i),
        });
        assert!(
            text.contains("keel_agent_ingress_requests_total{ingress=\"ns/web\",backend=\"ns/web:80\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(text.contains("keel_agent_proxy_syncs_total 3"), "{text}");
        assert!(
            text.contains("keel_agent_dns_replies_total{rcode=\"NXDOMAIN\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "keel_agent_proxy_network_programming_duration_seconds_bucket{le=\"1.0\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("keel_agent_proxy_network_programming_duration_seconds_count 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(render(&Sources::default()).contains("# EOF"));
    }
}
