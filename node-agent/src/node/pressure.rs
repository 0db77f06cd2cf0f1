//! The node's pressure conditions from the kubelet's default hard eviction signals: MemoryPressure when
//! `memory.available` (MemAvailable, within the agent's cgroup limit when it has one) is under 100 MiB,
//! DiskPressure when `nodefs.available` (free space of the filesystem holding the agent's root) is under
//! 10 % or its free inodes under 5 %. PIDPressure has no default threshold upstream, so it is reported
//! only when fewer than 1 % of `pid_max` process ids are left. The agent reports; it does not evict.

use std::path::Path;

/// memory.available below this is pressure (upstream's default `memory.available<100Mi`).
pub const MEMORY_AVAILABLE_MIN: u64 = 100 << 20;
/// nodefs.available below this share is pressure (`nodefs.available<10%`).
pub const NODEFS_AVAILABLE_MIN_PCT: u64 = 10;
/// nodefs.inodesFree below this share is pressure (`nodefs.inodesFree<5%`).
pub const NODEFS_INODES_MIN_PCT: u64 = 5;

/// What the signals say: a message for each kind of pressure found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signals {
    /// Memory pressure, and why.
    pub memory: Option<String>,
    /// Disk pressure, and why.
    pub disk: Option<String>,
    /// PID pressure, and why.
    pub pid: Option<String>,
}

fn meminfo_kb(info: &str, key: &str) -> Option<u64> {
    info.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Reads the signals now; `memory_limit` is the node's memory (cgroup limit or total), `root` the
/// agent's directory.
pub fn read(root: &Path, memory_limit: u64) -> Signals {
    let mut s = Signals::default();
    if let Ok(info) = std::fs::read_to_string("/proc/meminfo") {
        if let (Some(avail), Some(total)) = (
            meminfo_kb(&info, "MemAvailable:"),
            meminfo_kb(&info, "MemTotal:"),
        ) {
            // Within a cgroup limit, what is left is the limit minus what the host already uses.
            let used = (total - avail.min(total)) * 1024;
            let available = memory_limit.saturating_sub(used).min(avail * 1024);
            if available < MEMORY_AVAILABLE_MIN {
                s.memory = Some(format!(
                    "memory.available {} MiB is under the 100 MiB threshold",
                    available >> 20
                ));
            }
        }
    }
    if let Ok(c) = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()) {
        // SAFETY: statvfs(3) on a NUL-terminated path into a zeroed struct it fills.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0 && st.f_blocks > 0 {
            let avail_pct = st.f_bavail as u64 * 100 / st.f_blocks as u64;
            let inodes_pct = if st.f_files > 0 {
                st.f_favail as u64 * 100 / st.f_files as u64
            } else {
                100
            };
            if avail_pct < NODEFS_AVAILABLE_MIN_PCT {
                s.disk = Some(format!(
                    "nodefs.available {avail_pct}% is under the 10% threshold"
                ));
            } else if inodes_pct < NODEFS_INODES_MIN_PCT {
                s.disk = Some(format!(
                    "nodefs.inodesFree {inodes_pct}% is under the 5% threshold"
                ));
            }
        }
    }
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    if pid_max > 0 {
        let used = std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().parse::<u64>().is_ok())
                    .count() as u64
            })
            .unwrap_or(0);
        if pid_max.saturating_sub(used) * 100 < pid_max {
            s.pid = Some(format!(
                "{} of {pid_max} process ids left",
                pid_max.saturating_sub(used)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_not_under_pressure() {
        let s = read(Path::new("/"), u64::MAX);
        assert_eq!(s.pid, None);
        assert!(meminfo_kb("MemAvailable:   1024 kB\n", "MemAvailable:") == Some(1024));
    }

    #[test]
    fn a_tiny_memory_limit_is_pressure() {
        let s = read(Path::new("/"), 1 << 20);
        assert!(s.memory.is_some(), "{s:?}");
    }
}
