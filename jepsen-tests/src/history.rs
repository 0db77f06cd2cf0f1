//! Operation histories: what each client invoked, when, and how it completed.
//!
//! Times are nanoseconds since the start of the run, taken from one monotonic clock in the test process, so an
//! operation that completed before another was invoked is ordered before it (real-time order).

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// How an operation completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<O> {
    /// It happened, with this result.
    Ok(O),
    /// It certainly did not happen (e.g. a transaction whose compare failed, a read that errored).
    Fail,
    /// Unknown: a timeout or a lost connection; it may have taken effect at any time after its invocation.
    Info,
}

/// One operation of one client.
#[derive(Clone, Debug)]
pub struct Op<I, O> {
    /// The client (worker) that ran it; each client runs one operation at a time.
    pub process: usize,
    /// Independent part of the state it touches (a key, a group of keys): the checker's partition.
    pub key: String,
    /// Invocation time.
    pub call: u64,
    /// Completion time (for [`Outcome::Info`], when the client gave up).
    pub ret: u64,
    /// What was asked.
    pub input: I,
    /// What came back.
    pub outcome: Outcome<O>,
}

/// The shared clock and the list every client appends its completed operations to.
pub struct Recorder<I, O> {
    start: Instant,
    ops: Mutex<Vec<Op<I, O>>>,
}

impl<I, O> Recorder<I, O> {
    /// An empty history whose clock starts at `start`.
    pub fn new(start: Instant) -> Arc<Self> {
        Arc::new(Recorder {
            start,
            ops: Mutex::new(Vec::new()),
        })
    }

    /// Nanoseconds since the start of the run.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Records a completed operation.
    pub fn push(&self, op: Op<I, O>) {
        self.ops.lock().push(op);
    }

    /// Every operation recorded so far.
    pub fn take(&self) -> Vec<Op<I, O>> {
        std::mem::take(&mut *self.ops.lock())
    }

    /// Number of operations recorded so far.
    pub fn len(&self) -> usize {
        self.ops.lock().len()
    }

    /// True before the first operation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Operation counts of one history by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Completed operations.
    pub ok: usize,
    /// Operations that certainly did not happen.
    pub fail: usize,
    /// Indeterminate operations.
    pub info: usize,
}

impl Counts {
    /// Counts the outcomes of `ops`.
    pub fn of<I, O>(ops: &[Op<I, O>]) -> Counts {
        let mut c = Counts::default();
        for op in ops {
            match op.outcome {
                Outcome::Ok(_) => c.ok += 1,
                Outcome::Fail => c.fail += 1,
                Outcome::Info => c.info += 1,
            }
        }
        c
    }

    /// All operations.
    pub fn total(&self) -> usize {
        self.ok + self.fail + self.info
    }

    /// Adds another count.
    pub fn add(&mut self, o: Counts) {
        self.ok += o.ok;
        self.fail += o.fail;
        self.info += o.info;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ops ({} ok, {} failed, {} indeterminate)",
            self.total(),
            self.ok,
            self.fail,
            self.info
        )
    }
}
