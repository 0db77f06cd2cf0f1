//! Differential tests: the same etcdctl 3.4 command sequence against a real etcd 3.4 and against keel; the
//! normalized outputs (stdout, stderr, exit code) must be identical.
//!
//! Every test is one scenario: a data table of steps (one line each). Steps run on both servers at the same time;
//! all mismatches of a scenario are collected and printed as diffs (`-` etcd, `+` keel), then the test fails.
//!
//! - `KEEL_DIFF_AGAINST_ETCD=1`: the "keel" side is a second real etcd (harness self-check; must pass).
//! - `KEEL_DIFF_VERBOSE=1`: also print every step's normalized output.
//!
//! Needs `/usr/bin/etcd` and `/usr/bin/etcdctl` (run `scripts/setup.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use keel_testkit::{
    against_etcd, etcdctl_command, keel_bin, line_diff, CtlOutput, Normalizer, Process, Server,
    Vars, AGAINST_ETCD_ENV,
};

/// How long a foreground watch may run before the harness stops it.
const WATCH_LIMIT: Duration = Duration::from_secs(3);
/// After a watch printed the expected lines, how long to keep listening for unexpected extra events.
const WATCH_GRACE: Duration = Duration::from_millis(300);
/// Best-effort pause after starting a background watch so the server registers it before the next write
/// (correctness never depends on it: background watches always start at an explicit revision).
const WATCH_SETTLE: Duration = Duration::from_millis(300);
/// Default bound for `wait_for` steps.
const WAIT_LIMIT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------------------------------

type ClientFn = fn(etcd_client::Client, Vars) -> BoxFuture<'static, String>;

enum Action {
    /// `etcdctl <args>` with optional stdin.
    Ctl {
        args: String,
        stdin: Option<Vec<u8>>,
    },
    /// `etcdctl watch <args>` until it printed `lines` lines (+ a grace period), or until it exits (`None`).
    Watch { args: String, lines: Option<usize> },
    /// Starts `etcdctl watch <args>` in the background under a name.
    WatchStart { name: String, args: String },
    /// Collects a background watch once it printed `lines` lines (+ grace), and stops it.
    WatchCollect { name: String, lines: usize },
    /// Re-runs `etcdctl <args>` until its normalized stdout equals `expect` (bounded); compares the last run.
    WaitFor {
        args: String,
        expect: String,
        limit: Duration,
    },
    /// Something etcdctl 3.4 cannot send, done with the etcd-client crate; the returned text is compared.
    Client { f: ClientFn },
    /// Starts `etcdctl <args>` in the background under a name and waits until it printed `lines` lines.
    BgStart {
        name: String,
        args: String,
        lines: usize,
    },
    /// Waits until the background command `name` printed `lines` lines in all (bounded by `limit`).
    BgLines {
        name: String,
        lines: usize,
        limit: Duration,
    },
    /// Sends `signal` to the background command `name`, waits for it to exit and compares its whole output.
    BgStop { name: String, signal: i32 },
    /// Waits until `etcdctl get <prefix> --prefix --keys-only` lists `n` keys.
    WaitKeys { prefix: String, n: usize },
}

struct Step {
    label: String,
    action: Action,
    /// Store whitespace-separated word `n` of stdout in a variable (used as `{NAME}` in later steps).
    capture: Option<(String, usize)>,
    /// Run on the candidate (keel) side only: for the harness self-test that proves a difference is caught.
    candidate_only: bool,
}

fn ctl(args: &str) -> Step {
    Step {
        label: format!("etcdctl {args}"),
        action: Action::Ctl {
            args: args.to_string(),
            stdin: None,
        },
        capture: None,
        candidate_only: false,
    }
}

/// `etcdctl txn [args]`: stdin holds the compares, the success ops and the failure ops, each block ended by a blank
/// line (etcdctl fails with `Error: EOF` if the last blank line is missing).
fn txn(args: &str, compares: &[&str], success: &[&str], failure: &[&str]) -> Step {
    let mut input = String::new();
    for block in [compares, success, failure] {
        for line in block {
            input.push_str(line);
            input.push('\n');
        }
        input.push('\n');
    }
    txn_raw(args, &input)
}

/// `etcdctl txn [args]` with stdin exactly as given.
fn txn_raw(args: &str, input: &str) -> Step {
    ctl(format!("txn {args}").trim_end()).stdin(input)
}

fn watch(args: &str, lines: usize) -> Step {
    Step {
        label: format!("etcdctl watch {args} (until {lines} lines)"),
        action: Action::Watch {
            args: args.to_string(),
            lines: Some(lines),
        },
        capture: None,
        candidate_only: false,
    }
}

/// A watch that is expected to end by itself (e.g. canceled by compaction).
fn watch_exits(args: &str) -> Step {
    Step {
        label: format!("etcdctl watch {args} (until it exits)"),
        action: Action::Watch {
            args: args.to_string(),
            lines: None,
        },
        capture: None,
        candidate_only: false,
    }
}

fn watch_start(name: &str, args: &str) -> Step {
    Step {
        label: format!("start watch {name}: etcdctl watch {args}"),
        action: Action::WatchStart {
            name: name.to_string(),
            args: args.to_string(),
        },
        capture: None,
        candidate_only: false,
    }
}

fn watch_collect(name: &str, lines: usize) -> Step {
    Step {
        label: format!("collect watch {name} (until {lines} lines)"),
        action: Action::WatchCollect {
            name: name.to_string(),
            lines,
        },
        capture: None,
        candidate_only: false,
    }
}

fn wait_for(args: &str, expect: &str) -> Step {
    Step {
        label: format!("wait until `etcdctl {args}` prints {expect:?}"),
        action: Action::WaitFor {
            args: args.to_string(),
            expect: expect.to_string(),
            limit: WAIT_LIMIT,
        },
        capture: None,
        candidate_only: false,
    }
}

fn step(label: String, action: Action) -> Step {
    Step {
        label,
        action,
        capture: None,
        candidate_only: false,
    }
}

/// `etcdctl <args>` in the background (a lock holder, a candidate, an observer) until it printed `lines`.
fn bg_start(name: &str, args: &str, lines: usize) -> Step {
    step(
        format!("start {name}: etcdctl {args} (until {lines} lines)"),
        Action::BgStart {
            name: name.into(),
            args: args.into(),
            lines,
        },
    )
}

/// Waits until the background command `name` printed `lines` lines (its output is compared at `bg_stop`).
fn bg_lines(name: &str, lines: usize, limit: Duration) -> Step {
    step(
        format!("wait until {name} printed {lines} lines"),
        Action::BgLines {
            name: name.into(),
            lines,
            limit,
        },
    )
}

fn bg_stop(name: &str, signal: i32) -> Step {
    step(
        format!("stop {name} with signal {signal}"),
        Action::BgStop {
            name: name.into(),
            signal,
        },
    )
}

fn wait_keys(prefix: &str, n: usize) -> Step {
    step(
        format!("wait until {n} keys under {prefix}"),
        Action::WaitKeys {
            prefix: prefix.into(),
            n,
        },
    )
}

fn client(label: &str, f: ClientFn) -> Step {
    Step {
        label: format!("etcd-client: {label}"),
        action: Action::Client { f },
        capture: None,
        candidate_only: false,
    }
}

impl Step {
    fn stdin(self, input: &str) -> Step {
        self.stdin_bytes(input.as_bytes().to_vec())
    }

    fn stdin_bytes(mut self, input: Vec<u8>) -> Step {
        if let Action::Ctl { stdin, .. } = &mut self.action {
            let shown: String =
                String::from_utf8_lossy(&input[..input.len().min(60)]).replace('\n', "\\n");
            self.label = format!("{} <<< {shown:?} ({} bytes)", self.label, input.len());
            *stdin = Some(input);
        } else {
            panic!("stdin only applies to etcdctl steps");
        }
        self
    }

    fn capture(mut self, var: &str, word: usize) -> Step {
        self.capture = Some((var.to_string(), word));
        self
    }

    fn candidate_only(mut self) -> Step {
        self.candidate_only = true;
        self
    }
}

/// Splits a command line on whitespace; `'...'` quotes (no escapes), `''` is an empty argument.
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in {s:?}");
    if in_word {
        out.push(cur);
    }
    out
}

// ---------------------------------------------------------------------------------------------------------------
// Running a scenario on one side
// ---------------------------------------------------------------------------------------------------------------

struct Side {
    server: Server,
    norm: Normalizer,
    vars: Vars,
    watches: HashMap<String, Process>,
}

impl Side {
    fn new(server: Server) -> Side {
        let norm = server.normalizer();
        Side {
            server,
            norm,
            vars: Vars::default(),
            watches: HashMap::new(),
        }
    }

    fn ctl_command(&self) -> std::process::Command {
        etcdctl_command(
            &self.server.endpoint(),
            &["--command-timeout=5s", "--dial-timeout=2s"],
        )
    }

    fn args(&self, args: &str) -> Vec<String> {
        split_args(&self.vars.subst(args))
    }

    /// Runs one step and returns its normalized, rendered result.
    fn run(&mut self, step: &Step) -> String {
        let (out, note) = match &step.action {
            Action::Ctl { args, stdin } => {
                let args = self.args(args);
                let stdin = stdin.as_ref().map(|s| self.vars.subst_bytes(s));
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                (self.server.ctl(&refs, stdin.as_deref()), None)
            }
            Action::Watch { args, lines } => {
                let mut cmd = self.ctl_command();
                cmd.arg("watch").args(self.args(args));
                let mut p = Process::spawn(&mut cmd, None);
                match lines {
                    Some(n) => {
                        p.wait_lines(*n, WATCH_LIMIT);
                        p.wait_exit(WATCH_GRACE);
                    }
                    None => {
                        p.wait_exit(WATCH_LIMIT);
                    }
                }
                (p.finish(), None)
            }
            Action::WatchStart { name, args } => {
                let mut cmd = self.ctl_command();
                cmd.arg("watch").args(self.args(args));
                let p = Process::spawn(&mut cmd, None);
                self.watches.insert(name.clone(), p);
                thread::sleep(WATCH_SETTLE);
                (CtlOutput::default(), Some("started".to_string()))
            }
            Action::WatchCollect { name, lines } => {
                let mut p = self
                    .watches
                    .remove(name)
                    .unwrap_or_else(|| panic!("no background watch named {name}"));
                p.wait_lines(*lines, WATCH_LIMIT);
                p.wait_exit(WATCH_GRACE);
                (p.finish(), None)
            }
            Action::WaitFor {
                args,
                expect,
                limit,
            } => {
                let args = self.args(args);
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let start = Instant::now();
                loop {
                    let out = self.server.ctl(&refs, None);
                    let got = Normalizer::new().normalize(out.stdout.trim_end());
                    if got == *expect {
                        break (out, None);
                    }
                    if start.elapsed() > *limit {
                        break (out, Some(format!("condition not reached within {limit:?}")));
                    }
                    thread::sleep(Duration::from_millis(100));
                }
            }
            Action::BgStart { name, args, lines } => {
                let mut cmd = self.ctl_command();
                cmd.args(self.args(args));
                let mut p = Process::spawn(&mut cmd, None);
                p.wait_lines(*lines, WAIT_LIMIT);
                let note = format!("{} lines so far", p.stdout_lines().min(*lines));
                self.watches.insert(name.clone(), p);
                (CtlOutput::default(), Some(note))
            }
            Action::BgLines { name, lines, limit } => {
                let p = self
                    .watches
                    .get_mut(name)
                    .unwrap_or_else(|| panic!("no background command named {name}"));
                p.wait_lines(*lines, *limit);
                let note = format!("{} lines so far", p.stdout_lines().min(*lines));
                (CtlOutput::default(), Some(note))
            }
            Action::BgStop { name, signal } => {
                let mut p = self
                    .watches
                    .remove(name)
                    .unwrap_or_else(|| panic!("no background command named {name}"));
                p.signal(*signal);
                p.wait_exit(WAIT_LIMIT);
                (p.finish(), None)
            }
            Action::WaitKeys { prefix, n } => {
                let args = ["get", prefix.as_str(), "--prefix", "--keys-only"];
                let start = Instant::now();
                loop {
                    let out = self.server.ctl(&args, None);
                    let got = out.stdout.lines().filter(|l| !l.is_empty()).count();
                    if got == *n {
                        break (CtlOutput::default(), None);
                    }
                    if start.elapsed() > WAIT_LIMIT {
                        break (out, Some(format!("{got} keys, not {n}")));
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }
            Action::Client { f } => {
                let text = run_client(&self.server.client_url(), self.vars.clone(), *f);
                (
                    CtlOutput {
                        stdout: text,
                        stderr: String::new(),
                        code: Some(0),
                    },
                    None,
                )
            }
        };
        if let Some((var, word)) = &step.capture {
            let value = out
                .stdout
                .split_whitespace()
                .nth(*word)
                .unwrap_or("<not-captured>")
                .to_string();
            self.vars.0.insert(var.clone(), value);
        }
        self.render(&out, note)
    }

    fn render(&mut self, out: &CtlOutput, note: Option<String>) -> String {
        let exit = match out.code {
            Some(c) => c.to_string(),
            None => "none (still running, stopped by the harness)".to_string(),
        };
        let mut s = format!("exit: {exit}\n");
        if let Some(n) = note {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str("stdout:\n");
        let stdout = self.lease_keys(out.stdout.trim_end_matches('\n'));
        s.push_str(&self.norm.normalize(&stdout));
        s.push_str("\nstderr:\n");
        s.push_str(&self.norm.normalize(out.stderr.trim_end_matches('\n')));
        s
    }

    /// Lock and election keys end in their lease ID in hex without padding (`name/694d7b5e4ad6c30b`): that ID
    /// becomes its placeholder whatever its length (the normalizer only knows 16-digit hex words).
    fn lease_keys(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find('/') {
            out.push_str(&rest[..=i]);
            rest = &rest[i + 1..];
            let len = rest
                .bytes()
                .take_while(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
                .count();
            let whole = rest[len..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_ascii_alphanumeric());
            match u64::from_str_radix(&rest[..len], 16) {
                Ok(id) if (12..=16).contains(&len) && whole => {
                    out.push_str(&self.norm.id(id));
                    rest = &rest[len..];
                }
                _ => {}
            }
        }
        out.push_str(rest);
        out
    }
}

trait SubstBytes {
    fn subst_bytes(&self, b: &[u8]) -> Vec<u8>;
}

impl SubstBytes for Vars {
    fn subst_bytes(&self, b: &[u8]) -> Vec<u8> {
        if self.0.is_empty() || !b.contains(&b'{') {
            return b.to_vec();
        }
        match std::str::from_utf8(b) {
            Ok(s) => self.subst(s).into_bytes(),
            Err(_) => b.to_vec(),
        }
    }
}

fn run_client(url: &str, vars: Vars, f: ClientFn) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let connect = etcd_client::Client::connect([url], None);
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(c)) => match tokio::time::timeout(Duration::from_secs(10), f(c, vars)).await {
                Ok(s) => s,
                Err(_) => "client step timed out".to_string(),
            },
            Ok(Err(e)) => format!("connect error: {}", client_error(&e)),
            Err(_) => "connect timed out".to_string(),
        }
    })
}

/// gRPC code and message of an etcd-client error (no metadata, which differs between servers).
fn client_error(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    }
}

fn render_kv(kv: &etcd_client::KeyValue) -> String {
    format!(
        "  {}={} create={} mod={} version={} lease={:016x}\n",
        kv.key_str().unwrap_or("?"),
        kv.value_str().unwrap_or("?"),
        kv.create_revision(),
        kv.mod_revision(),
        kv.version(),
        kv.lease()
    )
}

fn render_get(r: Result<etcd_client::GetResponse, etcd_client::Error>) -> String {
    match r {
        Err(e) => format!("error: {}\n", client_error(&e)),
        Ok(g) => {
            let mut s = format!(
                "count={} more={} revision={}\n",
                g.count(),
                g.more(),
                g.header().map(|h| h.revision()).unwrap_or(-1)
            );
            for kv in g.kvs() {
                s.push_str(&render_kv(kv));
            }
            s
        }
    }
}

fn render_txn(r: Result<etcd_client::TxnResponse, etcd_client::Error>) -> String {
    use etcd_client::TxnOpResponse;
    let r = match r {
        Ok(r) => r,
        Err(e) => return format!("error: {}\n", client_error(&e)),
    };
    let mut s = format!(
        "succeeded={} revision={}\n",
        r.succeeded(),
        r.header().map(|h| h.revision()).unwrap_or(-1)
    );
    for op in r.op_responses() {
        match op {
            TxnOpResponse::Put(p) => s.push_str(&format!(
                "put prev={:?}\n",
                p.prev_key()
                    .map(|kv| kv.key_str().unwrap_or("?").to_string())
            )),
            TxnOpResponse::Get(g) => {
                s.push_str(&format!("get count={} more={}\n", g.count(), g.more()));
                for kv in g.kvs() {
                    s.push_str(&render_kv(kv));
                }
            }
            TxnOpResponse::Delete(d) => s.push_str(&format!("delete deleted={}\n", d.deleted())),
            TxnOpResponse::Txn(t) => s.push_str(&format!("txn succeeded={}\n", t.succeeded())),
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------------------------
// Running a scenario on both sides
// ---------------------------------------------------------------------------------------------------------------

/// Starts the reference etcd and the candidate (keel, or etcd with `KEEL_DIFF_AGAINST_ETCD=1`) in parallel.
fn start_pair(candidate: fn() -> Server) -> (Side, Side) {
    thread::scope(|s| {
        let r = s.spawn(Server::start_etcd);
        let k = candidate();
        (
            Side::new(r.join().expect("starting etcd panicked")),
            Side::new(k),
        )
    })
}

fn candidate_label() -> String {
    if against_etcd() {
        format!("etcd-as-keel ({AGAINST_ETCD_ENV}=1)")
    } else {
        "keel".to_string()
    }
}

fn run_scenario(name: &str, steps: Vec<Step>) {
    run_scenario_with(name, steps, &[]);
}

/// [`run_scenario`] with the same extra server flags on both sides (flags etcd and keel share).
fn run_scenario_with(name: &str, steps: Vec<Step>, flags: &[&str]) {
    let started = Instant::now();
    let (mut a, mut b) = thread::scope(|s| {
        let r = s.spawn(|| Server::start_etcd_with(flags));
        let k = Server::start_keel_with(keel_bin!(), flags);
        (
            Side::new(r.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
            Side::new(k),
        )
    });
    let label = candidate_label();
    let failures = compare_steps(name, &mut a, &mut b, &steps, &label);
    eprintln!(
        "[{name}] {} steps, {} mismatches, {:.1?}",
        steps.len(),
        failures.len(),
        started.elapsed()
    );
    if !failures.is_empty() {
        panic!(
            "scenario {name}: {} of {} steps differ between etcd and {label}\n\n{}\n\
             last lines of the {label} server log:\n{}",
            failures.len(),
            steps.len(),
            failures.join("\n"),
            b.server.log_tail(30)
        );
    }
}

/// Runs every step on both sides at the same time; returns one diff per differing step.
fn compare_steps(
    name: &str,
    a: &mut Side,
    b: &mut Side,
    steps: &[Step],
    candidate_label: &str,
) -> Vec<String> {
    let verbose = std::env::var("KEEL_DIFF_VERBOSE").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let (ra, rb) = thread::scope(|s| {
            let h = s.spawn(|| {
                if step.candidate_only {
                    "(step skipped on this side)".to_string()
                } else {
                    a.run(step)
                }
            });
            let rb = b.run(step);
            (h.join().expect("etcd side panicked"), rb)
        });
        if verbose {
            eprintln!("[{name}] step {i}: {}\n{ra}\n", step.label);
        }
        if ra != rb {
            failures.push(format!(
                "step {i}: {}\n{}",
                step.label,
                line_diff(&ra, &rb, "etcd", candidate_label)
            ));
        }
    }
    failures
}

// ---------------------------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn put_and_get_flags() {
    let mut steps = vec![
        ctl("put foo bar"),
        ctl("put foo baz --prev-kv"),
        ctl("put foo qux --prev-kv -w json"),
        ctl("put fresh v --prev-kv"),
        ctl("put fresh v --prev-kv -w json"),
        ctl("put foo --ignore-value"),
        ctl("get foo -w json"),
        ctl("put missing --ignore-value"),
        ctl("lease grant 300").capture("L1", 1),
        ctl("put lk v1 --lease={L1}"),
        ctl("get lk -w json"),
        ctl("put lk v2 --ignore-lease"),
        ctl("get lk -w fields"),
        ctl("put lk v3"),
        ctl("get lk -w json"),
        ctl("put lk v4 --lease={L1} --ignore-lease"),
        ctl("put missing2 v --ignore-lease"),
        ctl("put lk v5 --lease=1234abcd"),
        ctl("put lk v6 --lease={L1} -w json"),
        ctl("get lk -w fields"),
        ctl("put foo --ignore-value --ignore-lease -w json"),
        // A small keyspace for ranges and sorting.
        ctl("put s/a 3"),
        ctl("put s/b 1"),
        ctl("put s/c 2"),
        ctl("put s/a 4"),
        ctl("put s/d 0"),
        ctl("put s/b 5"),
        ctl("put s/b 6"),
        ctl("put t 1"),
        ctl("get s/a"),
        ctl("get s/ --prefix"),
        ctl("get s/a s/c"),
        ctl("get s/a s/c -w json"),
        ctl("get s/c --from-key"),
        ctl("get '' --from-key --keys-only"),
        ctl("get '' --prefix --keys-only -w json"),
        ctl("get s/ --prefix --limit 2"),
        ctl("get s/ --prefix --limit 2 -w json"),
        ctl("get s/ --prefix --limit 4 -w json"),
        ctl("get s/ --prefix --keys-only"),
        ctl("get s/ --prefix --keys-only -w json"),
        ctl("get s/ --prefix --print-value-only"),
        ctl("get s/ --prefix -w fields"),
        ctl("get s/ --prefix --consistency=s"),
        ctl("get s/ --prefix --hex"),
        ctl("get s/b --rev 18"),
        ctl("get s/ --prefix --rev 16 -w json"),
        ctl("get s/b --rev 2"),
        ctl("get s/ --prefix --rev 17 --limit 1 --sort-by VALUE --order DESCEND -w json"),
        ctl("get nothing"),
        ctl("get nothing -w json"),
        ctl("get nothing -w fields"),
        ctl("get s/ --prefix --order DESCEND"),
        ctl("get s/ --prefix --order ASCEND --limit 2"),
        ctl("get s/ --prefix --sort-by VALUE"),
        ctl("get s/ --prefix --sort-by VALUE --limit 2 -w json"),
        ctl("get s/ --prefix --sort-by MODIFY --order DESCEND --limit 1 -w json"),
    ];
    for target in ["KEY", "VERSION", "CREATE", "MODIFY", "VALUE"] {
        for order in ["ASCEND", "DESCEND"] {
            steps.push(ctl(&format!(
                "get s/ --prefix --sort-by {target} --order {order}"
            )));
        }
    }
    steps.push(ctl(
        "get s/ --prefix --sort-by CREATE --order DESCEND -w json",
    ));
    // Range options etcdctl 3.4 cannot send (no --count-only, no min/max revision filters).
    steps.push(client(
        "count_only, revision filters, sort without order",
        |mut c, _| {
            Box::pin(async move {
                use etcd_client::{GetOptions, SortOrder, SortTarget};
                let cases: Vec<(&str, GetOptions)> = vec![
                    (
                        "count_only",
                        GetOptions::new().with_prefix().with_count_only(),
                    ),
                    (
                        "count_only+limit",
                        GetOptions::new()
                            .with_prefix()
                            .with_count_only()
                            .with_limit(1),
                    ),
                    (
                        "min_mod 17",
                        GetOptions::new().with_prefix().with_min_mod_revision(17),
                    ),
                    (
                        "max_mod 16",
                        GetOptions::new().with_prefix().with_max_mod_revision(16),
                    ),
                    (
                        "min_create 14",
                        GetOptions::new().with_prefix().with_min_create_revision(14),
                    ),
                    (
                        "max_create 14",
                        GetOptions::new().with_prefix().with_max_create_revision(14),
                    ),
                    (
                        "min_mod 16 + limit 1",
                        GetOptions::new()
                            .with_prefix()
                            .with_min_mod_revision(16)
                            .with_limit(1),
                    ),
                    (
                        "min_create 14 + max_mod 17 + count_only",
                        GetOptions::new()
                            .with_prefix()
                            .with_min_create_revision(14)
                            .with_max_mod_revision(17)
                            .with_count_only(),
                    ),
                    (
                        "sort VALUE order NONE",
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Value, SortOrder::None),
                    ),
                    (
                        "sort MOD order NONE limit 2",
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Mod, SortOrder::None)
                            .with_limit(2),
                    ),
                    (
                        "rev 16 + min_mod 15",
                        GetOptions::new()
                            .with_prefix()
                            .with_revision(16)
                            .with_min_mod_revision(15),
                    ),
                ];
                let mut out = String::new();
                for (label, opts) in cases {
                    out.push_str(&format!(
                        "{label}: {}",
                        render_get(c.get("s/", Some(opts)).await)
                    ));
                }
                out
            })
        },
    ));
    run_scenario("put_and_get_flags", steps);
}

#[test]
fn delete_variants() {
    run_scenario(
        "delete_variants",
        vec![
            ctl("put a 1"),
            ctl("put a/x 2"),
            ctl("put a/y 3"),
            ctl("put b 4"),
            ctl("put c 5"),
            ctl("put d 6"),
            ctl("put e 7"),
            ctl("put f 8"),
            ctl("del nothing"),
            ctl("del nothing -w json"),
            ctl("del nothing --prefix --prev-kv"),
            ctl("get '' --from-key -w json --keys-only"),
            ctl("del a"),
            ctl("del a"),
            ctl("del a/ --prefix --prev-kv"),
            ctl("del b c --prev-kv -w json"),
            ctl("get '' --from-key"),
            ctl("del e --from-key --prev-kv"),
            ctl("put c 55"),
            ctl("get c -w json"),
            ctl("del c -w json"),
            ctl("put c 56"),
            ctl("get c -w json"),
            ctl("get c --rev 12 -w json"),
            ctl("del '' --from-key"),
            ctl("get '' --from-key --keys-only -w json"),
            ctl("del '' --prefix"),
        ],
    );
}

#[test]
fn txn_compares_and_branches() {
    run_scenario(
        "txn_compares_and_branches",
        vec![
            ctl("put t1 a"),
            ctl("put t1 b"),
            ctl("put t2 x"),
            // value
            txn(
                "",
                &["value(\"t1\") = \"b\""],
                &["put r ok", "get t1"],
                &["put r fail"],
            ),
            txn(
                "",
                &["value(\"t1\") != \"b\""],
                &["put r ok"],
                &["put r fail", "get r"],
            ),
            txn("", &["val(\"t1\") > \"a\""], &["get t1"], &[]),
            txn("", &["val(\"t1\") < \"a\""], &[], &["get t2"]),
            // version
            txn(
                "",
                &["version(\"t1\") = \"2\""],
                &["get t1 --keys-only"],
                &[],
            ),
            txn(
                "",
                &["ver(\"t1\") > \"1\"", "ver(\"t1\") < \"3\""],
                &["put v ok"],
                &["put v fail"],
            ),
            txn(
                "",
                &["version(\"t1\") != \"2\""],
                &["put v ok"],
                &["put v fail"],
            ),
            // create revision
            txn(
                "",
                &["create(\"t1\") = \"2\""],
                &["put c ok"],
                &["put c fail"],
            ),
            txn(
                "",
                &["c(\"t1\") > \"1\"", "c(\"t1\") < \"2\""],
                &["put c ok"],
                &["put c fail"],
            ),
            txn("", &["create(\"t1\") != \"3\""], &["put c ok2"], &[]),
            // mod revision
            txn("", &["mod(\"t1\") = \"3\""], &["put m ok"], &["put m fail"]),
            txn("", &["m(\"t1\") > \"3\""], &["put m ok"], &["put m fail"]),
            txn(
                "",
                &["m(\"t1\") < \"4\"", "mod(\"t1\") != \"2\""],
                &["put m ok2"],
                &[],
            ),
            // missing keys compare as an all-zero key-value, except value compares
            txn(
                "",
                &[
                    "version(\"nokey\") = \"0\"",
                    "create(\"nokey\") = \"0\"",
                    "mod(\"nokey\") = \"0\"",
                ],
                &["put z ok"],
                &["put z fail"],
            ),
            txn(
                "",
                &["value(\"nokey\") = \"\""],
                &["put z2 ok"],
                &["put z2 fail"],
            ),
            txn(
                "",
                &["value(\"nokey\") != \"x\""],
                &["put z3 ok"],
                &["put z3 fail"],
            ),
            // several compares are ANDed; success branch with put, get, del
            txn(
                "",
                &[
                    "value(\"t1\") = \"b\"",
                    "version(\"t2\") = \"1\"",
                    "mod(\"t2\") > \"0\"",
                ],
                &["del t2", "put t3 new", "get t --prefix"],
                &["put never 1"],
            ),
            txn(
                "-w json",
                &["value(\"t1\") = \"b\""],
                &["put t4 v", "get t1", "del t3 --prev-kv", "del nothing"],
                &["put never 1"],
            ),
            txn(
                "-w json",
                &["value(\"t1\") = \"zz\""],
                &["put never 1"],
                &["get t --prefix --keys-only", "get t --prefix --limit 1"],
            ),
            txn("-w fields", &[], &["put f1 1", "get f1"], &[]),
            // no compares: success branch
            txn(
                "",
                &[],
                &["put e1 1", "put e2 2 --prev-kv"],
                &["put never 1"],
            ),
            // read-only and no-op transactions do not bump the revision
            txn("-w json", &[], &["get e1"], &[]),
            txn("-w json", &[], &[], &[]),
            txn("-w json", &[], &["del nothing"], &[]),
            txn(
                "",
                &["value(\"e1\") = \"1\""],
                &["get e --prefix --limit 1", "get e --prefix --rev 2"],
                &[],
            ),
            txn("", &[], &["put e1 11 --prev-kv", "del e2 --prev-kv"], &[]),
            ctl("get '' --from-key -w json"),
        ],
    );
}

#[test]
fn txn_lease_compare() {
    // etcdctl 3.4 cannot send a lease compare: `lease("k") = "<hex>"` panics inside the client (clientv3
    // mustInt64orLeaseID gets a string), so this step uses the etcd-client crate.
    run_scenario(
        "txn_lease_compare",
        vec![
            ctl("lease grant 300").capture("L1", 1),
            ctl("put lk v --lease={L1}"),
            ctl("put plain v"),
            client("lease compares", |mut c, vars| {
                Box::pin(async move {
                    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
                    let lease = i64::from_str_radix(vars.get("L1"), 16).unwrap_or(-1);
                    let mut out = String::new();
                    let cases: Vec<(&str, Compare)> = vec![
                        (
                            "lease(lk) = L1",
                            Compare::lease("lk", CompareOp::Equal, lease),
                        ),
                        (
                            "lease(lk) != L1",
                            Compare::lease("lk", CompareOp::NotEqual, lease),
                        ),
                        ("lease(lk) > 0", Compare::lease("lk", CompareOp::Greater, 0)),
                        (
                            "lease(lk) < L1",
                            Compare::lease("lk", CompareOp::Less, lease),
                        ),
                        (
                            "lease(plain) = 0",
                            Compare::lease("plain", CompareOp::Equal, 0),
                        ),
                        (
                            "lease(nokey) = 0",
                            Compare::lease("nokey", CompareOp::Equal, 0),
                        ),
                        (
                            "lease(nokey) < 1",
                            Compare::lease("nokey", CompareOp::Less, 1),
                        ),
                    ];
                    for (label, cmp) in cases {
                        let t = Txn::new()
                            .when([cmp])
                            .and_then([TxnOp::get("lk", None)])
                            .or_else([TxnOp::get("plain", None)]);
                        out.push_str(&format!("{label}: {}", render_txn(c.txn(t).await)));
                    }
                    // Compare over a range (range_end): true only if it holds for every key.
                    let t = Txn::new()
                        .when([Compare::version("l", CompareOp::Greater, 0).with_prefix()])
                        .and_then([TxnOp::put("range-ok", "1", None)])
                        .or_else([TxnOp::put("range-fail", "1", None)]);
                    out.push_str(&format!("version(l*) > 0: {}", render_txn(c.txn(t).await)));
                    let t = Txn::new()
                        .when([Compare::value("", CompareOp::NotEqual, "zzz").with_range("\0")])
                        .and_then([TxnOp::get(
                            "",
                            Some(
                                etcd_client::GetOptions::new()
                                    .with_all_keys()
                                    .with_keys_only(),
                            ),
                        )]);
                    out.push_str(&format!(
                        "value('', range \\0) != zzz: {}",
                        render_txn(c.txn(t).await)
                    ));
                    let t = Txn::new()
                        .when([Compare::value("l", CompareOp::NotEqual, "zzz").with_range("\0")])
                        .and_then([TxnOp::get(
                            "l",
                            Some(
                                etcd_client::GetOptions::new()
                                    .with_from_key()
                                    .with_keys_only(),
                            ),
                        )]);
                    out.push_str(&format!(
                        "value(l.., from key) != zzz: {}",
                        render_txn(c.txn(t).await)
                    ));
                    let t = Txn::new()
                        .when([Compare::mod_revision("a", CompareOp::Less, 100).with_range("z")])
                        .and_then([TxnOp::put("in-range", "1", None)])
                        .or_else([TxnOp::put("in-range", "0", None)]);
                    out.push_str(&format!("mod(a..z) < 100: {}", render_txn(c.txn(t).await)));
                    out
                })
            }),
            ctl("get '' --from-key -w json"),
        ],
    );
}

#[test]
fn watch_history_and_live() {
    run_scenario(
        "watch_history_and_live",
        vec![
            ctl("put w/a 1"), // rev 2
            ctl("put w/b 2"), // rev 3
            ctl("put w/a 3"), // rev 4
            ctl("del w/b"),   // rev 5
            ctl("put x 9"),   // rev 6
            ctl("put w/c 7"), // rev 7
            watch("--rev 2 w/a", 6),
            watch("--rev 1 --prefix w/", 15),
            watch("--rev 3 --prefix w/ --prev-kv", 16),
            watch("--rev 2 w/a w/c", 12),
            watch("--rev 2 --prefix w/ -w json", 1),
            watch("--rev 5 --prefix w/ --prev-kv -w json", 1),
            watch("--rev 6 --prefix ''", 6),
            ctl("compaction 4"),
            watch_exits("--rev 2 w/a"),
            watch_exits("--rev 3 --prefix w/ -w json"),
            watch("--rev 4 --prefix w/", 9),
            watch("--rev 4 --prefix w/ --prev-kv", 11),
            // live events: the watch starts at a future revision, then the writes happen
            watch_start("live", "--rev 8 --prefix w/"),
            watch_start("live-json", "--rev 8 --prefix w/ --prev-kv -w json"),
            ctl("put w/d 1"),       // rev 8
            ctl("put other 1"),     // rev 9
            ctl("del w/ --prefix"), // rev 10
            ctl("put w/a again"),   // rev 11
            watch_collect("live", 15),
            watch_collect("live-json", 3),
        ],
    );
}

#[test]
fn lease_lifecycle() {
    run_scenario(
        "lease_lifecycle",
        vec![
            // Granted out of TTL order: `lease list` sorts by expiry (etcd's lessor.Leases), not by grant or ID.
            ctl("lease grant 300").capture("L3", 1),
            ctl("lease grant 100").capture("L1", 1),
            ctl("lease grant 400 -w fields"),
            ctl("lease grant 200 -w json"),
            ctl("lease list"),
            ctl("lease list -w json"),
            ctl("put k1 v --lease={L1}"),
            ctl("put k2 v --lease={L1}"),
            ctl("put k3 v --lease={L3}"),
            ctl("get k --prefix -w json"),
            ctl("lease timetolive {L1}"),
            ctl("lease timetolive {L1} --keys"),
            ctl("lease timetolive {L1} --keys -w json"),
            ctl("lease timetolive {L3} --keys -w fields"),
            ctl("lease keep-alive --once {L1}"),
            ctl("lease keep-alive --once {L1} -w json"),
            ctl("lease revoke {L1}"),
            ctl("get k --prefix"),
            ctl("get k --prefix -w json"),
            ctl("lease revoke {L1}"),
            ctl("lease timetolive {L1}"),
            ctl("lease timetolive {L1} -w json"),
            ctl("lease keep-alive --once {L1}"),
            ctl("lease timetolive 1234"),
            ctl("lease revoke 1234"),
            ctl("lease grant 9000000001"),
            ctl("lease list"),
            // The minimum TTL: `lease grant 0` is raised to 2 s; the attached key goes when it expires.
            ctl("lease grant 0").capture("L0", 1),
            ctl("lease grant 1"),
            ctl("put ek v --lease={L0}"),
            wait_for("get ek --print-value-only", ""),
            ctl("get '' --from-key -w json"),
            ctl("lease timetolive {L0}"),
            ctl("lease revoke {L0}"),
        ],
    );
}

#[test]
fn auth_users_roles_and_permissions() {
    const ROOT: &str = "--user root:rootpw";
    const RO: &str = "--user ro:ropw";
    let as_root = |args: &str| ctl(&format!("{ROOT} {args}"));
    let as_ro = |args: &str| ctl(&format!("{RO} {args}"));
    run_scenario(
        "auth_users_roles_and_permissions",
        vec![
            ctl("put /ro/a 1"),
            ctl("put /x 2"),
            // Enabling needs user root holding role root.
            ctl("auth enable"),
            ctl("user add root:rootpw"),
            ctl("role add root"),
            ctl("auth enable"),
            ctl("user grant-role root root"),
            ctl("user add ro:ropw"),
            ctl("user add ro:again"),
            ctl("user add nopw --no-password"),
            ctl("role add ro"),
            ctl("role add ro"),
            ctl("role grant-permission ro read /ro/ --prefix"),
            ctl("role grant-permission ro readwrite /rw"),
            ctl("role grant-permission ro write /w/ /w9"),
            ctl("role grant-permission ro write /rw"),
            ctl("user grant-role ro ro"),
            ctl("user grant-role ro nosuch"),
            ctl("user grant-role nosuch ro"),
            ctl("user list"),
            ctl("role list -w json"),
            ctl("role get ro"),
            ctl("role get ro -w json"),
            ctl("user get ro --detail"),
            ctl("auth enable"),
            ctl("auth enable"),
            // Who may do what.
            ctl("get /ro/a"),
            ctl("put /ro/a 3"),
            ctl("user list"),
            as_root("get /ro/a"),
            as_ro("get /ro/a"),
            as_ro("get /ro/ --prefix"),
            as_ro("get /ro/ /ro0"),
            as_ro("get /ro/ --from-key"),
            as_ro("get /x"),
            as_ro("put /ro/a 3"),
            as_ro("put /rw 1"),
            as_ro("get /rw"),
            as_ro("put /w/x 1"),
            as_ro("get /w/x"),
            as_ro("put --prev-kv /w/x 2"),
            as_ro("del /w/ /w9"),
            as_ro("del --prev-kv /w/ /w9"),
            as_ro("txn").stdin("\nput /ro/a 5\n\n"),
            as_ro("txn").stdin("value(\"/rw\") = \"1\"\n\nget /ro/a\n\n"),
            watch_exits(&format!("{RO} /x")),
            watch_exits("/ro/a"),
            ctl("--user ro:bad get /ro/a"),
            ctl("--user nopw:x get /ro/a"),
            ctl("--user ghost:x get /ro/a"),
            // Users and roles: root may do everything, others see only themselves.
            as_ro("user get ro"),
            as_ro("user get root"),
            as_ro("role get ro"),
            as_ro("role get root"),
            as_ro("user list"),
            as_ro("role add x"),
            as_ro("auth disable"),
            as_root("user delete root"),
            as_root("role delete root"),
            as_root("user revoke-role root root"),
            as_root("user revoke-role ro nosuch"),
            as_root("role revoke-permission ro /nope"),
            as_root("role revoke-permission ro /rw"),
            as_root("role get ro"),
            // Maintenance needs root; etcd 3.4 sends these refusals unconverted (code Unknown).
            ctl("endpoint hashkv"),
            as_ro("endpoint hashkv"),
            as_ro("defrag"),
            as_root("endpoint hashkv -w json"),
            ctl("endpoint status"),
            // A changed password invalidates the old one.
            as_root("user passwd ro --interactive=false").stdin("newpw\n"),
            as_ro("get /ro/a"),
            ctl("--user ro:newpw get /ro/a"),
            as_root("user delete nopw"),
            as_root("user list"),
            as_root("auth disable"),
            ctl("get /ro/a"),
            ctl("auth disable"),
            ctl("--user ro:newpw get /ro/a"),
            ctl("user list"),
            ctl("role delete ro"),
            ctl("user get ro"),
        ],
    );
}

#[test]
fn compaction_rules() {
    run_scenario(
        "compaction_rules",
        vec![
            ctl("put c 1"), // rev 2
            ctl("put c 2"), // rev 3
            ctl("put d 1"), // rev 4
            ctl("del d"),   // rev 5
            ctl("put c 3"), // rev 6
            ctl("put c 4"), // rev 7
            ctl("compaction 100"),
            ctl("compaction 3"),
            ctl("compaction 3"),
            ctl("compaction 2"),
            ctl("get c --rev 2"),
            ctl("get c --rev 3"),
            ctl("get c --rev 3 -w json"),
            ctl("get d --rev 4 -w json"),
            txn("", &[], &["get c --rev 2"], &[]),
            ctl("compaction 5 --physical"),
            ctl("get c --rev 4"),
            ctl("get d --rev 5 -w json"),
            ctl("get '' --from-key --rev 5 -w json"),
            ctl("compaction 7"),
            ctl("compaction 7 --physical"),
            ctl("compaction 8"),
            ctl("get c -w json"),
            ctl("put c 5"), // rev 8
            ctl("get c --rev 7 -w json"),
        ],
    );
}

#[test]
fn cluster_and_maintenance_info() {
    run_scenario(
        "cluster_and_maintenance_info",
        vec![
            ctl("put a 1"),
            ctl("endpoint health"),
            ctl("endpoint health -w json"),
            ctl("endpoint health -w table"),
            ctl("endpoint status"),
            ctl("endpoint status -w json"),
            ctl("endpoint status -w table"),
            ctl("member list"),
            ctl("member list -w json"),
            ctl("member list -w table"),
            ctl("member list -w fields"),
            ctl("alarm list"),
            ctl("alarm list -w json"),
        ],
    );
}

#[test]
fn hashkv_matches_etcd() {
    // HashKV is a CRC-32C over etcd's on-disk key/value encoding: keel matches only if it hashes the same bytes.
    run_scenario(
        "hashkv_matches_etcd",
        vec![
            ctl("put a 1"),
            ctl("put b 2"),
            ctl("put a 3"),
            ctl("del b"),
            ctl("endpoint hashkv -w json"),
            ctl("endpoint hashkv --rev 3 -w json"),
            ctl("compaction 3"),
            ctl("endpoint hashkv -w json"),
        ],
    );
}

#[test]
fn bad_input_errors() {
    let too_many: String = std::iter::once("\n".to_string())
        .chain((0..129).map(|i| format!("put k{i} v\n")))
        .chain(["\n\n".to_string()])
        .collect();
    let max_ops: String = std::iter::once("\n".to_string())
        .chain((0..128).map(|i| format!("put k{i} v\n")))
        .chain(["\n\n".to_string()])
        .collect();
    let too_many_compares: String = (0..129)
        .map(|i| format!("version(\"c{i}\") = \"0\"\n"))
        .chain(["\nput x 1\n\n\n".to_string()])
        .collect();
    run_scenario(
        "bad_input_errors",
        vec![
            ctl("put big").stdin_bytes(vec![b'a'; 1_600_001]),
            ctl("put fits").stdin_bytes(vec![b'b'; 1_500_000]),
            ctl("get big --keys-only -w json"),
            ctl("get fits --keys-only -w json"),
            txn_raw("", &too_many),
            txn_raw("", &too_many_compares),
            txn_raw("", &max_ops),
            ctl("get k --prefix --limit 1 -w json"),
            ctl("get foo --rev 100"),
            ctl("get foo --rev 100 -w json"),
            txn("", &[], &["get foo --rev 100"], &[]),
            ctl("put k v --lease=abcdef"),
            txn("", &[], &["put k v --lease=abcdef"], &[]),
            txn("", &[], &["put dup 1", "put dup 2"], &[]),
            txn("", &[], &["put d/x 1", "del d/ --prefix"], &[]),
            txn("", &[], &["del d/ --prefix", "put d/y 1"], &[]),
            txn(
                "",
                &["value(\"nokey\") = \"x\""],
                &["put ok 1"],
                &["put dup 1", "put dup 2"],
            ),
            txn("", &[], &["del k1", "del k --prefix"], &[]),
            txn(
                "",
                &[],
                &["put k2 --ignore-value", "put k3 v --ignore-lease"],
                &[],
            ),
            txn("", &[], &["put nokey --ignore-value"], &[]),
            ctl("put '' x"),
            ctl("get ''"),
            ctl("del ''"),
            txn("", &[], &["put \"\" x"], &[]),
            ctl("get '' --from-key --keys-only -w json"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Harness self-tests (no servers)
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn harness_normalizer_maps_ids_terms_and_ports() {
    let mut n = Normalizer::new().replace("127.0.0.1:23791", "<CLIENT>");
    // Ordinary words (keys, values, "OK") never take an ID number.
    assert_eq!(
        n.normalize("OK\nc\n1\nabc\ndeadbeef"),
        "OK\nc\n1\nabc\ndeadbeef"
    );
    let got = n.normalize(
        r#"{"header":{"cluster_id":15118495548433857066,"member_id":13668033151171901709,"revision":3,"raft_term":2},"kvs":[{"key":"Zm9v","create_revision":2,"mod_revision":3,"version":2,"value":"YmF6","lease":4111120388900598286}],"count":1}"#,
    );
    let want = r#"{"header":{"cluster_id":"<ID1>","member_id":"<ID2>","revision":3,"raft_term":"<TERM>"},"kvs":[{"key":"Zm9v","create_revision":2,"mod_revision":3,"version":2,"value":"YmF6","lease":"<ID3>"}],"count":1}"#;
    let canon = |s: &str| {
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(s).unwrap()).unwrap()
    };
    assert_eq!(canon(&got), canon(want));
    // The same lease printed in hex by etcdctl maps to the same placeholder.
    assert_eq!(
        n.normalize(
            "lease 390da2364949320e granted with TTL(100s), remaining(99s), attached keys([k1])"
        ),
        "lease <ID3> granted with TTL(100s), remaining(<REMAINING~100>s), attached keys([k1])"
    );
    assert_eq!(
        n.normalize(
            "bdae9bbc11dd390d, started, node1, http://127.0.0.1:23801, http://127.0.0.1:23791, false"
        ),
        "<ID2>, started, node1, http://127.0.0.1:<PORT>, http://<CLIENT>, false"
    );
    assert_eq!(
        n.normalize("127.0.0.1:23791, bdae9bbc11dd390d, 3.4.23, 25 kB, true, false, 2, 6, 6, "),
        "<CLIENT>, <ID2>, <VERSION>, <SIZE>, true, false, <TERM>, <INDEX>, <INDEX>, "
    );
    assert_eq!(
        n.normalize(
            "127.0.0.1:23791 is healthy: successfully committed proposal: took = 2.498428ms"
        ),
        "<CLIENT> is healthy: successfully committed proposal: took = <DURATION>"
    );
    let log = r#"{"level":"warn","ts":"2026-12-02T10:25:08.014Z","caller":"clientv3/retry_interceptor.go:62","msg":"retrying of unary invoker failed","target":"endpoint://client-af2bdc1c-e80a-4c6a-b80e-433aad45be2e/127.0.0.1:23791","attempt":0,"error":"rpc error: code = NotFound desc = etcdserver: requested lease not found"}"#;
    let got = n.normalize(log);
    assert!(got.contains(r#""ts":"<TS>""#), "{got}");
    assert!(
        got.contains(r#""target":"endpoint://client-<UUID>/<CLIENT>""#),
        "{got}"
    );
}

#[test]
fn harness_normalizer_sorts_lease_keys() {
    use keel_testkit::normalize;
    // etcd 3.4 lists a lease's attached keys in random (Go map) order.
    assert_eq!(
        normalize(
            "lease 390da2364949320e granted with TTL(100s), remaining(99s), attached keys([k2 k1])"
        ),
        normalize(
            "lease 390da2364949320e granted with TTL(100s), remaining(98s), attached keys([k1 k2])"
        )
    );
    assert_eq!(
        normalize(r#"{"id":1,"ttl":99,"granted-ttl":100,"keys":["azI=","azE="]}"#),
        normalize(r#"{"id":1,"ttl":99,"granted-ttl":100,"keys":["azE=","azI="]}"#)
    );
    assert_eq!(
        normalize("\"GrantedTTL\" : 300\n\"Key\" : \"k2\"\n\"Key\" : \"k1\""),
        normalize("\"GrantedTTL\" : 300\n\"Key\" : \"k1\"\n\"Key\" : \"k2\"")
    );
    assert_ne!(
        normalize("attached keys([k1 k2])"),
        normalize("attached keys([k1 k3])")
    );
}

#[test]
fn harness_normalizer_keeps_real_differences() {
    use keel_testkit::normalize;
    assert_ne!(
        normalize(r#"{"header":{"revision":3}}"#),
        normalize(r#"{"header":{"revision":4}}"#)
    );
    assert_ne!(
        normalize(
            "lease 390da2364949320e granted with TTL(100s), remaining(0s), attached keys([])"
        ),
        normalize(
            "lease 390da2364949320e granted with TTL(100s), remaining(99s), attached keys([])"
        )
    );
    assert_eq!(
        normalize("lease 390da2364949320e granted with TTL(60s)"),
        normalize("lease 0000000000000001 granted with TTL(60s)")
    );
    assert_ne!(
        normalize("lease 390da2364949320e granted with TTL(60s)"),
        normalize("lease 0000000000000001 granted with TTL(61s)")
    );
    // Two different leases stay different.
    assert_ne!(
        normalize("390da2364949320e\n390da2364949320e"),
        normalize("390da2364949320e\n390da23649493210")
    );
    // Tables: column widths do not matter, contents do.
    assert_eq!(
        normalize("+---+\n| RAFT INDEX | REV |\n+---+\n|          6 | 1 |\n+---+"),
        normalize("+------+\n| RAFT INDEX | REV |\n+------+\n| 12 |   1 |\n+------+"),
    );
    assert_ne!(
        normalize("| A | REV |\n| x | 1 |"),
        normalize("| A | REV |\n| x | 2 |"),
    );
}

#[test]
fn harness_detects_a_real_difference() {
    // Two real etcds; the second gets one extra write. The extra step, and every later output that shows the
    // shifted revision, must be reported.
    let (mut a, mut b) = start_pair(Server::start_etcd);
    let steps = vec![
        ctl("put a 1").candidate_only(),
        ctl("get a -w json"),
        ctl("put b 1"),
        ctl("get b -w json"),
        ctl("get x"),
    ];
    let failures = compare_steps(
        "self-check",
        &mut a,
        &mut b,
        &steps,
        "etcd-with-extra-write",
    );
    let failed: Vec<&str> = failures
        .iter()
        .map(|f| f.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        failed,
        ["step 0", "step 1", "step 3"],
        "{}",
        failures.join("\n")
    );
    // The diff shows the candidate's extra key (`+` side) against etcd's empty answer (`-` side).
    assert!(failures[1].contains("+{\"count\":1"), "{}", failures[1]);
}

#[test]
fn harness_split_args() {
    assert_eq!(split_args("put '' x"), vec!["put", "", "x"]);
    assert_eq!(
        split_args("get 'a b' --prefix"),
        vec!["get", "a b", "--prefix"]
    );
    assert_eq!(split_args("  get   a  "), vec!["get", "a"]);
}

/// Puts 100 KB random values under `big/<n>` until the server refuses one (at most 100); prints the refusal.
fn fill_until_refused(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        for i in 0..100 {
            let value: Vec<u8> = (0..100_000).map(|_| rand::random::<u8>()).collect();
            if let Err(e) = c.put(format!("big/{i}"), value, None).await {
                return format!("refused: {}\n", client_error(&e));
            }
        }
        "never refused\n".to_string()
    })
}

/// Deletes `big/` (how many keys that is differs between the sides).
fn delete_filler(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let opts = etcd_client::DeleteOptions::new().with_prefix();
        match c.delete("big/", Some(opts)).await {
            Ok(r) if r.deleted() > 0 => "deleted\n".to_string(),
            Ok(_) => "nothing deleted\n".to_string(),
            Err(e) => format!("delete: {}\n", client_error(&e)),
        }
    })
}

/// Compacts to the current revision (which differs between the sides: they filled different amounts).
fn compact_to_current(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let rev = match c.get("nothing", None).await {
            Ok(r) => r.header().map(|h| h.revision()).unwrap_or(0),
            Err(e) => return format!("get: {}\n", client_error(&e)),
        };
        match c.compact(rev, None).await {
            Ok(_) => "compacted to the current revision\n".to_string(),
            Err(e) => format!("compact: {}\n", client_error(&e)),
        }
    })
}

fn render_alarms(r: Result<etcd_client::AlarmResponse, etcd_client::Error>) -> String {
    match r {
        Err(e) => format!("error: {}\n", client_error(&e)),
        Ok(r) => {
            let mut s = format!(
                "alarms={} header={}\n",
                r.alarms().len(),
                r.header().is_some()
            );
            for a in r.alarms() {
                let member = if a.member_id() == 0 { "0" } else { "<member>" };
                s.push_str(&format!("  member={member} alarm={:?}\n", a.alarm()));
            }
            s
        }
    }
}

/// The Alarm RPC as etcdctl 3.4 cannot send it: raising alarms, member ID 0, CORRUPT, deactivating one member's.
fn alarm_rpc(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
        let mut out = String::new();
        let alarm = |c: &mut etcd_client::Client, action, t, member: u64| {
            let mut c = c.clone();
            async move {
                let mut opts = AlarmOptions::new();
                opts.with_member(member);
                render_alarms(c.alarm(action, t, Some(opts)).await)
            }
        };
        let put = |c: &mut etcd_client::Client| {
            let mut c = c.clone();
            async move {
                match c.put("after-alarm", "v", None).await {
                    Ok(_) => "put: ok\n".to_string(),
                    Err(e) => format!("put: {}\n", client_error(&e)),
                }
            }
        };
        let get = |c: &mut etcd_client::Client| {
            let mut c = c.clone();
            async move {
                match c.get("after-alarm", None).await {
                    Ok(r) => format!("get: {} kvs\n", r.kvs().len()),
                    Err(e) => format!("get: {}\n", client_error(&e)),
                }
            }
        };
        out.push_str("activate NOSPACE for member 0:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Activate, AlarmType::Nospace, 0).await);
        out.push_str("activate it again:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Activate, AlarmType::Nospace, 0).await);
        out.push_str("get all:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Get, AlarmType::None, 0).await);
        out.push_str(&put(&mut c).await);
        out.push_str("deactivate NOSPACE for member 7 (not raised):\n");
        out.push_str(&alarm(&mut c, AlarmAction::Deactivate, AlarmType::Nospace, 7).await);
        out.push_str("deactivate NOSPACE for member 0:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Deactivate, AlarmType::Nospace, 0).await);
        out.push_str(&put(&mut c).await);
        out.push_str("activate CORRUPT for member 5:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Activate, AlarmType::Corrupt, 5).await);
        out.push_str("get NOSPACE only:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Get, AlarmType::Nospace, 0).await);
        out.push_str(&put(&mut c).await);
        out.push_str(&get(&mut c).await);
        out.push_str("deactivate CORRUPT for member 5:\n");
        out.push_str(&alarm(&mut c, AlarmAction::Deactivate, AlarmType::Corrupt, 5).await);
        out.push_str(&put(&mut c).await);
        out
    })
}

/// The space quota and the NOSPACE alarm, as an operator meets them: fill a small quota, see writes refused while
/// reads and deletes go on, `alarm list`, `endpoint status` errors, then compact + defrag + `alarm disarm` and
/// write again. How many puts fit differs (bbolt pages vs fjall tables), so the fill step prints only the refusal.
#[test]
fn space_quota_and_alarms() {
    let steps = vec![
        ctl("put small v"),
        ctl("alarm list"),
        ctl("endpoint status"),
        client("fill until the quota refuses", fill_until_refused),
        ctl("put k v"),
        ctl("alarm list"),
        ctl("endpoint status"),
        ctl("endpoint status -w table"),
        ctl("get small"),
        ctl("get k"),
        txn("", &[], &["get small"], &[]),
        txn("", &[], &["put t v"], &[]),
        ctl("lease grant 60"),
        client("delete the filler", delete_filler),
        ctl("put k v"),
        client("compact to the current revision", compact_to_current),
        ctl("defrag"),
        ctl("put k v"),
        ctl("alarm disarm"),
        ctl("alarm list"),
        ctl("put k v"),
        ctl("get k"),
        ctl("lease grant 60").capture("L", 1),
        ctl("endpoint status"),
        ctl("alarm disarm"),
        client("the Alarm RPC", alarm_rpc),
        ctl("alarm list"),
        ctl("endpoint status"),
    ];
    run_scenario_with(
        "space_quota_and_alarms",
        steps,
        &["--quota-backend-bytes", "2000000"],
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Locks and elections
// ---------------------------------------------------------------------------------------------------------------

const SIGINT: i32 = 2;
const SIGKILL: i32 = 9;
/// Bound for a waiter that gets the lock when its holder's 2 s lease expires.
const EXPIRY_LIMIT: Duration = Duration::from_secs(20);

/// `etcdctl lock` and `etcdctl elect` (etcdctl runs etcd's concurrency recipes over KV, Watch and Lease), then the
/// `v3lock` and `v3election` gRPC services with the etcd-client crate: holders, waiters, a holder whose lease
/// expires, leaders, observers, proclaim, resign and the services' errors.
#[test]
fn locks_and_elections() {
    run_scenario(
        "locks_and_elections",
        vec![
            // A holder, two waiters queued in order; each gets the lock when the one before lets go.
            bg_start("h1", "lock mylock", 1),
            bg_start("h2", "lock mylock", 0),
            wait_keys("mylock/", 2),
            bg_start("h3", "lock mylock", 0),
            wait_keys("mylock/", 3),
            ctl("get mylock/ --prefix --keys-only --sort-by=CREATE --order=ASCEND"),
            bg_stop("h1", SIGINT),
            bg_lines("h2", 1, WAIT_LIMIT),
            bg_stop("h2", SIGINT),
            bg_lines("h3", 1, WAIT_LIMIT),
            bg_stop("h3", SIGINT),
            ctl("get mylock/ --prefix"),
            // The command form: runs the command while holding the lock, with its key and revision.
            ctl("lock mylock -- sh -c 'echo held $ETCD_LOCK_KEY $ETCD_LOCK_REV'"),
            // A holder that dies: its 2 s lease expires and the waiter gets the lock.
            bg_start("x1", "lock --ttl=2 explock", 1),
            bg_start("x2", "lock explock", 0),
            wait_keys("explock/", 2),
            bg_stop("x1", SIGKILL),
            bg_lines("x2", 1, EXPIRY_LIMIT),
            ctl("get explock/ --prefix --keys-only"),
            bg_stop("x2", SIGINT),
            // Elections: a leader, an observer, a second candidate who leads once the first resigns.
            bg_start("c1", "elect myelection p1", 2),
            bg_start("o1", "elect -l myelection", 2),
            bg_start("c2", "elect myelection p2", 0),
            wait_keys("myelection/", 2),
            ctl("get myelection/ --prefix --sort-by=CREATE --order=ASCEND"),
            bg_stop("c1", SIGINT),
            bg_lines("c2", 2, WAIT_LIMIT),
            bg_lines("o1", 4, WAIT_LIMIT),
            bg_stop("o1", SIGINT),
            bg_stop("c2", SIGINT),
            ctl("elect myelection"),
            ctl("get myelection/ --prefix"),
            // The gRPC services.
            client("Lock/Unlock: holder, waiter, expiry", lock_rpcs),
            client("Campaign/Proclaim/Leader/Observe/Resign", election_rpcs),
            client("lock and election errors", recipe_errors),
        ],
    );
}

fn show_header(h: Option<&etcd_client::ResponseHeader>) -> String {
    h.map_or("none".into(), |h| format!("revision={}", h.revision()))
}

fn show_key(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

fn lock_rpcs(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let mut out = String::new();
        let grant = |c: &mut etcd_client::Client, ttl| {
            let mut c = c.clone();
            async move { c.lease_grant(ttl, None).await.map(|g| g.id()).unwrap_or(0) }
        };
        let (l1, l2) = (grant(&mut c, 60).await, grant(&mut c, 60).await);
        let opts = |l| Some(etcd_client::LockOptions::new().with_lease(l));
        let held = match c.lock("rpclock", opts(l1)).await {
            Ok(r) => r,
            Err(e) => return format!("lock: {}\n", client_error(&e)),
        };
        out.push_str(&format!(
            "lock: key={} {}\n",
            show_key(held.key()),
            show_header(held.header())
        ));
        // Locking again with the same lease finds the key it already holds.
        match c.lock("rpclock", opts(l1)).await {
            Ok(r) => out.push_str(&format!(
                "relock: key={} {}\n",
                show_key(r.key()),
                show_header(r.header())
            )),
            Err(e) => out.push_str(&format!("relock: {}\n", client_error(&e))),
        }
        let mut w = c.clone();
        let waiter = tokio::spawn(async move { w.lock("rpclock", opts(l2)).await });
        while c
            .get(
                "rpclock/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .map_or(0, |g| g.count())
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match c.unlock(held.key()).await {
            Ok(u) => out.push_str(&format!("unlock: {}\n", show_header(u.header()))),
            Err(e) => out.push_str(&format!("unlock: {}\n", client_error(&e))),
        }
        match waiter.await {
            Ok(Ok(r)) => out.push_str(&format!(
                "waiter: key={} {}\n",
                show_key(r.key()),
                show_header(r.header())
            )),
            Ok(Err(e)) => out.push_str(&format!("waiter: {}\n", client_error(&e))),
            Err(e) => out.push_str(&format!("waiter task: {e}\n")),
        }
        // A holder whose 2 s lease is never kept alive: the next waiter gets the lock when it expires.
        let (l3, l4) = (grant(&mut c, 2).await, grant(&mut c, 60).await);
        let _ = c.lock("rpcexp", opts(l3)).await;
        match c.lock("rpcexp", opts(l4)).await {
            Ok(r) => out.push_str(&format!(
                "after expiry: key={} {}\n",
                show_key(r.key()),
                show_header(r.header())
            )),
            Err(e) => out.push_str(&format!("after expiry: {}\n", client_error(&e))),
        }
        out
    })
}

fn election_rpcs(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let mut out = String::new();
        let l1 = c.lease_grant(60, None).await.map(|g| g.id()).unwrap_or(0);
        let l2 = c.lease_grant(60, None).await.map(|g| g.id()).unwrap_or(0);
        let camp = match c.campaign("rpcelect", "v1", l1).await {
            Ok(r) => r,
            Err(e) => return format!("campaign: {}\n", client_error(&e)),
        };
        let Some(leader) = camp.leader().cloned() else {
            return "campaign: no leader key\n".into();
        };
        out.push_str(&format!(
            "campaign: name={} key={} rev={} lease_is_ours={} {}\n",
            show_key(leader.name()),
            show_key(leader.key()),
            leader.rev(),
            leader.lease() == l1,
            show_header(camp.header())
        ));
        let show_leader = |r: Result<etcd_client::LeaderResponse, etcd_client::Error>| match r {
            Ok(r) => format!(
                "key={} value={} {}\n",
                r.kv().map_or("-".into(), |kv| show_key(kv.key())),
                r.kv().map_or("-".into(), |kv| show_key(kv.value())),
                show_header(r.header())
            ),
            Err(e) => format!("{}\n", client_error(&e)),
        };
        out.push_str(&format!(
            "leader: {}",
            show_leader(c.leader("rpcelect").await)
        ));
        let pro = c
            .proclaim(
                "v2",
                Some(etcd_client::ProclaimOptions::new().with_leader(leader.clone())),
            )
            .await;
        out.push_str(&match pro {
            Ok(p) => format!("proclaim: {}\n", show_header(p.header())),
            Err(e) => format!("proclaim: {}\n", client_error(&e)),
        });
        let mut obs = match c.observe("rpcelect").await {
            Ok(s) => s,
            Err(e) => return format!("{out}observe: {}\n", client_error(&e)),
        };
        let next = |m: Result<Option<etcd_client::LeaderResponse>, etcd_client::Error>| match m {
            Ok(Some(r)) => show_leader(Ok(r)),
            Ok(None) => "end\n".into(),
            Err(e) => format!("{}\n", client_error(&e)),
        };
        out.push_str(&format!("observe: {}", next(obs.message().await)));
        let mut c2 = c.clone();
        let second = tokio::spawn(async move { c2.campaign("rpcelect", "w", l2).await });
        while c
            .get(
                "rpcelect/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .map_or(0, |g| g.count())
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let res = c
            .resign(Some(
                etcd_client::ResignOptions::new().with_leader(leader.clone()),
            ))
            .await;
        out.push_str(&match res {
            Ok(r) => format!("resign: {}\n", show_header(r.header())),
            Err(e) => format!("resign: {}\n", client_error(&e)),
        });
        match second.await {
            Ok(Ok(r)) => out.push_str(&format!(
                "second campaign: rev={} {}\n",
                r.leader().map_or(0, |l| l.rev()),
                show_header(r.header())
            )),
            Ok(Err(e)) => out.push_str(&format!("second campaign: {}\n", client_error(&e))),
            Err(e) => out.push_str(&format!("second campaign task: {e}\n")),
        }
        out.push_str(&format!("observe: {}", next(obs.message().await)));
        // The old leader key no longer leads.
        let pro = c
            .proclaim(
                "v3",
                Some(etcd_client::ProclaimOptions::new().with_leader(leader)),
            )
            .await;
        out.push_str(&match pro {
            Ok(p) => format!("stale proclaim: {}\n", show_header(p.header())),
            Err(e) => format!("stale proclaim: {}\n", client_error(&e)),
        });
        out
    })
}

fn recipe_errors(mut c: etcd_client::Client, _: Vars) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let mut out = String::new();
        let r = c.leader("nobody").await;
        out.push_str(&format!(
            "leader of none: {:?}\n",
            r.map(|_| ()).map_err(|e| client_error(&e))
        ));
        let r = c
            .lock(
                "badlease",
                Some(etcd_client::LockOptions::new().with_lease(12345)),
            )
            .await;
        out.push_str(&format!(
            "lock, unknown lease: {:?}\n",
            r.map(|_| ()).map_err(|e| client_error(&e))
        ));
        let r = c.campaign("badlease", "v", 12345).await;
        out.push_str(&format!(
            "campaign, unknown lease: {:?}\n",
            r.map(|_| ()).map_err(|e| client_error(&e))
        ));
        let r = c.resign(None).await;
        out.push_str(&format!(
            "resign without leader: {:?}\n",
            r.map(|_| ()).map_err(|e| client_error(&e))
        ));
        let r = c.proclaim("v", None).await;
        out.push_str(&format!(
            "proclaim without leader: {:?}\n",
            r.map(|_| ()).map_err(|e| client_error(&e))
        ));
        let r = c.unlock("").await;
        out.push_str(&format!(
            "unlock of no key: {:?}\n",
            r.map(|_| ()).map_err(|e| client_error(&e))
        ));
        out
    })
}
