//! A revision: the main revision of a change and its position inside that change.

use std::fmt;

/// etcd's revision: `main` counts changes to the store, `sub` orders the writes within one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

/// Length of an encoded revision key (etcd's bbolt `key` bucket encoding).
pub const REV_KEY_LEN: usize = 17;
/// Marker byte appended to a revision key that records a deletion.
pub const TOMBSTONE_MARK: u8 = b't';

impl Revision {
    /// A revision at `main` with sub 0.
    pub fn new(main: i64, sub: i64) -> Self {
        Revision { main, sub }
    }

    /// Encodes as etcd does: main (8 bytes big-endian), `_`, sub (8 bytes big-endian).
    pub fn to_bytes(self) -> [u8; REV_KEY_LEN] {
        let mut b = [0u8; REV_KEY_LEN];
        b[..8].copy_from_slice(&(self.main as u64).to_be_bytes());
        b[8] = b'_';
        b[9..].copy_from_slice(&(self.sub as u64).to_be_bytes());
        b
    }

    /// Encodes with the tombstone mark when `tombstone` is set.
    pub fn to_key(self, tombstone: bool) -> Vec<u8> {
        let mut v = self.to_bytes().to_vec();
        if tombstone {
            v.push(TOMBSTONE_MARK);
        }
        v
    }

    /// Decodes a revision key; returns the revision and whether it marks a tombstone.
    pub fn from_key(b: &[u8]) -> Option<(Revision, bool)> {
        if b.len() < REV_KEY_LEN || b[8] != b'_' {
            return None;
        }
        let tomb = match b.len() {
            REV_KEY_LEN => false,
            18 if b[17] == TOMBSTONE_MARK => true,
            _ => return None,
        };
        let main = u64::from_be_bytes(b[..8].try_into().ok()?) as i64;
        let sub = u64::from_be_bytes(b[9..17].try_into().ok()?) as i64;
        Some((Revision { main, sub }, tomb))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.main, self.sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_encoding_round_trips_and_sorts() {
        let a = Revision::new(3, 0);
        let b = Revision::new(3, 1);
        let c = Revision::new(256, 0);
        assert!(a.to_bytes() < b.to_bytes() && b.to_bytes() < c.to_bytes());
        assert_eq!(Revision::from_key(&a.to_key(false)), Some((a, false)));
        assert_eq!(Revision::from_key(&c.to_key(true)), Some((c, true)));
        assert_eq!(Revision::from_key(b"short"), None);
        assert_eq!(&a.to_bytes()[..], b"\0\0\0\0\0\0\0\x03_\0\0\0\0\0\0\0\0");
    }
}
