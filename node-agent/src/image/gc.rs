//! Image garbage collection, as the kubelet's image manager: when the filesystem the runtime keeps
//! images on is fuller than the high threshold, images no container uses are removed, least recently
//! used first, until it is back under the low threshold. An image is kept while it is younger (since
//! the agent first saw it unused) than the minimum age, and always when it is pinned by the runtime,
//! is the sandbox image, or came from `--image-dir`: with no registry to pull it back, removing a
//! local image would break every pod that names it.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::cri::Cri;
use crate::error::Result;

/// When images are collected.
#[derive(Debug, Clone, Copy)]
pub struct GcPolicy {
    /// Collect when the image filesystem is at least this full, in percent (the kubelet's
    /// `imageGCHighThresholdPercent`, 85; 100 turns collection off).
    pub high_percent: u8,
    /// Collect down to this, in percent (`imageGCLowThresholdPercent`, 80).
    pub low_percent: u8,
    /// An unused image younger than this is kept (`imageMinimumGCAge`, 2 min).
    pub min_age: Duration,
    /// How often usage is checked (the kubelet's 5 min).
    pub interval: Duration,
}

impl Default for GcPolicy {
    fn default() -> Self {
        GcPolicy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
            interval: Duration::from_secs(300),
        }
    }
}

/// What the collector remembers of each image between passes.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// When the agent first saw the image.
    first: Instant,
    /// When a container last used it (or `first`).
    last_used: Instant,
}

/// One image as a pass sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The image ID.
    pub id: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last used.
    last_used: Instant,
}

/// Chooses the images to remove to free `bytes`: unused, unprotected and old enough, least recently
/// used first (larger first among equals), until enough is freed.
pub fn choose(mut candidates: Vec<Candidate>, bytes: u64) -> Vec<Candidate> {
    candidates.sort_by(|a, b| a.last_used.cmp(&b.last_used).then(b.size.cmp(&a.size)));
    let mut freed = 0u64;
    let mut out = Vec::new();
    for c in candidates {
        if freed >= bytes {
            break;
        }
        freed = freed.saturating_add(c.size);
        out.push(c);
    }
    out
}

/// Usage of the filesystem holding `path`: (used bytes, total bytes).
fn usage(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) on a NUL-terminated path into a zeroed struct it fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 || st.f_blocks == 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    let total = st.f_blocks as u64 * frsize;
    let avail = st.f_bavail as u64 * frsize;
    Some((total.saturating_sub(avail), total))
}

/// The image collector.
pub struct Collector {
    cri: Cri,
    policy: GcPolicy,
    /// Names never removed (the sandbox image, `--image-dir`'s images).
    protected: HashSet<String>,
    seen: HashMap<String, Seen>,
}

impl Collector {
    /// A collector for `cri` that never removes an image with one of the `protected` names.
    pub fn new(cri: Cri, policy: GcPolicy, protected: HashSet<String>) -> Collector {
        Collector {
            cri,
            policy,
            protected,
            seen: HashMap::new(),
        }
    }

    /// Collects as the policy says, until dropped.
    pub async fn run(mut self) {
        if self.policy.high_percent >= 100 {
            return;
        }
        // A zero period would make the timer panic.
        let mut tick = tokio::time::interval(self.policy.interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.pass().await {
                warn!(error = %e, "image garbage collection failed");
            }
        }
    }

    /// One pass: remember what is used, then free space when over the high threshold.
    pub async fn pass(&mut self) -> Result<()> {
        let now = Instant::now();
        let images = self.cri.list_images().await?;
        let in_use: HashSet<String> = self
            .cri
            .list_containers()
            .await?
            .into_iter()
            .map(|c| c.image_ref)
            .collect();
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.seen.retain(|id, _| present.contains(id.as_str()));
        for i in &images {
            let s = self.seen.entry(i.id.clone()).or_insert(Seen {
                first: now,
                last_used: now,
            });
            if in_use.contains(&i.id) {
                s.last_used = now;
            }
        }
        let Some(mount) = self
            .cri
            .image_fs_info()
            .await?
            .into_iter()
            .find_map(|f| f.fs_id.map(|id| id.mountpoint))
        else {
            return Ok(());
        };
        let Some((used, total)) = usage(Path::new(&mount)) else {
            return Ok(());
        };
        let percent = used.saturating_mul(100) / total.max(1);
        if percent < u64::from(self.policy.high_percent) {
            debug!(percent, "image filesystem under the high threshold");
            return Ok(());
        }
        let goal = total / 100 * u64::from(self.policy.low_percent);
        let to_free = used.saturating_sub(goal);
        let candidates: Vec<Candidate> = images
            .iter()
            .filter(|i| !i.pinned && !in_use.contains(&i.id))
            .filter(|i| !i.repo_tags.iter().any(|t| self.protected.contains(t)))
            .filter_map(|i| {
                let s = self.seen.get(&i.id)?;
                (now.duration_since(s.first) >= self.policy.min_age).then(|| Candidate {
                    id: i.id.clone(),
                    size: i.size,
                    last_used: s.last_used,
                })
            })
            .collect();
        let mut freed = 0u64;
        for c in choose(candidates, to_free) {
            match self.cri.remove_image(&c.id).await {
                Ok(()) => {
                    freed = freed.saturating_add(c.size);
                    self.seen.remove(&c.id);
                    info!(image = %c.id, size = c.size, "unused image removed");
                }
                Err(e) => warn!(image = %c.id, error = %e, "removing an unused image failed"),
            }
        }
        if freed < to_free {
            warn!(
                percent,
                wanted = to_free,
                freed,
                "image filesystem stays over the high threshold: not enough unused images"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_go_first_until_enough_is_freed() {
        let t0 = Instant::now();
        let c = |id: &str, size, secs| Candidate {
            id: id.into(),
            size,
            last_used: t0 + Duration::from_secs(secs),
        };
        let chosen: Vec<String> = choose(
            vec![c("new", 50, 30), c("old", 10, 0), c("mid", 40, 10)],
            45,
        )
        .into_iter()
        .map(|c| c.id)
        .collect();
        assert_eq!(chosen, ["old", "mid"]);
        assert!(choose(vec![c("a", 1, 0)], 0).is_empty());
    }
}
