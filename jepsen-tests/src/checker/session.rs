//! What one member promises the clients it serves: read-your-writes and monotonic reads.
//!
//! A session is a run of sequential operations by one client through one member without a failure in between
//! (a failed or indeterminate operation, a reconnection or a switch to another member ends it). Within a
//! session, with serializable reads and compare-only transactions (both served from the member's local state):
//!
//! - every revision the member reports (a header, a put's revision) is at least every revision it reported
//!   before (monotonic reads), and a put's revision is greater than all of them;
//! - a key read after this session put it shows that put or a later one (`mod_revision` at least the put's);
//! - a key's `mod_revision` never goes down, and a key once seen never disappears (nobody deletes them);
//! - a transaction that only compares a key's `mod_revision` >= the revision of this session's last put of it
//!   succeeds (any later write of the key only raises it; an earlier session's indeterminate put may land
//!   after this session's, which is why the compare is not `==`).

use std::collections::HashMap;

/// One completed operation of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A put of `key` answered with revision `revision`.
    Put {
        /// The key written.
        key: String,
        /// The put's revision (its header revision).
        revision: i64,
    },
    /// A serializable read of `key`.
    Get {
        /// The key read.
        key: String,
        /// The answer's header revision.
        header: i64,
        /// The key's `mod_revision`, if it exists.
        mod_revision: Option<i64>,
    },
    /// A transaction without operations, comparing `key`'s `mod_revision` >= `expected`.
    CompareOnly {
        /// The key compared.
        key: String,
        /// The revision compared with (this session's last put of the key).
        expected: i64,
        /// The answer's header revision.
        header: i64,
        /// Whether the compare held.
        succeeded: bool,
    },
}

/// The operations of one session, in the order they ran.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// The worker that ran it.
    pub worker: usize,
    /// The member (index) it talked to.
    pub member: usize,
    /// Its completed operations.
    pub steps: Vec<Step>,
}

/// The anomalies of every session (empty if each kept both promises).
pub fn check(sessions: &[Session]) -> Vec<String> {
    let mut found = Vec::new();
    for s in sessions {
        let mut max_rev = 0i64;
        // key -> revision of this session's last put of it
        let mut written: HashMap<&str, i64> = HashMap::new();
        // key -> highest mod_revision seen
        let mut seen: HashMap<&str, i64> = HashMap::new();
        for (i, step) in s.steps.iter().enumerate() {
            // Every reason this step breaks a promise; one anomaly per step.
            let mut why: Vec<String> = Vec::new();
            let mut bad = |_: usize, what: String| why.push(what);
            match step {
                Step::Put { key, revision } => {
                    if *revision <= max_rev {
                        bad(
                            i,
                            format!("put revision {revision} after revision {max_rev} was seen"),
                        );
                    }
                    max_rev = max_rev.max(*revision);
                    written.insert(key, *revision);
                    seen.insert(key, *revision);
                }
                Step::Get {
                    key,
                    header,
                    mod_revision,
                } => {
                    if *header < max_rev {
                        bad(
                            i,
                            format!("read at revision {header} after revision {max_rev}"),
                        );
                    }
                    max_rev = max_rev.max(*header);
                    let before = seen.get(key.as_str()).copied();
                    match (before, mod_revision) {
                        (Some(b), None) => bad(
                            i,
                            format!("{key} missing after it was seen at revision {b}"),
                        ),
                        (Some(b), Some(m)) if *m < b => bad(
                            i,
                            format!("{key} at mod_revision {m} after mod_revision {b}"),
                        ),
                        _ => {}
                    }
                    if let Some(&w) = written.get(key.as_str()) {
                        if mod_revision.is_none_or(|m| m < w) {
                            bad(
                                i,
                                format!(
                                    "{key} read as {mod_revision:?}, missing this session's put at revision {w}"
                                ),
                            );
                        }
                    }
                    if let Some(m) = mod_revision {
                        let e = seen.entry(key).or_insert(*m);
                        *e = (*e).max(*m);
                    }
                }
                Step::CompareOnly {
                    key,
                    expected,
                    header,
                    succeeded,
                } => {
                    if *header < max_rev {
                        bad(
                            i,
                            format!("compare at revision {header} after revision {max_rev}"),
                        );
                    }
                    max_rev = max_rev.max(*header);
                    if !succeeded {
                        bad(
                            i,
                            format!(
                                "{key} mod_revision >= {expected} (this session's put) did not hold"
                            ),
                        );
                    }
                }
            }
            if !why.is_empty() {
                found.push(format!(
                    "session of worker {} on member {} is not read-your-writes/monotonic at its op {i}: {}; ops so far: {:?}",
                    s.worker,
                    s.member,
                    why.join("; "),
                    &s.steps[i.saturating_sub(4)..=i]
                ));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, r: i64) -> Step {
        Step::Put {
            key: k.into(),
            revision: r,
        }
    }
    fn get(k: &str, h: i64, m: Option<i64>) -> Step {
        Step::Get {
            key: k.into(),
            header: h,
            mod_revision: m,
        }
    }
    fn cmp(k: &str, e: i64, h: i64, ok: bool) -> Step {
        Step::CompareOnly {
            key: k.into(),
            expected: e,
            header: h,
            succeeded: ok,
        }
    }
    fn session(steps: Vec<Step>) -> Vec<Session> {
        vec![Session {
            worker: 1,
            member: 0,
            steps,
        }]
    }

    #[test]
    fn a_session_that_keeps_both_promises_passes() {
        let s = session(vec![
            put("/p/w1/a", 5),
            get("/p/w1/a", 5, Some(5)),
            cmp("/p/w1/a", 5, 6, true),
            get("/p/w2/a", 7, Some(7)),
            put("/p/w1/a", 9),
            get("/p/w2/a", 9, Some(8)),
            get("/p/w1/a", 10, Some(9)),
        ]);
        assert!(check(&s).is_empty(), "{:?}", check(&s));
    }

    #[test]
    fn stale_read_of_own_write_is_caught() {
        assert_eq!(
            check(&session(vec![
                put("/p/w1/a", 5),
                get("/p/w1/a", 4, Some(3))
            ]))
            .len(),
            1
        );
    }

    #[test]
    fn failed_compare_on_own_write_is_caught() {
        assert_eq!(
            check(&session(vec![
                put("/p/w1/a", 5),
                cmp("/p/w1/a", 5, 4, false)
            ]))
            .len(),
            1
        );
    }

    #[test]
    fn revisions_going_back_are_caught() {
        let s = session(vec![get("/p/w2/a", 8, Some(7)), get("/p/w2/a", 8, Some(6))]);
        assert_eq!(check(&s).len(), 1);
        let s = session(vec![get("/p/w2/a", 8, Some(7)), get("/p/w3/b", 7, None)]);
        assert_eq!(check(&s).len(), 1);
        let s = session(vec![get("/p/w2/a", 8, Some(7)), get("/p/w2/a", 9, None)]);
        assert_eq!(check(&s).len(), 1);
        let s = session(vec![get("/p/w2/a", 8, None), put("/p/w1/a", 8)]);
        assert_eq!(check(&s).len(), 1);
    }

    #[test]
    fn separate_sessions_are_not_compared() {
        let mut s = session(vec![put("/p/w1/a", 5)]);
        s.push(Session {
            worker: 1,
            member: 1,
            steps: vec![get("/p/w1/a", 3, Some(2))],
        });
        assert!(check(&s).is_empty());
    }

    #[test]
    fn a_later_write_keeps_the_compare_true() {
        // An earlier session's put landed after this session's (5): the key is at 7, and `>= 5` holds.
        let s = session(vec![
            put("/p/w1/a", 5),
            get("/p/w1/a", 8, Some(7)),
            cmp("/p/w1/a", 5, 9, true),
        ]);
        assert!(check(&s).is_empty());
    }
}
