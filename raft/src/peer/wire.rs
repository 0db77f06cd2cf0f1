//! What both ends of the peer transport agree on: message size limits, the metadata headers
//! every call carries, HTTP/2 keep-alive, and the refusal a removed member gets. The client
//! (`crate::network`) and the server (`server.rs`) both take them from here.

use std::time::Duration;

/// Largest peer message either side encodes or decodes. AppendEntries batches are split near
/// [`APPEND_SPLIT_BYTES`] and snapshot chunks are openraft's `snapshot_max_chunk_size` (3 MiB by
/// default), so this leaves room for one oversized entry plus framing.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// An AppendEntries request larger than this (with more than one entry) is sent in parts.
pub(crate) const APPEND_SPLIT_BYTES: usize = 4 << 20;

/// Metadata header naming the cluster the sender belongs to (hex).
pub(crate) const CLUSTER_HEADER: &str = "keel-cluster-id";

/// Metadata header naming the member a Raft RPC is meant for (hex).
pub(crate) const TO_HEADER: &str = "keel-to";

/// The refusal a removed member gets for its Raft calls (etcd's words).
pub(crate) const REMOVED_MESSAGE: &str = "the member has been permanently removed from the cluster";

/// The refusal a member gets when a quorum-loss recovery left it out (`keel recover`): unlike an
/// explicit removal, it may join the recovered cluster again as a new member.
pub(crate) const RECOVERED_AWAY_MESSAGE: &str =
    "the member was left out of the cluster by a quorum-loss recovery";

/// HTTP/2 keep-alive on idle peer connections, so a dead peer's connection is noticed and
/// replaced instead of eating RPC timeouts.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long a keep-alive ping may go unanswered.
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
