//! What this machine has, read from `/proc`, `/sys` and `/etc` as the kubelet's cadvisor-less paths
//! do: CPUs (cgroup quota respected), memory, the root filesystem's size, and the identity fields of
//! `status.nodeInfo`.

use std::path::Path;

/// The machine's resources and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// CPUs usable by this process.
    pub cpus: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Size in bytes of the filesystem holding the runtime's root.
    pub storage_bytes: u64,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// DMI product UUID, or the machine id when unreadable.
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub os_image: String,
    /// The agent's directory (its filesystem is the one DiskPressure watches).
    pub root: std::path::PathBuf,
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// `PRETTY_NAME` of an os-release text.
pub fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        let v = l.strip_prefix("PRETTY_NAME=")?;
        Some(v.trim().trim_matches('"').to_string())
    })
}

/// Total bytes of the filesystem holding `path`.
pub fn filesystem_size(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_blocks as u64 * st.f_frsize as u64)
}

impl Machine {
    /// Reads this machine; `root` is where the runtime keeps its data.
    pub fn read(root: &Path) -> Machine {
        let machine_id = read_trim("/etc/machine-id")
            .or_else(|| read_trim("/var/lib/dbus/machine-id"))
            .unwrap_or_default();
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_total(&m))
            .unwrap_or(0);
        let memory_bytes = cgroup_memory_limit().map_or(memory_bytes, |l| l.min(memory_bytes));
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            memory_bytes,
            storage_bytes: filesystem_size(root)
                .or_else(|| filesystem_size(Path::new("/")))
                .unwrap_or(0),
            system_uuid: read_trim("/sys/class/dmi/id/product_uuid")
                .unwrap_or_else(|| machine_id.clone()),
            machine_id,
            boot_id: read_trim("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
            kernel_version: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|s| pretty_name(&s))
                .unwrap_or_else(|| "Linux".into()),
            root: root.to_path_buf(),
        }
    }
}

/// The memory limit of this process's cgroup (v2 `memory.max` or v1 `memory.limit_in_bytes`), when set.
fn cgroup_memory_limit() -> Option<u64> {
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Some(v) = read_trim(path) {
            if let Ok(n) = v.parse::<u64>() {
                // v1 reports "no limit" as a huge page-rounded number.
                if n < (1 << 60) {
                    return Some(n);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_and_os_release() {
        assert_eq!(
            mem_total("MemTotal:       24579060 kB\nMemFree: 1 kB\n"),
            Some(24579060 * 1024)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(
            pretty_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
                .as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn reads_this_machine() {
        let m = Machine::read(Path::new("/"));
        assert!(m.cpus >= 1);
        assert!(m.memory_bytes > 0);
        assert!(m.storage_bytes > 0);
    }
}
