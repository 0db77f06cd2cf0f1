//! Leases: time-to-live grants that keys attach to; revoking one deletes its keys.

pub mod lessor;

pub use lessor::{Lease, Lessor};

/// A lease's identifier (etcd's int64 lease ID; 0 means "no lease").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

/// etcd's largest accepted TTL in seconds.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// The lease record persisted in the backend (the same fields as etcd's `leasepb.Lease`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRecord {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(int64, tag = "2")]
    pub ttl: i64,
    #[prost(int64, tag = "3")]
    pub remaining_ttl: i64,
}
