//! The key index: for every key, its generations of revisions.
//!
//! A generation runs from a key's creation to its deletion (the tombstone). Reads at a past
//! revision find the generation covering it; compaction drops what no read can reach.

use super::revision::Revision;

/// One life of a key: created at `created`, changed at each of `revs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// Revision of the put that created this generation (kept when compaction trims `revs`).
    pub created: Revision,
    /// Version of the last entry in `revs` (a tombstone counts, as in etcd).
    pub ver: i64,
    /// Revisions of the changes still reachable, ascending.
    pub revs: Vec<Revision>,
    /// The last entry of `revs` is a deletion.
    pub tombstone: bool,
}

/// What a read of one key at a revision sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAt {
    pub modified: Revision,
    pub created: Revision,
    pub version: i64,
}

/// All generations of one key, oldest first. Only the last may be open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyIndex {
    pub gens: Vec<Generation>,
    /// Lease attached to the live value (0 = none); kept here so puts need no value read.
    pub lease: i64,
}

impl KeyIndex {
    /// Starts a generation. Most keys only ever have one, so the first gets room for exactly
    /// one (a plain push would reserve four, 224 bytes per key).
    fn push_generation(&mut self, g: Generation) {
        if self.gens.capacity() == 0 {
            self.gens.reserve_exact(1);
        }
        self.gens.push(g);
    }

    /// Records a put at `rev`.
    pub fn put(&mut self, rev: Revision) {
        match self.gens.last_mut() {
            Some(g) if !g.tombstone => {
                g.revs.push(rev);
                g.ver += 1;
            }
            _ => self.push_generation(Generation {
                created: rev,
                ver: 1,
                revs: vec![rev],
                tombstone: false,
            }),
        }
    }

    /// Rebuilds the index from a stored record (after restart or snapshot install), where
    /// compaction may have removed the generation's first revisions.
    pub fn restore(&mut self, rev: Revision, created: i64, version: i64, tombstone: bool) {
        match self.gens.last_mut() {
            Some(g) if !g.tombstone => {
                g.revs.push(rev);
                g.ver = version;
                g.tombstone = tombstone;
            }
            _ => self.push_generation(Generation {
                created: Revision::new(created, 0),
                ver: version,
                revs: vec![rev],
                tombstone,
            }),
        }
    }

    /// Records a deletion at `rev`; returns false if the key was not live.
    pub fn tombstone(&mut self, rev: Revision) -> bool {
        match self.gens.last_mut() {
            Some(g) if !g.tombstone => {
                g.revs.push(rev);
                g.ver += 1;
                g.tombstone = true;
                true
            }
            _ => false,
        }
    }

    /// The live state at the newest revision, if the key exists.
    pub fn current(&self) -> Option<KeyAt> {
        let g = self.gens.last()?;
        if g.tombstone {
            return None;
        }
        let modified = *g.revs.last()?;
        Some(KeyAt {
            modified,
            created: g.created,
            version: g.ver,
        })
    }

    /// The state visible at main revision `at` (None if absent then).
    pub fn get(&self, at: i64) -> Option<KeyAt> {
        for g in self.gens.iter().rev() {
            let first = g.revs.first()?;
            if first.main > at {
                continue;
            }
            let idx = g.revs.partition_point(|r| r.main <= at) - 1;
            if g.tombstone && idx == g.revs.len() - 1 {
                return None;
            }
            let behind = (g.revs.len() - 1 - idx) as i64;
            return Some(KeyAt {
                modified: g.revs[idx],
                created: g.created,
                version: g.ver - behind,
            });
        }
        None
    }

    /// The revision a compaction at `at` would keep for reads at `at` (None if the key is
    /// absent then). etcd's HashKV uses this to decide which old revisions to hash.
    pub fn kept_at(&self, at: i64) -> Option<Revision> {
        let g = self
            .gens
            .iter()
            .find(|g| !(g.tombstone && g.revs.last().is_some_and(|r| r.main <= at)))?;
        let idx = g.revs.partition_point(|r| r.main <= at);
        idx.checked_sub(1).map(|i| g.revs[i])
    }

    /// Drops history unreachable by reads at or after `at`, pushing the dropped revisions
    /// (with their tombstone flag) to `dropped`. Returns true if the key is gone entirely.
    pub fn compact(&mut self, at: i64, dropped: &mut Vec<(Revision, bool)>) -> bool {
        let mut keep_from = 0;
        for (i, g) in self.gens.iter().enumerate() {
            let last = match g.revs.last() {
                Some(r) => *r,
                None => continue,
            };
            if g.tombstone && last.main <= at {
                // The whole generation ended at or before the compaction point.
                keep_from = i + 1;
            }
        }
        for g in self.gens.drain(..keep_from) {
            let n = g.revs.len();
            for (j, r) in g.revs.into_iter().enumerate() {
                dropped.push((r, g.tombstone && j == n - 1));
            }
        }
        if let Some(g) = self.gens.first_mut() {
            // Keep the newest revision at or below `at`: reads at `at` still need it.
            let idx = g.revs.partition_point(|r| r.main <= at);
            if idx > 1 {
                for r in g.revs.drain(..idx - 1) {
                    dropped.push((r, false));
                }
            }
        }
        self.gens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(m: i64) -> Revision {
        Revision::new(m, 0)
    }

    #[test]
    fn versions_and_generations() {
        let mut k = KeyIndex::default();
        k.put(r(2));
        k.put(r(3));
        assert!(k.tombstone(r(5)));
        k.put(r(7));
        assert_eq!(k.get(1), None);
        assert_eq!(k.get(2).map(|a| (a.modified.main, a.version)), Some((2, 1)));
        assert_eq!(k.get(4).map(|a| (a.modified.main, a.version)), Some((3, 2)));
        assert_eq!(k.get(5), None);
        assert_eq!(k.get(6), None);
        let at = k.get(9).unwrap();
        assert_eq!((at.modified.main, at.created.main, at.version), (7, 7, 1));
        assert_eq!(k.current(), Some(at));
    }

    #[test]
    fn compaction_keeps_what_reads_need() {
        let mut k = KeyIndex::default();
        k.put(r(2));
        k.put(r(3));
        k.put(r(4));
        let mut dropped = vec![];
        assert!(!k.compact(3, &mut dropped));
        assert_eq!(dropped, vec![(r(2), false)]);
        assert_eq!(
            k.get(3)
                .map(|a| (a.modified.main, a.version, a.created.main)),
            Some((3, 2, 2))
        );
        k.tombstone(r(6));
        dropped.clear();
        assert!(!k.compact(5, &mut dropped));
        assert_eq!(dropped, vec![(r(3), false)]);
        dropped.clear();
        assert!(k.compact(6, &mut dropped));
        assert_eq!(dropped, vec![(r(4), false), (r(6), true)]);
    }
}
