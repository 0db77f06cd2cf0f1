//! Multi-version concurrency control: revisions, the key index and the versioned key space.

pub mod key_index;
pub mod kv;
pub mod range;
pub mod revision;
pub mod txn_check;
