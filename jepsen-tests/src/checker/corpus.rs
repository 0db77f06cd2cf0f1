//! The search against histories with known verdicts: Jepsen's etcd register histories (see
//! `testdata/jepsen-etcd/README.md`). Each line is `INFO  jepsen.util - <process>\t<type>\t<f>\t<value>`; a
//! process's invocation is completed by its next line. Line numbers are the clock.

use std::path::PathBuf;

use super::register::{Register, RegisterInput, RegisterOutput};
use super::{check, Report};
use crate::history::{Op, Outcome};

/// Histories porcupine's test suite expects to be linearizable; every other file of the set is not.
const LINEARIZABLE: &[u32] = &[
    2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100, 101, 102,
];
/// The histories kept in `testdata/jepsen-etcd/`.
const FILES: &[u32] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75,
    76, 80, 87, 92, 98, 100, 101, 102,
];

fn value(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// Parses one Jepsen register log into register operations on one key.
fn parse(text: &str) -> Vec<Op<RegisterInput, RegisterOutput>> {
    let mut pending: std::collections::HashMap<u64, (u64, RegisterInput)> = Default::default();
    let mut ops = Vec::new();
    let mut t = 0u64;
    for line in text.lines() {
        let Some((_, rest)) = line.split_once(" - ") else {
            continue;
        };
        let f: Vec<&str> = rest.split('\t').collect();
        if f.len() < 4 {
            continue;
        }
        t += 1;
        let Ok(p) = f[0].trim().parse::<u64>() else {
            continue;
        };
        let v = f[3].trim();
        if f[1] == ":invoke" {
            let input = match f[2] {
                ":read" => RegisterInput::Read,
                ":write" => RegisterInput::Write(value(v).expect("write value")),
                ":cas" => {
                    let inner: Vec<u64> = v
                        .trim_matches(|c| c == '[' || c == ']')
                        .split_whitespace()
                        .map(|x| x.parse().expect("cas value"))
                        .collect();
                    RegisterInput::Cas(inner[0], inner[1])
                }
                other => panic!("unknown function {other}"),
            };
            pending.insert(p, (t, input));
            continue;
        }
        let (call, input) = pending.remove(&p).expect("completion without invocation");
        let outcome = match (f[1], &input) {
            (":ok", RegisterInput::Read) => Outcome::Ok(RegisterOutput::Read(value(v))),
            (":ok", RegisterInput::Write(_)) => Outcome::Ok(RegisterOutput::Written),
            (":ok", RegisterInput::Cas(..)) => Outcome::Ok(RegisterOutput::Cas(true)),
            // A failed compare-and-set: the compare did not hold.
            (":fail", RegisterInput::Cas(..)) => Outcome::Ok(RegisterOutput::Cas(false)),
            (":fail", _) => Outcome::Fail,
            (":info", RegisterInput::Read) => Outcome::Fail,
            (":info", _) => Outcome::Info,
            (other, _) => panic!("unknown completion {other}"),
        };
        ops.push(Op {
            process: p as usize,
            key: "r".into(),
            call,
            ret: t,
            input,
            outcome,
        });
    }
    // Invocations never completed: indeterminate.
    for (p, (call, input)) in pending {
        let outcome = if input == RegisterInput::Read {
            Outcome::Fail
        } else {
            Outcome::Info
        };
        ops.push(Op {
            process: p as usize,
            key: "r".into(),
            call,
            ret: t + 1,
            input,
            outcome,
        });
    }
    ops
}

fn run(n: u32) -> Report {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/jepsen-etcd")
        .join(format!("etcd_{n:03}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check(&Register, &parse(&text), 10_000_000)
}

#[test]
fn jepsen_etcd_histories_get_porcupines_verdicts() {
    let mut steps = 0;
    for &n in FILES {
        let r = run(n);
        steps += r.steps;
        assert!(
            r.unknown.is_empty(),
            "etcd_{n:03}: undecided after {} steps",
            r.steps
        );
        let expected = LINEARIZABLE.contains(&n);
        assert_eq!(
            r.valid(),
            expected,
            "etcd_{n:03}: expected linearizable = {expected} ({} ops); {:?}",
            r.ops,
            r.illegal.first().map(|(_, why)| why)
        );
    }
    println!("{} histories, {steps} search steps", FILES.len());
}
