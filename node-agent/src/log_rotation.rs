//! Container log rotation, as the kubelet's container log manager does it: every interval, the log file
//! of each running container that reached the size limit is renamed to `<file>.<UTC time>` and the
//! runtime is asked to reopen the original path (CRI `ReopenContainerLog`); the oldest rotated files go
//! so that a container keeps at most `max_files` files, the live one included. Rotated files are not
//! compressed. `kubectl logs` reads the live file; a follower moves to the new file after a rotation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_cri::v1::ContainerState;
use tracing::{debug, info, warn};

use crate::cri::Cri;
use crate::error::{Error, Result};

/// When container logs are rotated.
#[derive(Debug, Clone, Copy)]
pub struct RotationPolicy {
    /// A live log this large (bytes) is rotated (the kubelet's `containerLogMaxSize`, 10 Mi).
    pub max_size: u64,
    /// Files kept per container, the live one included (the kubelet's `containerLogMaxFiles`, 5; at
    /// least 2).
    pub max_files: usize,
    /// How often sizes are checked (the kubelet's `containerLogMonitorInterval`, 10 s).
    pub interval: Duration,
}

impl Default for RotationPolicy {
    fn default() -> Self {
        RotationPolicy {
            max_size: 10 * 1024 * 1024,
            max_files: 5,
            interval: Duration::from_secs(10),
        }
    }
}

/// The layout of rotated names' suffix (UTC), as the kubelet's.
const STAMP: &str = "%Y%m%d-%H%M%S";

/// Rotates the logs of `cri`'s running containers as `policy` says, until dropped.
pub async fn run(cri: Cri, policy: RotationPolicy) {
    // A zero period would make the timer panic.
    let mut tick = tokio::time::interval(policy.interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = rotate_all(&cri, policy).await {
            debug!(error = %e, "container log rotation pass failed");
        }
    }
}

async fn rotate_all(cri: &Cri, policy: RotationPolicy) -> Result<()> {
    for c in cri.list_containers().await? {
        if c.state != ContainerState::ContainerRunning as i32 {
            continue;
        }
        let Ok(status) = cri.container_status(&c.id).await else {
            continue;
        };
        if status.log_path.is_empty() {
            continue;
        }
        let path = PathBuf::from(&status.log_path);
        let size = match tokio::fs::metadata(&path).await {
            Ok(m) => m.len(),
            Err(_) => continue,
        };
        if size < policy.max_size {
            continue;
        }
        match rotate(cri, &c.id, &path, policy.max_files).await {
            Ok(to) => {
                info!(container = %c.id, log = %path.display(), rotated = %to.display(), size, "container log rotated")
            }
            Err(e) => {
                warn!(container = %c.id, log = %path.display(), error = %e, "container log rotation failed")
            }
        }
    }
    Ok(())
}

/// The rotated files of `live` (`<live>.<stamp>`), oldest first.
pub fn rotated_files(live: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(base)) = (live.parent(), live.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", base.to_string_lossy());
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stamp = name.strip_prefix(&prefix)?;
            jiff::civil::DateTime::strptime(STAMP, stamp).ok()?;
            Some(e.path())
        })
        .collect();
    // The stamps sort as the times they write.
    out.sort();
    out
}

/// Rotates the live log `live` of container `id`: old files beyond the limit removed, the live one
/// renamed, the runtime told to reopen. Returns the rotated file's path.
async fn rotate(cri: &Cri, id: &str, live: &Path, max_files: usize) -> Result<PathBuf> {
    let keep = max_files.max(2) - 2;
    let old = rotated_files(live);
    for p in &old[..old.len().saturating_sub(keep)] {
        tokio::fs::remove_file(p)
            .await
            .map_err(|e| Error::io(p, e))?;
    }
    let stamp = jiff::Timestamp::now().strftime(STAMP).to_string();
    let mut to = live.as_os_str().to_owned();
    to.push(format!(".{stamp}"));
    let to = PathBuf::from(to);
    if tokio::fs::try_exists(&to).await.unwrap_or(true) {
        return Err(Error::Config(format!(
            "{} exists; rotating again next time",
            to.display()
        )));
    }
    tokio::fs::rename(live, &to)
        .await
        .map_err(|e| Error::io(live, e))?;
    if let Err(e) = cri.reopen_container_log(id).await {
        // The runtime still writes the renamed file: give it its name back.
        let _ = tokio::fs::rename(&to, live).await;
        return Err(e);
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_files_are_the_stamped_ones_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        for name in [
            "0.log",
            "0.log.20261206-101500",
            "0.log.20261205-235959",
            "0.log.tmp",
            "1.log.20261206-101500",
        ] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let names: Vec<String> = rotated_files(&live)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["0.log.20261205-235959", "0.log.20261206-101500"]);
    }
}
