//! A campaign: one cluster, then one phase per fault. A phase runs every workload against the cluster while the
//! nemesis injects and heals its fault over and over, then heals everything, stops the clients, reads every key
//! once more, and checks the phase's histories. Every wait is bounded; the cluster (processes, namespaces,
//! nftables tables) is torn down by the harness's `Drop`, also on panic.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checker::append::ListAppend;
use crate::checker::register::Register;
use crate::checker::{self, session as session_check, watch as watch_check};
use crate::history::Counts;
use crate::nemesis::{Damage, Fault, Nemesis};
use crate::workload::append::AppendWorkload;
use crate::workload::register::RegisterWorkload;
use crate::workload::session::SessionWorkload;
use crate::workload::watch::WatchWorkload;
use crate::workload::{Ctx, Endpoints};
use keel_testkit::cluster::{self, Options};
use keel_testkit::Kind;

/// How to run a campaign.
#[derive(Clone, Debug)]
pub struct Config {
    /// keel, or real etcd 3.4 (self-check of the harness and checkers).
    pub kind: Kind,
    /// Cluster size (3 or 5).
    pub members: usize,
    /// Seed of every random choice (faults, targets, operations); printed, replayable.
    pub seed: u64,
    /// One phase per fault, in this order.
    pub faults: Vec<Fault>,
    /// Load + faults time of each phase.
    pub phase_time: Duration,
    /// Start keel with `--unsafe-serve-linearizable-reads-locally` (the checker must then fail).
    pub unsafe_local_reads: bool,
    /// Start keel with `--unsafe-answer-forwarded-writes-early` (the session checker must then fail).
    pub unsafe_early_answers: bool,
    /// After this long an operation is indeterminate.
    pub op_timeout: Duration,
    /// Register workers (bound to members round-robin).
    pub register_workers: usize,
    /// List-append workers.
    pub append_workers: usize,
    /// Single-member session workers (read-your-writes, monotonic reads), bound to members round-robin.
    pub session_workers: usize,
    /// Search steps allowed per checked partition.
    pub check_budget: u64,
    /// `--snapshot-count` of every member (small, so that snapshots and log purges happen during faults).
    pub snapshot_count: u64,
    /// Keep the cluster directory (data dirs, logs) when something was found (off where anomalies are the
    /// expected outcome).
    pub keep_on_anomaly: bool,
}

impl Config {
    /// Every fault, `phase_time` each, 3 members, keel.
    pub fn new(seed: u64, phase_time: Duration) -> Config {
        Config {
            kind: Kind::Keel,
            members: 3,
            seed,
            faults: Fault::ALL.to_vec(),
            phase_time,
            unsafe_local_reads: false,
            unsafe_early_answers: false,
            op_timeout: Duration::from_millis(1500),
            register_workers: 6,
            append_workers: 3,
            session_workers: 3,
            check_budget: 5_000_000,
            snapshot_count: 1000,
            keep_on_anomaly: true,
        }
    }
}

/// A seed from the clock, for runs that were not given one.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

/// What one phase did and found.
#[derive(Clone, Debug, Default)]
pub struct PhaseReport {
    /// The fault of this phase.
    pub fault: Option<Fault>,
    /// Faults injected (and healed).
    pub injections: usize,
    /// Register operations by outcome.
    pub register: Counts,
    /// List-append transactions by outcome.
    pub append: Counts,
    /// Session operations by outcome (failed: reads and compares; indeterminate: puts).
    pub session: Counts,
    /// Puts of the watch workload (plain and lease groups).
    pub watch_puts: usize,
    /// Events seen by all watchers together, and their resumptions.
    pub watch_events: usize,
    /// How often watchers (re)started a watch from a revision.
    pub watch_resumes: usize,
    /// Lease groups written.
    pub leases: usize,
    /// Linearizability violations and watch/lease violations.
    pub anomalies: Vec<String>,
    /// Partitions the checker could not decide within its budget.
    pub unknown: Vec<String>,
    /// Checker search steps.
    pub steps: u64,
    /// Load, faults, healing and final reads.
    pub duration: Duration,
    /// Time spent checking.
    pub check_time: Duration,
}

/// What a campaign did and found.
#[derive(Clone, Debug)]
pub struct CampaignReport {
    /// The seed every choice was drawn from.
    pub seed: u64,
    /// What was tested.
    pub kind: Kind,
    /// Initial cluster size.
    pub members: usize,
    /// One report per fault.
    pub phases: Vec<PhaseReport>,
    /// Wall-clock time of the whole campaign.
    pub duration: Duration,
}

impl CampaignReport {
    /// Every anomaly of every phase, prefixed with its fault.
    pub fn anomalies(&self) -> Vec<String> {
        self.phases
            .iter()
            .flat_map(|p| {
                let f = p.fault.map(Fault::name).unwrap_or("?");
                p.anomalies.iter().map(move |a| format!("[{f}] {a}"))
            })
            .collect()
    }

    /// Undecided partitions of every phase.
    pub fn unknown(&self) -> usize {
        self.phases.iter().map(|p| p.unknown.len()).sum()
    }

    /// A Markdown table of the phases.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| fault | injections | register ops (ok/fail/info) | append txns (ok/fail/info) | session ops (ok/fail/info) | watch puts | watch events (resumes) | leases | anomalies | undecided | phase | register ok/s | check |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for p in &self.phases {
            s.push_str(&format!(
                "| {} | {} | {} ({}/{}/{}) | {} ({}/{}/{}) | {} ({}/{}/{}) | {} | {} ({}) | {} | {} | {} | {:.0} s | {:.0} | {:.1} s |\n",
                p.fault.map(Fault::name).unwrap_or("?"),
                p.injections,
                p.register.total(),
                p.register.ok,
                p.register.fail,
                p.register.info,
                p.append.total(),
                p.append.ok,
                p.append.fail,
                p.append.info,
                p.session.total(),
                p.session.ok,
                p.session.fail,
                p.session.info,
                p.watch_puts,
                p.watch_events,
                p.watch_resumes,
                p.leases,
                p.anomalies.len(),
                p.unknown.len(),
                p.duration.as_secs_f64(),
                p.register.ok as f64 / p.duration.as_secs_f64().max(1.0),
                p.check_time.as_secs_f64()
            ));
        }
        s
    }
}

/// Runs a campaign and returns its report (anomalies are in the report; harness failures panic with the
/// members' logs).
pub fn run(cfg: &Config) -> CampaignReport {
    let t0 = Instant::now();
    println!(
        "jepsen: seed {} ({} {} members, faults {}, {:?} per fault{}); replay with --seed {}",
        cfg.seed,
        cfg.kind.label(),
        cfg.members,
        cfg.faults
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(","),
        cfg.phase_time,
        match (cfg.unsafe_local_reads, cfg.unsafe_early_answers) {
            (false, false) => "",
            (true, false) => ", UNSAFE local linearizable reads",
            (false, true) => ", UNSAFE early answers to forwarded writes",
            (true, true) =>
                ", UNSAFE local linearizable reads and early answers to forwarded writes",
        },
        cfg.seed
    );
    let mut opts = Options::new(cfg.kind, cfg.members)
        .netns()
        .snapshot_count(cfg.snapshot_count);
    if cfg.unsafe_local_reads && cfg.kind == Kind::Keel {
        opts = opts.arg("--unsafe-serve-linearizable-reads-locally");
    }
    if cfg.unsafe_early_answers && cfg.kind == Kind::Keel {
        opts = opts.arg("--unsafe-answer-forwarded-writes-early");
    }
    let mut cluster = opts.start();
    println!(
        "jepsen: cluster up in {:.1} s: {}",
        t0.elapsed().as_secs_f64(),
        cluster
            .endpoints(&(0..cfg.members).collect::<Vec<_>>())
            .join(", ")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("jepsen: cannot start the clients' tokio runtime: {e}"));
    let endpoints = Endpoints::new(cluster.endpoints(&(0..cfg.members).collect::<Vec<_>>()));
    let values = Arc::new(AtomicU64::new(1));
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut nemesis = Nemesis {
        cluster: &mut cluster,
        endpoints: endpoints.clone(),
        rng: StdRng::seed_from_u64(cfg.seed ^ 0x6e656d65),
        added: 0,
    };
    let mut phases = Vec::new();
    for (k, &fault) in cfg.faults.iter().enumerate() {
        let phase_seed: u64 = rng.gen();
        let ctx = Ctx {
            endpoints: endpoints.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            op_timeout: cfg.op_timeout,
            values: values.clone(),
            prefix: format!("/jepsen/{:x}/{k}-{}/", cfg.seed, fault.name()),
        };
        println!(
            "jepsen: phase {}/{} {fault}: load and faults for {:?} [t={:.0}s]",
            k + 1,
            cfg.faults.len(),
            cfg.phase_time,
            t0.elapsed().as_secs_f64()
        );
        let report = phase(cfg, &rt, &mut nemesis, fault, &ctx, phase_seed, t0);
        println!(
            "jepsen: phase {}/{} {fault}: {} injections; register {}; append {}; watch {} puts, {} events; \
             session {}; {} anomalies, {} undecided; {:.0} s + check {:.1} s",
            k + 1,
            cfg.faults.len(),
            report.injections,
            report.register,
            report.append,
            report.watch_puts,
            report.watch_events,
            report.session,
            report.anomalies.len(),
            report.unknown.len(),
            report.duration.as_secs_f64(),
            report.check_time.as_secs_f64()
        );
        for a in &report.anomalies {
            println!("jepsen: ANOMALY [{fault}] {a}");
        }
        phases.push(report);
    }
    let report = CampaignReport {
        seed: cfg.seed,
        kind: cfg.kind,
        members: cfg.members,
        phases,
        duration: t0.elapsed(),
    };
    let keep = cfg.keep_on_anomaly
        && (!report.anomalies().is_empty() || report.unknown() > 0)
        && std::env::var_os(cluster::KEEP_ENV).is_none();
    if keep {
        // The harness keeps a cluster's directory when this is set as it is dropped.
        std::env::set_var(cluster::KEEP_ENV, "1");
    }
    drop(rt);
    drop(cluster);
    if keep {
        std::env::remove_var(cluster::KEEP_ENV);
    }
    report
}

fn phase(
    cfg: &Config,
    rt: &tokio::runtime::Runtime,
    nemesis: &mut Nemesis,
    fault: Fault,
    ctx: &Ctx,
    seed: u64,
    t0: Instant,
) -> PhaseReport {
    let start = Instant::now();
    let mut report = PhaseReport {
        fault: Some(fault),
        ..PhaseReport::default()
    };
    let reg = RegisterWorkload::new(ctx, start, 6, 120);
    let sess = SessionWorkload::new();
    let app = AppendWorkload::new(ctx, start, 3, 60);
    let mut watch = match rt.block_on(WatchWorkload::new(ctx)) {
        Ok(w) => w,
        Err(e) => nemesis.cluster.fail(e),
    };
    let mut handles = reg.spawn(rt.handle(), ctx, cfg.register_workers, seed);
    handles.extend(app.spawn(rt.handle(), ctx, cfg.append_workers, 100, seed ^ 1));
    handles.extend(watch.spawn(rt.handle(), ctx, cfg.members, 2, seed ^ 2));
    handles.extend(sess.spawn(rt.handle(), ctx, cfg.session_workers, seed ^ 4));

    let deadline = start + cfg.phase_time;
    let mut rng = StdRng::seed_from_u64(seed ^ 3);
    loop {
        let quiet = Duration::from_millis(rng.gen_range(1_000..3_000));
        if Instant::now() + quiet >= deadline {
            break;
        }
        std::thread::sleep(quiet);
        let (damage, what) = nemesis.inject(fault);
        if !matches!(damage, Damage::Nothing) {
            report.injections += 1;
        }
        println!(
            "  [t={:>6.1}s] {fault}: {what} (ops so far: register {}, append {})",
            t0.elapsed().as_secs_f64(),
            reg.history.len(),
            app.history.len()
        );
        let hold = Duration::from_millis(rng.gen_range(2_000..5_000));
        std::thread::sleep(hold.min(deadline.saturating_duration_since(Instant::now())));
        let what = nemesis.heal(damage);
        println!("  [t={:>6.1}s] {fault}: {what}", t0.elapsed().as_secs_f64());
    }
    // Leave the cluster whole: every link up, every member running, one leader.
    nemesis.cluster.net_mut().heal();
    let leader = nemesis.cluster.wait_leader(Duration::from_secs(30));
    println!(
        "  [t={:>6.1}s] healed; leader {leader}; stopping clients",
        t0.elapsed().as_secs_f64()
    );
    ctx.stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(30), h).await;
        }
        // Bounded: a slow cluster makes the check less strict, never the run endless.
        let deadline = Instant::now() + Duration::from_secs(60);
        reg.final_reads(ctx, deadline).await;
        app.final_reads(ctx, deadline + Duration::from_secs(30))
            .await;
    });
    let wh = rt.block_on(watch.finish(ctx));
    report.duration = start.elapsed();

    let t = Instant::now();
    let reg_ops = reg.history.take();
    let app_ops = app.history.take();
    report.register = Counts::of(&reg_ops);
    report.append = Counts::of(&app_ops);
    report.session = sess.counts();
    report.watch_puts = watch.puts.load(Ordering::Relaxed);
    report.watch_events = wh.watchers.iter().map(|w| w.events.len()).sum();
    report.watch_resumes = wh.watchers.iter().map(|w| w.resumes).sum();
    report.leases = wh.leases.len();
    let r = checker::check(&Register, &reg_ops, cfg.check_budget);
    report.steps += r.steps;
    for (key, why) in r.illegal {
        report
            .anomalies
            .push(format!("register {key} is not linearizable:\n{why}"));
    }
    report.unknown.extend(r.unknown);
    let a = checker::check(
        &ListAppend {
            keys: crate::workload::append::GROUP_KEYS,
        },
        &app_ops,
        cfg.check_budget,
    );
    report.steps += a.steps;
    for (key, why) in a.illegal {
        report
            .anomalies
            .push(format!("append group {key} is not linearizable:\n{why}"));
    }
    report.unknown.extend(a.unknown);
    report.anomalies.extend(session_check::check(&sess.take()));
    report.anomalies.extend(watch.errors());
    report.anomalies.extend(watch_check::check(&wh));
    report.check_time = t.elapsed();
    report
}
