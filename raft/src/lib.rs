//! keel's Raft layer: openraft with a segmented write-ahead log, the store as state machine.
//!
//! The handle every front door uses is [`node::Node`] (propose, read linearizably or
//! serializably, watch, members, leadership as a stream); [`error`] and [`types`] hold what its
//! calls return. [`membership`] and [`codec`] are public for the `keel` binary's offline tools
//! (snapshot restore writes a membership and an applied index the way a member would).
//!
//! Inside: `wal` (segmented log files) under `log_store` (openraft's log storage, group commit),
//! `state_machine` (the store, snapshots), `proposer` (batching proposals), `read_index`
//! (batching ReadIndex rounds), `timing` (election timeouts), `quota` (the space quota's costs),
//! `leadership` (the leadership stream), `peer` (the peer transport's server and wire format) and
//! `network` (its clients).

mod applied;
pub mod codec;
pub mod error;
#[cfg(test)]
mod fuzz;
mod leadership;
mod log_store;
pub mod membership;
pub mod metrics;
mod network;
pub mod node;
mod peer;
mod proposer;
mod quota;
mod read_index;
pub mod recover;
mod state_machine;
mod timing;
pub mod tls;
pub mod types;
mod wal;
