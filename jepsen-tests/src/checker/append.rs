//! The model of a small group of keys holding lists, changed by multi-key transactions that read some keys and
//! append to others (Jepsen's list-append, checked for linearizability of whole transactions: a multi-key
//! anomaly, such as a transaction seen half-applied or two transactions each missing the other, has no
//! linearization).

use std::collections::HashSet;

use super::{Event, Model};

/// One step of a transaction, on key `.0` of the group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Micro {
    /// Append this (unique) element to the key's list.
    Append(usize, u64),
    /// Read the key's list.
    Read(usize),
}

/// A transaction: its steps in order (a read sees the transaction's own earlier appends).
pub type Txn = Vec<Micro>;

/// The lists the transaction's reads returned, in order of its read steps.
pub type TxnReads = Vec<Vec<u64>>;

/// The list-append model of a group of `keys` keys.
#[derive(Clone, Copy, Debug)]
pub struct ListAppend {
    /// Keys per group.
    pub keys: usize,
}

impl Model for ListAppend {
    type State = Vec<Vec<u64>>;
    type Input = Txn;
    type Output = TxnReads;

    fn init(&self) -> Vec<Vec<u64>> {
        vec![Vec::new(); self.keys]
    }

    fn step(
        &self,
        state: &Vec<Vec<u64>>,
        txn: &Txn,
        reads: Option<&TxnReads>,
    ) -> Option<Vec<Vec<u64>>> {
        let mut s = state.clone();
        let mut r = 0;
        for m in txn {
            match m {
                Micro::Append(k, v) => s.get_mut(*k)?.push(*v),
                Micro::Read(k) => {
                    if let Some(reads) = reads {
                        if reads.get(r)? != s.get(*k)? {
                            return None;
                        }
                    }
                    r += 1;
                }
            }
        }
        Some(s)
    }

    /// Drops indeterminate transactions none of whose appended elements was ever read: a linearization could
    /// only place them after every read of their keys, where they change nothing anyone saw.
    fn prepare(&self, events: Vec<Event<Txn, TxnReads>>) -> Vec<Event<Txn, TxnReads>> {
        let seen: HashSet<u64> = events
            .iter()
            .filter_map(|e| e.output.as_ref())
            .flat_map(|reads| reads.iter().flatten().copied())
            .collect();
        events
            .into_iter()
            .filter(|e| {
                e.output.is_some()
                    || e.input
                        .iter()
                        .any(|m| matches!(m, Micro::Append(_, v) if seen.contains(v)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Micro::*;
    use super::*;
    use crate::checker::check;
    use crate::history::{Op, Outcome};

    fn op(
        p: usize,
        call: u64,
        ret: u64,
        txn: Txn,
        outcome: Outcome<TxnReads>,
    ) -> Op<Txn, TxnReads> {
        Op {
            process: p,
            key: "g".into(),
            call,
            ret,
            input: txn,
            outcome,
        }
    }

    fn valid(h: &[Op<Txn, TxnReads>]) -> bool {
        let r = check(&ListAppend { keys: 2 }, h, 1_000_000);
        assert!(r.unknown.is_empty());
        r.valid()
    }

    #[test]
    fn serial_transactions_are_linearizable() {
        let h = [
            op(
                0,
                0,
                1,
                vec![Append(0, 1), Append(1, 1)],
                Outcome::Ok(vec![]),
            ),
            op(
                1,
                2,
                3,
                vec![Read(0), Read(1)],
                Outcome::Ok(vec![vec![1], vec![1]]),
            ),
            op(
                0,
                4,
                5,
                vec![Append(0, 2), Read(0)],
                Outcome::Ok(vec![vec![1, 2]]),
            ),
        ];
        assert!(valid(&h));
    }

    #[test]
    fn half_applied_transaction_is_caught() {
        // Reads see the append to key 0 but not the one to key 1 of the same transaction.
        let h = [
            op(
                0,
                0,
                1,
                vec![Append(0, 1), Append(1, 1)],
                Outcome::Ok(vec![]),
            ),
            op(
                1,
                2,
                3,
                vec![Read(0), Read(1)],
                Outcome::Ok(vec![vec![1], vec![]]),
            ),
        ];
        assert!(!valid(&h));
    }

    #[test]
    fn write_skew_is_caught() {
        // Each transaction read the other's key empty and appended to its own: no serial order explains it.
        let h = [
            op(
                0,
                0,
                5,
                vec![Read(1), Append(0, 1)],
                Outcome::Ok(vec![vec![]]),
            ),
            op(
                1,
                0,
                5,
                vec![Read(0), Append(1, 2)],
                Outcome::Ok(vec![vec![]]),
            ),
            op(
                2,
                6,
                7,
                vec![Read(0), Read(1)],
                Outcome::Ok(vec![vec![1], vec![2]]),
            ),
        ];
        assert!(!valid(&h));
    }

    #[test]
    fn indeterminate_transaction_may_apply_late_or_never() {
        let h = [
            op(0, 0, 1, vec![Append(0, 1)], Outcome::Info),
            op(1, 2, 3, vec![Read(0)], Outcome::Ok(vec![vec![]])),
            op(1, 4, 5, vec![Read(0)], Outcome::Ok(vec![vec![1]])),
        ];
        assert!(valid(&h));
        // An element appended after another cannot be read before it.
        let h = [
            op(0, 0, 1, vec![Append(0, 1)], Outcome::Ok(vec![])),
            op(0, 2, 3, vec![Append(0, 2)], Outcome::Ok(vec![])),
            op(1, 4, 5, vec![Read(0)], Outcome::Ok(vec![vec![2, 1]])),
        ];
        assert!(!valid(&h));
    }
}
