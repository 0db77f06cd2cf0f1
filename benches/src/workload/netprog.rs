//! Service rules (netprog): the nftables table keel's kube-proxy writes for N ClusterIP Services of 10
//! ready endpoints each, rendered by `keel_netprog::render::render` and applied by
//! `keel_netprog::nft::apply` (one `nft -f -`, as the node agent runs it), measured for
//! - render time (Rust only), script size and chain count;
//! - the first apply into an empty namespace (table absent before every run), with the CPU `nft`
//!   spent in user space and in the kernel (system time: the kernel's work on the transaction);
//! - the re-apply after one endpoint changed (a pod replaced by one with a new IP): what netprog does on
//!   every sync, a new render of the whole table and one transaction that flushes and refills it;
//! - for reference, the same one-endpoint change sent as an incremental transaction (flush and refill
//!   only the changed service chain, add the new endpoint chain, delete the old one), as kube-proxy's
//!   partial syncs do. That script is derived here from the two renders; netprog never sends it.
//!
//! Everything that touches nftables runs in a child of this benchmark started with `unshare -n`: a fresh
//! network namespace with an empty ruleset, which disappears when its last process (the child, or an
//! `nft` it started) exits, also when the child fails or is killed. The child refuses to run if its namespace is the parent's, or if the ruleset it finds is not
//! empty, so the host's ruleset is never touched. Needs root and `nft` (nftables) and `unshare`
//! (util-linux). Each figure is the median of the runs asked for (5 by default), or of 3 once they
//! have taken a minute together. Timings never fail the run.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use keel_netprog::model::{
    Endpoint, NodeView, PortKey, Protocol, ProxyState, ServicePort, TrafficPolicy,
};
use keel_netprog::nft;
use keel_netprog::render::{self, Existing, Ruleset};

use super::netns;
use crate::error::{BenchError, Result};

/// Service counts of a full run.
pub(crate) const SIZES: &[usize] = &[100, 1000, 5000];
/// Service counts of `--quick`.
pub(crate) const QUICK_SIZES: &[usize] = &[100, 1000];
/// Endpoints per Service.
pub(crate) const ENDPOINTS: usize = 10;
/// Fewest timed runs of a figure.
const MIN_RUNS: usize = 3;
/// Time after which a figure stops at [`MIN_RUNS`] runs (one apply takes tens of seconds at 5 000
/// Services on this machine).
const BUDGET: Duration = Duration::from_secs(60);
/// How long the child may take for all sizes before it is killed.
const DEADLINE: Duration = Duration::from_secs(3600);
/// Prefix of the child's result lines on stdout.
const RESULT: &str = "netprog-result";
/// Prefix of the child's progress lines on stdout.
const PROGRESS: &str = "netprog-progress";
/// The node the rules are written for.
const NODE: &str = "bench-node";

/// What upstream publishes about kube-proxy's nftables mode, with sources and conditions. No
/// kube-proxy binary runs here; these were measured elsewhere, on other hardware.
pub(crate) const UPSTREAM: &[&str] = &[
    "blog \"NFTables mode for kube-proxy\" (2025-02-28, https://kubernetes.io/blog/2025/02/28/nftables-kube-proxy/): \
     no control-plane (sync) figures (\"Unfortunately I don't have cool graphs for this part\"); sync updates are \
     O(changed Services and endpoints). Data plane: first-packet latency only as charts for 5 000, 10 000 and \
     30 000 Services; at 5 000 and 10 000 the nftables p50 is about the iptables p01, at 30 000 the nftables \
     worst case beats the iptables best case by a few µs",
    "KEP-3866 (https://github.com/kubernetes/enhancements/blob/master/keps/sig-network/3866-nftables-proxy/README.md): \
     no sync-time figures (\"we never got entirely clear measurements\"; the iptables scale job runs with \
     minSyncPeriod 10s, the nftables one without)",
    "kubernetes PR #126013 (partial sync, 2024-07-10, kind cluster): 1 new Service with 10 000 already present: \
     ~8 min before partial sync, ~141 ms with it; creating 10 000 Services of 2 endpoints: ~25 min -> ~9 min",
    "kubernetes issue #139513 (v1.36.1, 2026-06): one full sync of 44 125 Services / 44 152 endpoints took \
     16 min 44 s; an incremental sync at 44 128 Services took 1.33 s on a fix under review",
    "kubernetes PR #140723 (2026-07): no figure; single-endpoint Services stop using a numgen vmap because \
     \"many maps in a nftables table seems to be costly when adding rules\"",
];

/// Min, median and max of a few timings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stat {
    pub min: Duration,
    pub median: Duration,
    pub max: Duration,
}

impl Stat {
    fn of(samples: &[Duration]) -> Stat {
        let mut s = samples.to_vec();
        s.sort();
        let pick = |i: usize| s.get(i).copied().unwrap_or_default();
        Stat {
            min: pick(0),
            median: pick(s.len().saturating_sub(1) / 2),
            max: s.last().copied().unwrap_or_default(),
        }
    }
}

/// What one Service count measured.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Figures {
    /// Service ports (one port each).
    pub services: usize,
    /// Endpoints in all.
    pub endpoints: usize,
    /// Chains in the table (fixed and per-service).
    pub chains: usize,
    /// Size of the rendered script, bytes.
    pub script_bytes: usize,
    /// Timed runs of the figure with fewest (each figure: the runs asked for, or [`MIN_RUNS`] once
    /// they have taken [`BUDGET`]).
    pub runs: usize,
    /// `render` of the whole state into an empty table.
    pub render: Stat,
    /// `nft -f` of that script with no table present.
    pub first_apply: Stat,
    /// CPU of `nft` per first apply, (user, system): system is the kernel's work on the transaction.
    pub first_cpu: (Duration, Duration),
    /// `render` after one endpoint changed (with the table's current chains known).
    pub rerender: Stat,
    /// `nft -f` of that script over the table in force: netprog's sync.
    pub reapply: Stat,
    /// CPU of `nft` per re-apply, (user, system).
    pub reapply_cpu: (Duration, Duration),
    /// `nft -f` of the same kind of change as an incremental transaction (reference only).
    pub incremental: Stat,
}

fn bench_error(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Netprog(format!("{what}: {e}"))
}

/// `n` ClusterIP Services `bench/svc-NNNNN` (TCP 80 -> 8080), 10 ready endpoints each on this node.
fn state(n: usize) -> Result<ProxyState> {
    let cluster_cidr = "10.42.0.0/16"
        .parse()
        .map_err(|e| bench_error("cluster CIDR", e))?;
    let ip_at = |base: [u8; 4], offset: usize| {
        Ipv4Addr::from(u32::from(Ipv4Addr::from(base)).wrapping_add(offset as u32))
    };
    let ports = (0..n)
        .map(|i| {
            let key = PortKey {
                namespace: "bench".into(),
                service: format!("svc-{i:05}"),
                port_name: "http".into(),
                protocol: Protocol::Tcp,
            };
            let port = ServicePort {
                key: key.clone(),
                cluster_ip: Some(ip_at([10, 96, 0, 10], i)),
                port: 80,
                node_port: None,
                external_ips: vec![],
                load_balancer: false,
                affinity_timeout: None,
                external_policy: TrafficPolicy::Cluster,
                internal_policy: TrafficPolicy::Cluster,
                endpoints: (0..ENDPOINTS)
                    .map(|e| Endpoint {
                        ip: ip_at([10, 42, 0, 2], i * ENDPOINTS + e),
                        port: 8080,
                        ready: true,
                        serving: true,
                        terminating: false,
                        node: Some(NODE.into()),
                    })
                    .collect(),
            };
            (key, port)
        })
        .collect();
    Ok(ProxyState {
        node: NodeView {
            name: NODE.into(),
            addresses: vec![Ipv4Addr::new(198, 18, 0, 11)],
            cluster_cidr,
        },
        ports,
        host_ports: Vec::new(),
    })
}

/// Change `r`: the first endpoint of one Service gets a new address (its pod was replaced). The new
/// address sorts before the others, so the endpoint list stays sorted.
fn change_one_endpoint(state: &mut ProxyState, r: usize) -> Result<()> {
    let n = state.ports.len().max(1);
    let port = state
        .ports
        .values_mut()
        .nth((r * 7919 + 1) % n)
        .ok_or_else(|| bench_error("change", "no Service"))?;
    let ep = port
        .endpoints
        .first_mut()
        .ok_or_else(|| bench_error("change", "no endpoint"))?;
    ep.ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 41, 0, 1)).wrapping_add(r as u32));
    Ok(())
}

/// The pieces of a rendered script inside `table ip keel { … }`: chain blocks by name, and the map and
/// set declarations as they stand.
#[derive(Default)]
struct Blocks {
    chains: std::collections::BTreeMap<String, String>,
    maps_and_sets: String,
}

fn blocks(script: &str) -> Blocks {
    let mut out = Blocks::default();
    let mut current: Option<(String, String, bool)> = None; // (name, text, is chain)
    for line in script.lines() {
        if let Some((name, text, chain)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
            if line == "\t}" {
                if *chain {
                    out.chains
                        .insert(std::mem::take(name), std::mem::take(text));
                } else {
                    out.maps_and_sets.push_str(text);
                }
                current = None;
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("\tchain ") {
            let name = rest.trim_end_matches(" {").to_string();
            current = Some((name, format!("{line}\n"), true));
        } else if line.starts_with("\tmap ") {
            current = Some((String::new(), format!("{line}\n"), false));
        } else if line.starts_with("\tset ") {
            out.maps_and_sets.push_str(line);
            out.maps_and_sets.push('\n');
        }
    }
    out
}

/// The incremental transaction that turns the table `before` rendered into the one `after` renders:
/// changed chains flushed and refilled, new ones added, vanished ones flushed and deleted. Only chain
/// changes are covered (a one-endpoint change touches no map element).
fn incremental(before: &str, after: &str) -> Result<String> {
    let (old, new) = (blocks(before), blocks(after));
    if old.maps_and_sets != new.maps_and_sets {
        return Err(bench_error(
            "incremental reference",
            "the change touches maps or sets, which this reference does not cover",
        ));
    }
    let table = render::TABLE;
    let mut flush = String::new();
    let mut body = String::new();
    for (name, block) in &new.chains {
        match old.chains.get(name) {
            Some(b) if b == block => {}
            Some(_) => {
                let _ = writeln!(flush, "flush chain {table} {name}");
                body.push_str(block);
            }
            None => body.push_str(block),
        }
    }
    let mut delete = String::new();
    for name in old.chains.keys().filter(|n| !new.chains.contains_key(*n)) {
        let _ = writeln!(
            delete,
            "flush chain {table} {name}\ndelete chain {table} {name}"
        );
    }
    Ok(format!("{flush}table {table} {{\n{body}}}\n{delete}"))
}

/// CPU time (user, system) of this process's children that have ended: the `nft` runs.
fn children_cpu() -> (Duration, Duration) {
    // SAFETY: rusage is a plain C struct for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage(2) writes one rusage to the valid pointer it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// One timed `nft -f -` of `script`, as netprog runs it.
#[derive(Default)]
struct Timings {
    wall: Vec<Duration>,
    user: Duration,
    system: Duration,
}

impl Timings {
    /// Whether another run is due: `runs` of them, but no more than [`MIN_RUNS`] once the runs so
    /// far have taken [`BUDGET`] together.
    fn more(&self, runs: usize) -> bool {
        self.wall.len() < runs
            && (self.wall.len() < MIN_RUNS || self.wall.iter().sum::<Duration>() < BUDGET)
    }

    async fn apply(&mut self, script: &str) -> Result<()> {
        let (u0, s0) = children_cpu();
        let t = Instant::now();
        nft::apply(script).await?;
        self.wall.push(t.elapsed());
        let (u1, s1) = children_cpu();
        self.user += u1.saturating_sub(u0);
        self.system += s1.saturating_sub(s0);
        Ok(())
    }

    /// Mean CPU per run of `nft`: (user, system).
    fn cpu(&self) -> (Duration, Duration) {
        let n = (self.wall.len().max(1)) as u32;
        (self.user / n, self.system / n)
    }
}

fn existing(r: &Ruleset) -> Existing {
    Existing {
        chains: r.chains.clone(),
        sets: r.sets.clone(),
    }
}

/// Measures `n` Services, up to `runs` timed runs per figure. Runs in the child, inside its own
/// namespace.
async fn measure(n: usize, runs: usize, progress: &dyn Fn(String)) -> Result<Figures> {
    let runs = runs.max(1);
    let mut st = state(n)?;
    progress(format!("{n} Services: render"));
    let mut render_t = Vec::new();
    let mut first = None;
    for _ in 0..runs {
        let t = Instant::now();
        let r = render::render(&st, &Existing::default());
        render_t.push(t.elapsed());
        first = Some(r);
    }
    let first = first.ok_or_else(|| bench_error("render", "no run"))?;
    let chains = first.text.matches("\n\tchain ").count();
    let script_bytes = first.text.len();

    progress(format!("{n} Services: first apply (no table before it)"));
    let mut first_t = Timings::default();
    while first_t.more(runs) {
        nft::remove().await?;
        first_t.apply(&first.text).await?;
    }
    let held = nft::existing().await?;
    if held.chains != first.chains {
        return Err(bench_error(
            "first apply",
            format!(
                "nft holds {} per-service chains, the render has {}",
                held.chains.len(),
                first.chains.len()
            ),
        ));
    }

    progress(format!("{n} Services: re-apply after one endpoint changed"));
    let mut rerender_t = Vec::new();
    let mut reapply_t = Timings::default();
    let mut prev = first;
    let mut change = 0;
    while reapply_t.more(runs) {
        change_one_endpoint(&mut st, change)?;
        change += 1;
        let t = Instant::now();
        let next = render::render(&st, &existing(&prev));
        rerender_t.push(t.elapsed());
        reapply_t.apply(&next.text).await?;
        prev = next;
    }

    progress(format!(
        "{n} Services: the same change as an incremental transaction"
    ));
    let mut incremental_t = Timings::default();
    while incremental_t.more(runs) {
        change_one_endpoint(&mut st, change)?;
        change += 1;
        let next = render::render(&st, &existing(&prev));
        let script = incremental(&prev.text, &next.text)?;
        incremental_t.apply(&script).await?;
        prev = next;
    }
    let held = nft::existing().await?;
    if held.chains != prev.chains {
        return Err(bench_error(
            "incremental reference",
            "the table does not hold what a full render of the last state does",
        ));
    }
    nft::remove().await?;
    Ok(Figures {
        services: n,
        endpoints: n * ENDPOINTS,
        chains,
        script_bytes,
        runs: [&first_t, &reapply_t, &incremental_t]
            .iter()
            .map(|t| t.wall.len())
            .min()
            .unwrap_or(0),
        render: Stat::of(&render_t),
        first_apply: Stat::of(&first_t.wall),
        first_cpu: first_t.cpu(),
        rerender: Stat::of(&rerender_t),
        reapply: Stat::of(&reapply_t.wall),
        reapply_cpu: reapply_t.cpu(),
        incremental: Stat::of(&incremental_t.wall),
    })
}

fn micros(ds: &[Duration]) -> String {
    ds.iter()
        .map(|d| d.as_micros().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// One result line: every field as `name=value`, timings as min,median,max in µs.
fn encode(f: &Figures) -> String {
    let stat = |s: &Stat| micros(&[s.min, s.median, s.max]);
    format!(
        "{RESULT} services={} endpoints={} chains={} bytes={} runs={} render={} first={} firstcpu={} rerender={} reapply={} reapplycpu={} incremental={}",
        f.services,
        f.endpoints,
        f.chains,
        f.script_bytes,
        f.runs,
        stat(&f.render),
        stat(&f.first_apply),
        micros(&[f.first_cpu.0, f.first_cpu.1]),
        stat(&f.rerender),
        stat(&f.reapply),
        micros(&[f.reapply_cpu.0, f.reapply_cpu.1]),
        stat(&f.incremental),
    )
}

fn decode(line: &str) -> Result<Figures> {
    let bad = |what: &str| bench_error("child result", format!("{what} in {line:?}"));
    let fields: std::collections::HashMap<&str, &str> = line
        .strip_prefix(RESULT)
        .ok_or_else(|| bad("no prefix"))?
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let num = |k: &str| -> Result<usize> {
        fields
            .get(k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(k))
    };
    let durations = |k: &str| -> Result<Vec<Duration>> {
        fields
            .get(k)
            .ok_or_else(|| bad(k))?
            .split(',')
            .map(|x| x.parse::<u64>().map(Duration::from_micros))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad(k))
    };
    let stat = |k: &str| -> Result<Stat> {
        match durations(k)?[..] {
            [min, median, max] => Ok(Stat { min, median, max }),
            _ => Err(bad(k)),
        }
    };
    let cpu = |k: &str| -> Result<(Duration, Duration)> {
        match durations(k)?[..] {
            [user, system] => Ok((user, system)),
            _ => Err(bad(k)),
        }
    };
    Ok(Figures {
        services: num("services")?,
        endpoints: num("endpoints")?,
        chains: num("chains")?,
        script_bytes: num("bytes")?,
        runs: num("runs")?,
        render: stat("render")?,
        first_apply: stat("first")?,
        first_cpu: cpu("firstcpu")?,
        rerender: stat("rerender")?,
        reapply: stat("reapply")?,
        reapply_cpu: cpu("reapplycpu")?,
        incremental: stat("incremental")?,
    })
}

/// The parent's side: runs this binary again as `unshare -n <self> --netprog-child …` and collects
/// its results.
pub(crate) async fn run(
    sizes: &[usize],
    runs: usize,
    progress: &dyn Fn(String),
) -> Result<Vec<Figures>> {
    let sizes_arg = sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let args = [
        "--netprog-services".to_string(),
        sizes_arg,
        "--netprog-runs".to_string(),
        runs.to_string(),
    ];
    let prefixes = netns::Prefixes {
        progress: PROGRESS,
        result: RESULT,
    };
    netns::run_child("--netprog-child", &args, &prefixes, DEADLINE, progress)
        .await?
        .iter()
        .map(|l| decode(l))
        .collect()
}

/// The child's side (`--netprog-child <parent's netns>`): checks that it is alone in a fresh
/// namespace, measures every size, prints one result line each.
pub(crate) async fn child(parent_netns: &str, sizes: &[usize], runs: usize) -> Result<()> {
    netns::enter(parent_netns).await?;
    let progress = |m: String| println!("{PROGRESS} {m}");
    for &n in sizes {
        let f = measure(n, runs, &progress).await;
        if f.is_err() {
            // Leave nothing behind even on failure (the namespace goes anyway when we exit).
            let _ = nft::remove().await;
        }
        println!("{}", encode(&f?));
    }
    Ok(())
}

/// `nft --version`, for the header.
pub(crate) fn nft_version() -> String {
    std::process::Command::new("nft")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "nft (version unknown)".into())
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

fn stat(s: &Stat) -> String {
    format!("{} ({}–{})", ms(s.median), ms(s.min), ms(s.max))
}

/// Columns of the table.
const COLS: usize = 12;

const HEADER: [&str; COLS] = [
    "services",
    "endpoints",
    "chains",
    "script KiB",
    "runs",
    "render ms",
    "first apply ms",
    "its nft CPU user+sys ms",
    "re-render ms",
    "re-apply ms (1 endpoint changed)",
    "its nft CPU user+sys ms",
    "same change, incremental ms (reference)",
];

fn cpu(c: (Duration, Duration)) -> String {
    format!("{}+{}", ms(c.0), ms(c.1))
}

fn cells(f: &Figures) -> [String; COLS] {
    [
        f.services.to_string(),
        f.endpoints.to_string(),
        f.chains.to_string(),
        format!("{:.0}", f.script_bytes as f64 / 1024.0),
        f.runs.to_string(),
        stat(&f.render),
        stat(&f.first_apply),
        cpu(f.first_cpu),
        stat(&f.rerender),
        stat(&f.reapply),
        cpu(f.reapply_cpu),
        stat(&f.incremental),
    ]
}

/// The figures as an aligned table, medians with (min–max), then upstream's published figures.
pub(crate) fn text(figures: &[Figures], header: &str) -> String {
    let rows: Vec<[String; COLS]> = std::iter::once(HEADER.map(String::from))
        .chain(figures.iter().map(cells))
        .collect();
    let widths: Vec<usize> = (0..COLS)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!("{header}\n");
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  "));
    }
    let _ = writeln!(
        out,
        "\nkube-proxy (nftables mode), published figures, other hardware, not run here:"
    );
    for u in UPSTREAM {
        let _ = writeln!(out, "- {u}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_round_trip() {
        let s = |a, b, c| Stat {
            min: Duration::from_micros(a),
            median: Duration::from_micros(b),
            max: Duration::from_micros(c),
        };
        let f = Figures {
            services: 1000,
            endpoints: 10_000,
            chains: 11_010,
            script_bytes: 3_500_000,
            runs: 5,
            render: s(1, 2, 3),
            first_apply: s(4, 5, 6),
            first_cpu: (Duration::from_micros(16), Duration::from_micros(17)),
            rerender: s(7, 8, 9),
            reapply: s(10, 11, 12),
            reapply_cpu: (Duration::from_micros(18), Duration::from_micros(19)),
            incremental: s(13, 14, 15),
        };
        assert_eq!(decode(&encode(&f)).unwrap(), f);
        assert!(decode("netprog-result services=1").is_err());
        assert_eq!(
            Stat::of(&[
                Duration::from_millis(3),
                Duration::from_millis(1),
                Duration::from_millis(2)
            ]),
            s(1000, 2000, 3000)
        );
    }

    #[test]
    fn the_states_render_as_many_chains_as_services_and_endpoints() {
        let st = state(100).unwrap();
        let r = render::render(&st, &Existing::default());
        assert_eq!((r.services, r.endpoints), (100, 1000));
        assert_eq!(r.chains.len(), 100 + 1000);
        // Plus the fixed chains, which the count in the table includes.
        assert!(r.text.matches("\n\tchain ").count() > r.chains.len());
    }

    #[test]
    fn one_endpoint_change_is_one_changed_chain_one_new_and_one_deleted() {
        let mut st = state(50).unwrap();
        let before = render::render(&st, &Existing::default());
        change_one_endpoint(&mut st, 0).unwrap();
        let after = render::render(&st, &existing(&before));
        let script = incremental(&before.text, &after.text).unwrap();
        assert_eq!(script.matches("flush chain ").count(), 2, "{script}");
        assert_eq!(script.matches("delete chain ").count(), 1, "{script}");
        assert_eq!(script.matches("\tchain ").count(), 2, "{script}");
        assert!(script.contains("10.41.0.1"), "{script}");
        // The whole-table script is as large as the first one; the incremental one is tiny.
        assert!(script.len() * 20 < after.text.len());
    }
}
