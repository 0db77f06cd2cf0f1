//! keel's Raft layer: openraft driving a segmented WAL, with the store as the state machine.

pub mod types;
