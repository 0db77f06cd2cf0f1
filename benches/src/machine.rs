//! A description of the machine a run happened on, for the report.

use std::path::Path;
use std::process::Command;

/// Facts about the machine.
#[derive(Clone, Debug)]
pub(crate) struct Machine {
    /// CPUs available to this process.
    pub cpus: usize,
    /// CPU model name.
    pub cpu_model: String,
    /// Total memory, bytes.
    pub memory: u64,
    /// Kernel release.
    pub kernel: String,
    /// Device and file system holding the data directories.
    pub disk: String,
    /// `etcd --version`, first line.
    pub etcd_version: String,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The 1-minute load average from /proc/loadavg.
pub(crate) fn load() -> String {
    read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Describes this machine, with data under `data_root` and etcd at `etcd`.
pub(crate) fn describe(data_root: &Path, etcd: &Path) -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    let root = std::fs::canonicalize(data_root).unwrap_or_else(|_| data_root.to_path_buf());
    // The mount with the longest prefix of the data root holds it.
    let disk = read("/proc/mounts")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && root.starts_with(f[1]))
                .then(|| (f[1].len(), format!("{} ({}) on {}", f[0], f[2], f[1])))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, d)| d)
        .unwrap_or_default();
    let etcd_version = Command::new(etcd)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default();
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        disk,
        etcd_version,
    }
}
