//! The campaigns CI runs (part of `cargo test --workspace --all-targets`). They need root (network namespaces,
//! nftables), etcd 3.4 in /usr/bin, and the `keel` binary built in the same target directory (the workspace
//! build does it; alone: `cargo build --bin keel` first). They run one at a time.
//!
//! - `short_campaign_every_fault`: every fault against 3 keel members, `JEPSEN_PHASE_SECS` (default 20) each;
//!   must find nothing.
//! - `unsafe_modes_are_caught`: keel with `--unsafe-serve-linearizable-reads-locally` and
//!   `--unsafe-answer-forwarded-writes-early`; the checkers must find non-linearizable histories and sessions
//!   that miss their own writes (proof that they can fail).
//! - `etcd_passes`: the same harness against real etcd 3.4 under four faults; must find nothing.
//!
//! `JEPSEN_SEED=<n>` replays a seed (each run prints the one it used).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::sync::Mutex;
use std::time::Duration;

use jepsen_tests::campaign::{self, CampaignReport, Config};
use jepsen_tests::nemesis::Fault;
use keel_testkit::Kind;

static SERIAL: Mutex<()> = Mutex::new(());

fn seed() -> u64 {
    std::env::var("JEPSEN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(campaign::clock_seed)
}

fn phase_secs(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("JEPSEN_PHASE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

fn show(r: &CampaignReport) {
    println!(
        "{} campaign, seed {}, {:.1} min\n{}",
        r.kind.label(),
        r.seed,
        r.duration.as_secs_f64() / 60.0,
        r.table()
    );
}

fn assert_clean(r: &CampaignReport) {
    show(r);
    for p in &r.phases {
        assert!(
            p.injections >= 1,
            "fault {:?} was never injected (seed {})",
            p.fault,
            r.seed
        );
    }
    let anomalies = r.anomalies();
    assert!(
        anomalies.is_empty(),
        "{} anomalies (seed {}):\n{}",
        anomalies.len(),
        r.seed,
        anomalies.join("\n")
    );
    assert_eq!(
        r.unknown(),
        0,
        "the checker could not decide some partitions (seed {})",
        r.seed
    );
}

#[test]
fn short_campaign_every_fault() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = Config::new(seed(), phase_secs(20));
    assert_clean(&campaign::run(&cfg));
}

/// Both unsafe modes in one cluster (CI time is short): local linearizable reads break the register and
/// list-append checks only, early answers to forwarded writes break the session check only (its reads are
/// serializable and its transactions compare-only, which every mode serves locally).
#[test]
fn unsafe_modes_are_caught() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cfg = Config::new(seed(), phase_secs(15));
    cfg.faults = vec![Fault::PartitionLeader];
    cfg.unsafe_local_reads = true;
    cfg.unsafe_early_answers = true;
    cfg.keep_on_anomaly = false;
    let r = campaign::run(&cfg);
    show(&r);
    let anomalies = r.anomalies();
    let linearizable: Vec<&String> = anomalies
        .iter()
        .filter(|a| a.contains("is not linearizable"))
        .collect();
    let sessions: Vec<&String> = anomalies
        .iter()
        .filter(|a| a.contains("is not read-your-writes/monotonic"))
        .collect();
    assert!(
        !linearizable.is_empty(),
        "the checker did not catch keel serving linearizable reads locally (seed {})",
        r.seed
    );
    assert!(
        !sessions.is_empty(),
        "the session checker did not catch early answers to forwarded writes (seed {})",
        r.seed
    );
    println!(
        "caught: {} non-linearizable partitions, first:\n{}\n{} read-your-writes/monotonic violations, first:\n{}",
        linearizable.len(),
        linearizable[0],
        sessions.len(),
        sessions[0]
    );
}

#[test]
fn etcd_passes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cfg = Config::new(seed(), phase_secs(15));
    cfg.kind = Kind::Etcd;
    cfg.faults = vec![
        Fault::PartitionLeader,
        Fault::KillLeader,
        Fault::Pause,
        Fault::MemberReplace,
    ];
    assert_clean(&campaign::run(&cfg));
}
