//! The lessor: which leases exist, which keys each holds, and (on the leader) when each expires.
//!
//! Existence and attachments are replicated state, changed only by applied commands. Expiry
//! deadlines are local: only the member that leads tracks them, and it revokes expired leases
//! by proposing a revoke through the log, as etcd's primary lessor does.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::LeaseId;

/// One lease.
#[derive(Debug, Clone)]
pub struct Lease {
    /// TTL in seconds as granted (after raising to the minimum).
    pub ttl: i64,
    /// Keys attached to the lease.
    pub keys: BTreeSet<Bytes>,
    /// When it expires; tracked only while this member is primary.
    pub expiry: Option<Instant>,
}

/// All leases of the store.
#[derive(Debug)]
pub struct Lessor {
    leases: HashMap<LeaseId, Lease>,
    primary: bool,
    min_ttl: i64,
}

impl Lessor {
    /// An empty lessor raising TTLs below `min_ttl` seconds.
    pub fn new(min_ttl: i64) -> Self {
        Lessor {
            leases: HashMap::new(),
            primary: false,
            min_ttl,
        }
    }

    /// The TTL a grant of `ttl` gets.
    pub fn effective_ttl(&self, ttl: i64) -> i64 {
        ttl.max(self.min_ttl)
    }

    /// True if the lease exists.
    pub fn contains(&self, id: LeaseId) -> bool {
        self.leases.contains_key(&id)
    }

    /// Looks a lease up.
    pub fn get(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(&id)
    }

    /// Adds a lease (the caller checked it does not exist).
    pub fn grant(&mut self, id: LeaseId, ttl: i64) {
        let expiry = self.primary.then(|| deadline(ttl));
        self.leases.insert(
            id,
            Lease {
                ttl,
                keys: BTreeSet::new(),
                expiry,
            },
        );
    }

    /// Removes a lease, returning its keys.
    pub fn revoke(&mut self, id: LeaseId) -> Option<Lease> {
        self.leases.remove(&id)
    }

    /// Attaches a key to a lease (no-op for lease 0 or an unknown lease).
    pub fn attach(&mut self, id: LeaseId, key: Bytes) {
        if let Some(l) = self.leases.get_mut(&id) {
            l.keys.insert(key);
        }
    }

    /// Detaches a key from a lease.
    pub fn detach(&mut self, id: LeaseId, key: &[u8]) {
        if let Some(l) = self.leases.get_mut(&id) {
            l.keys.remove(key);
        }
    }

    /// Renews a lease to its full TTL; returns the TTL, or None if it does not exist.
    pub fn renew(&mut self, id: LeaseId) -> Option<i64> {
        let primary = self.primary;
        let l = self.leases.get_mut(&id)?;
        if primary {
            l.expiry = Some(deadline(l.ttl));
        }
        Some(l.ttl)
    }

    /// Remaining whole seconds before expiry (the granted TTL when not primary).
    pub fn remaining(&self, id: LeaseId) -> Option<i64> {
        let l = self.leases.get(&id)?;
        Some(match l.expiry {
            Some(t) => t.saturating_duration_since(Instant::now()).as_secs() as i64,
            None => l.ttl,
        })
    }

    /// All lease IDs, soonest expiry first (etcd's order), then by TTL and ID.
    pub fn ids(&self) -> Vec<LeaseId> {
        let mut v: Vec<(Option<Instant>, i64, LeaseId)> = self
            .leases
            .iter()
            .map(|(id, l)| (l.expiry, l.ttl, *id))
            .collect();
        v.sort();
        v.into_iter().map(|(_, _, id)| id).collect()
    }

    /// Becomes primary: every lease gets a full TTL from now (etcd's behaviour on promotion).
    pub fn promote(&mut self, extend: Duration) {
        self.primary = true;
        for l in self.leases.values_mut() {
            l.expiry = Some(deadline(l.ttl) + extend);
        }
    }

    /// Stops tracking expiry.
    pub fn demote(&mut self) {
        self.primary = false;
        for l in self.leases.values_mut() {
            l.expiry = None;
        }
    }

    /// True while this member tracks expiry.
    pub fn is_primary(&self) -> bool {
        self.primary
    }

    /// Leases whose deadline has passed, at most `limit`, oldest deadline first.
    pub fn expired(&self, now: Instant, limit: usize) -> Vec<LeaseId> {
        let mut v: Vec<(Instant, LeaseId)> = self
            .leases
            .iter()
            .filter_map(|(id, l)| l.expiry.filter(|t| *t <= now).map(|t| (t, *id)))
            .collect();
        v.sort();
        v.into_iter().take(limit).map(|(_, id)| id).collect()
    }

    /// Number of leases.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// True when there are no leases.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }
}

fn deadline(ttl: i64) -> Instant {
    Instant::now() + Duration::from_secs(ttl.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_only_when_primary() {
        let mut l = Lessor::new(2);
        assert_eq!(l.effective_ttl(0), 2);
        l.grant(LeaseId(7), 5);
        assert_eq!(l.remaining(LeaseId(7)), Some(5));
        assert!(l
            .expired(Instant::now() + Duration::from_secs(100), 10)
            .is_empty());
        l.promote(Duration::ZERO);
        let late = Instant::now() + Duration::from_secs(6);
        assert_eq!(l.expired(late, 10), vec![LeaseId(7)]);
        l.attach(LeaseId(7), Bytes::from_static(b"a"));
        assert_eq!(l.revoke(LeaseId(7)).map(|x| x.keys.len()), Some(1));
        assert_eq!(l.renew(LeaseId(7)), None);
    }
}
