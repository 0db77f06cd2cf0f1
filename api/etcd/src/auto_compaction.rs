//! etcd's auto-compaction (`--auto-compaction-mode`, `--auto-compaction-retention`), run on the
//! Raft leader only (etcd pauses its compactor on followers), with etcd 3.4's semantics:
//!
//! - **periodic**, retention `P` (a duration, or a bare number of hours): the revision is
//!   sampled every `min(P, 1h) / 10`; a window of the last `P / sample + 1` samples is kept, so
//!   its oldest is the revision of about `P` ago. The first compaction happens `P` after start,
//!   to that oldest sample; later ones every `min(P, 1h)` after the last success. A failed
//!   compaction is retried at the next sample. Sampling goes on while paused (not leader).
//! - **revision**, retention `N`: every 5 minutes, compact to `current - N` unless that is not
//!   positive or the same as last time.
//!
//! A compaction that finds the revision already compacted counts as a success, as in etcd.
//! Compactions go through the log like any client's (`physical = false`).

use std::sync::Arc;
use std::time::Duration;

use keel_raft::error::ProposeError;
use keel_raft::node::Node;
use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::CompactionRequest;
use keel_store::{Command, StoreError};
use tokio::time::Instant;
use tracing::{info, warn};

/// etcd's revision-mode check interval (`revInterval`).
pub const REVISION_CHECK_INTERVAL: Duration = Duration::from_secs(300);

/// A configured auto-compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Keep about this much time of history.
    Periodic(Duration),
    /// Keep this many revisions.
    Revision(i64),
}

/// Parses etcd's flags: `None` when retention is zero (etcd's default: off).
/// Periodic retention is a bare number of hours or a Go duration (`30m`, `1h30m`, `2.5h`);
/// revision retention is a number of revisions (etcd would read a duration there as a
/// count of nanoseconds, which nobody means: keel refuses it).
pub fn parse(mode: &str, retention: &str) -> Result<Option<AutoCompaction>, String> {
    let retention = retention.trim();
    let bare = retention.parse::<u64>().ok();
    let parsed = match mode {
        "periodic" => {
            let d = match bare {
                Some(h) => Duration::from_secs(h.saturating_mul(3600)),
                None => parse_go_duration(retention)
                    .map_err(|e| format!("--auto-compaction-retention {retention:?}: {e}"))?,
            };
            (!d.is_zero()).then_some(AutoCompaction::Periodic(d))
        }
        "revision" => {
            let n = bare.ok_or_else(|| {
                format!(
                    "--auto-compaction-retention {retention:?}: revision mode takes a number of revisions"
                )
            })?;
            let n = i64::try_from(n)
                .map_err(|_| format!("--auto-compaction-retention {retention:?}: too large"))?;
            (n > 0).then_some(AutoCompaction::Revision(n))
        }
        other => {
            return Err(format!(
                "unknown --auto-compaction-mode {other:?} (use periodic or revision)"
            ))
        }
    };
    Ok(parsed)
}

/// Go's `time.ParseDuration` for non-negative values: decimal numbers with units ns, us, µs,
/// ms, s, m, h, concatenated (`1h30m`, `1.5s`); `0` alone is zero.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        if num_len == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let n: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?} in duration {s:?}")),
        };
        total += n * secs;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("duration {s:?}: {e}"))
}

/// The periodic compactor's bookkeeping, separate from time and the member so it can be
/// tested step by step.
#[derive(Debug)]
pub struct Periodic {
    period: Duration,
    /// Sampled revisions, oldest first (at most `retentions`).
    revs: Vec<i64>,
    retentions: usize,
    /// What must pass since the last success before the next compaction: the period at
    /// first, `min(period, 1h)` after the first attempt.
    base_interval: Duration,
}

impl Periodic {
    /// A compactor keeping `period` of history.
    pub fn new(period: Duration) -> Self {
        let retry = Self::retry_interval_of(period);
        let retentions = if retry.is_zero() {
            1
        } else {
            (period.as_nanos() / retry.as_nanos()) as usize + 1
        };
        Periodic {
            period,
            revs: Vec::with_capacity(retentions),
            retentions,
            base_interval: period,
        }
    }

    fn compact_interval_of(period: Duration) -> Duration {
        period.min(Duration::from_secs(3600))
    }

    fn retry_interval_of(period: Duration) -> Duration {
        Self::compact_interval_of(period) / 10
    }

    /// How long to wait between samples.
    pub fn retry_interval(&self) -> Duration {
        Self::retry_interval_of(self.period)
    }

    /// Records a sample (before each wait, as etcd does).
    pub fn sample(&mut self, rev: i64) {
        self.revs.push(rev);
        if self.revs.len() > self.retentions {
            self.revs.remove(0);
        }
    }

    /// After a wait: the revision to compact to, if `since_success` is long enough.
    pub fn due(&mut self, since_success: Duration) -> Option<i64> {
        if since_success < self.base_interval {
            return None;
        }
        if self.base_interval == self.period {
            self.base_interval = Self::compact_interval_of(self.period);
        }
        self.revs.first().copied()
    }
}

/// Starts the configured compactor on its own task; it runs until the process ends.
/// `revision_interval` replaces etcd's 5-minute revision-mode check (tests only).
pub fn spawn(
    node: Arc<Node>,
    cfg: AutoCompaction,
    revision_interval: Duration,
) -> tokio::task::JoinHandle<()> {
    match cfg {
        AutoCompaction::Periodic(period) => tokio::spawn(run_periodic(node, period)),
        AutoCompaction::Revision(keep) => tokio::spawn(run_revision(node, keep, revision_interval)),
    }
}

async fn run_periodic(node: Arc<Node>, period: Duration) {
    let mut pc = Periodic::new(period);
    let retry = pc.retry_interval().max(Duration::from_millis(1));
    let mut last_success = Instant::now();
    loop {
        pc.sample(node.store().revision());
        tokio::time::sleep(retry).await;
        if !node.is_leader() {
            continue;
        }
        let Some(rev) = pc.due(last_success.elapsed()) else {
            continue;
        };
        info!(revision = rev, ?period, "starting auto periodic compaction");
        match compact(&node, rev).await {
            Ok(()) => {
                info!(revision = rev, "completed auto periodic compaction");
                last_success = Instant::now();
            }
            Err(e) => warn!(revision = rev, %e, ?retry, "failed auto periodic compaction"),
        }
    }
}

async fn run_revision(node: Arc<Node>, keep: i64, interval: Duration) {
    let mut prev = 0;
    loop {
        tokio::time::sleep(interval).await;
        if !node.is_leader() {
            continue;
        }
        let rev = node.store().revision() - keep;
        if rev <= 0 || rev == prev {
            continue;
        }
        info!(
            revision = rev,
            retention = keep,
            "starting auto revision compaction"
        );
        match compact(&node, rev).await {
            Ok(()) => {
                info!(revision = rev, "completed auto revision compaction");
                prev = rev;
            }
            Err(e) => warn!(revision = rev, %e, "failed auto revision compaction"),
        }
    }
}

/// Proposes a compaction; an already compacted revision is no failure.
async fn compact(node: &Node, revision: i64) -> Result<(), ProposeError> {
    let cmd = Command::new(CommandKind::Compaction(CompactionRequest {
        revision,
        physical: false,
    }));
    match node.propose(cmd).await {
        Ok(_) | Err(ProposeError::Store(StoreError::Compacted)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert_eq!(parse("periodic", "0"), Ok(None));
        assert_eq!(
            parse("periodic", "1"),
            Ok(Some(AutoCompaction::Periodic(Duration::from_secs(3600))))
        );
        assert_eq!(
            parse("periodic", "1h30m"),
            Ok(Some(AutoCompaction::Periodic(Duration::from_secs(5400))))
        );
        assert_eq!(
            parse("periodic", "2.5s"),
            Ok(Some(AutoCompaction::Periodic(Duration::from_millis(2500))))
        );
        assert_eq!(
            parse("revision", "1000"),
            Ok(Some(AutoCompaction::Revision(1000)))
        );
        assert_eq!(parse("revision", "0"), Ok(None));
        assert!(parse("revision", "1h").is_err());
        assert!(parse("periodic", "10").is_ok());
        assert!(parse("periodic", "10x").is_err());
        assert!(parse("periodic", "-1").is_err());
        assert!(parse("daily", "1").is_err());
    }

    /// etcd's documented walk-through for a 10-second period (samples every second, 11 kept).
    #[test]
    fn periodic_sampling_as_etcd() {
        let mut pc = Periodic::new(Duration::from_secs(10));
        assert_eq!(pc.retry_interval(), Duration::from_secs(1));
        let mut compacted = Vec::new();
        let mut since_success = Duration::ZERO;
        // Revision = 100 × elapsed seconds; one tick per second.
        for t in 0..40u64 {
            pc.sample(100 * t as i64);
            since_success += Duration::from_secs(1);
            if let Some(rev) = pc.due(since_success) {
                compacted.push((t + 1, rev));
                since_success = Duration::ZERO;
            }
        }
        // First at 10 s to the revision of 10 s before, then every 10 s, each to the revision
        // sampled 10 s before that tick.
        assert_eq!(compacted, vec![(10, 0), (20, 900), (30, 1900), (40, 2900)]);
    }

    /// Periods above an hour: samples every 6 minutes, compaction every hour after the first.
    #[test]
    fn periodic_long_period() {
        let mut pc = Periodic::new(Duration::from_secs(3 * 3600));
        assert_eq!(pc.retry_interval(), Duration::from_secs(360));
        let tick = Duration::from_secs(360);
        let mut since = Duration::ZERO;
        let mut at = Vec::new();
        for t in 0..60u64 {
            pc.sample(t as i64);
            since += tick;
            if let Some(rev) = pc.due(since) {
                at.push(((t + 1) * 6, rev));
                since = Duration::ZERO;
            }
        }
        // First after 3 h (minute 180) to the sample of 3 h before; then hourly, each keeping
        // about 3 h (31 samples).
        assert_eq!(at, vec![(180, 0), (240, 9), (300, 19), (360, 29)]);
    }
}
