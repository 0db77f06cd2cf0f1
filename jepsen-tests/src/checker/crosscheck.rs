//! The linearizability search against a brute-force oracle on thousands of small random register histories:
//! every verdict must agree (so the memo, the symmetry between pending writes and the renaming of unobserved
//! values neither hide a violation nor invent one).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::register::{Register, RegisterInput, RegisterOutput};
use super::{events, wgl, Event, Model, Verdict};
use crate::history::{Op, Outcome};

/// Whether some order of `evs` respecting real time (indeterminate ones optional) satisfies the model.
fn brute<M: Model>(model: &M, evs: &[Event<M::Input, M::Output>]) -> bool {
    fn go<M: Model>(
        model: &M,
        evs: &[Event<M::Input, M::Output>],
        done: &mut Vec<bool>,
        state: &M::State,
    ) -> bool {
        let remaining: Vec<usize> = (0..evs.len()).filter(|&i| !done[i]).collect();
        if remaining.iter().all(|&i| evs[i].output.is_none()) {
            return true;
        }
        for &o in &remaining {
            // `o` may come next only if nothing still pending returned before it was invoked.
            if remaining
                .iter()
                .any(|&p| p != o && evs[p].ret < evs[o].call)
            {
                continue;
            }
            if let Some(next) = model.step(state, &evs[o].input, evs[o].output.as_ref()) {
                done[o] = true;
                let ok = go(model, evs, done, &next);
                done[o] = false;
                if ok {
                    return true;
                }
            }
        }
        false
    }
    go(model, evs, &mut vec![false; evs.len()], &model.init())
}

fn random_history(rng: &mut StdRng) -> Vec<Op<RegisterInput, RegisterOutput>> {
    let n = rng.gen_range(2..=7);
    let mut next_value = 1;
    let mut written: Vec<u64> = Vec::new();
    (0..n)
        .map(|p| {
            let call = rng.gen_range(0..20);
            let ret = call + rng.gen_range(0..8);
            let (input, out) = match rng.gen_range(0..3) {
                0 => {
                    let v = if written.is_empty() || rng.gen_bool(0.2) {
                        None
                    } else {
                        Some(written[rng.gen_range(0..written.len())])
                    };
                    (RegisterInput::Read, RegisterOutput::Read(v))
                }
                1 => {
                    next_value += 1;
                    written.push(next_value);
                    (RegisterInput::Write(next_value), RegisterOutput::Written)
                }
                _ => {
                    next_value += 1;
                    let from = if written.is_empty() {
                        0
                    } else {
                        written[rng.gen_range(0..written.len())]
                    };
                    written.push(next_value);
                    (
                        RegisterInput::Cas(from, next_value),
                        RegisterOutput::Cas(rng.gen_bool(0.5)),
                    )
                }
            };
            let indeterminate = !matches!(input, RegisterInput::Read) && rng.gen_bool(0.3);
            Op {
                process: p,
                key: "k".into(),
                call,
                ret,
                input,
                outcome: if indeterminate {
                    Outcome::Info
                } else {
                    Outcome::Ok(out)
                },
            }
        })
        .collect()
}

#[test]
fn search_agrees_with_brute_force() {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut legal, mut illegal) = (0, 0);
    for round in 0..4000 {
        let h = random_history(&mut rng);
        let evs = events(&h);
        let expected = brute(&Register, &evs);
        let (verdict, _) = wgl::search(&Register, &Register.prepare(evs.clone()), 1_000_000);
        let got = match verdict {
            Verdict::Linearizable => true,
            Verdict::Illegal { .. } => false,
            Verdict::Unknown => panic!("round {round}: budget exhausted on {h:?}"),
        };
        assert_eq!(
            got, expected,
            "round {round}: search says {got}, brute force {expected}: {h:#?}"
        );
        if expected {
            legal += 1;
        } else {
            illegal += 1;
        }
    }
    println!("{legal} legal, {illegal} illegal histories");
    // Both kinds were exercised.
    assert!(
        legal > 200 && illegal > 200,
        "{legal} legal, {illegal} illegal"
    );
}
