//! The rules an object is checked and completed by before admission plugins see it: upstream's
//! defaults, names, required and immutable fields, byte and time fields, pruning of unknown
//! fields. Strategies use these helpers; nothing here knows the admission chain.

pub mod bytes;
pub mod defaults;
pub mod names;
pub mod prune;
pub mod times;
pub mod validate;
pub mod webhook_client;
