//! The model of one etcd key used as a read/write/compare-and-set register. Values are unique integers (every
//! write writes a value never written before), `None` is "no such key".

use std::collections::HashSet;

use super::{Event, Model};

/// Stands for every value no read returned and no compare-and-set expected: such values are
/// indistinguishable to the model, so naming them alike loses nothing and merges states.
pub const UNOBSERVED: u64 = u64::MAX - 1;

/// An operation on one register.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    /// A linearizable Range of the key.
    Read,
    /// A Put of this value.
    Write(u64),
    /// A Txn: if the value is `.0`, put `.1`.
    Cas(u64, u64),
}

/// What a register operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOutput {
    /// The value read (`None`: the key did not exist).
    Read(Option<u64>),
    /// The Put succeeded.
    Written,
    /// Whether the Txn's compare held (and so the Put was applied).
    Cas(bool),
}

/// The register model.
#[derive(Clone, Copy, Debug, Default)]
pub struct Register;

impl Model for Register {
    type State = Option<u64>;
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn init(&self) -> Option<u64> {
        None
    }

    fn step(
        &self,
        state: &Option<u64>,
        input: &RegisterInput,
        output: Option<&RegisterOutput>,
    ) -> Option<Option<u64>> {
        match (input, output) {
            (RegisterInput::Read, Some(RegisterOutput::Read(v))) => (v == state).then_some(*state),
            // An indeterminate read tells nothing.
            (RegisterInput::Read, None) => Some(*state),
            (RegisterInput::Write(v), Some(RegisterOutput::Written) | None) => Some(Some(*v)),
            (RegisterInput::Cas(from, to), Some(RegisterOutput::Cas(true))) => {
                (*state == Some(*from)).then_some(Some(*to))
            }
            (RegisterInput::Cas(from, _), Some(RegisterOutput::Cas(false))) => {
                (*state != Some(*from)).then_some(*state)
            }
            // Unknown outcome: where the compare holds, linearizing it here means it was applied.
            (RegisterInput::Cas(from, to), None) => Some(if *state == Some(*from) {
                Some(*to)
            } else {
                *state
            }),
            // An output that does not belong to the input: never legal.
            _ => None,
        }
    }

    fn prepare(
        &self,
        events: Vec<Event<RegisterInput, RegisterOutput>>,
    ) -> Vec<Event<RegisterInput, RegisterOutput>> {
        let mut observed: HashSet<u64> = HashSet::new();
        for e in &events {
            match (&e.input, &e.output) {
                (RegisterInput::Read, Some(RegisterOutput::Read(Some(v)))) => {
                    observed.insert(*v);
                }
                (RegisterInput::Cas(from, _), _) => {
                    observed.insert(*from);
                }
                _ => {}
            }
        }
        let hide = |v: u64| if observed.contains(&v) { v } else { UNOBSERVED };
        events
            .into_iter()
            .map(|mut e| {
                e.input = match e.input {
                    RegisterInput::Write(v) => RegisterInput::Write(hide(v)),
                    RegisterInput::Cas(from, to) => RegisterInput::Cas(from, hide(to)),
                    RegisterInput::Read => RegisterInput::Read,
                };
                e
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::RegisterInput::*;
    use super::RegisterOutput as Out;
    use super::*;
    use crate::checker::{check, Verdict};
    use crate::history::{Op, Outcome};

    fn op(
        p: usize,
        call: u64,
        ret: u64,
        input: RegisterInput,
        outcome: Outcome<Out>,
    ) -> Op<RegisterInput, Out> {
        Op {
            process: p,
            key: "k".into(),
            call,
            ret,
            input,
            outcome,
        }
    }

    fn verdict(ops: &[Op<RegisterInput, Out>]) -> bool {
        let r = check(&Register, ops, 1_000_000);
        assert!(r.unknown.is_empty(), "budget exhausted");
        r.valid()
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(0, 2, 3, Read, Outcome::Ok(Out::Read(Some(1)))),
            op(1, 4, 5, Cas(1, 2), Outcome::Ok(Out::Cas(true))),
            op(1, 6, 7, Cas(1, 3), Outcome::Ok(Out::Cas(false))),
            op(0, 8, 9, Read, Outcome::Ok(Out::Read(Some(2)))),
        ];
        assert!(verdict(&h));
    }

    #[test]
    fn stale_read_after_completed_write_is_caught() {
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(0, 2, 3, Write(2), Outcome::Ok(Out::Written)),
            op(1, 4, 5, Read, Outcome::Ok(Out::Read(Some(1)))),
        ];
        assert!(!verdict(&h));
    }

    #[test]
    fn concurrent_reads_may_see_either_value() {
        // The write of 2 overlaps both reads: one sees 1, then the other sees 2 — legal.
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(0, 2, 10, Write(2), Outcome::Ok(Out::Written)),
            op(1, 3, 4, Read, Outcome::Ok(Out::Read(Some(1)))),
            op(2, 5, 6, Read, Outcome::Ok(Out::Read(Some(2)))),
        ];
        assert!(verdict(&h));
        // But once a read saw 2, a later read may not go back to 1.
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(0, 2, 10, Write(2), Outcome::Ok(Out::Written)),
            op(1, 3, 4, Read, Outcome::Ok(Out::Read(Some(2)))),
            op(2, 5, 6, Read, Outcome::Ok(Out::Read(Some(1)))),
        ];
        assert!(!verdict(&h));
    }

    #[test]
    fn indeterminate_write_may_or_may_not_have_happened() {
        let lost = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(1, 2, 3, Write(2), Outcome::Info),
            op(0, 4, 5, Read, Outcome::Ok(Out::Read(Some(1)))),
        ];
        assert!(verdict(&lost));
        let applied_late = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(1, 2, 3, Write(2), Outcome::Info),
            op(0, 4, 5, Read, Outcome::Ok(Out::Read(Some(1)))),
            op(0, 6, 7, Read, Outcome::Ok(Out::Read(Some(2)))),
        ];
        assert!(verdict(&applied_late));
        // A value that was never written cannot be read, indeterminate writes or not.
        let phantom = [
            op(1, 2, 3, Write(2), Outcome::Info),
            op(0, 4, 5, Read, Outcome::Ok(Out::Read(Some(7)))),
        ];
        assert!(!verdict(&phantom));
        // Once the value is gone it cannot come back: 2 applied, overwritten by 3, then read again.
        let resurrected = [
            op(1, 0, 1, Write(2), Outcome::Info),
            op(0, 2, 3, Read, Outcome::Ok(Out::Read(Some(2)))),
            op(0, 4, 5, Write(3), Outcome::Ok(Out::Written)),
            op(0, 6, 7, Read, Outcome::Ok(Out::Read(Some(2)))),
        ];
        assert!(!verdict(&resurrected));
    }

    #[test]
    fn failed_operations_did_not_happen() {
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(1, 2, 3, Write(2), Outcome::Fail),
            op(0, 4, 5, Read, Outcome::Ok(Out::Read(Some(2)))),
        ];
        assert!(!verdict(&h));
    }

    #[test]
    fn cas_success_needs_the_expected_value() {
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(1, 2, 3, Cas(5, 6), Outcome::Ok(Out::Cas(true))),
        ];
        assert!(!verdict(&h));
        // Two concurrent CAS from the same value cannot both succeed.
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(1, 2, 5, Cas(1, 2), Outcome::Ok(Out::Cas(true))),
            op(2, 2, 5, Cas(1, 3), Outcome::Ok(Out::Cas(true))),
        ];
        assert!(!verdict(&h));
    }

    #[test]
    fn explains_an_illegal_history() {
        let h = [
            op(0, 0, 1, Write(1), Outcome::Ok(Out::Written)),
            op(0, 2, 3, Write(2), Outcome::Ok(Out::Written)),
            op(1, 4, 5, Read, Outcome::Ok(Out::Read(Some(1)))),
        ];
        let r = check(&Register, &h, 1000);
        assert_eq!(r.illegal.len(), 1);
        let text = &r.illegal[0].1;
        assert!(text.contains("Read"), "{text}");
        let evs = crate::checker::events(&h);
        let (v, _) = crate::checker::wgl::search(&Register, &evs, 1000);
        assert!(matches!(v, Verdict::Illegal { .. }));
    }

    #[test]
    fn budget_gives_unknown() {
        // Concurrent writes whose values are all read later: the search needs more than a handful of steps.
        let mut h: Vec<_> = (0..10)
            .map(|i| op(i, 0, 10, Write(i as u64), Outcome::Ok(Out::Written)))
            .collect();
        h.extend((0..10).map(|i| {
            op(
                20 + i,
                11 + i as u64,
                12 + i as u64,
                Read,
                Outcome::Ok(Out::Read(Some(i as u64))),
            )
        }));
        let r = check(&Register, &h, 5);
        assert_eq!(r.unknown.len(), 1, "{r:?}");
        assert!(r.illegal.is_empty());
    }

    #[test]
    fn many_pending_indeterminate_writes_stay_tractable() {
        // 30 writes cut off by a crash of every member, then reads pinning down one of them: the symmetry and
        // renaming of unobserved values keep this to a few thousand steps.
        let mut h: Vec<_> = (0..30)
            .map(|i| {
                op(
                    i,
                    i as u64,
                    i as u64 + 1,
                    Write(100 + i as u64),
                    Outcome::Info,
                )
            })
            .collect();
        h.push(op(99, 50, 51, Read, Outcome::Ok(Out::Read(Some(117)))));
        h.push(op(99, 52, 53, Write(7), Outcome::Ok(Out::Written)));
        h.push(op(99, 54, 55, Read, Outcome::Ok(Out::Read(Some(7)))));
        let r = check(&Register, &h, 100_000);
        assert!(r.valid(), "{r:?}");
        // The same with a read of a value that cannot be there any more.
        h.push(op(99, 56, 57, Read, Outcome::Ok(Out::Read(Some(117)))));
        let r = check(&Register, &h, 1_000_000);
        assert!(r.unknown.is_empty() && !r.illegal.is_empty(), "{r:?}");
    }

    #[test]
    fn per_key_partitions_are_independent() {
        let mut a = op(0, 0, 1, Write(1), Outcome::Ok(Out::Written));
        let mut b = op(1, 2, 3, Read, Outcome::Ok(Out::Read(None)));
        a.key = "a".into();
        b.key = "b".into();
        let r = check(&Register, &[a.clone(), b.clone()], 1000);
        assert!(r.valid());
        assert_eq!(r.partitions, 2);
        b.key = "a".into();
        assert!(!check(&Register, &[a, b], 1000).valid());
    }
}
