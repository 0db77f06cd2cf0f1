//! The linearizability search of Wing & Gong with Lowe's memoisation (the algorithm porcupine implements).
//!
//! Every operation becomes a call entry and a return entry in one list sorted by time. The search walks the
//! list from its head: a call entry may be linearized now if the model accepts it from the current state; it
//! is then removed (with its return) from the list and the walk restarts at the head. Reaching a return entry
//! means that operation's deadline passed without it being linearized: backtrack (undo the last linearized
//! operation and try the entry after it). A configuration (set of linearized operations, state) already seen
//! is never explored twice, which is what keeps the search tractable. Indeterminate operations return at
//! `u64::MAX`, so they can always be put last, i.e. be treated as never having happened.
//!
//! Indeterminate operations with equal inputs are interchangeable (same effect, no deadline), so the search
//! only ever linearizes the earliest-invoked one not yet linearized: any linearization that uses a later one
//! first can swap the two. Without this, k such operations pending at once multiply the configurations by
//! 2^k (after a crash of every member, for instance); with it, by k + 1.

use std::collections::{HashMap, HashSet};

use super::{Event, Model, Verdict};

const NIL: usize = usize::MAX;

/// A list of call/return entries that supports removing a call with its return and putting them back in
/// LIFO order (dancing links).
struct Entries {
    /// Operation index of entry `e` (entries are numbered from 1; 0 is the head).
    op: Vec<usize>,
    is_call: Vec<bool>,
    /// The return entry of a call entry.
    matching: Vec<usize>,
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Entries {
    fn new<I, O>(evs: &[Event<I, O>]) -> Entries {
        // (time, is_return, op): calls sort before returns at equal times, which makes operations that touch
        // at one instant concurrent (the permissive reading).
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * evs.len());
        for (i, e) in evs.iter().enumerate() {
            order.push((e.call, false, i));
            order.push((e.ret, true, i));
        }
        order.sort_unstable();
        let n = order.len() + 1;
        let mut en = Entries {
            op: vec![NIL; n],
            is_call: vec![false; n],
            matching: vec![NIL; n],
            next: vec![NIL; n],
            prev: vec![NIL; n],
        };
        let mut call_entry = vec![NIL; evs.len()];
        for (k, &(_, is_ret, op)) in order.iter().enumerate() {
            let e = k + 1;
            en.op[e] = op;
            en.is_call[e] = !is_ret;
            if is_ret {
                en.matching[call_entry[op]] = e;
            } else {
                call_entry[op] = e;
            }
        }
        for e in 0..n {
            en.next[e] = if e + 1 < n { e + 1 } else { NIL };
            en.prev[e] = if e == 0 { NIL } else { e - 1 };
        }
        en
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        if n != NIL {
            self.prev[n] = e;
        }
    }

    /// Removes call entry `c` and its return.
    fn lift(&mut self, c: usize) {
        self.unlink(c);
        self.unlink(self.matching[c]);
    }

    /// Undoes [`Entries::lift`] (must be called in reverse order of the lifts).
    fn unlift(&mut self, c: usize) {
        self.relink(self.matching[c]);
        self.relink(c);
    }
}

/// Linearized operations as a bitset (hashable, for the memo).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Searches for a linearization of `evs` under `model`, taking at most `budget` steps. Returns the verdict
/// and the number of steps taken.
pub fn search<M: Model>(
    model: &M,
    evs: &[Event<M::Input, M::Output>],
    budget: u64,
) -> (Verdict, u64) {
    let mut en = Entries::new(evs);
    // Classes of interchangeable indeterminate operations: (class, rank by invocation) per operation.
    let mut class_of: Vec<Option<(usize, usize)>> = vec![None; evs.len()];
    {
        let mut by_call: Vec<usize> = (0..evs.len())
            .filter(|&i| evs[i].output.is_none())
            .collect();
        by_call.sort_by_key(|&i| (evs[i].call, i));
        let mut classes: HashMap<&M::Input, (usize, usize)> = HashMap::new();
        for i in by_call {
            let next = classes.len();
            let c = classes.entry(&evs[i].input).or_insert((next, 0));
            class_of[i] = Some(*c);
            c.1 += 1;
        }
    }
    let mut linearized_in_class: Vec<usize> = vec![0; evs.len()];
    let mut bits = Bits::new(evs.len());
    let mut memo: HashSet<(Bits, M::State)> = HashSet::new();
    let mut state = model.init();
    // Linearized call entries with the state before each.
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut deepest: Vec<usize> = Vec::new();
    let mut stuck: Vec<usize> = Vec::new();
    let mut steps = 0u64;
    let mut entry = en.next[0];
    while en.next[0] != NIL {
        steps += 1;
        if steps > budget {
            return (Verdict::Unknown, steps);
        }
        if entry == NIL {
            // Cannot happen: while operations remain, a return entry is always reached before the end.
            break;
        }
        if en.is_call[entry] {
            let op = en.op[entry];
            let e = &evs[op];
            let canonical = class_of[op].is_none_or(|(c, rank)| linearized_in_class[c] == rank);
            if !canonical {
                entry = en.next[entry];
                continue;
            }
            if let Some(next_state) = model.step(&state, &e.input, e.output.as_ref()) {
                bits.set(op);
                if memo.insert((bits.clone(), next_state.clone())) {
                    let before = std::mem::replace(&mut state, next_state);
                    stack.push((entry, before));
                    if let Some((c, _)) = class_of[op] {
                        linearized_in_class[c] += 1;
                    }
                    en.lift(entry);
                    entry = en.next[0];
                    continue;
                }
                bits.clear(op);
            }
            entry = en.next[entry];
        } else {
            if stack.len() > deepest.len() || stuck.is_empty() {
                deepest = stack.iter().map(|(c, _)| en.op[*c]).collect();
                stuck = candidates(&en);
            }
            let Some((c, before)) = stack.pop() else {
                return (Verdict::Illegal { deepest, stuck }, steps);
            };
            state = before;
            bits.clear(en.op[c]);
            if let Some((class, _)) = class_of[en.op[c]] {
                linearized_in_class[class] -= 1;
            }
            en.unlift(c);
            entry = en.next[c];
        }
    }
    (Verdict::Linearizable, steps)
}

/// The operations whose call entries precede the first return entry of the list (one of them had to be next).
fn candidates(en: &Entries) -> Vec<usize> {
    let mut out = Vec::new();
    let mut e = en.next[0];
    while e != NIL {
        out.push(en.op[e]);
        if !en.is_call[e] {
            break;
        }
        e = en.next[e];
    }
    out.dedup();
    out
}
