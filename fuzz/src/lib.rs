//! A small mutation fuzzer for keel's decoders of untrusted bytes, run as ordinary `cargo test`
//! tests (no cargo-fuzz, no nightly): each target starts from real, valid inputs and mutates them
//! (bit flips, truncation, splicing, length fields and varints set to huge values, repeated slices
//! for deep nesting, dictionary tokens, random bytes) for a time budget.
//!
//! What a target must never do, and how it is caught:
//! - panic: caught with `catch_unwind`, the input minimized and saved, the test fails at the end;
//! - hang: a watchdog aborts the process after [`timeout`] on one input, printing and saving it;
//! - allocate from a length field: [`CappedAlloc`] aborts on any single allocation above
//!   [`ALLOC_CAP`], printing a backtrace (replay with the printed seed to get the input).
//!
//! Environment: `KEEL_FUZZ_SECONDS` (budget per target, default 1), `KEEL_FUZZ_SEED` (replay a
//! run), `KEEL_FUZZ_TIMEOUT` (seconds per input, default 10), `KEEL_FUZZ_OUT` (findings
//! directory), `KEEL_FUZZ_STATS` (a file each target appends its figures to).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Largest single allocation a target may make; decoders bound what they allocate by the bytes
/// they were given (at most a few MiB here), so anything this big trusted a length field.
pub const ALLOC_CAP: usize = 256 << 20;

/// Largest input the mutator produces.
const MAX_INPUT: usize = 1 << 20;

/// Inputs kept for mutation (the seeds plus inputs the target accepted).
const MAX_CORPUS: usize = 512;

thread_local! {
    static IN_ALLOC_REPORT: Cell<bool> = const { Cell::new(false) };
    static FUZZING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A global allocator that aborts on any single allocation above [`ALLOC_CAP`] made while a
/// target runs on the thread, after printing where it came from. Test binaries that fuzz install
/// it with `#[global_allocator]`.
#[derive(Debug, Default)]
pub struct CappedAlloc;

impl CappedAlloc {
    #[cold]
    fn too_big(size: usize) {
        // Only inputs being fuzzed on this thread are held to the cap; other tests in the same
        // binary allocate as they like.
        if !FUZZING.try_with(Cell::get).unwrap_or(false) {
            return;
        }
        let first = IN_ALLOC_REPORT.with(|f| !f.replace(true));
        if first {
            let bt = std::backtrace::Backtrace::force_capture();
            eprintln!(
                "keel-fuzz: allocation of {size} bytes (cap {ALLOC_CAP}): a length field was trusted\n{bt}"
            );
            if let Some(out) = current_out() {
                out.dump("alloc");
            }
            std::process::abort();
        }
    }
}

// SAFETY: every call forwards to the system allocator unchanged; the cap check only reads the
// layout and never unwinds (it aborts).
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            Self::too_big(layout.size());
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            Self::too_big(layout.size());
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            Self::too_big(new_size);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The input being run on this thread, for the allocation cap's report.
#[derive(Clone)]
struct Current {
    name: String,
    input: Arc<Mutex<Vec<u8>>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

fn current_out() -> Option<Current> {
    CURRENT.with(|c| c.borrow().clone())
}

impl Current {
    fn dump(&self, why: &str) {
        let input = match self.input.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let path = save(&self.name, why, &input);
        eprintln!(
            "keel-fuzz: {} {why} input ({} bytes) saved to {}: {}",
            self.name,
            input.len(),
            path.display(),
            hex(&input[..input.len().min(4096)])
        );
    }
}

/// Per-target budget: `KEEL_FUZZ_SECONDS` (fractions allowed), default 1 s: a smoke pass.
pub fn budget() -> Duration {
    std::env::var("KEEL_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(1))
}

/// How long one input may run before it counts as a hang: `KEEL_FUZZ_TIMEOUT`, default 10 s.
pub fn timeout() -> Duration {
    std::env::var("KEEL_FUZZ_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(10))
}

fn out_dir() -> PathBuf {
    std::env::var_os("KEEL_FUZZ_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("keel-fuzz-findings"))
}

fn save(name: &str, why: &str, input: &[u8]) -> PathBuf {
    let dir = out_dir().join(name);
    let _ = std::fs::create_dir_all(&dir);
    let h = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("{why}-{h:016x}.bin"));
    let _ = std::fs::write(&path, input);
    path
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What a target said about one input: accepted inputs join the corpus (a cheap stand-in for
/// coverage feedback: mutants of valid inputs reach deeper than mutants of garbage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The input decoded (and went through whatever follows decoding).
    Accepted,
    /// The input was refused with a typed error.
    Rejected,
}

impl<E> From<Result<(), E>> for Verdict {
    fn from(r: Result<(), E>) -> Self {
        if r.is_ok() {
            Verdict::Accepted
        } else {
            Verdict::Rejected
        }
    }
}

/// One panic found: where, the message, and the smallest input found that still hits it.
#[derive(Debug, Clone)]
pub struct Finding {
    /// `file:line:col: message` of the panic.
    pub panic: String,
    /// The minimized input.
    pub input: Vec<u8>,
    /// Where the input was saved.
    pub saved: PathBuf,
}

/// A target's figures after its run.
#[derive(Debug)]
pub struct Report {
    /// The target's name.
    pub name: String,
    /// Inputs run.
    pub inputs: u64,
    /// Inputs the target accepted.
    pub accepted: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The seed that replays this run (`KEEL_FUZZ_SEED`).
    pub seed: u64,
    /// Distinct panics found.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Fails the calling test if anything was found, listing every finding with its input.
    pub fn assert_clean(&self) {
        if self.findings.is_empty() {
            return;
        }
        let mut msg = format!(
            "fuzz target {} found {} panic(s) (seed {}):\n",
            self.name,
            self.findings.len(),
            self.seed
        );
        for f in &self.findings {
            msg.push_str(&format!(
                "- {}\n  input ({} bytes, {}): {}\n",
                f.panic,
                f.input.len(),
                f.saved.display(),
                hex(&f.input[..f.input.len().min(2048)])
            ));
        }
        panic!("{msg}");
    }
}

/// A fuzz target: its name, valid seed inputs, and tokens worth inserting (keywords, delimiters).
pub struct Target<'a> {
    name: &'a str,
    seeds: Vec<Vec<u8>>,
    dict: Vec<Vec<u8>>,
    max_len: usize,
}

impl<'a> Target<'a> {
    /// A target named `name` (the findings directory and the report use it).
    pub fn new(name: &'a str) -> Self {
        Target {
            name,
            seeds: Vec::new(),
            dict: Vec::new(),
            max_len: 64 << 10,
        }
    }

    /// Adds valid inputs to start from.
    pub fn seeds<I: IntoIterator<Item = Vec<u8>>>(mut self, seeds: I) -> Self {
        self.seeds.extend(seeds);
        self
    }

    /// Adds dictionary tokens.
    pub fn dict<I: IntoIterator<Item = T>, T: AsRef<[u8]>>(mut self, tokens: I) -> Self {
        self.dict
            .extend(tokens.into_iter().map(|t| t.as_ref().to_vec()));
        self
    }

    /// Caps the size of mutated inputs (default 64 KiB; at most 1 MiB).
    pub fn max_len(mut self, n: usize) -> Self {
        self.max_len = n.clamp(16, MAX_INPUT);
        self
    }

    /// Runs `f` on the seeds, then on mutants until the budget is spent, and reports.
    pub fn run<F, V>(self, mut f: F) -> Report
    where
        F: FnMut(&[u8]) -> V,
        V: Into<Verdict>,
    {
        install_hook();
        let seed = std::env::var("KEEL_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| rand::thread_rng().gen());
        let mut rng = StdRng::seed_from_u64(seed);
        let budget = budget();
        eprintln!(
            "keel-fuzz: {} start: {:.0}s budget, seed {seed}",
            self.name,
            budget.as_secs_f64()
        );
        let current = Current {
            name: self.name.to_string(),
            input: Arc::new(Mutex::new(Vec::new())),
        };
        CURRENT.with(|c| *c.borrow_mut() = Some(current.clone()));
        FUZZING.with(|f| f.set(true));
        let watchdog = Watchdog::start(current.clone(), timeout());

        let mut corpus: Vec<Vec<u8>> = self.seeds.clone();
        if corpus.is_empty() {
            corpus.push(Vec::new());
        }
        let mut findings: BTreeMap<String, Finding> = BTreeMap::new();
        let mut inputs = 0u64;
        let mut accepted = 0u64;
        let start = Instant::now();
        let mut pending: Vec<Vec<u8>> = self.seeds.clone();
        loop {
            let input = match pending.pop() {
                Some(i) => i,
                None => {
                    if start.elapsed() >= budget {
                        break;
                    }
                    mutate(&mut rng, &corpus, &self.dict, self.max_len)
                }
            };
            inputs += 1;
            match run_one(&current, &watchdog, &mut f, &input) {
                Ok(Verdict::Accepted) => {
                    accepted += 1;
                    if corpus.len() < MAX_CORPUS {
                        corpus.push(input);
                    } else if rng.gen_ratio(1, 8) {
                        let i = rng.gen_range(self.seeds.len().min(corpus.len() - 1)..corpus.len());
                        corpus[i] = input;
                    }
                }
                Ok(Verdict::Rejected) => {}
                Err(panic) => {
                    if !findings.contains_key(&panic) {
                        let min = minimize(&current, &watchdog, &mut f, input, &panic);
                        let saved = save(self.name, "panic", &min);
                        eprintln!(
                            "keel-fuzz: {} PANIC {panic}\n  minimized input ({} bytes) {}: {}",
                            self.name,
                            min.len(),
                            saved.display(),
                            hex(&min[..min.len().min(2048)])
                        );
                        findings.insert(
                            panic.clone(),
                            Finding {
                                panic,
                                input: min,
                                saved,
                            },
                        );
                    }
                }
            }
        }
        let elapsed = start.elapsed();
        watchdog.stop();
        FUZZING.with(|f| f.set(false));
        CURRENT.with(|c| *c.borrow_mut() = None);
        let report = Report {
            name: self.name.to_string(),
            inputs,
            accepted,
            elapsed,
            seed,
            findings: findings.into_values().collect(),
        };
        let line = format!(
            "{}\t{:.1}s\t{} inputs\t{:.0}/s\t{} accepted\t{} findings\tseed {}",
            report.name,
            elapsed.as_secs_f64(),
            inputs,
            inputs as f64 / elapsed.as_secs_f64().max(1e-9),
            accepted,
            report.findings.len(),
            seed
        );
        eprintln!("keel-fuzz: {line}");
        if let Some(path) = std::env::var_os("KEEL_FUZZ_STATS") {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(f, "{line}");
            }
        }
        report
    }
}

/// Runs one input; `Err` is the panic's `location: message`.
fn run_one<F, V>(cur: &Current, wd: &Watchdog, f: &mut F, input: &[u8]) -> Result<Verdict, String>
where
    F: FnMut(&[u8]) -> V,
    V: Into<Verdict>,
{
    match cur.input.lock() {
        Ok(mut g) => g.clone_from(&input.to_vec()),
        Err(p) => p.into_inner().clone_from(&input.to_vec()),
    }
    wd.begin();
    let r = catch_unwind(AssertUnwindSafe(|| f(input).into()));
    wd.end();
    r.map_err(|_| {
        LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "unknown panic".into())
    })
}

/// Shrinks `input` while it still panics at the same place: drops chunks, halving their size.
fn minimize<F, V>(
    cur: &Current,
    wd: &Watchdog,
    f: &mut F,
    mut input: Vec<u8>,
    panic: &str,
) -> Vec<u8>
where
    F: FnMut(&[u8]) -> V,
    V: Into<Verdict>,
{
    let mut tries = 0;
    let mut chunk = input.len().div_ceil(2).max(1);
    while chunk >= 1 && tries < 4000 {
        let mut i = 0;
        while i < input.len() && tries < 4000 {
            let mut cand = input[..i].to_vec();
            cand.extend_from_slice(&input[(i + chunk).min(input.len())..]);
            tries += 1;
            if run_one(cur, wd, f, &cand).err().as_deref() == Some(panic) {
                input = cand;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk /= 2;
    }
    input
}

fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if FUZZING.with(Cell::get) {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let loc = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                    .unwrap_or_default();
                // Messages can hold input bytes; the location plus the message's first line
                // tells findings apart without one finding per input.
                let first: String = msg.lines().next().unwrap_or("").chars().take(200).collect();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{loc}: {first}")));
            } else {
                prev(info);
            }
        }));
    });
}

/// Aborts the process when one input runs longer than the timeout, saving the input first.
struct Watchdog {
    started: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(cur: Current, limit: Duration) -> Self {
        let started = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let (s, st) = (started.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                // 0 = idle; otherwise the start time in ms since epoch, plus one.
                let t = s.load(Ordering::Relaxed);
                if t == 0 {
                    continue;
                }
                let ran = epoch.elapsed().saturating_sub(Duration::from_millis(t - 1));
                if ran > limit {
                    eprintln!("keel-fuzz: {} HANG: one input ran for {ran:?}", cur.name);
                    cur.dump("hang");
                    std::process::abort();
                }
            }
        });
        Watchdog {
            started,
            stop,
            epoch,
            thread: Some(thread),
        }
    }

    fn begin(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.started.store(ms + 1, Ordering::Relaxed);
    }

    fn end(&self) {
        self.started.store(0, Ordering::Relaxed);
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Values that break length and count fields.
const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
];

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One mutant of a corpus input: one to a few stacked mutations.
pub fn mutate(rng: &mut StdRng, corpus: &[Vec<u8>], dict: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut d = corpus[rng.gen_range(0..corpus.len())].clone();
    if rng.gen_ratio(1, 64) {
        // Plain random bytes now and then.
        let n = rng.gen_range(0..256);
        return (0..n).map(|_| rng.gen()).collect();
    }
    let stack = 1 << rng.gen_range(0..4);
    for _ in 0..stack {
        mutate_once(rng, &mut d, corpus, dict);
    }
    d.truncate(max_len);
    d
}

fn mutate_once(rng: &mut StdRng, d: &mut Vec<u8>, corpus: &[Vec<u8>], dict: &[Vec<u8>]) {
    let len = d.len();
    let pos = |rng: &mut StdRng| if len == 0 { 0 } else { rng.gen_range(0..=len) };
    match rng.gen_range(0..15) {
        // Bit flip.
        0 | 1 if len > 0 => {
            let i = rng.gen_range(0..len);
            d[i] ^= 1 << rng.gen_range(0..8);
        }
        // Random byte.
        2 if len > 0 => {
            let i = rng.gen_range(0..len);
            d[i] = rng.gen();
        }
        // Small arithmetic on a byte (lengths off by a few).
        3 if len > 0 => {
            let i = rng.gen_range(0..len);
            d[i] = d[i].wrapping_add(rng.gen_range(1..=8u8).wrapping_mul(if rng.gen() {
                1
            } else {
                255
            }));
        }
        // Truncate.
        4 if len > 0 => {
            let n = rng.gen_range(0..len);
            d.truncate(n);
        }
        // Delete a range.
        5 if len > 0 => {
            let a = rng.gen_range(0..len);
            let b = (a + rng.gen_range(1..=16.min(len - a).max(1))).min(len);
            d.drain(a..b);
        }
        // Insert random bytes.
        6 => {
            let at = pos(rng);
            let n = rng.gen_range(1..=8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            d.splice(at..at, bytes);
        }
        // Duplicate or repeat a slice (deep nesting, long runs, repeated fields).
        7 if len > 0 => {
            let a = rng.gen_range(0..len);
            let b = (a + rng.gen_range(1..=64)).min(len);
            let times = if rng.gen_ratio(1, 4) {
                rng.gen_range(2..4000)
            } else {
                rng.gen_range(1..4)
            };
            let piece = d[a..b].repeat(times);
            let at = pos(rng).min(d.len());
            d.splice(at..at, piece);
        }
        // An interesting integer, little- or big-endian, 1/2/4/8 bytes wide (length fields).
        8 if len > 0 => {
            let v = INTERESTING[rng.gen_range(0..INTERESTING.len())];
            let w = [1usize, 2, 4, 8][rng.gen_range(0..4)];
            let bytes = if rng.gen() {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            let src = if bytes[0] == 0 && w < 8 && !rng.gen::<bool>() {
                &bytes[8 - w..]
            } else {
                &bytes[..w]
            };
            let at = rng.gen_range(0..len);
            for (k, b) in src.iter().enumerate() {
                if let Some(x) = d.get_mut(at + k) {
                    *x = *b;
                }
            }
        }
        // A protobuf varint set to an interesting value (length-delimited sizes, counts).
        9 if len > 0 => {
            let at = rng.gen_range(0..len);
            let mut end = at;
            while end < len && d[end] & 0x80 != 0 && end - at < 9 {
                end += 1;
            }
            let mut v = Vec::new();
            varint(INTERESTING[rng.gen_range(0..INTERESTING.len())], &mut v);
            d.splice(at..(end + 1).min(len), v);
        }
        // Splice with another corpus input.
        10 if !corpus.is_empty() => {
            let other = &corpus[rng.gen_range(0..corpus.len())];
            if !other.is_empty() {
                let a = rng.gen_range(0..other.len());
                let b = rng.gen_range(a..=other.len());
                let at = pos(rng);
                let cut = if rng.gen() {
                    (at + (b - a)).min(d.len())
                } else {
                    at
                };
                d.splice(at..cut, other[a..b].iter().copied());
            }
        }
        // Dictionary token, inserted or overwriting.
        11 | 12 if !dict.is_empty() => {
            let t = &dict[rng.gen_range(0..dict.len())];
            let at = pos(rng);
            if rng.gen() {
                d.splice(at..at, t.iter().copied());
            } else {
                let end = (at + t.len()).min(d.len());
                d.splice(at..end, t.iter().copied());
            }
        }
        // A dictionary token repeated many times (nesting: `[[[[`, `{"a":{"a":`).
        13 if !dict.is_empty() => {
            let t = &dict[rng.gen_range(0..dict.len())];
            let times = rng.gen_range(16..20_000);
            let at = pos(rng);
            d.splice(at..at, t.repeat(times));
        }
        // Swap two bytes.
        _ if len > 1 => {
            let a = rng.gen_range(0..len);
            let b = rng.gen_range(0..len);
            d.swap(a, b);
        }
        _ => {
            let at = pos(rng);
            d.insert(at, rng.gen());
        }
    }
    if d.len() > MAX_INPUT {
        d.truncate(MAX_INPUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_panic_and_minimizes_it() {
        let report = Target::new("selftest")
            .seeds([b"hello world".to_vec()])
            .dict(["!"])
            .run(|b: &[u8]| -> Result<(), ()> {
                if b.contains(&b'!') {
                    panic!("bang");
                }
                Ok(())
            });
        assert!(report.inputs > 1);
        assert_eq!(report.findings.len(), 1, "{report:?}");
        assert_eq!(report.findings[0].input, b"!");
        assert!(report.findings[0].panic.contains("bang"));
        // The planted finding is no finding: leave nothing behind.
        let _ = std::fs::remove_file(&report.findings[0].saved);
    }

    #[test]
    fn mutants_stay_under_the_cap() {
        let mut rng = StdRng::seed_from_u64(1);
        let corpus = vec![vec![1u8; 100]];
        for _ in 0..2000 {
            assert!(mutate(&mut rng, &corpus, &[b"[".to_vec()], 4096).len() <= 4096);
        }
    }
}
