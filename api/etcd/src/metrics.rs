//! `GET /metrics`, `/health` and `/version` on the client URLs, next to gRPC on the same
//! listener as etcd serves them: plain HTTP/1.1 (or HTTP/2) requests that are not gRPC.
//!
//! Series carry etcd's names where etcd has one, so its dashboards and alerts work; keel's own
//! start with `keel_`. Figures openraft and the store already keep are read on each scrape;
//! timings and counts come from what the Raft layer and the store record while they work
//! ([`keel_raft::metrics::RaftMetrics`], [`keel_store::metrics::StoreMetrics`]).

use std::sync::Arc;
use std::time::SystemTime;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use keel_raft::metrics::{SLOW_FSYNC, SLOW_FSYNC_MEMORY};
use keel_raft::node::Node;
use keel_store::pb::etcdserverpb::AlarmType;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// The Content-Type of the exposition (Prometheus text format 0.0.4, as etcd answers).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Series the embedding process adds to every scrape (registered afresh each time, so they may
/// read their values then).
pub type Extra = Arc<dyn Fn(&mut Registry) + Send + Sync>;

/// The routes, to be merged into the gRPC router of one client URL.
/// `grpc` holds the gRPC server series counted in front of the gRPC routes.
pub fn routes(
    node: Arc<Node>,
    extra: Option<Extra>,
    grpc: Arc<crate::grpc_metrics::GrpcMetrics>,
) -> axum::Router {
    let (m, h) = (node.clone(), node);
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let node = m.clone();
                let extra = extra.clone();
                let grpc = grpc.clone();
                async move { metrics_response(&node, extra.as_deref(), &grpc) }
            }),
        )
        .route(
            "/health",
            axum::routing::get(move |q: axum::extract::RawQuery| {
                let node = h.clone();
                // etcd's `?serializable=true`: judge this member alone (no leader, no quorum read).
                let serializable =
                    q.0.is_some_and(|q| q.split('&').any(|kv| kv == "serializable=true"));
                async move { health_response(&node, serializable).await }
            }),
        )
        .route("/version", axum::routing::get(version_response))
}

/// What a path no route serves gets: gRPC's Unimplemented for gRPC calls (unknown services),
/// 404 for anything else, as etcd's HTTP mux answers.
pub async fn fallback(req: axum::extract::Request) -> Response {
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented("").into_http();
    }
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

fn metrics_response(
    node: &Node,
    extra: Option<&(dyn Fn(&mut Registry) + Send + Sync)>,
    grpc: &crate::grpc_metrics::GrpcMetrics,
) -> Response {
    match exposition(node, extra, grpc) {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::warn!(%e, "encoding /metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn health_response(node: &Node, serializable: bool) -> Response {
    let (code, body) = match health(node, serializable).await {
        Ok(()) => (StatusCode::OK, r#"{"health":"true"}"#.to_string()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(r#"{{"health":"false","reason":{}}}"#, json_string(&reason)),
        ),
    };
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `s` as a JSON string literal (reasons may quote an error message).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

async fn version_response() -> Response {
    let body = format!(
        r#"{{"etcdserver":"{}","etcdcluster":"{}","keel":"{}"}}"#,
        crate::ETCD_VERSION,
        crate::ETCD_CLUSTER_VERSION,
        env!("CARGO_PKG_VERSION")
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// How long `/health`'s read through the leader may take (etcd's one second).
const HEALTH_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether this member is healthy as etcd's `/health` judges it (no alarm, a leader, a quorum
/// read answered within a second; with `serializable`, as `?serializable=true`, only the alarms),
/// plus no slow log fsync in the last [`SLOW_FSYNC_MEMORY`]. The error is the reason, in etcd's
/// words where etcd has some.
pub async fn health(node: &Node, serializable: bool) -> Result<(), String> {
    let alarms = node.store().alarms();
    if !alarms.is_empty() {
        let names: Vec<&str> = alarms
            .iter()
            .map(|a| {
                AlarmType::try_from(a.alarm)
                    .map(|t| t.as_str_name())
                    .unwrap_or("UNKNOWN")
            })
            .collect();
        return Err(format!("ALARM {}", names.join(",")));
    }
    if !serializable {
        if node.status().leader.is_none() {
            return Err("RAFT NO LEADER".into());
        }
        // etcd runs a quorum GET; a ReadIndex round proves the same (a leader with a quorum).
        match tokio::time::timeout(HEALTH_READ_TIMEOUT, node.read_barrier()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("QGET ERROR:{e}")),
            Err(_) => return Err("QGET ERROR:etcdserver: request timed out".into()),
        }
    }
    if let Some(ago) = node.metrics().since_slow_fsync() {
        if ago < SLOW_FSYNC_MEMORY {
            return Err(format!(
                "SLOW FSYNC: a write-ahead log fsync took over {}s {}s ago",
                SLOW_FSYNC.as_secs(),
                ago.as_secs()
            ));
        }
    }
    Ok(())
}

/// Registers a gauge holding `v` now.
fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    r.register(name, help, ConstGauge::new(v));
}

/// This member's series (with the gRPC server's and `extra`'s) in the Prometheus text format 0.0.4.
pub fn exposition(
    node: &Node,
    extra: Option<&(dyn Fn(&mut Registry) + Send + Sync)>,
    grpc: &crate::grpc_metrics::GrpcMetrics,
) -> Result<String, std::fmt::Error> {
    let status = node.status();
    let raft = node.metrics();
    let store = node.store();
    let commit = raft.commit_index().max(status.applied_index);
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    // Built per scrape: the values are read now, the histograms and counters are shared handles.
    let mut r = Registry::default();
    gauge(
        &mut r,
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not",
        i64::from(status.leader.is_some()),
    );
    gauge(
        &mut r,
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise",
        i64::from(status.is_leader),
    );
    r.register(
        "etcd_server_leader_changes_seen",
        "The number of leader changes seen",
        raft.leader_changes.clone(),
    );
    // etcd's two `_total` gauges: the commit and apply indexes.
    gauge(
        &mut r,
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed",
        as_i64(commit),
    );
    gauge(
        &mut r,
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied",
        as_i64(status.applied_index),
    );
    r.register(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit",
        raft.proposals_pending.clone(),
    );
    r.register(
        "etcd_server_proposals_failed",
        "The total number of failed proposals seen",
        raft.proposals_failed.clone(),
    );
    let ids: Family<Vec<(&'static str, String)>, Gauge> = Family::default();
    ids.get_or_create(&vec![("server_id", format!("{:x}", node.member_id()))])
        .set(1);
    r.register(
        "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID",
        ids,
    );
    gauge(
        &mut r,
        "etcd_debugging_mvcc_current_revision",
        "The current revision of store",
        store.revision(),
    );
    let size = as_i64(store.db_size());
    gauge(
        &mut r,
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes",
        size,
    );
    gauge(
        &mut r,
        "etcd_debugging_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes",
        size,
    );
    gauge(
        &mut r,
        "etcd_debugging_mvcc_watcher_total",
        "Total number of watchers",
        i64::try_from(store.hub().watcher_count()).unwrap_or(i64::MAX),
    );
    r.register(
        "etcd_disk_wal_fsync_duration_seconds",
        "The latency distributions of fsync called by WAL",
        raft.wal_fsync.clone(),
    );
    r.register(
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend",
        store.metrics().backend_commit.clone(),
    );
    gauge(
        &mut r,
        "keel_raft_term",
        "The Raft term this member is in",
        as_i64(status.term),
    );
    gauge(
        &mut r,
        "keel_raft_commit_index",
        "The highest Raft log index this member knows to be committed",
        as_i64(commit),
    );
    gauge(
        &mut r,
        "keel_raft_applied_index",
        "The highest Raft log index applied to this member's store",
        as_i64(status.applied_index),
    );
    gauge(
        &mut r,
        "keel_raft_last_log_index",
        "The index of the last entry in this member's Raft log",
        as_i64(status.last_log_index),
    );
    gauge(
        &mut r,
        "keel_raft_apply_lag",
        "Entries in this member's Raft log not applied yet (last log index minus applied index)",
        as_i64(status.last_log_index.saturating_sub(status.applied_index)),
    );
    r.register(
        "keel_slow_fsyncs",
        "Write-ahead log fsyncs that took over one second",
        raft.slow_fsyncs.clone(),
    );
    if let Some(snap) = node.newest_snapshot() {
        gauge(
            &mut r,
            "keel_snapshot_last_size_bytes",
            "Size of this member's newest Raft snapshot file",
            as_i64(snap.size),
        );
        let age = SystemTime::now()
            .duration_since(snap.modified)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        r.register(
            "keel_snapshot_last_age_seconds",
            "Seconds since this member's newest Raft snapshot file was written",
            ConstGauge::new(age),
        );
    }
    grpc.register(&mut r);
    if let Some(extra) = extra {
        extra(&mut r);
    }
    let mut open = String::new();
    prometheus_client::encoding::text::encode(&mut open, &r)?;
    Ok(keel_store::exposition::prometheus_text(&open))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_json_strings() {
        assert_eq!(json_string("a \"b\" \\ \n"), r#""a \"b\" \\ \u000a""#);
    }
}
