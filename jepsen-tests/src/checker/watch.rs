//! Checks of what watchers saw: every watcher sees the same ordered events (no gap, no duplicate, across its
//! reconnects and resumptions from a revision), every acknowledged write appears at the revision it was
//! acknowledged with, no event carries a value nobody wrote, and the keys of an expired lease vanish together,
//! in one revision that deletes nothing else.

use std::collections::{BTreeMap, BTreeSet, HashSet};

/// One event as a watcher saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The revision of the change.
    pub revision: i64,
    /// The key changed.
    pub key: String,
    /// `None` for a delete.
    pub value: Option<String>,
}

/// Everything one watcher saw, in order.
#[derive(Clone, Debug, Default)]
pub struct WatcherLog {
    /// Events in the order received.
    pub events: Vec<WatchEvent>,
    /// How many times it (re)started its watch from a revision.
    pub resumes: usize,
}

/// A put that was acknowledged with a revision.
#[derive(Clone, Debug)]
pub struct AckedPut {
    /// The key written.
    pub key: String,
    /// The value written.
    pub value: String,
    /// The revision the put was acknowledged with.
    pub revision: i64,
}

/// Keys written with one lease (in one transaction) that was never kept alive.
#[derive(Clone, Debug)]
pub struct LeaseGroup {
    /// The lease ID.
    pub lease: i64,
    /// The keys attached to it.
    pub keys: Vec<String>,
    /// The revision the transaction was acknowledged with; `None` if indeterminate.
    pub revision: Option<i64>,
}

/// What the watch workload recorded.
#[derive(Clone, Debug, Default)]
pub struct WatchHistory {
    /// Every watcher started at this revision.
    pub start: i64,
    /// The revision of the fence write every watcher had to reach.
    pub end: i64,
    /// What each watcher saw.
    pub watchers: Vec<WatcherLog>,
    /// Acknowledged plain puts.
    pub acked: Vec<AckedPut>,
    /// Every value any put (acknowledged or not) tried to write.
    pub written: HashSet<String>,
    /// Lease groups written.
    pub leases: Vec<LeaseGroup>,
}

/// Every violation found (empty: all checks hold).
pub fn check(h: &WatchHistory) -> Vec<String> {
    let mut out = Vec::new();
    let upto = |w: &WatcherLog| -> Vec<WatchEvent> {
        w.events
            .iter()
            .filter(|e| e.revision <= h.end)
            .cloned()
            .collect()
    };
    for (i, w) in h.watchers.iter().enumerate() {
        // Ordered and unique.
        let mut seen: HashSet<(i64, &str)> = HashSet::new();
        for pair in w.events.windows(2) {
            if pair[1].revision < pair[0].revision {
                out.push(format!(
                    "watcher {i}: revision went back from {} to {} ({:?} after {:?})",
                    pair[0].revision, pair[1].revision, pair[1], pair[0]
                ));
                break;
            }
        }
        for e in &w.events {
            if e.revision < h.start {
                out.push(format!(
                    "watcher {i}: event at revision {} before its start revision {}",
                    e.revision, h.start
                ));
                break;
            }
            if !seen.insert((e.revision, e.key.as_str())) {
                out.push(format!("watcher {i}: duplicate event {e:?}"));
                break;
            }
        }
        if !w.events.iter().any(|e| e.revision >= h.end) {
            out.push(format!(
                "watcher {i}: never reached the fence revision {} (last seen {:?})",
                h.end,
                w.events.last().map(|e| e.revision)
            ));
        }
    }
    // Everyone saw the same thing.
    if let Some(first) = h.watchers.first() {
        let reference = upto(first);
        for (i, w) in h.watchers.iter().enumerate().skip(1) {
            let mine = upto(w);
            if mine != reference {
                let at = mine
                    .iter()
                    .zip(reference.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(mine.len().min(reference.len()));
                out.push(format!(
                    "watcher {i} differs from watcher 0 at event #{at}: {:?} vs {:?} ({} vs {} events)",
                    mine.get(at),
                    reference.get(at),
                    mine.len(),
                    reference.len()
                ));
            }
        }
        // Reliable: every acknowledged put is there, at its revision.
        let by_rev: BTreeMap<(i64, &str), &WatchEvent> = reference
            .iter()
            .map(|e| ((e.revision, e.key.as_str()), e))
            .collect();
        for a in &h.acked {
            if a.revision > h.end {
                continue;
            }
            match by_rev.get(&(a.revision, a.key.as_str())) {
                Some(e) if e.value.as_deref() == Some(a.value.as_str()) => {}
                other => out.push(format!(
                    "acknowledged put {a:?} not seen by the watchers (event at that revision: {other:?})"
                )),
            }
        }
        // No phantom values.
        for e in &reference {
            if let Some(v) = &e.value {
                if !h.written.contains(v) {
                    out.push(format!("event {e:?} carries a value no client wrote"));
                }
            }
        }
        // Leases: all keys of a lease deleted in one revision holding nothing else.
        let mut revs: BTreeMap<i64, Vec<&WatchEvent>> = BTreeMap::new();
        for e in &reference {
            revs.entry(e.revision).or_default().push(e);
        }
        for l in &h.leases {
            let keys: BTreeSet<&str> = l.keys.iter().map(String::as_str).collect();
            let created = reference
                .iter()
                .any(|e| keys.contains(e.key.as_str()) && e.value.is_some());
            if let (Some(r), false) = (l.revision, created) {
                out.push(format!(
                    "lease {:x}: its keys were acknowledged at revision {r} but never seen created",
                    l.lease
                ));
                continue;
            }
            if !created {
                continue;
            }
            let deletes: BTreeSet<i64> = reference
                .iter()
                .filter(|e| keys.contains(e.key.as_str()) && e.value.is_none())
                .map(|e| e.revision)
                .collect();
            match deletes.len() {
                0 => out.push(format!(
                    "lease {:x}: keys {:?} never deleted",
                    l.lease, l.keys
                )),
                1 => {
                    let r = *deletes.iter().next().unwrap_or(&0);
                    let at: BTreeSet<&str> = revs[&r].iter().map(|e| e.key.as_str()).collect();
                    let deleted: BTreeSet<&str> = revs[&r]
                        .iter()
                        .filter(|e| e.value.is_none())
                        .map(|e| e.key.as_str())
                        .collect();
                    if deleted != keys || at != keys {
                        out.push(format!(
                            "lease {:x}: revision {r} deleted {deleted:?} and touched {at:?}, expected exactly {keys:?}",
                            l.lease
                        ));
                    }
                }
                _ => out.push(format!(
                    "lease {:x}: keys deleted in several revisions {deletes:?}",
                    l.lease
                )),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(rev: i64, k: &str, v: &str) -> WatchEvent {
        WatchEvent {
            revision: rev,
            key: k.into(),
            value: Some(v.into()),
        }
    }
    fn del(rev: i64, k: &str) -> WatchEvent {
        WatchEvent {
            revision: rev,
            key: k.into(),
            value: None,
        }
    }

    fn history(watchers: Vec<Vec<WatchEvent>>) -> WatchHistory {
        WatchHistory {
            start: 2,
            end: 6,
            watchers: watchers
                .into_iter()
                .map(|events| WatcherLog { events, resumes: 1 })
                .collect(),
            acked: vec![AckedPut {
                key: "a".into(),
                value: "1".into(),
                revision: 2,
            }],
            written: ["1", "2", "3", "f", "l1", "l2"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            leases: vec![LeaseGroup {
                lease: 7,
                keys: vec!["x".into(), "y".into()],
                revision: Some(3),
            }],
        }
    }

    fn good() -> Vec<WatchEvent> {
        vec![
            put(2, "a", "1"),
            put(3, "x", "l1"),
            put(3, "y", "l2"),
            put(4, "b", "2"),
            del(5, "x"),
            del(5, "y"),
            put(6, "fence", "f"),
        ]
    }

    #[test]
    fn identical_complete_watchers_pass() {
        assert_eq!(check(&history(vec![good(), good()])), Vec::<String>::new());
    }

    #[test]
    fn gap_duplicate_and_reorder_are_caught() {
        let mut gap = good();
        gap.remove(3);
        assert!(!check(&history(vec![good(), gap])).is_empty());
        let mut dup = good();
        dup.insert(4, put(4, "b", "2"));
        assert!(!check(&history(vec![dup.clone(), dup])).is_empty());
        let mut back = good();
        back.swap(3, 4);
        assert!(!check(&history(vec![back.clone(), back])).is_empty());
    }

    #[test]
    fn lost_acknowledged_put_and_phantom_are_caught() {
        let mut lost = good();
        lost.remove(0);
        assert!(!check(&history(vec![lost.clone(), lost])).is_empty());
        let mut phantom = good();
        phantom[3] = put(4, "b", "zzz");
        assert!(!check(&history(vec![phantom.clone(), phantom])).is_empty());
    }

    #[test]
    fn lease_keys_must_vanish_in_one_revision() {
        let mut split = good();
        split[5] = del(6, "y");
        split[6] = put(7, "fence", "f");
        let mut h = history(vec![split.clone(), split]);
        h.end = 7;
        let v = check(&h);
        assert!(v.iter().any(|m| m.contains("several revisions")), "{v:?}");
        let mut never = good();
        never.remove(5);
        never.remove(4);
        assert!(!check(&history(vec![never.clone(), never])).is_empty());
    }

    #[test]
    fn watcher_that_stops_early_is_caught() {
        let mut short = good();
        short.pop();
        assert!(!check(&history(vec![good(), short])).is_empty());
    }
}
