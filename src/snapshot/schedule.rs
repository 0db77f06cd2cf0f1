//! Snapshots a member takes by itself: on a cron schedule (every 12 hours by default, k3s's default),
//! into its snapshot directory, keeping the newest few. Each is a local export of this member's store,
//! sealed and described as [`super::archive`] lays out; a failed snapshot is logged and counted and the
//! schedule goes on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_raft::node::Node;
use keel_store::bbolt::EtcdMember;
use tracing::{info, warn};

use super::archive::{self, Meta, MetaMember, Origin};

/// The schedule used when `--snapshot-schedule` is not given.
pub(crate) const DEFAULT_SCHEDULE: &str = "0 */12 * * *";

/// Why a snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TakeError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("export: {0}")]
    Export(#[from] keel_store::etcd_snapshot::EtcdSnapshotError),
    #[error("snapshot task: {0}")]
    Task(String),
}

/// A parsed schedule with where its snapshots go and how many it keeps.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub cron: croner::Cron,
    pub dir: PathBuf,
    pub retention: usize,
}

/// Parses a cron expression: five fields (minute to weekday) or six with seconds first.
pub(crate) fn parse(expr: &str) -> Result<croner::Cron, String> {
    croner::Cron::new(expr)
        .with_seconds_optional()
        .parse()
        .map_err(|e| format!("--snapshot-schedule {expr:?}: {e}"))
}

/// Counters of the scheduled snapshots, for logs and metrics.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub taken: AtomicU64,
    pub failed: AtomicU64,
}

/// The schedule's series for the etcd port's `/metrics`: snapshots taken and failed, and the
/// newest snapshot in `dir` (read on each scrape, so on-demand ones and restarts count too).
pub(crate) fn metrics(dir: PathBuf, stats: Arc<Stats>) -> keel_etcd_api::metrics::Extra {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    Arc::new(move |r: &mut prometheus_client::registry::Registry| {
        r.register(
            "keel_scheduled_snapshots_taken",
            "Scheduled snapshots taken since this member started",
            ConstCounter::new(stats.taken.load(Ordering::Relaxed)),
        );
        r.register(
            "keel_scheduled_snapshots_failed",
            "Scheduled snapshots that failed since this member started",
            ConstCounter::new(stats.failed.load(Ordering::Relaxed)),
        );
        let newest = archive::list(&dir).ok().and_then(|l| l.into_iter().last());
        if let Some(e) = newest {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            r.register(
                "keel_backup_snapshot_last_age_seconds",
                "Seconds since the newest snapshot in this member's snapshot directory was written",
                ConstGauge::new(now.saturating_sub(e.modified).max(0)),
            );
            r.register(
                "keel_backup_snapshot_last_size_bytes",
                "Size of the newest snapshot in this member's snapshot directory",
                ConstGauge::new(i64::try_from(e.size).unwrap_or(i64::MAX)),
            );
        }
    })
}

/// Runs `schedule` for `node` until the task is aborted.
pub(crate) fn spawn(
    node: Arc<Node>,
    schedule: Schedule,
    stats: Arc<Stats>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        archive::remove_partial(&schedule.dir);
        loop {
            let now = chrono::Utc::now();
            let next = match schedule.cron.find_next_occurrence(&now, false) {
                Ok(t) => t,
                Err(e) => {
                    warn!(%e, "snapshot schedule has no next time; scheduled snapshots stop");
                    return;
                }
            };
            let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
            tokio::time::sleep(wait).await;
            match take(&node, &schedule.dir, Origin::Scheduled).await {
                Ok((path, meta)) => {
                    stats.taken.fetch_add(1, Ordering::Relaxed);
                    info!(path = %path.display(), revision = meta.revision, size = meta.size, "scheduled snapshot taken");
                }
                Err(e) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    warn!(%e, "scheduled snapshot failed");
                }
            }
            match archive::prune(&schedule.dir, schedule.retention) {
                Ok(removed) => {
                    for p in removed {
                        info!(path = %p.display(), "old snapshot pruned");
                    }
                }
                Err(e) => warn!(%e, dir = %schedule.dir.display(), "pruning snapshots failed"),
            }
        }
    })
}

/// Takes one snapshot of `node`'s store into `dir`: exported to a `.part` file, sealed with its
/// SHA-256 trailer, renamed into place, then described by its sidecar.
pub(crate) async fn take(
    node: &Arc<Node>,
    dir: &Path,
    origin: Origin,
) -> Result<(PathBuf, Meta), TakeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TakeError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(io(dir))?;
    let now = jiff::Timestamp::now();
    let name = archive::file_name(origin, &node.config().name, now);
    let path = dir.join(&name);
    if path.exists() {
        // Two triggers in one second: the one already there is this moment's snapshot.
        let meta = archive::read_meta(&path).map_err(io(&path))?;
        if let Some(meta) = meta {
            return Ok((path, meta));
        }
    }
    let part = dir.join(format!("{name}{}", archive::PART_SUFFIX));
    let infos = node.members();
    let members: Vec<EtcdMember> = infos
        .iter()
        .map(|m| EtcdMember {
            id: m.id,
            name: m.node.name.clone(),
            peer_urls: m.node.peer_urls.clone(),
            client_urls: m.node.client_urls.clone(),
            is_learner: m.is_learner,
        })
        .collect();
    let meta_members = infos
        .iter()
        .map(|m| MetaMember {
            name: m.node.name.clone(),
            id: format!("{:x}", m.id),
            peer_urls: m.node.peer_urls.clone(),
            is_learner: m.is_learner,
        })
        .collect();
    let applied = node.status().applied_index;
    let store = node.store().clone();
    let export_part = part.clone();
    let sealed = tokio::task::spawn_blocking(move || {
        let summary = store.export_etcd(&export_part, members, applied, &|_| {})?;
        let (size, sha256) = archive::seal(&export_part).map_err(|source| TakeError::Io {
            path: export_part.clone(),
            source,
        })?;
        Ok::<_, TakeError>((summary, size, sha256))
    })
    .await
    .map_err(|e| TakeError::Task(e.to_string()))?;
    let (summary, size, sha256) = match sealed {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
    };
    std::fs::rename(&part, &path).map_err(io(&path))?;
    let meta = Meta {
        file: name,
        origin,
        created: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        revision: summary.revision,
        total_key: summary.total_key,
        size,
        sha256,
        member: node.config().name.clone(),
        cluster_id: format!("{:x}", node.cluster_id()),
        members: meta_members,
        keel_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    archive::write_meta(&path, &meta).map_err(io(&path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok((path, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_take_five_or_six_fields() {
        assert!(parse(DEFAULT_SCHEDULE).is_ok());
        assert!(parse("*/2 * * * * *").is_ok());
        let err = parse("every day").err().unwrap_or_default();
        assert!(
            err.starts_with("--snapshot-schedule \"every day\""),
            "{err}"
        );
    }
}
