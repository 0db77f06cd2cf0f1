//! keel's MVCC key-value store: the state machine that Raft replicates.
//!
//! The model is etcd's: every change gets a [`Revision`] (main, sub); a key index maps each key to
//! its generations of revisions; history lives in a backend keyed by revision; compaction drops
//! history below a revision; leases attach keys to a time-to-live; the watch hub streams changes.
//! It knows nothing about Raft or the network: callers apply commands in log order and read.

pub mod alarm;
pub mod auth;
pub mod backend;
pub mod bbolt;
pub mod command;
pub mod error;
pub mod etcd_snapshot;
pub mod exposition;
pub mod lease;
pub mod metrics;
pub mod mvcc;
pub mod snapshot;
pub mod store;
pub mod watch;

/// Generated etcd wire types (our own `.proto` files, field numbers as in etcd 3.4), with serde
/// impls in the proto3 JSON mapping.
pub mod pb {
    /// `mvccpb`: KeyValue and Event.
    pub mod mvccpb {
        include!(concat!(env!("OUT_DIR"), "/mvccpb.rs"));
        include!(concat!(env!("OUT_DIR"), "/mvccpb.serde.rs"));
    }
    /// `authpb`: users, roles and permissions.
    pub mod authpb {
        include!(concat!(env!("OUT_DIR"), "/authpb.rs"));
        include!(concat!(env!("OUT_DIR"), "/authpb.serde.rs"));
    }
    /// `etcdserverpb`: requests and responses of the v3 API.
    pub mod etcdserverpb {
        include!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs"));
        include!(concat!(env!("OUT_DIR"), "/etcdserverpb.serde.rs"));
    }
}

pub use command::{Command, CommandResponse};
pub use error::StoreError;
pub use lease::LeaseId;
pub use mvcc::revision::Revision;
pub use store::{Store, StoreOptions};

/// etcd's limit on operations in one Txn branch (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;
/// etcd's default `--max-request-bytes`.
pub const MAX_REQUEST_BYTES: usize = 1_572_864;
