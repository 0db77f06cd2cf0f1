//! `jepsen-tests`: runs a Jepsen-style campaign against keel (or real etcd 3.4) and prints its report.
//!
//! ```text
//! cargo build --bin keel && cargo run -p jepsen-tests -- --time 300            # every fault, 5 min each
//! cargo run -p jepsen-tests -- --faults partition-leader,pause --seed 42        # replay a seed
//! cargo run -p jepsen-tests -- --target etcd --time 30                          # self-check against etcd 3.4
//! ```
//!
//! Exit status: 0 when every history checked out, 1 on an anomaly or an undecided check (with
//! `--expect-anomalies`, the other way round).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use jepsen_tests::campaign::{self, Config};
use jepsen_tests::nemesis::Fault;
use keel_testkit::Kind;

/// Jepsen-style campaign against keel (or etcd 3.4) in network namespaces. Needs root.
#[derive(Debug, Parser)]
#[command(name = "jepsen-tests")]
struct Args {
    /// `keel` or `etcd` (real etcd 3.4 from /usr/bin/etcd).
    #[arg(long, default_value = "keel", value_parser = ["keel", "etcd"])]
    target: String,
    /// Members (3 or 5).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Seed of every random choice (default: from the clock; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds of load and faults per fault.
    #[arg(long, default_value_t = 60)]
    time: u64,
    /// Comma-separated faults (default: all): partition-leader, partition-halves, partition-bridge,
    /// kill-random, kill-leader, kill-all, pause, member-replace, torn-wal.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Start keel with --unsafe-serve-linearizable-reads-locally (the checker must catch it).
    #[arg(long)]
    unsafe_serve_linearizable_reads_locally: bool,
    /// Start keel with --unsafe-answer-forwarded-writes-early (the session checker must catch it).
    #[arg(long)]
    unsafe_answer_forwarded_writes_early: bool,
    /// Exit 0 only if an anomaly was found (for the unsafe mode).
    #[arg(long)]
    expect_anomalies: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let mut faults = Vec::new();
    for f in &a.faults {
        match Fault::parse(f) {
            Some(f) => faults.push(f),
            None => {
                eprintln!(
                    "unknown fault {f:?}; known: {}",
                    Fault::ALL.map(Fault::name).join(", ")
                );
                return ExitCode::from(2);
            }
        }
    }
    let mut cfg = Config::new(
        a.seed.unwrap_or_else(campaign::clock_seed),
        Duration::from_secs(a.time),
    );
    if !faults.is_empty() {
        cfg.faults = faults;
    }
    cfg.kind = if a.target == "etcd" {
        Kind::Etcd
    } else {
        Kind::Keel
    };
    cfg.members = a.members;
    cfg.unsafe_local_reads = a.unsafe_serve_linearizable_reads_locally;
    cfg.unsafe_early_answers = a.unsafe_answer_forwarded_writes_early;
    let report = campaign::run(&cfg);
    println!(
        "\njepsen: {} campaign, {} members, seed {}, {:.1} min\n\n{}",
        report.kind.label(),
        report.members,
        report.seed,
        report.duration.as_secs_f64() / 60.0,
        report.table()
    );
    let anomalies = report.anomalies();
    let clean = anomalies.is_empty() && report.unknown() == 0;
    println!(
        "jepsen: {} anomalies, {} undecided partitions: {}",
        anomalies.len(),
        report.unknown(),
        if clean { "PASS" } else { "FAIL" }
    );
    if clean != a.expect_anomalies {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
