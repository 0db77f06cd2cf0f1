//! The commands that change the store, as carried in Raft log entries, and their results.
//!
//! A command is a prost message so the log format can evolve: new variants get new tags.

use crate::pb::etcdserverpb as pb;

/// One state-machine command (the payload of a normal Raft log entry).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Command {
    #[prost(oneof = "CommandKind", tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10")]
    pub kind: Option<CommandKind>,
}

/// The variants of [`Command`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum CommandKind {
    #[prost(message, tag = "1")]
    Put(pb::PutRequest),
    #[prost(message, tag = "2")]
    DeleteRange(pb::DeleteRangeRequest),
    #[prost(message, tag = "3")]
    Txn(pb::TxnRequest),
    #[prost(message, tag = "4")]
    Compaction(pb::CompactionRequest),
    /// The proposer has already chosen the ID (never 0), so every replica applies the same one.
    #[prost(message, tag = "5")]
    LeaseGrant(pb::LeaseGrantRequest),
    #[prost(message, tag = "6")]
    LeaseRevoke(pb::LeaseRevokeRequest),
    /// Several clients' commands in one log entry (group commit); each keeps its own revision.
    #[prost(message, tag = "7")]
    Batch(CommandBatch),
    /// Raises, clears or lists alarms (see [`crate::alarm`]); changes no revision.
    #[prost(message, tag = "8")]
    Alarm(pb::AlarmRequest),
    /// A change to (or a read of) the auth store (see [`crate::auth`]); changes no revision.
    #[prost(message, tag = "9")]
    Auth(crate::auth::AuthCommand),
    /// A key-space command from the etcd client port while auth is on, checked when applied.
    #[prost(message, tag = "10")]
    Authed(crate::auth::AuthedCommand),
}

/// Commands proposed together as one log entry, applied in order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommandBatch {
    #[prost(message, repeated, tag = "1")]
    pub commands: Vec<Command>,
}

impl Command {
    /// Wraps a command kind.
    pub fn new(kind: CommandKind) -> Self {
        Command { kind: Some(kind) }
    }
}

/// The result of applying one command.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandResponse {
    Put(pb::PutResponse),
    DeleteRange(pb::DeleteRangeResponse),
    Txn(pb::TxnResponse),
    Compaction(pb::CompactionResponse),
    LeaseGrant(pb::LeaseGrantResponse),
    LeaseRevoke(pb::LeaseRevokeResponse),
    Alarm(pb::AlarmResponse),
    Auth(crate::auth::AuthResult),
    /// One result per command of a [`CommandBatch`].
    Batch(Vec<Result<CommandResponse, crate::StoreError>>),
}
