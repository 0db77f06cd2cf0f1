//! The resolver's counters: plain atomics, bumped on the query path and read by whoever exports them.
//!
//! Every query that reaches the resolver counts once in `queries`; every reply sent counts once
//! under its rcode; queries never answered (responses, overload) count in `dropped`.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the cluster DNS resolver has done since it started.
#[derive(Debug, Default)]
pub struct DnsStats {
    /// Packets received on UDP or TCP.
    pub queries: AtomicU64,
    /// Replies with rcode NOERROR (answers and NODATA).
    pub noerror: AtomicU64,
    /// Replies with rcode NXDOMAIN.
    pub nxdomain: AtomicU64,
    /// Replies with rcode SERVFAIL.
    pub servfail: AtomicU64,
    /// Replies with rcode FORMERR.
    pub formerr: AtomicU64,
    /// Replies with rcode REFUSED.
    pub refused: AtomicU64,
    /// Replies with any other rcode (NOTIMP…).
    pub other_rcode: AtomicU64,
    /// Questions sent to the upstream resolvers.
    pub forwarded: AtomicU64,
    /// Forwarded questions no upstream answered.
    pub upstream_failures: AtomicU64,
    /// UDP replies cut down to the question with TC set, for the client to retry over TCP.
    pub truncated: AtomicU64,
    /// Packets not answered (responses sent to us, undecodable headers, too many in flight).
    pub dropped: AtomicU64,
}

impl DnsStats {
    /// Counts a reply by the rcode in its header.
    pub fn count_reply(&self, reply: &[u8]) {
        let counter = match reply.get(3).map(|b| b & 0x0f) {
            Some(0) => &self.noerror,
            Some(1) => &self.formerr,
            Some(2) => &self.servfail,
            Some(3) => &self.nxdomain,
            Some(5) => &self.refused,
            _ => &self.other_rcode,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_count_by_rcode() {
        let s = DnsStats::default();
        let mut header = [0u8; 12];
        header[3] = 3;
        s.count_reply(&header);
        header[3] = 0x80; // RA set, NOERROR
        s.count_reply(&header);
        s.count_reply(&[]);
        assert_eq!(s.nxdomain.load(Ordering::Relaxed), 1);
        assert_eq!(s.noerror.load(Ordering::Relaxed), 1);
        assert_eq!(s.other_rcode.load(Ordering::Relaxed), 1);
    }
}
