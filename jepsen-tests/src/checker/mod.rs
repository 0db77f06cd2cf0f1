//! Checkers: linearizability (Wing & Gong search with Lowe's memoisation, as porcupine does it), split into
//! independent partitions (per key or key group), and the watch checks.

pub mod append;
#[cfg(test)]
mod corpus;
#[cfg(test)]
mod crosscheck;
pub mod register;
pub mod session;
pub mod watch;
pub mod wgl;

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::history::{Op, Outcome};

/// A sequential specification of one partition of the state.
pub trait Model {
    /// The state; equal states are interchangeable (the memo relies on it).
    type State: Clone + Eq + Hash + std::fmt::Debug;
    /// What a client asked (indeterminate operations with equal inputs are interchangeable, see [`wgl`]).
    type Input: std::fmt::Debug + Eq + std::hash::Hash;
    /// What came back.
    type Output: std::fmt::Debug;

    /// The state before any operation.
    fn init(&self) -> Self::State;

    /// Applies `input` to `state`: the next state if `output` is what a correct system could return from that
    /// state, `None` if not. `output` is `None` for an indeterminate operation, which then must be accepted
    /// from every state (whether it took effect is the model's choice: it is only ever linearized where taking
    /// effect is consistent, and if it never took effect the search puts it after everything else).
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// Simplifies one partition's events before the search without changing the verdict (e.g. forgets values
    /// nobody observed). The default keeps them as they are.
    fn prepare(
        &self,
        events: Vec<Event<Self::Input, Self::Output>>,
    ) -> Vec<Event<Self::Input, Self::Output>> {
        events
    }
}

/// One operation as the search sees it.
#[derive(Clone, Debug)]
pub struct Event<I, O> {
    /// Invocation time.
    pub call: u64,
    /// `u64::MAX` for an indeterminate operation (it may still be pending at the end).
    pub ret: u64,
    /// What was asked.
    pub input: I,
    /// `None` for an indeterminate operation.
    pub output: Option<O>,
}

/// What the search concluded about one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization exists.
    Linearizable,
    /// None exists. `deepest` is the longest linearizable prefix found (indexes into the partition's
    /// operations), `stuck` the operations that could not be placed after it.
    Illegal {
        /// Operations of the longest linearizable prefix found, in order.
        deepest: Vec<usize>,
        /// Operations that could not come next.
        stuck: Vec<usize>,
    },
    /// The step budget ran out before an answer.
    Unknown,
}

/// The result of checking a whole history.
#[derive(Clone, Debug)]
pub struct Report {
    /// Partitions checked.
    pub partitions: usize,
    /// Operations given to the search (failed ones are dropped before).
    pub ops: usize,
    /// Search steps taken in all partitions.
    pub steps: u64,
    /// Partitions with no linearization, with a readable explanation each.
    pub illegal: Vec<(String, String)>,
    /// Partitions whose search ran out of budget, with their operation counts.
    pub unknown: Vec<String>,
}

impl Report {
    /// True when every partition was shown linearizable.
    pub fn valid(&self) -> bool {
        self.illegal.is_empty() && self.unknown.is_empty()
    }
}

/// Converts recorded operations to search events: failed operations are dropped (they did not happen),
/// indeterminate ones are kept with no output and an open end.
pub fn events<I: Clone, O: Clone>(ops: &[Op<I, O>]) -> Vec<Event<I, O>> {
    ops.iter()
        .filter_map(|op| match &op.outcome {
            Outcome::Ok(o) => Some(Event {
                call: op.call,
                ret: op.ret.max(op.call),
                input: op.input.clone(),
                output: Some(o.clone()),
            }),
            Outcome::Fail => None,
            Outcome::Info => Some(Event {
                call: op.call,
                ret: u64::MAX,
                input: op.input.clone(),
                output: None,
            }),
        })
        .collect()
}

/// Checks every partition (the operations' `key`) of `ops` against `model`, each with at most `budget` search
/// steps.
pub fn check<M: Model>(model: &M, ops: &[Op<M::Input, M::Output>], budget: u64) -> Report
where
    M::Input: Clone,
    M::Output: Clone,
{
    // Partition by key, keeping indexes (operations are cloned only when a partition is converted).
    let mut parts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        parts.entry(op.key.as_str()).or_default().push(i);
    }
    let mut report = Report {
        partitions: parts.len(),
        ops: 0,
        steps: 0,
        illegal: Vec::new(),
        unknown: Vec::new(),
    };
    for (key, idx) in parts {
        let part: Vec<Op<M::Input, M::Output>> = idx.iter().map(|&i| ops[i].clone()).collect();
        let evs = model.prepare(events(&part));
        report.ops += evs.len();
        let (verdict, steps) = wgl::search(model, &evs, budget);
        report.steps += steps;
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Unknown => report.unknown.push(format!(
                "{key} ({} ops, {} indeterminate)",
                evs.len(),
                evs.iter().filter(|e| e.output.is_none()).count()
            )),
            Verdict::Illegal { deepest, stuck } => {
                report
                    .illegal
                    .push((key.to_string(), explain(model, &evs, &deepest, &stuck)));
            }
        }
    }
    report
}

/// A readable account of a failed search: the longest linearization found and the operations that could not
/// follow it.
pub fn explain<M: Model>(
    model: &M,
    evs: &[Event<M::Input, M::Output>],
    deepest: &[usize],
    stuck: &[usize],
) -> String {
    let mut out = String::new();
    let mut state = model.init();
    out.push_str(&format!(
        "longest linearizable prefix ({} of {} ops), last 10:\n",
        deepest.len(),
        evs.len()
    ));
    for (n, &i) in deepest.iter().enumerate() {
        let e = &evs[i];
        if let Some(s) = model.step(&state, &e.input, e.output.as_ref()) {
            state = s;
        }
        if n + 10 >= deepest.len() {
            out.push_str(&format!(
                "  [{:>9.3}s..{}] {:?} -> {:?}   state after: {:?}\n",
                e.call as f64 / 1e9,
                fmt_ret(e.ret),
                e.input,
                e.output,
                state
            ));
        }
    }
    out.push_str(
        "no operation can be linearized next; the ones that must come next (by real time) are:\n",
    );
    for &i in stuck.iter().take(10) {
        let e = &evs[i];
        out.push_str(&format!(
            "  [{:>9.3}s..{}] {:?} -> {:?}\n",
            e.call as f64 / 1e9,
            fmt_ret(e.ret),
            e.input,
            e.output
        ));
    }
    out
}

fn fmt_ret(ret: u64) -> String {
    if ret == u64::MAX {
        "?".to_string()
    } else {
        format!("{:.3}s", ret as f64 / 1e9)
    }
}
