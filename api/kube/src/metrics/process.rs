//! The process' figures from `/proc/self`, under the Prometheus process collector's names.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The process' figures, read from `/proc/self` on each scrape (Prometheus' process collector's names).
#[derive(Debug)]
pub(super) struct ProcessFigures;

/// Clock ticks per second of `/proc` times: USER_HZ, 100 on every Linux architecture keel runs on (the
/// Prometheus Go client assumes the same).
const USER_HZ: f64 = 100.0;

/// `(cpu seconds, start time since boot in seconds, virtual bytes)` from `/proc/self/stat`.
fn proc_stat(text: &str) -> Option<(f64, f64, f64)> {
    // The command name is in parentheses and may hold spaces: fields are counted after its close.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name, field 3 (state) is f[0]; utime is field 14, stime 15, starttime 22, vsize 23.
    let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    Some((
        (num(14)? + num(15)?) / USER_HZ,
        num(22)? / USER_HZ,
        num(23)?,
    ))
}

/// The kernel's boot time (seconds since the epoch) from `/proc/stat`.
fn boot_time(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of open files from `/proc/self/limits`.
fn max_fds(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
}

/// Resident bytes from `/proc/self/status` (`VmRSS`, in kB), which needs no page size.
fn resident_bytes(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line["VmRSS:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

impl Collector for ProcessFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        if let Some((cpu, start, virt)) = read("/proc/self/stat").as_deref().and_then(proc_stat) {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
            let g = ConstGauge::new(virt);
            g.encode(encoder.encode_descriptor(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                None,
                g.metric_type(),
            )?)?;
            if let Some(boot) = read("/proc/stat").as_deref().and_then(boot_time) {
                let g = ConstGauge::new(boot + start);
                g.encode(encoder.encode_descriptor(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    None,
                    g.metric_type(),
                )?)?;
            }
        }
        if let Some(rss) = read("/proc/self/status")
            .as_deref()
            .and_then(resident_bytes)
        {
            let g = ConstGauge::new(rss);
            g.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                None,
                g.metric_type(),
            )?)?;
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            let g = ConstGauge::new(dir.count() as f64);
            g.encode(encoder.encode_descriptor(
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                g.metric_type(),
            )?)?;
        }
        if let Some(max) = read("/proc/self/limits").as_deref().and_then(max_fds) {
            let g = ConstGauge::new(max);
            g.encode(encoder.encode_descriptor(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                g.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "4242 (keel (srv) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 8 0 \
                    12345 987654321 2048 18446744073709551615";
        let (cpu, start, virt) = proc_stat(stat).expect("stat");
        assert!((cpu - 4.0).abs() < 1e-9, "{cpu}");
        assert!((start - 123.45).abs() < 1e-9, "{start}");
        assert_eq!(virt, 987654321.0);
        assert_eq!(boot_time("cpu 1 2\nbtime 1700000000\n"), Some(1.7e9));
        assert_eq!(
            max_fds("Limit Soft Hard Units\nMax open files            1024                 524288               files\n"),
            Some(1024.0)
        );
        assert_eq!(
            resident_bytes("Name:\tkeel\nVmRSS:\t  2048 kB\n"),
            Some(2048.0 * 1024.0)
        );
        // The real files parse too.
        let own = std::fs::read_to_string("/proc/self/stat").expect("own stat");
        assert!(proc_stat(&own).is_some(), "{own}");
    }
}
