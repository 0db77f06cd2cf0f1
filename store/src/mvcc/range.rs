//! Key ranges as etcd spells them: `range_end` empty = one key, `"\0"` = from `key` on.

use std::ops::Bound;

/// A resolved key interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRange {
    /// Exactly one key.
    Single(Vec<u8>),
    /// `[start, end)`; `end = None` means unbounded.
    Span(Vec<u8>, Option<Vec<u8>>),
    /// `range_end <= key`: matches nothing.
    Empty,
}

impl KeyRange {
    /// Interprets a `(key, range_end)` pair.
    pub fn new(key: &[u8], range_end: &[u8]) -> Self {
        if range_end.is_empty() {
            return KeyRange::Single(key.to_vec());
        }
        if range_end == [0] {
            return KeyRange::Span(key.to_vec(), None);
        }
        if range_end <= key {
            return KeyRange::Empty;
        }
        KeyRange::Span(key.to_vec(), Some(range_end.to_vec()))
    }

    /// True if `k` falls inside.
    pub fn contains(&self, k: &[u8]) -> bool {
        match self {
            KeyRange::Single(s) => s.as_slice() == k,
            KeyRange::Span(s, e) => k >= s.as_slice() && e.as_deref().is_none_or(|e| k < e),
            KeyRange::Empty => false,
        }
    }

    /// Bounds for a `BTreeMap::range` over keys.
    pub fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        match self {
            KeyRange::Single(s) => (Bound::Included(s), Bound::Included(s)),
            KeyRange::Span(s, Some(e)) => (Bound::Included(s), Bound::Excluded(e)),
            KeyRange::Span(s, None) => (Bound::Included(s), Bound::Unbounded),
            KeyRange::Empty => (Bound::Excluded(&[]), Bound::Excluded(&[])),
        }
    }

    /// True if two ranges share a key (used for duplicate-key checks in a Txn).
    pub fn overlaps(&self, other: &KeyRange) -> bool {
        match (self, other) {
            (KeyRange::Empty, _) | (_, KeyRange::Empty) => false,
            (KeyRange::Single(a), b) | (b, KeyRange::Single(a)) => b.contains(a),
            (KeyRange::Span(s1, e1), KeyRange::Span(s2, e2)) => {
                let lt = |s: &Vec<u8>, e: &Option<Vec<u8>>| e.as_ref().is_none_or(|e| s < e);
                lt(s1, e2) && lt(s2, e1)
            }
        }
    }
}

/// The smallest key greater than every key starting with `prefix` (etcd's prefix end).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions() {
        assert_eq!(KeyRange::new(b"a", b""), KeyRange::Single(b"a".to_vec()));
        assert_eq!(
            KeyRange::new(b"a", b"\0"),
            KeyRange::Span(b"a".to_vec(), None)
        );
        assert_eq!(KeyRange::new(b"b", b"a"), KeyRange::Empty);
        assert!(KeyRange::new(b"a", b"c").contains(b"b"));
        assert!(!KeyRange::new(b"a", b"c").contains(b"c"));
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
        assert!(KeyRange::new(b"a", b"c").overlaps(&KeyRange::new(b"b", b"")));
        assert!(!KeyRange::new(b"a", b"b").overlaps(&KeyRange::new(b"b", b"c")));
    }
}
