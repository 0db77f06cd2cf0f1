//! What the Raft layer records while it works (fsync timings, proposals, leader changes), for the
//! etcd port's `/metrics` and `/health`. Figures openraft already tracks (term, indexes, leader)
//! are read from its metrics on each scrape instead (see [`crate::node::Node::status`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// An fsync slower than this is logged and counted, and makes `/health` false for a while (etcd
/// warns about the same threshold).
pub const SLOW_FSYNC: Duration = Duration::from_secs(1);

/// How long a slow fsync keeps `/health` false.
pub const SLOW_FSYNC_MEMORY: Duration = Duration::from_secs(30);

/// One member's Raft-layer series; shared by the log store, the proposer and the scrape.
#[derive(Debug)]
pub struct RaftMetrics {
    /// Seconds per `fdatasync` of the write-ahead log (`etcd_disk_wal_fsync_duration_seconds`).
    pub wal_fsync: Histogram,
    /// Log fsyncs over [`SLOW_FSYNC`] (`keel_slow_fsyncs_total`).
    pub slow_fsyncs: Counter,
    /// Proposals from this member's clients waiting for their answer.
    pub proposals_pending: Gauge,
    /// Proposals from this member's clients that were not committed (no leader, timeout, stop).
    pub proposals_failed: Counter,
    /// Times this member saw a new leader (`etcd_server_leader_changes_seen_total`).
    pub leader_changes: Counter,
    /// The commit index last saved by openraft (openraft 0.9's metrics do not show it).
    committed: AtomicU64,
    /// When the last slow fsync ended, as milliseconds since `born` plus one (0 = never).
    last_slow_ms: AtomicU64,
    born: Instant,
}

impl Default for RaftMetrics {
    fn default() -> Self {
        RaftMetrics {
            wal_fsync: keel_store::metrics::disk_histogram(),
            slow_fsyncs: Counter::default(),
            proposals_pending: Gauge::default(),
            proposals_failed: Counter::default(),
            leader_changes: Counter::default(),
            committed: AtomicU64::new(0),
            last_slow_ms: AtomicU64::new(0),
            born: Instant::now(),
        }
    }
}

impl RaftMetrics {
    /// Records one log fsync that took `took`.
    pub(crate) fn fsync(&self, took: Duration) {
        self.wal_fsync.observe(took.as_secs_f64());
        if took >= SLOW_FSYNC {
            self.slow_fsyncs.inc();
            let ms = self.born.elapsed().as_millis() as u64 + 1;
            self.last_slow_ms.store(ms, Ordering::Relaxed);
            tracing::warn!(took = ?took, "slow fdatasync of the write-ahead log");
        }
    }

    /// How long ago the last slow fsync ended, if there was one.
    pub fn since_slow_fsync(&self) -> Option<Duration> {
        match self.last_slow_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(
                self.born
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms - 1)),
            ),
        }
    }

    /// Records the commit index openraft saved.
    pub(crate) fn committed(&self, index: u64) {
        self.committed.fetch_max(index, Ordering::Relaxed);
    }

    /// The highest commit index saved so far.
    pub fn commit_index(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }
}

/// Counts a proposal as pending until dropped.
pub(crate) struct PendingProposal<'a>(&'a RaftMetrics);

impl<'a> PendingProposal<'a> {
    pub(crate) fn new(m: &'a RaftMetrics) -> Self {
        m.proposals_pending.inc();
        PendingProposal(m)
    }
}

impl Drop for PendingProposal<'_> {
    fn drop(&mut self) {
        self.0.proposals_pending.dec();
    }
}

/// The newest Raft snapshot file in a member's data directory.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotFile {
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written.
    pub modified: std::time::SystemTime,
}

/// The newest `*.snap` file in `<data_dir>/snap`, if any (names sort by log index).
pub fn newest_snapshot(data_dir: &std::path::Path) -> Option<SnapshotFile> {
    let dir = std::fs::read_dir(data_dir.join("snap")).ok()?;
    let newest = dir
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(crate::state_machine::SNAP_SUFFIX)
        })
        .max_by_key(|e| e.file_name())?;
    let meta = newest.metadata().ok()?;
    Some(SnapshotFile {
        size: meta.len(),
        modified: meta.modified().ok()?,
    })
}

/// Counts leader changes as etcd does: every time the leader this member knows becomes some
/// member other than the one before (the first election counts). Ends when Raft stops.
pub(crate) fn count_leader_changes(
    raft: &openraft::Raft<crate::types::TypeConfig>,
    metrics: std::sync::Arc<RaftMetrics>,
) {
    let mut rx = raft.metrics();
    tokio::spawn(async move {
        let mut seen = None;
        loop {
            let leader = rx.borrow_and_update().current_leader;
            if leader.is_some() && leader != seen {
                metrics.leader_changes.inc();
            }
            seen = leader;
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}
