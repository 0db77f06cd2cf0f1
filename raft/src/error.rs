//! Why things fail: starting a member, a request through Raft, a membership change, the initial
//! cluster flags. etcd's own error texts where etcd has one, since clients match on them.

use std::path::PathBuf;

use keel_store::StoreError;
use thiserror::Error;

/// Why a member could not start.
#[derive(Debug, Error)]
pub enum StartError {
    #[error("data directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("write-ahead log: {0}")]
    Wal(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("raft: {0}")]
    Raft(String),
    #[error("unrecoverable: {0}")]
    Unrecoverable(String),
    #[error(transparent)]
    InitialCluster(#[from] InitialClusterError),
    #[error("this data directory belongs to cluster {stored:016x}, but --initial-cluster-token gives {given:016x}")]
    ClusterMismatch { stored: u64, given: u64 },
    #[error("peer transport: {0}")]
    Peer(String),
}

/// Why a request through Raft failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// The command itself was refused by the store.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: server stopped")]
    Stopped,
    /// A membership change was refused.
    #[error(transparent)]
    Membership(#[from] MembershipError),
}

/// Why a membership change was refused (etcd's messages).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum MembershipError {
    #[error("etcdserver: member not found")]
    NotFound,
    #[error("etcdserver: member ID already exist")]
    IdExists,
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    #[error("etcdserver: given member URLs are invalid")]
    InvalidUrls,
    #[error("etcdserver: can only promote a learner member")]
    NotLearner,
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    #[error("etcdserver: bad leader transferee")]
    BadTransferee,
    #[error("etcdserver: too many learner members in cluster")]
    TooManyLearners,
    /// Another member already uses the name this member starts with.
    #[error("keel: member name is already used by another member")]
    NameInUse,
}

/// Why `--initial-cluster` is unusable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InitialClusterError {
    #[error("--initial-cluster entry {0:?} is not name=http://host:port")]
    Malformed(String),
    #[error("member name {0:?} is already used by another member: --initial-cluster names it more than once with different URLs")]
    DuplicateName(String),
    #[error("--initial-cluster lists peer URL {0} for two members")]
    DuplicateUrl(String),
    #[error("--initial-cluster has no entry for this member's --name {0:?}")]
    MissingSelf(String),
    #[error("--initial-cluster gives {name:?} the peer URLs {listed:?}, but --initial-advertise-peer-urls says {own:?}")]
    UrlMismatch {
        name: String,
        listed: Vec<String>,
        own: Vec<String>,
    },
}
