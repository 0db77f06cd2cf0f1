//! The results table, printed to the terminal and written as `docs/benchmarks.md`.

use std::fmt::Write as _;

use crate::load::Sample;
use crate::machine::Machine;

/// One system's figure for a row.
#[derive(Clone, Debug)]
pub(crate) struct Figure {
    /// The measured value (a rate, or bytes for footprint rows).
    pub value: f64,
    /// Median and 99th percentile latency, µs, where they apply.
    pub latency_us: Option<(u64, u64)>,
    /// Failed requests during the measurement.
    pub errors: u64,
    /// What the last failure said.
    pub last_error: Option<String>,
    /// Server CPU time (all members) per operation over the whole step, µs.
    pub cpu_us_per_op: Option<f64>,
    /// The load generator's own CPU time per operation over the step, µs: on a shared machine
    /// it bounds what any server could reach.
    pub client_cpu_us_per_op: Option<f64>,
}

impl From<&Sample> for Figure {
    fn from(s: &Sample) -> Self {
        Figure {
            value: s.rate,
            latency_us: Some((s.p50_us, s.p99_us)),
            errors: s.errors,
            last_error: s.last_error.clone(),
            cpu_us_per_op: None,
            client_cpu_us_per_op: None,
        }
    }
}

/// One line of the table.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Cluster size.
    pub members: usize,
    /// What was measured.
    pub workload: String,
    /// Unit of the figures.
    pub unit: &'static str,
    /// keel's figure.
    pub keel: Figure,
    /// etcd's figure.
    pub etcd: Figure,
}

impl Row {
    /// keel's figure divided by etcd's.
    pub(crate) fn ratio(&self) -> f64 {
        if self.etcd.value > 0.0 {
            self.keel.value / self.etcd.value
        } else {
            f64::NAN
        }
    }
}

fn value(f: &Figure, unit: &str) -> String {
    let v = f.value;
    let s = match unit {
        "MiB" => format!("{:.1}", v / (1024.0 * 1024.0)),
        _ => format!("{v:.0}"),
    };
    if f.errors > 0 {
        format!("{s} ({} err)", f.errors)
    } else {
        s
    }
}

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0}", us as f64 / 1000.0)
    } else {
        format!("{:.2}", us as f64 / 1000.0)
    }
}

fn latency(f: &Figure) -> String {
    match f.latency_us {
        Some((p50, p99)) => format!("{} / {}", ms(p50), ms(p99)),
        None => "-".into(),
    }
}

/// CPU microseconds, with a decimal below 10 (watch events cost a few µs each).
fn micros(c: f64) -> String {
    if c < 10.0 {
        format!("{c:.1}")
    } else {
        format!("{c:.0}")
    }
}

fn cpu(f: &Figure) -> String {
    f.cpu_us_per_op.map_or("-".into(), micros)
}

fn client_cpu(r: &Row) -> String {
    match (r.keel.client_cpu_us_per_op, r.etcd.client_cpu_us_per_op) {
        (Some(k), Some(e)) => format!("{} / {}", micros(k), micros(e)),
        _ => "-".into(),
    }
}

fn cells(r: &Row) -> [String; 11] {
    [
        r.members.to_string(),
        r.workload.clone(),
        r.unit.to_string(),
        value(&r.keel, r.unit),
        value(&r.etcd, r.unit),
        format!("{:.2}", r.ratio()),
        latency(&r.keel),
        latency(&r.etcd),
        cpu(&r.keel),
        cpu(&r.etcd),
        client_cpu(r),
    ]
}

const HEADER: [&str; 11] = [
    "members",
    "workload",
    "unit",
    "keel",
    "etcd",
    "keel/etcd",
    "keel p50 / p99 ms",
    "etcd p50 / p99 ms",
    "keel CPU µs/op",
    "etcd CPU µs/op",
    "load gen CPU µs/op (keel / etcd runs)",
];

/// The table as aligned plain text.
pub(crate) fn text(rows: &[Row]) -> String {
    let all: Vec<[String; 11]> = std::iter::once(HEADER.map(String::from))
        .chain(rows.iter().map(cells))
        .collect();
    let widths: Vec<usize> = (0..11)
        .map(|i| all.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &all {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 1 || i == 2 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  "));
    }
    out
}

/// One line per figure with failed requests, with what the last failure said; empty if none.
pub(crate) fn failures(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        for (name, f) in [("keel", &r.keel), ("etcd", &r.etcd)] {
            if f.errors > 0 {
                let _ = writeln!(
                    out,
                    "- {} members, {}, {name}: {} failed; last: {}",
                    r.members,
                    r.workload,
                    f.errors,
                    f.last_error.as_deref().unwrap_or("(not recorded)")
                );
            }
        }
    }
    out
}

/// The table as Markdown.
pub(crate) fn markdown_table(rows: &[Row]) -> String {
    let mut out = format!("| {} |\n", HEADER.join(" | "));
    out.push_str("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in rows {
        let _ = writeln!(out, "| {} |", cells(r).join(" | "));
    }
    out
}

/// Everything `docs/benchmarks.md` holds besides the hand-written analysis.
pub(crate) struct Run<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// The exact command line.
    pub command: String,
    /// Load averages sampled at the start, between topologies and at the end.
    pub loads: Vec<(String, String)>,
    /// Wall time of the run, seconds.
    pub secs: f64,
    /// The table.
    pub rows: &'a [Row],
    /// Seconds measured per workload.
    pub measure_secs: f64,
}

/// The generated part of `docs/benchmarks.md`.
pub(crate) fn markdown(run: &Run<'_>) -> String {
    let m = run.machine;
    let mut out = String::new();
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "- CPUs (`nproc`): {} × {}", m.cpus, m.cpu_model);
    let _ = writeln!(
        out,
        "- memory: {:.1} GiB",
        m.memory as f64 / (1u64 << 30) as f64
    );
    let _ = writeln!(out, "- disk holding the data directories: {}", m.disk);
    let _ = writeln!(out, "- kernel: {}", m.kernel);
    let _ = writeln!(out, "- etcd: {}", m.etcd_version);
    let _ = writeln!(out, "- load average (1, 5, 15 min) during the run:");
    for (when, load) in &run.loads {
        let _ = writeln!(out, "  - {when}: {load}");
    }
    let _ = writeln!(
        out,
        "- wall time: {:.0} s, {:.0} s measured per workload after 1 s of warm-up\n",
        run.secs, run.measure_secs
    );
    let _ = writeln!(out, "## Command\n\n```\n{}\n```\n", run.command);
    let _ = writeln!(out, "## Results\n");
    out.push_str(&markdown_table(run.rows));
    let failed = failures(run.rows);
    if !failed.is_empty() {
        let _ = writeln!(out, "\nFailed requests:\n\n{failed}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(value: f64, errors: u64, last: Option<&str>) -> Figure {
        Figure {
            value,
            latency_us: Some((1500, 12_000)),
            errors,
            last_error: last.map(String::from),
            cpu_us_per_op: Some(4.25),
            client_cpu_us_per_op: Some(52.4),
        }
    }

    #[test]
    fn failures_name_the_row_the_system_and_the_last_error() {
        let rows = vec![
            Row {
                members: 3,
                workload: "guarded update 1 KiB, 64 clients".into(),
                unit: "ops/s",
                keel: fig(3915.0, 1, Some("request timed out")),
                etcd: fig(2433.0, 0, None),
            },
            Row {
                members: 1,
                workload: "put 256 B, 1 clients".into(),
                unit: "ops/s",
                keel: fig(953.0, 0, None),
                etcd: fig(1480.0, 2, None),
            },
        ];
        assert_eq!(
            failures(&rows),
            "- 3 members, guarded update 1 KiB, 64 clients, keel: 1 failed; last: request timed out\n\
             - 1 members, put 256 B, 1 clients, etcd: 2 failed; last: (not recorded)\n"
        );
        assert_eq!(failures(&rows[..0]), "");
        // Small CPU figures keep a decimal, large ones do not; failures show in the value cell.
        let c = cells(&rows[0]);
        assert_eq!((c[3].as_str(), c[8].as_str()), ("3915 (1 err)", "4.2"));
        assert_eq!(c[10], "52 / 52");
    }
}
