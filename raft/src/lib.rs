//! keel's Raft layer: openraft with a segmented write-ahead log, the store as state machine.

pub mod codec;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod node;
pub mod peer;
pub mod proposer;
pub mod read_index;
pub mod state_machine;
mod timing;
pub mod types;
pub mod wal;
