//! Conversions between openraft's and keel's types and the peer protocol's protobuf messages.
//!
//! Encoding never fails; decoding returns [`CodecError`] for anything a well-behaved peer would
//! not send (a missing required field, an unknown enum value, a command that does not decode),
//! so the server can answer `InvalidArgument` instead of guessing or panicking.
//!
//! Log ids, memberships, entries and votes are encoded as the WAL encodes them (memberships go
//! through the WAL's own encoder), so an entry on the wire is byte-for-byte the entry inside a
//! WAL record; the tests below hold the two to that.

use keel_store::{Command, CommandResponse, StoreError};
use openraft::error::{Fatal, Infallible, InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{
    AnyError, EntryPayload, ErrorSubject, ErrorVerb, SnapshotMeta, SnapshotSegmentId,
    StorageIOError,
};
use prost::Message;

use crate::codec::{membership_from_pb, membership_to_pb, MemberPb, MembershipPb, VoterSetPb};
use crate::error::{MembershipError, ProposeError};
use crate::proposer::Answer;
use crate::types::{
    Entry, LogId, MemberChange, MemberChangeResult, MemberInfo, MemberNode, NodeId, StorageError,
    StoredMembership, TypeConfig, Vote,
};

/// Generated messages, client and server of `proto/peer.proto` (package `keel.peer`). Generated
/// code is `pub` throughout; the crate keeps this module to itself.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub(crate) mod pb {
    tonic::include_proto!("keel.peer");
}

/// Why a peer message could not be turned into keel's types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CodecError {
    /// A field the receiver needs is absent.
    #[error("peer message has no {0}")]
    Missing(&'static str),
    /// An enum value this build does not know (a newer peer, or garbage).
    #[error("peer message has an unknown {what} {value}")]
    Unknown { what: &'static str, value: i32 },
    /// A variant that this reply cannot carry (e.g. a snapshot error answering a vote).
    #[error("peer message carries an unexpected {0}")]
    Unexpected(&'static str),
    /// Embedded bytes (a command) do not decode.
    #[error("protobuf decode: {0}")]
    Decode(#[from] prost::DecodeError),
}

fn required<T>(v: Option<T>, what: &'static str) -> Result<T, CodecError> {
    v.ok_or(CodecError::Missing(what))
}

// ---------------------------------------------------------------------------------------------
// Log ids, votes, memberships, entries: the WAL's encodings (see `proto/peer.proto`).

/// Encodes a log id.
pub(crate) fn log_id_to_pb(id: &LogId) -> pb::LogId {
    pb::LogId {
        term: id.leader_id.term,
        node_id: id.leader_id.node_id,
        index: id.index,
    }
}

/// Decodes a log id.
pub(crate) fn log_id_from_pb(p: &pb::LogId) -> LogId {
    LogId::new(openraft::CommittedLeaderId::new(p.term, p.node_id), p.index)
}

fn opt_log_id(p: Option<&pb::LogId>) -> Option<LogId> {
    p.map(log_id_from_pb)
}

/// Encodes a vote.
pub(crate) fn vote_to_pb(v: &Vote) -> pb::Vote {
    pb::Vote {
        term: v.leader_id.term,
        node_id: v.leader_id.node_id,
        committed: v.committed,
    }
}

/// Decodes a vote.
pub(crate) fn vote_from_pb(p: &pb::Vote) -> Vote {
    let mut v = Vote::new(p.term, p.node_id);
    v.committed = p.committed;
    v
}

fn required_vote(p: Option<&pb::Vote>) -> Result<Vote, CodecError> {
    Ok(vote_from_pb(required(p, "vote")?))
}

/// Encodes a membership through the WAL's encoder, so both agree on voter sets and nodes.
pub(crate) fn membership_to_peer(m: &openraft::Membership<NodeId, MemberNode>) -> pb::Membership {
    let m = membership_to_pb(m);
    pb::Membership {
        configs: m
            .configs
            .into_iter()
            .map(|s| pb::VoterSet { ids: s.ids })
            .collect(),
        nodes: m
            .nodes
            .into_iter()
            .map(|n| pb::Member {
                id: n.id,
                name: n.name,
                peer_urls: n.peer_urls,
                client_urls: n.client_urls,
            })
            .collect(),
    }
}

/// Decodes a membership through the WAL's decoder.
pub(crate) fn membership_from_peer(p: pb::Membership) -> openraft::Membership<NodeId, MemberNode> {
    membership_from_pb(&MembershipPb {
        configs: p
            .configs
            .into_iter()
            .map(|s| VoterSetPb { ids: s.ids })
            .collect(),
        nodes: p
            .nodes
            .into_iter()
            .map(|n| MemberPb {
                id: n.id,
                name: n.name,
                peer_urls: n.peer_urls,
                client_urls: n.client_urls,
            })
            .collect(),
    })
}

/// Encodes a log entry exactly as the WAL's entry record does.
pub(crate) fn entry_to_pb(e: &Entry) -> pb::Entry {
    use pb::entry::Payload;
    let payload = match &e.payload {
        EntryPayload::Blank => Payload::Blank(pb::Blank {}),
        EntryPayload::Normal(cmd) => Payload::Normal(cmd.encode_to_vec()),
        EntryPayload::Membership(m) => Payload::Membership(membership_to_peer(m)),
    };
    pb::Entry {
        term: e.log_id.leader_id.term,
        leader_node_id: e.log_id.leader_id.node_id,
        index: e.log_id.index,
        payload: Some(payload),
    }
}

/// Decodes a log entry.
pub(crate) fn entry_from_pb(p: pb::Entry) -> Result<Entry, CodecError> {
    use pb::entry::Payload;
    let log_id = log_id_from_pb(&pb::LogId {
        term: p.term,
        node_id: p.leader_node_id,
        index: p.index,
    });
    let payload = match required(p.payload, "entry payload")? {
        Payload::Blank(_) => EntryPayload::Blank,
        Payload::Normal(b) => EntryPayload::Normal(Command::decode(b.as_slice())?),
        Payload::Membership(m) => EntryPayload::Membership(membership_from_peer(m)),
    };
    Ok(Entry { log_id, payload })
}

// ---------------------------------------------------------------------------------------------
// AppendEntries.

/// Encodes an AppendEntries request.
pub(crate) fn append_request_to_pb(
    r: &AppendEntriesRequest<TypeConfig>,
) -> pb::AppendEntriesRequest {
    pb::AppendEntriesRequest {
        vote: Some(vote_to_pb(&r.vote)),
        prev_log_id: r.prev_log_id.as_ref().map(log_id_to_pb),
        entries: r.entries.iter().map(entry_to_pb).collect(),
        leader_commit: r.leader_commit.as_ref().map(log_id_to_pb),
    }
}

/// Decodes an AppendEntries request.
pub(crate) fn append_request_from_pb(
    p: pb::AppendEntriesRequest,
) -> Result<AppendEntriesRequest<TypeConfig>, CodecError> {
    Ok(AppendEntriesRequest {
        vote: required_vote(p.vote.as_ref())?,
        prev_log_id: opt_log_id(p.prev_log_id.as_ref()),
        entries: p
            .entries
            .into_iter()
            .map(entry_from_pb)
            .collect::<Result<_, _>>()?,
        leader_commit: opt_log_id(p.leader_commit.as_ref()),
    })
}

/// Encodes an AppendEntries response (every variant).
pub(crate) fn append_response_to_pb(
    r: &AppendEntriesResponse<NodeId>,
) -> pb::AppendEntriesResponse {
    use pb::append_entries_response::Kind;
    let kind = match r {
        AppendEntriesResponse::Success => Kind::Success(pb::Empty {}),
        AppendEntriesResponse::PartialSuccess(m) => Kind::PartialSuccess(pb::PartialSuccess {
            matching: m.as_ref().map(log_id_to_pb),
        }),
        AppendEntriesResponse::Conflict => Kind::Conflict(pb::Empty {}),
        AppendEntriesResponse::HigherVote(v) => Kind::HigherVote(vote_to_pb(v)),
    };
    pb::AppendEntriesResponse { kind: Some(kind) }
}

/// Decodes an AppendEntries response.
pub(crate) fn append_response_from_pb(
    p: pb::AppendEntriesResponse,
) -> Result<AppendEntriesResponse<NodeId>, CodecError> {
    use pb::append_entries_response::Kind;
    Ok(match required(p.kind, "append-entries response")? {
        Kind::Success(_) => AppendEntriesResponse::Success,
        Kind::PartialSuccess(s) => {
            AppendEntriesResponse::PartialSuccess(opt_log_id(s.matching.as_ref()))
        }
        Kind::Conflict(_) => AppendEntriesResponse::Conflict,
        Kind::HigherVote(v) => AppendEntriesResponse::HigherVote(vote_from_pb(&v)),
    })
}

/// Encodes what `Raft::append_entries` returned.
pub(crate) fn append_reply_to_pb(
    r: &Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>,
) -> pb::AppendEntriesReply {
    use pb::append_entries_reply::Result as R;
    let result = match r {
        Ok(resp) => R::Ok(append_response_to_pb(resp)),
        Err(e) => R::Error(raft_error_to_pb(e)),
    };
    pb::AppendEntriesReply {
        result: Some(result),
    }
}

/// Decodes an AppendEntries reply into the receiver's result.
#[allow(clippy::type_complexity)]
pub(crate) fn append_reply_from_pb(
    p: pb::AppendEntriesReply,
) -> Result<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>, CodecError> {
    use pb::append_entries_reply::Result as R;
    Ok(match required(p.result, "append-entries result")? {
        R::Ok(resp) => Ok(append_response_from_pb(resp)?),
        R::Error(e) => Err(raft_error_from_pb(e)?),
    })
}

// ---------------------------------------------------------------------------------------------
// Vote.

/// Encodes a vote request.
pub(crate) fn vote_request_to_pb(r: &VoteRequest<NodeId>) -> pb::VoteRequest {
    pb::VoteRequest {
        vote: Some(vote_to_pb(&r.vote)),
        last_log_id: r.last_log_id.as_ref().map(log_id_to_pb),
    }
}

/// Decodes a vote request.
pub(crate) fn vote_request_from_pb(p: pb::VoteRequest) -> Result<VoteRequest<NodeId>, CodecError> {
    Ok(VoteRequest {
        vote: required_vote(p.vote.as_ref())?,
        last_log_id: opt_log_id(p.last_log_id.as_ref()),
    })
}

/// Encodes a vote response.
pub(crate) fn vote_response_to_pb(r: &VoteResponse<NodeId>) -> pb::VoteResponse {
    pb::VoteResponse {
        vote: Some(vote_to_pb(&r.vote)),
        vote_granted: r.vote_granted,
        last_log_id: r.last_log_id.as_ref().map(log_id_to_pb),
    }
}

/// Decodes a vote response.
pub(crate) fn vote_response_from_pb(
    p: pb::VoteResponse,
) -> Result<VoteResponse<NodeId>, CodecError> {
    Ok(VoteResponse {
        vote: required_vote(p.vote.as_ref())?,
        vote_granted: p.vote_granted,
        last_log_id: opt_log_id(p.last_log_id.as_ref()),
    })
}

/// Encodes what `Raft::vote` returned.
pub(crate) fn vote_reply_to_pb(
    r: &Result<VoteResponse<NodeId>, RaftError<NodeId>>,
) -> pb::VoteReply {
    use pb::vote_reply::Result as R;
    let result = match r {
        Ok(resp) => R::Ok(vote_response_to_pb(resp)),
        Err(e) => R::Error(raft_error_to_pb(e)),
    };
    pb::VoteReply {
        result: Some(result),
    }
}

/// Decodes a vote reply into the receiver's result.
#[allow(clippy::type_complexity)]
pub(crate) fn vote_reply_from_pb(
    p: pb::VoteReply,
) -> Result<Result<VoteResponse<NodeId>, RaftError<NodeId>>, CodecError> {
    use pb::vote_reply::Result as R;
    Ok(match required(p.result, "vote result")? {
        R::Ok(resp) => Ok(vote_response_from_pb(resp)?),
        R::Error(e) => Err(raft_error_from_pb(e)?),
    })
}

// ---------------------------------------------------------------------------------------------
// InstallSnapshot.

/// Encodes snapshot metadata.
pub(crate) fn snapshot_meta_to_pb(m: &SnapshotMeta<NodeId, MemberNode>) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: m.last_log_id.as_ref().map(log_id_to_pb),
        last_membership_log_id: m.last_membership.log_id().as_ref().map(log_id_to_pb),
        last_membership: Some(membership_to_peer(m.last_membership.membership())),
        snapshot_id: m.snapshot_id.clone(),
    }
}

/// Decodes snapshot metadata.
pub(crate) fn snapshot_meta_from_pb(
    p: pb::SnapshotMeta,
) -> Result<SnapshotMeta<NodeId, MemberNode>, CodecError> {
    let membership = required(p.last_membership, "snapshot membership")?;
    Ok(SnapshotMeta {
        last_log_id: opt_log_id(p.last_log_id.as_ref()),
        last_membership: StoredMembership::new(
            opt_log_id(p.last_membership_log_id.as_ref()),
            membership_from_peer(membership),
        ),
        snapshot_id: p.snapshot_id,
    })
}

/// Encodes one snapshot chunk.
#[cfg(test)]
pub(crate) fn snapshot_request_to_pb(
    r: &InstallSnapshotRequest<TypeConfig>,
) -> pb::InstallSnapshotRequest {
    pb::InstallSnapshotRequest {
        vote: Some(vote_to_pb(&r.vote)),
        meta: Some(snapshot_meta_to_pb(&r.meta)),
        offset: r.offset,
        data: r.data.clone(),
        done: r.done,
    }
}

/// Encodes one snapshot chunk, moving its data instead of copying it.
pub(crate) fn snapshot_request_into_pb(
    r: InstallSnapshotRequest<TypeConfig>,
) -> pb::InstallSnapshotRequest {
    pb::InstallSnapshotRequest {
        vote: Some(vote_to_pb(&r.vote)),
        meta: Some(snapshot_meta_to_pb(&r.meta)),
        offset: r.offset,
        data: r.data,
        done: r.done,
    }
}

/// Decodes one snapshot chunk.
pub(crate) fn snapshot_request_from_pb(
    p: pb::InstallSnapshotRequest,
) -> Result<InstallSnapshotRequest<TypeConfig>, CodecError> {
    Ok(InstallSnapshotRequest {
        vote: required_vote(p.vote.as_ref())?,
        meta: snapshot_meta_from_pb(required(p.meta, "snapshot meta")?)?,
        offset: p.offset,
        data: p.data,
        done: p.done,
    })
}

/// Encodes an InstallSnapshot response.
pub(crate) fn snapshot_response_to_pb(
    r: &InstallSnapshotResponse<NodeId>,
) -> pb::InstallSnapshotResponse {
    pb::InstallSnapshotResponse {
        vote: Some(vote_to_pb(&r.vote)),
    }
}

/// Decodes an InstallSnapshot response.
pub(crate) fn snapshot_response_from_pb(
    p: pb::InstallSnapshotResponse,
) -> Result<InstallSnapshotResponse<NodeId>, CodecError> {
    Ok(InstallSnapshotResponse {
        vote: required_vote(p.vote.as_ref())?,
    })
}

/// Encodes what `Raft::install_snapshot` returned.
pub(crate) fn snapshot_reply_to_pb(
    r: &Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
) -> pb::InstallSnapshotReply {
    use pb::install_snapshot_reply::Result as R;
    let result = match r {
        Ok(resp) => R::Ok(snapshot_response_to_pb(resp)),
        Err(e) => R::Error(raft_error_to_pb(e)),
    };
    pb::InstallSnapshotReply {
        result: Some(result),
    }
}

/// Decodes an InstallSnapshot reply into the receiver's result.
#[allow(clippy::type_complexity)]
pub(crate) fn snapshot_reply_from_pb(
    p: pb::InstallSnapshotReply,
) -> Result<
    Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    CodecError,
> {
    use pb::install_snapshot_reply::Result as R;
    Ok(match required(p.result, "install-snapshot result")? {
        R::Ok(resp) => Ok(snapshot_response_from_pb(resp)?),
        R::Error(e) => Err(raft_error_from_pb(e)?),
    })
}

// ---------------------------------------------------------------------------------------------
// openraft errors a receiver returns.

/// The API error part of a `RaftError<NodeId, E>` that can travel between peers.
pub(crate) trait ApiErrorPb: Sized {
    /// Encodes the API error.
    fn to_pb(&self) -> pb::raft_error::Kind;
    /// Decodes an API error; `Unexpected` for kinds this `E` cannot hold.
    fn from_pb(kind: pb::raft_error::Kind) -> Result<Self, CodecError>;
}

impl ApiErrorPb for Infallible {
    fn to_pb(&self) -> pb::raft_error::Kind {
        match *self {}
    }

    fn from_pb(kind: pb::raft_error::Kind) -> Result<Self, CodecError> {
        match kind {
            pb::raft_error::Kind::Fatal(_) => {
                Err(CodecError::Unexpected("fatal error as API error"))
            }
            pb::raft_error::Kind::SnapshotMismatch(_) => {
                Err(CodecError::Unexpected("snapshot mismatch"))
            }
        }
    }
}

impl ApiErrorPb for InstallSnapshotError {
    fn to_pb(&self) -> pb::raft_error::Kind {
        match self {
            InstallSnapshotError::SnapshotMismatch(m) => {
                pb::raft_error::Kind::SnapshotMismatch(pb::SnapshotMismatch {
                    expect: Some(segment_to_pb(&m.expect)),
                    got: Some(segment_to_pb(&m.got)),
                })
            }
        }
    }

    fn from_pb(kind: pb::raft_error::Kind) -> Result<Self, CodecError> {
        match kind {
            pb::raft_error::Kind::SnapshotMismatch(m) => {
                Ok(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                    expect: segment_from_pb(required(m.expect, "mismatch expect")?),
                    got: segment_from_pb(required(m.got, "mismatch got")?),
                }))
            }
            pb::raft_error::Kind::Fatal(_) => {
                Err(CodecError::Unexpected("fatal error as API error"))
            }
        }
    }
}

fn segment_to_pb(s: &SnapshotSegmentId) -> pb::SnapshotSegmentId {
    pb::SnapshotSegmentId {
        id: s.id.clone(),
        offset: s.offset,
    }
}

fn segment_from_pb(p: pb::SnapshotSegmentId) -> SnapshotSegmentId {
    SnapshotSegmentId {
        id: p.id,
        offset: p.offset,
    }
}

/// Encodes a fatal error. A storage error travels as its text: the sender only logs it.
pub(crate) fn fatal_to_pb(f: &Fatal<NodeId>) -> pb::Fatal {
    use pb::fatal::Kind;
    let kind = match f {
        Fatal::StorageError(e) => Kind::StorageError(e.to_string()),
        Fatal::Panicked => Kind::Panicked(pb::Empty {}),
        Fatal::Stopped => Kind::Stopped(pb::Empty {}),
    };
    pb::Fatal { kind: Some(kind) }
}

/// Decodes a fatal error; a storage error comes back as an I/O error carrying the remote text.
pub(crate) fn fatal_from_pb(p: pb::Fatal) -> Result<Fatal<NodeId>, CodecError> {
    use pb::fatal::Kind;
    Ok(match required(p.kind, "fatal kind")? {
        Kind::StorageError(text) => Fatal::StorageError(StorageError::IO {
            source: StorageIOError::new(ErrorSubject::None, ErrorVerb::Read, AnyError::error(text)),
        }),
        Kind::Panicked(_) => Fatal::Panicked,
        Kind::Stopped(_) => Fatal::Stopped,
    })
}

/// Encodes a receiver's `RaftError`.
pub(crate) fn raft_error_to_pb<E: ApiErrorPb>(e: &RaftError<NodeId, E>) -> pb::RaftError {
    let kind = match e {
        RaftError::APIError(api) => api.to_pb(),
        RaftError::Fatal(f) => pb::raft_error::Kind::Fatal(fatal_to_pb(f)),
    };
    pb::RaftError { kind: Some(kind) }
}

/// Decodes a receiver's `RaftError`.
pub(crate) fn raft_error_from_pb<E: ApiErrorPb>(
    p: pb::RaftError,
) -> Result<RaftError<NodeId, E>, CodecError> {
    Ok(match required(p.kind, "raft error kind")? {
        pb::raft_error::Kind::Fatal(f) => RaftError::Fatal(fatal_from_pb(f)?),
        api => RaftError::APIError(E::from_pb(api)?),
    })
}

// ---------------------------------------------------------------------------------------------
// Application results and errors.

/// Encodes the result of applying a command (every variant, batches recursively).
pub(crate) fn command_response_to_pb(r: &CommandResponse) -> pb::CommandResult {
    use pb::command_result::Kind;
    let kind = match r {
        CommandResponse::Put(x) => Kind::Put(x.clone()),
        CommandResponse::DeleteRange(x) => Kind::DeleteRange(x.clone()),
        CommandResponse::Txn(x) => Kind::Txn(x.clone()),
        CommandResponse::Compaction(x) => Kind::Compaction(*x),
        CommandResponse::LeaseGrant(x) => Kind::LeaseGrant(x.clone()),
        CommandResponse::LeaseRevoke(x) => Kind::LeaseRevoke(*x),
        CommandResponse::Alarm(x) => Kind::Alarm(x.clone()),
        CommandResponse::Auth(x) => Kind::Auth(prost::Message::encode_to_vec(x)),
        CommandResponse::Batch(items) => Kind::Batch(pb::BatchResult {
            results: items
                .iter()
                .map(|item| pb::BatchItem {
                    result: Some(match item {
                        Ok(r) => pb::batch_item::Result::Ok(command_response_to_pb(r)),
                        Err(e) => pb::batch_item::Result::Error(store_error_to_pb(e)),
                    }),
                })
                .collect(),
        }),
    };
    pb::CommandResult { kind: Some(kind) }
}

/// Decodes the result of applying a command.
pub(crate) fn command_response_from_pb(
    p: pb::CommandResult,
) -> Result<CommandResponse, CodecError> {
    use pb::command_result::Kind;
    Ok(match required(p.kind, "command result")? {
        Kind::Put(x) => CommandResponse::Put(x),
        Kind::DeleteRange(x) => CommandResponse::DeleteRange(x),
        Kind::Txn(x) => CommandResponse::Txn(x),
        Kind::Compaction(x) => CommandResponse::Compaction(x),
        Kind::LeaseGrant(x) => CommandResponse::LeaseGrant(x),
        Kind::LeaseRevoke(x) => CommandResponse::LeaseRevoke(x),
        Kind::Alarm(x) => CommandResponse::Alarm(x),
        Kind::Auth(b) => CommandResponse::Auth(
            prost::Message::decode(&b[..]).map_err(|_| CodecError::Unexpected("auth result"))?,
        ),
        // Recursion depth is bounded by prost's decode recursion limit.
        Kind::Batch(b) => CommandResponse::Batch(
            b.results
                .into_iter()
                .map(|item| match required(item.result, "batch item")? {
                    pb::batch_item::Result::Ok(r) => Ok(Ok(command_response_from_pb(r)?)),
                    pb::batch_item::Result::Error(e) => Ok(Err(store_error_from_pb(&e)?)),
                })
                .collect::<Result<_, CodecError>>()?,
        ),
    })
}

/// Encodes a store error; Backend and Corrupt keep their detail.
pub(crate) fn store_error_to_pb(e: &StoreError) -> pb::StoreError {
    use pb::store_error::Kind;
    let (kind, detail) = match e {
        StoreError::EmptyKey => (Kind::EmptyKey, ""),
        StoreError::KeyNotFound => (Kind::KeyNotFound, ""),
        StoreError::ValueProvided => (Kind::ValueProvided, ""),
        StoreError::LeaseProvided => (Kind::LeaseProvided, ""),
        StoreError::TooManyOps => (Kind::TooManyOps, ""),
        StoreError::DuplicateKey => (Kind::DuplicateKey, ""),
        StoreError::Compacted => (Kind::Compacted, ""),
        StoreError::FutureRev => (Kind::FutureRev, ""),
        StoreError::LeaseNotFound => (Kind::LeaseNotFound, ""),
        StoreError::LeaseExists => (Kind::LeaseExists, ""),
        StoreError::LeaseTtlTooLarge => (Kind::LeaseTtlTooLarge, ""),
        StoreError::RequestTooLarge => (Kind::RequestTooLarge, ""),
        StoreError::EmptyWatchRange => (Kind::EmptyWatchRange, ""),
        StoreError::NoSpace => (Kind::NoSpace, ""),
        StoreError::CorruptCluster => (Kind::CorruptCluster, ""),
        StoreError::RootUserNotExist => (Kind::RootUserNotExist, ""),
        StoreError::RootRoleNotExist => (Kind::RootRoleNotExist, ""),
        StoreError::UserAlreadyExist => (Kind::UserAlreadyExist, ""),
        StoreError::UserEmpty => (Kind::UserEmpty, ""),
        StoreError::UserNotFound => (Kind::UserNotFound, ""),
        StoreError::RoleAlreadyExist => (Kind::RoleAlreadyExist, ""),
        StoreError::RoleNotFound => (Kind::RoleNotFound, ""),
        StoreError::RoleEmpty => (Kind::RoleEmpty, ""),
        StoreError::AuthFailed => (Kind::AuthFailed, ""),
        StoreError::NoPasswordUser => (Kind::NoPasswordUser, ""),
        StoreError::PermissionNotGiven => (Kind::PermissionNotGiven, ""),
        StoreError::PermissionDenied => (Kind::PermissionDenied, ""),
        StoreError::RoleNotGranted => (Kind::RoleNotGranted, ""),
        StoreError::PermissionNotGranted => (Kind::PermissionNotGranted, ""),
        StoreError::AuthNotEnabled => (Kind::AuthNotEnabled, ""),
        StoreError::InvalidAuthToken => (Kind::InvalidAuthToken, ""),
        StoreError::InvalidAuthMgmt => (Kind::InvalidAuthMgmt, ""),
        StoreError::AuthOldRevision => (Kind::AuthOldRevision, ""),
        StoreError::Backend(d) => (Kind::Backend, d.as_str()),
        StoreError::Corrupt(d) => (Kind::Corrupt, d.as_str()),
    };
    pb::StoreError {
        kind: kind as i32,
        detail: detail.to_string(),
    }
}

/// Decodes a store error.
pub(crate) fn store_error_from_pb(p: &pb::StoreError) -> Result<StoreError, CodecError> {
    use pb::store_error::Kind;
    let kind = Kind::try_from(p.kind).map_err(|_| CodecError::Unknown {
        what: "store error",
        value: p.kind,
    })?;
    Ok(match kind {
        Kind::Unspecified => {
            return Err(CodecError::Unknown {
                what: "store error",
                value: p.kind,
            })
        }
        Kind::EmptyKey => StoreError::EmptyKey,
        Kind::KeyNotFound => StoreError::KeyNotFound,
        Kind::ValueProvided => StoreError::ValueProvided,
        Kind::LeaseProvided => StoreError::LeaseProvided,
        Kind::TooManyOps => StoreError::TooManyOps,
        Kind::DuplicateKey => StoreError::DuplicateKey,
        Kind::Compacted => StoreError::Compacted,
        Kind::FutureRev => StoreError::FutureRev,
        Kind::LeaseNotFound => StoreError::LeaseNotFound,
        Kind::LeaseExists => StoreError::LeaseExists,
        Kind::LeaseTtlTooLarge => StoreError::LeaseTtlTooLarge,
        Kind::RequestTooLarge => StoreError::RequestTooLarge,
        Kind::EmptyWatchRange => StoreError::EmptyWatchRange,
        Kind::NoSpace => StoreError::NoSpace,
        Kind::CorruptCluster => StoreError::CorruptCluster,
        Kind::RootUserNotExist => StoreError::RootUserNotExist,
        Kind::RootRoleNotExist => StoreError::RootRoleNotExist,
        Kind::UserAlreadyExist => StoreError::UserAlreadyExist,
        Kind::UserEmpty => StoreError::UserEmpty,
        Kind::UserNotFound => StoreError::UserNotFound,
        Kind::RoleAlreadyExist => StoreError::RoleAlreadyExist,
        Kind::RoleNotFound => StoreError::RoleNotFound,
        Kind::RoleEmpty => StoreError::RoleEmpty,
        Kind::AuthFailed => StoreError::AuthFailed,
        Kind::NoPasswordUser => StoreError::NoPasswordUser,
        Kind::PermissionNotGiven => StoreError::PermissionNotGiven,
        Kind::PermissionDenied => StoreError::PermissionDenied,
        Kind::RoleNotGranted => StoreError::RoleNotGranted,
        Kind::PermissionNotGranted => StoreError::PermissionNotGranted,
        Kind::AuthNotEnabled => StoreError::AuthNotEnabled,
        Kind::InvalidAuthToken => StoreError::InvalidAuthToken,
        Kind::InvalidAuthMgmt => StoreError::InvalidAuthMgmt,
        Kind::AuthOldRevision => StoreError::AuthOldRevision,
        Kind::Backend => StoreError::Backend(p.detail.clone()),
        Kind::Corrupt => StoreError::Corrupt(p.detail.clone()),
    })
}

/// Encodes a membership error.
pub(crate) fn membership_error_to_pb(e: &MembershipError) -> pb::MembershipError {
    use pb::membership_error::Kind;
    let kind = match e {
        MembershipError::NotFound => Kind::NotFound,
        MembershipError::IdExists => Kind::IdExists,
        MembershipError::PeerUrlExists => Kind::PeerUrlExists,
        MembershipError::InvalidUrls => Kind::InvalidUrls,
        MembershipError::NotLearner => Kind::NotLearner,
        MembershipError::LearnerNotReady => Kind::LearnerNotReady,
        MembershipError::NotEnoughStarted => Kind::NotEnoughStarted,
        MembershipError::BadTransferee => Kind::BadTransferee,
        MembershipError::TooManyLearners => Kind::TooManyLearners,
        MembershipError::NameInUse => Kind::NameInUse,
    };
    pb::MembershipError { kind: kind as i32 }
}

/// Decodes a membership error.
pub(crate) fn membership_error_from_pb(
    p: &pb::MembershipError,
) -> Result<MembershipError, CodecError> {
    use pb::membership_error::Kind;
    let unknown = CodecError::Unknown {
        what: "membership error",
        value: p.kind,
    };
    Ok(match Kind::try_from(p.kind).map_err(|_| unknown.clone())? {
        Kind::Unspecified => return Err(unknown),
        Kind::NotFound => MembershipError::NotFound,
        Kind::IdExists => MembershipError::IdExists,
        Kind::PeerUrlExists => MembershipError::PeerUrlExists,
        Kind::InvalidUrls => MembershipError::InvalidUrls,
        Kind::NotLearner => MembershipError::NotLearner,
        Kind::LearnerNotReady => MembershipError::LearnerNotReady,
        Kind::NotEnoughStarted => MembershipError::NotEnoughStarted,
        Kind::BadTransferee => MembershipError::BadTransferee,
        Kind::TooManyLearners => MembershipError::TooManyLearners,
        Kind::NameInUse => MembershipError::NameInUse,
    })
}

/// Encodes a proposal error (every variant).
pub(crate) fn propose_error_to_pb(e: &ProposeError) -> pb::ProposeError {
    use pb::propose_error::Kind;
    let kind = match e {
        ProposeError::Store(s) => Kind::Store(store_error_to_pb(s)),
        ProposeError::NoLeader => Kind::NoLeader(pb::Empty {}),
        ProposeError::NotLeader => Kind::NotLeader(pb::Empty {}),
        ProposeError::Timeout => Kind::Timeout(pb::Empty {}),
        ProposeError::Stopped => Kind::Stopped(pb::Empty {}),
        ProposeError::Membership(m) => Kind::Membership(membership_error_to_pb(m)),
    };
    pb::ProposeError { kind: Some(kind) }
}

/// Decodes a proposal error.
pub(crate) fn propose_error_from_pb(p: &pb::ProposeError) -> Result<ProposeError, CodecError> {
    use pb::propose_error::Kind;
    Ok(match required(p.kind.as_ref(), "propose error kind")? {
        Kind::Store(s) => ProposeError::Store(store_error_from_pb(s)?),
        Kind::NoLeader(_) => ProposeError::NoLeader,
        Kind::NotLeader(_) => ProposeError::NotLeader,
        Kind::Timeout(_) => ProposeError::Timeout,
        Kind::Stopped(_) => ProposeError::Stopped,
        Kind::Membership(m) => ProposeError::Membership(membership_error_from_pb(m)?),
    })
}

/// Encodes a membership change request.
pub(crate) fn member_change_to_pb(c: &MemberChange) -> pb::MemberChangeRequest {
    use pb::member_change_request::Change;
    let change = match c {
        MemberChange::Add { peer_urls, learner } => Change::Add(pb::MemberAdd {
            peer_urls: peer_urls.clone(),
            learner: *learner,
        }),
        MemberChange::Remove { id } => Change::Remove(pb::MemberRemove { id: *id }),
        MemberChange::Update { id, peer_urls } => Change::Update(pb::MemberUpdate {
            id: *id,
            peer_urls: peer_urls.clone(),
        }),
        MemberChange::Promote { id } => Change::Promote(pb::MemberPromote { id: *id }),
        MemberChange::Publish {
            id,
            name,
            client_urls,
        } => Change::Publish(pb::MemberPublish {
            id: *id,
            name: name.clone(),
            client_urls: client_urls.clone(),
        }),
    };
    pb::MemberChangeRequest {
        change: Some(change),
    }
}

/// Decodes a membership change request.
pub(crate) fn member_change_from_pb(
    p: pb::MemberChangeRequest,
) -> Result<MemberChange, CodecError> {
    use pb::member_change_request::Change;
    Ok(match required(p.change, "member change")? {
        Change::Add(a) => MemberChange::Add {
            peer_urls: a.peer_urls,
            learner: a.learner,
        },
        Change::Remove(r) => MemberChange::Remove { id: r.id },
        Change::Update(u) => MemberChange::Update {
            id: u.id,
            peer_urls: u.peer_urls,
        },
        Change::Promote(p) => MemberChange::Promote { id: p.id },
        Change::Publish(p) => MemberChange::Publish {
            id: p.id,
            name: p.name,
            client_urls: p.client_urls,
        },
    })
}

/// Encodes one member as the Cluster API lists it.
pub(crate) fn member_info_to_pb(m: &MemberInfo) -> pb::MemberInfo {
    pb::MemberInfo {
        member: Some(pb::Member {
            id: m.id,
            name: m.node.name.clone(),
            peer_urls: m.node.peer_urls.clone(),
            client_urls: m.node.client_urls.clone(),
        }),
        is_learner: m.is_learner,
    }
}

/// Decodes one member.
pub(crate) fn member_info_from_pb(p: pb::MemberInfo) -> Result<MemberInfo, CodecError> {
    let m = required(p.member, "member")?;
    Ok(MemberInfo {
        id: m.id,
        node: MemberNode {
            name: m.name,
            peer_urls: m.peer_urls,
            client_urls: m.client_urls,
        },
        is_learner: p.is_learner,
    })
}

/// Encodes the result of a membership change.
pub(crate) fn member_change_result_to_pb(r: &MemberChangeResult) -> pb::MemberChangeResult {
    pb::MemberChangeResult {
        member: r.member.as_ref().map(member_info_to_pb),
        members: r.members.iter().map(member_info_to_pb).collect(),
    }
}

/// Decodes the result of a membership change.
pub(crate) fn member_change_result_from_pb(
    p: pb::MemberChangeResult,
) -> Result<MemberChangeResult, CodecError> {
    Ok(MemberChangeResult {
        member: p.member.map(member_info_from_pb).transpose()?,
        members: p
            .members
            .into_iter()
            .map(member_info_from_pb)
            .collect::<Result<_, _>>()?,
    })
}

// ---------------------------------------------------------------------------------------------
// Application replies: the handler's whole result, so a `ProposeError` crosses unchanged.

/// Encodes the result of a forwarded proposal.
pub(crate) fn forward_reply_to_pb(a: &Answer) -> pb::ForwardReply {
    use pb::forward_reply::Result as R;
    pb::ForwardReply {
        result: Some(match &a.result {
            Ok(x) => R::Ok(command_response_to_pb(x)),
            Err(e) => R::Error(propose_error_to_pb(e)),
        }),
        log_index: a.index.unwrap_or(0),
    }
}

/// Decodes the result of a forwarded proposal.
pub(crate) fn forward_reply_from_pb(
    p: pb::ForwardReply,
) -> Result<Result<Answer, ProposeError>, CodecError> {
    use pb::forward_reply::Result as R;
    let result = match required(p.result, "forward result")? {
        R::Ok(x) => Ok(command_response_from_pb(x)?),
        R::Error(e) => Err(propose_error_from_pb(&e)?),
    };
    Ok(Ok(Answer {
        result,
        index: (p.log_index > 0).then_some(p.log_index),
    }))
}

/// Encodes the result of a ReadIndex call.
pub(crate) fn read_index_reply_to_pb(r: &Result<u64, ProposeError>) -> pb::ReadIndexReply {
    use pb::read_index_reply::Result as R;
    pb::ReadIndexReply {
        result: Some(match r {
            Ok(i) => R::Index(*i),
            Err(e) => R::Error(propose_error_to_pb(e)),
        }),
    }
}

/// Decodes the result of a ReadIndex call.
pub(crate) fn read_index_reply_from_pb(
    p: pb::ReadIndexReply,
) -> Result<Result<u64, ProposeError>, CodecError> {
    use pb::read_index_reply::Result as R;
    Ok(match required(p.result, "read-index result")? {
        R::Index(i) => Ok(i),
        R::Error(e) => Err(propose_error_from_pb(&e)?),
    })
}

/// Encodes the result of a lease renewal.
pub(crate) fn lease_keepalive_reply_to_pb(
    r: &Result<Option<i64>, ProposeError>,
) -> pb::LeaseKeepAliveReply {
    use pb::lease_keep_alive_reply::Result as R;
    pb::LeaseKeepAliveReply {
        result: Some(match r {
            Ok(Some(ttl)) => R::Ttl(*ttl),
            Ok(None) => R::NotFound(pb::Empty {}),
            Err(e) => R::Error(propose_error_to_pb(e)),
        }),
    }
}

/// Decodes the result of a lease renewal.
pub(crate) fn lease_keepalive_reply_from_pb(
    p: pb::LeaseKeepAliveReply,
) -> Result<Result<Option<i64>, ProposeError>, CodecError> {
    use pb::lease_keep_alive_reply::Result as R;
    Ok(match required(p.result, "lease keep-alive result")? {
        R::Ttl(t) => Ok(Some(t)),
        R::NotFound(_) => Ok(None),
        R::Error(e) => Err(propose_error_from_pb(&e)?),
    })
}

/// What the leader knows of a lease: remaining TTL, granted TTL, attached keys.
pub(crate) type LeaseTtl = (i64, i64, Vec<Vec<u8>>);

/// Encodes the result of a lease TTL query.
pub(crate) fn lease_ttl_reply_to_pb(
    r: &Result<Option<LeaseTtl>, ProposeError>,
) -> pb::LeaseTimeToLiveReply {
    use pb::lease_time_to_live_reply::Result as R;
    pb::LeaseTimeToLiveReply {
        result: Some(match r {
            Ok(Some((ttl, granted_ttl, keys))) => R::Ok(pb::LeaseTtl {
                ttl: *ttl,
                granted_ttl: *granted_ttl,
                keys: keys.clone(),
            }),
            Ok(None) => R::NotFound(pb::Empty {}),
            Err(e) => R::Error(propose_error_to_pb(e)),
        }),
    }
}

/// Decodes the result of a lease TTL query.
pub(crate) fn lease_ttl_reply_from_pb(
    p: pb::LeaseTimeToLiveReply,
) -> Result<Result<Option<LeaseTtl>, ProposeError>, CodecError> {
    use pb::lease_time_to_live_reply::Result as R;
    Ok(match required(p.result, "lease time-to-live result")? {
        R::Ok(t) => Ok(Some((t.ttl, t.granted_ttl, t.keys))),
        R::NotFound(_) => Ok(None),
        R::Error(e) => Err(propose_error_from_pb(&e)?),
    })
}

/// Encodes the result of a membership change.
pub(crate) fn member_change_reply_to_pb(
    r: &Result<MemberChangeResult, ProposeError>,
) -> pb::MemberChangeReply {
    use pb::member_change_reply::Result as R;
    pb::MemberChangeReply {
        result: Some(match r {
            Ok(x) => R::Ok(member_change_result_to_pb(x)),
            Err(e) => R::Error(propose_error_to_pb(e)),
        }),
    }
}

/// Decodes the result of a membership change.
pub(crate) fn member_change_reply_from_pb(
    p: pb::MemberChangeReply,
) -> Result<Result<MemberChangeResult, ProposeError>, CodecError> {
    use pb::member_change_reply::Result as R;
    Ok(match required(p.result, "member change result")? {
        R::Ok(x) => Ok(member_change_result_from_pb(x)?),
        R::Error(e) => Err(propose_error_from_pb(&e)?),
    })
}

/// Encodes the result of a leadership transfer.
pub(crate) fn move_leader_reply_to_pb(r: &Result<(), ProposeError>) -> pb::MoveLeaderReply {
    use pb::move_leader_reply::Result as R;
    pb::MoveLeaderReply {
        result: Some(match r {
            Ok(()) => R::Ok(pb::Empty {}),
            Err(e) => R::Error(propose_error_to_pb(e)),
        }),
    }
}

/// Decodes the result of a leadership transfer.
pub(crate) fn move_leader_reply_from_pb(
    p: pb::MoveLeaderReply,
) -> Result<Result<(), ProposeError>, CodecError> {
    use pb::move_leader_reply::Result as R;
    Ok(match required(p.result, "move-leader result")? {
        R::Ok(_) => Ok(()),
        R::Error(e) => Err(propose_error_from_pb(&e)?),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use keel_store::command::{CommandBatch, CommandKind};
    use keel_store::pb::etcdserverpb as etcd;
    use keel_store::pb::mvccpb::KeyValue;
    use openraft::{CommittedLeaderId, Membership};

    use super::*;
    use crate::codec::{log_id_to_pb as wal_log_id, LogIdPb};
    use crate::wal::record::{self, RecordKind, WalRecord};

    pub(crate) fn lid(term: u64, node: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    fn node(name: &str, port: u16) -> MemberNode {
        MemberNode {
            name: name.into(),
            peer_urls: vec![format!("http://127.0.0.1:{port}")],
            client_urls: vec![format!("http://127.0.0.1:{}", port - 1)],
        }
    }

    pub(crate) fn joint_membership() -> Membership<NodeId, MemberNode> {
        Membership::new(
            vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3, 4])],
            BTreeMap::from([
                (1, node("a", 2380)),
                (2, node("b", 2381)),
                (3, node("c", 2382)),
                (4, node("d", 2383)),
                (5, node("learner", 2384)),
            ]),
        )
    }

    pub(crate) fn put(key: &str) -> Command {
        Command::new(CommandKind::Put(etcd::PutRequest {
            key: key.as_bytes().to_vec().into(),
            value: b"v".to_vec().into(),
            ..Default::default()
        }))
    }

    pub(crate) fn entries() -> Vec<Entry> {
        vec![
            Entry {
                log_id: lid(3, 1, 10),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: lid(3, 1, 11),
                payload: EntryPayload::Normal(put("k")),
            },
            Entry {
                log_id: lid(3, 1, 12),
                payload: EntryPayload::Normal(Command::new(CommandKind::Batch(CommandBatch {
                    commands: vec![put("x"), put("y")],
                }))),
            },
            Entry {
                log_id: lid(4, 2, 13),
                payload: EntryPayload::Membership(joint_membership()),
            },
        ]
    }

    fn dbg<T: std::fmt::Debug>(t: &T) -> String {
        format!("{t:?}")
    }

    /// Encodes with prost and decodes again, as the wire does.
    fn wire<M: Message + Default>(m: &M) -> M {
        M::decode(m.encode_to_vec().as_slice()).expect("decodes")
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn all_store_errors() -> Vec<StoreError> {
        vec![
            StoreError::EmptyKey,
            StoreError::KeyNotFound,
            StoreError::ValueProvided,
            StoreError::LeaseProvided,
            StoreError::TooManyOps,
            StoreError::DuplicateKey,
            StoreError::Compacted,
            StoreError::FutureRev,
            StoreError::LeaseNotFound,
            StoreError::LeaseExists,
            StoreError::LeaseTtlTooLarge,
            StoreError::RequestTooLarge,
            StoreError::EmptyWatchRange,
            StoreError::NoSpace,
            StoreError::CorruptCluster,
            StoreError::Backend("disk on fire".into()),
            StoreError::Corrupt("bad record at 7".into()),
        ]
    }

    fn all_membership_errors() -> Vec<MembershipError> {
        vec![
            MembershipError::NotFound,
            MembershipError::IdExists,
            MembershipError::PeerUrlExists,
            MembershipError::InvalidUrls,
            MembershipError::NotLearner,
            MembershipError::LearnerNotReady,
            MembershipError::NotEnoughStarted,
            MembershipError::BadTransferee,
            MembershipError::TooManyLearners,
            MembershipError::NameInUse,
        ]
    }

    pub(crate) fn all_propose_errors() -> Vec<ProposeError> {
        let mut v = vec![
            ProposeError::NoLeader,
            ProposeError::NotLeader,
            ProposeError::Timeout,
            ProposeError::Stopped,
        ];
        v.extend(all_store_errors().into_iter().map(ProposeError::Store));
        v.extend(
            all_membership_errors()
                .into_iter()
                .map(ProposeError::Membership),
        );
        v
    }

    fn header() -> Option<etcd::ResponseHeader> {
        Some(etcd::ResponseHeader {
            cluster_id: 1,
            member_id: 2,
            revision: 3,
            raft_term: 4,
        })
    }

    pub(crate) fn all_command_responses() -> Vec<CommandResponse> {
        let kv = KeyValue {
            key: b"k".to_vec().into(),
            create_revision: 2,
            mod_revision: 3,
            version: 2,
            value: b"old".to_vec().into(),
            lease: 7,
        };
        let put = CommandResponse::Put(etcd::PutResponse {
            header: header(),
            prev_kv: Some(kv.clone()),
        });
        let del = CommandResponse::DeleteRange(etcd::DeleteRangeResponse {
            header: header(),
            deleted: 1,
            prev_kvs: vec![kv],
        });
        let txn = CommandResponse::Txn(etcd::TxnResponse {
            header: header(),
            succeeded: true,
            responses: vec![etcd::ResponseOp {
                response: Some(etcd::response_op::Response::ResponsePut(
                    etcd::PutResponse {
                        header: header(),
                        prev_kv: None,
                    },
                )),
            }],
        });
        let compaction = CommandResponse::Compaction(etcd::CompactionResponse { header: header() });
        let grant = CommandResponse::LeaseGrant(etcd::LeaseGrantResponse {
            header: header(),
            id: 99,
            ttl: 30,
            error: String::new(),
        });
        let revoke = CommandResponse::LeaseRevoke(etcd::LeaseRevokeResponse { header: header() });
        let mut items: Vec<Result<CommandResponse, StoreError>> = vec![
            Ok(put.clone()),
            Ok(del.clone()),
            Ok(txn.clone()),
            Ok(compaction.clone()),
            Ok(grant.clone()),
            Ok(revoke.clone()),
            // A batch inside a batch still round-trips.
            Ok(CommandResponse::Batch(vec![
                Ok(put.clone()),
                Err(StoreError::Compacted),
            ])),
            Ok(CommandResponse::Batch(Vec::new())),
        ];
        items.extend(all_store_errors().into_iter().map(Err));
        vec![
            put,
            del,
            txn,
            compaction,
            grant,
            revoke,
            CommandResponse::Batch(items),
        ]
    }

    #[test]
    fn peer_log_id_and_vote_are_wal_encodings() {
        let id = lid(7, 3, 1234);
        let bytes = log_id_to_pb(&id).encode_to_vec();
        assert_eq!(bytes, wal_log_id(&id).encode_to_vec());
        assert_eq!(hex(&bytes), "0807100318d209");
        assert_eq!(
            log_id_from_pb(&pb::LogId::decode(bytes.as_slice()).unwrap()),
            id
        );
        assert_eq!(LogIdPb::decode(bytes.as_slice()).unwrap(), wal_log_id(&id));

        let mut vote = Vote::new(9, 2);
        vote.committed = true;
        let bytes = vote_to_pb(&vote).encode_to_vec();
        assert_eq!(bytes, record::encode_vote(&vote));
        assert_eq!(hex(&bytes), "080910021801");
        assert_eq!(vote_from_pb(&wire(&vote_to_pb(&vote))), vote);
        assert_eq!(
            vote_from_pb(&wire(&vote_to_pb(&Vote::new(1, 1)))),
            Vote::new(1, 1)
        );
    }

    #[test]
    fn peer_entries_are_byte_for_byte_wal_entries() {
        for e in entries() {
            let wal = WalRecord::decode(record::encode_entry(&e).as_slice()).unwrap();
            let Some(RecordKind::Entry(rec)) = wal.kind else {
                panic!("not an entry record")
            };
            assert_eq!(entry_to_pb(&e).encode_to_vec(), rec.encode_to_vec());
            let back = entry_from_pb(wire(&entry_to_pb(&e))).unwrap();
            assert_eq!(back, e);
        }
        let blank = entry_to_pb(&entries()[0]).encode_to_vec();
        assert_eq!(hex(&blank), "08031001180a2200");
    }

    #[test]
    fn peer_membership_round_trips_joint_and_learners() {
        let m = joint_membership();
        assert_eq!(membership_from_peer(wire(&membership_to_peer(&m))), m);
        let empty = Membership::<NodeId, MemberNode>::new(vec![], BTreeMap::new());
        assert_eq!(
            membership_from_peer(wire(&membership_to_peer(&empty))),
            empty
        );
    }

    #[test]
    fn peer_entry_without_payload_or_with_bad_command_is_refused() {
        let mut p = entry_to_pb(&entries()[1]);
        p.payload = None;
        assert_eq!(entry_from_pb(p), Err(CodecError::Missing("entry payload")));
        let mut p = entry_to_pb(&entries()[1]);
        p.payload = Some(pb::entry::Payload::Normal(vec![0xff, 0xff, 0xff]));
        assert!(matches!(entry_from_pb(p), Err(CodecError::Decode(_))));
    }

    #[test]
    fn peer_append_entries_round_trip() {
        let reqs = [
            AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new_committed(4, 2),
                prev_log_id: Some(lid(3, 1, 9)),
                entries: entries(),
                leader_commit: Some(lid(3, 1, 11)),
            },
            // A heartbeat from a fresh leader: nothing optional present.
            AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new(1, 1),
                prev_log_id: None,
                entries: vec![],
                leader_commit: None,
            },
        ];
        for req in reqs {
            let back = append_request_from_pb(wire(&append_request_to_pb(&req))).unwrap();
            assert_eq!(back.vote, req.vote);
            assert_eq!(back.prev_log_id, req.prev_log_id);
            assert_eq!(back.entries, req.entries);
            assert_eq!(back.leader_commit, req.leader_commit);
        }
        let mut p = append_request_to_pb(&AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new(1, 1),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        });
        p.vote = None;
        assert_eq!(
            append_request_from_pb(p).err(),
            Some(CodecError::Missing("vote"))
        );

        let responses = [
            AppendEntriesResponse::Success,
            AppendEntriesResponse::PartialSuccess(Some(lid(2, 1, 5))),
            AppendEntriesResponse::PartialSuccess(None),
            AppendEntriesResponse::Conflict,
            AppendEntriesResponse::HigherVote(Vote::new_committed(8, 3)),
        ];
        for r in responses {
            assert_eq!(
                append_response_from_pb(wire(&append_response_to_pb(&r))).unwrap(),
                r
            );
            let reply: Result<_, RaftError<NodeId>> = Ok(r);
            assert_eq!(
                append_reply_from_pb(wire(&append_reply_to_pb(&reply))).unwrap(),
                reply
            );
        }
        for f in [Fatal::Stopped, Fatal::Panicked] {
            let reply: Result<AppendEntriesResponse<NodeId>, _> = Err(RaftError::Fatal(f));
            assert_eq!(
                append_reply_from_pb(wire(&append_reply_to_pb(&reply))).unwrap(),
                reply
            );
        }
        assert_eq!(
            append_reply_from_pb(pb::AppendEntriesReply { result: None }),
            Err(CodecError::Missing("append-entries result"))
        );
    }

    #[test]
    fn peer_vote_round_trip() {
        let req = VoteRequest::new(Vote::new(5, 3), Some(lid(4, 1, 20)));
        assert_eq!(
            vote_request_from_pb(wire(&vote_request_to_pb(&req))).unwrap(),
            req
        );
        let req = VoteRequest::new(Vote::new(1, 3), None);
        assert_eq!(
            vote_request_from_pb(wire(&vote_request_to_pb(&req))).unwrap(),
            req
        );
        for resp in [
            VoteResponse::new(Vote::new(5, 3), Some(lid(4, 1, 20)), true),
            VoteResponse::new(Vote::new_committed(6, 2), None, false),
        ] {
            assert_eq!(
                vote_response_from_pb(wire(&vote_response_to_pb(&resp))).unwrap(),
                resp
            );
            let reply: Result<_, RaftError<NodeId>> = Ok(resp);
            assert_eq!(
                vote_reply_from_pb(wire(&vote_reply_to_pb(&reply))).unwrap(),
                reply
            );
        }
        let reply: Result<VoteResponse<NodeId>, _> = Err(RaftError::Fatal(Fatal::Stopped));
        assert_eq!(
            vote_reply_from_pb(wire(&vote_reply_to_pb(&reply))).unwrap(),
            reply
        );
    }

    #[test]
    fn peer_install_snapshot_round_trip() {
        let meta = SnapshotMeta {
            last_log_id: Some(lid(3, 1, 100)),
            last_membership: StoredMembership::new(Some(lid(2, 1, 50)), joint_membership()),
            snapshot_id: "3-1-100-7".into(),
        };
        assert_eq!(
            snapshot_meta_from_pb(wire(&snapshot_meta_to_pb(&meta))).unwrap(),
            meta
        );
        let empty = SnapshotMeta::<NodeId, MemberNode>::default();
        assert_eq!(
            snapshot_meta_from_pb(wire(&snapshot_meta_to_pb(&empty))).unwrap(),
            empty
        );

        let req = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 1),
            meta: meta.clone(),
            offset: 3 << 20,
            data: (0..=255u8).cycle().take(5000).collect(),
            done: true,
        };
        let p = snapshot_request_to_pb(&req);
        assert_eq!(p, snapshot_request_into_pb(req.clone()));
        let back = snapshot_request_from_pb(wire(&p)).unwrap();
        assert_eq!(dbg(&back), dbg(&req));
        assert_eq!(back.data, req.data);

        let mut bad = snapshot_request_to_pb(&req);
        bad.meta = None;
        assert_eq!(
            snapshot_request_from_pb(bad).err(),
            Some(CodecError::Missing("snapshot meta"))
        );
        let mut bad = snapshot_request_to_pb(&req);
        if let Some(m) = bad.meta.as_mut() {
            m.last_membership = None;
        }
        assert_eq!(
            snapshot_request_from_pb(bad).err(),
            Some(CodecError::Missing("snapshot membership"))
        );

        let resp = InstallSnapshotResponse {
            vote: Vote::new_committed(4, 2),
        };
        assert_eq!(
            snapshot_response_from_pb(wire(&snapshot_response_to_pb(&resp))).unwrap(),
            resp
        );
        let mismatch = InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
            expect: SnapshotSegmentId {
                id: "a".into(),
                offset: 0,
            },
            got: SnapshotSegmentId {
                id: "a".into(),
                offset: 1024,
            },
        });
        let replies: Vec<
            Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
        > = vec![
            Ok(resp),
            Err(RaftError::APIError(mismatch)),
            Err(RaftError::Fatal(Fatal::Stopped)),
            Err(RaftError::Fatal(Fatal::Panicked)),
        ];
        for reply in replies {
            assert_eq!(
                snapshot_reply_from_pb(wire(&snapshot_reply_to_pb(&reply))).unwrap(),
                reply
            );
        }
    }

    #[test]
    fn peer_raft_errors_keep_their_kind() {
        // A storage error keeps its text; the leader only logs it.
        let sto = StorageError::from_io_error(
            ErrorSubject::Vote,
            ErrorVerb::Write,
            std::io::Error::other("no space left"),
        );
        let text = sto.to_string();
        let e: RaftError<NodeId> = RaftError::Fatal(Fatal::StorageError(sto));
        let p = wire(&raft_error_to_pb(&e));
        assert_eq!(
            p.kind,
            Some(pb::raft_error::Kind::Fatal(pb::Fatal {
                kind: Some(pb::fatal::Kind::StorageError(text.clone()))
            }))
        );
        match raft_error_from_pb::<Infallible>(p) {
            Ok(RaftError::Fatal(Fatal::StorageError(back))) => {
                assert!(back.to_string().contains(&text), "{back}")
            }
            other => panic!("unexpected {other:?}"),
        }
        // A snapshot mismatch cannot answer AppendEntries or Vote.
        let mismatch = raft_error_to_pb::<InstallSnapshotError>(&RaftError::APIError(
            InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: SnapshotSegmentId {
                    id: "a".into(),
                    offset: 0,
                },
                got: SnapshotSegmentId {
                    id: "a".into(),
                    offset: 1,
                },
            }),
        ));
        assert_eq!(
            raft_error_from_pb::<Infallible>(mismatch).err(),
            Some(CodecError::Unexpected("snapshot mismatch"))
        );
        assert_eq!(
            raft_error_from_pb::<Infallible>(pb::RaftError { kind: None }).err(),
            Some(CodecError::Missing("raft error kind"))
        );
        assert_eq!(
            fatal_from_pb(pb::Fatal { kind: None }).err(),
            Some(CodecError::Missing("fatal kind"))
        );
    }

    #[test]
    fn peer_command_responses_round_trip_every_variant() {
        for r in all_command_responses() {
            assert_eq!(
                command_response_from_pb(wire(&command_response_to_pb(&r))).unwrap(),
                r
            );
            let ok = Answer {
                result: Ok(r),
                index: Some(9),
            };
            assert_eq!(
                forward_reply_from_pb(wire(&forward_reply_to_pb(&ok))).unwrap(),
                Ok(ok)
            );
        }
        assert_eq!(
            command_response_from_pb(pb::CommandResult { kind: None }),
            Err(CodecError::Missing("command result"))
        );
        let hole = pb::CommandResult {
            kind: Some(pb::command_result::Kind::Batch(pb::BatchResult {
                results: vec![pb::BatchItem { result: None }],
            })),
        };
        assert_eq!(
            command_response_from_pb(hole),
            Err(CodecError::Missing("batch item"))
        );
    }

    #[test]
    fn peer_store_errors_round_trip_with_messages() {
        for e in all_store_errors() {
            let back = store_error_from_pb(&wire(&store_error_to_pb(&e))).unwrap();
            assert_eq!(back, e);
            assert_eq!(back.to_string(), e.to_string());
        }
        // Golden: kind 14 (BACKEND) with its detail.
        let golden = store_error_to_pb(&StoreError::Backend("x".into())).encode_to_vec();
        assert_eq!(hex(&golden), "080e120178");
        assert_eq!(
            hex(&store_error_to_pb(&StoreError::Compacted).encode_to_vec()),
            "0807"
        );
        for kind in [0, 99, -1] {
            assert_eq!(
                store_error_from_pb(&pb::StoreError {
                    kind,
                    detail: String::new()
                }),
                Err(CodecError::Unknown {
                    what: "store error",
                    value: kind
                })
            );
        }
    }

    #[test]
    fn peer_propose_errors_round_trip_every_variant() {
        for e in all_propose_errors() {
            let back = propose_error_from_pb(&wire(&propose_error_to_pb(&e))).unwrap();
            assert_eq!(back, e);
            assert_eq!(back.to_string(), e.to_string());
            let reply = Answer::err(e.clone());
            assert_eq!(
                forward_reply_from_pb(wire(&forward_reply_to_pb(&reply))).unwrap(),
                Ok(reply)
            );
            let reply: Result<u64, ProposeError> = Err(e.clone());
            assert_eq!(
                read_index_reply_from_pb(wire(&read_index_reply_to_pb(&reply))).unwrap(),
                reply
            );
            let reply: Result<Option<i64>, ProposeError> = Err(e.clone());
            assert_eq!(
                lease_keepalive_reply_from_pb(wire(&lease_keepalive_reply_to_pb(&reply))).unwrap(),
                reply
            );
            let reply: Result<Option<LeaseTtl>, ProposeError> = Err(e.clone());
            assert_eq!(
                lease_ttl_reply_from_pb(wire(&lease_ttl_reply_to_pb(&reply))).unwrap(),
                reply
            );
            let reply: Result<MemberChangeResult, ProposeError> = Err(e.clone());
            assert_eq!(
                member_change_reply_from_pb(wire(&member_change_reply_to_pb(&reply))).unwrap(),
                reply
            );
            let reply: Result<(), ProposeError> = Err(e);
            assert_eq!(
                move_leader_reply_from_pb(wire(&move_leader_reply_to_pb(&reply))).unwrap(),
                reply
            );
        }
        for e in all_membership_errors() {
            assert_eq!(
                membership_error_from_pb(&wire(&membership_error_to_pb(&e))).unwrap(),
                e
            );
        }
        // Golden: ProposeError::NotLeader is oneof tag 3, an empty message.
        assert_eq!(
            hex(&propose_error_to_pb(&ProposeError::NotLeader).encode_to_vec()),
            "1a00"
        );
        assert_eq!(
            hex(&propose_error_to_pb(&MembershipError::BadTransferee.into()).encode_to_vec()),
            "32020808"
        );
        assert_eq!(
            propose_error_from_pb(&pb::ProposeError { kind: None }),
            Err(CodecError::Missing("propose error kind"))
        );
        assert_eq!(
            membership_error_from_pb(&pb::MembershipError { kind: 1000 }),
            Err(CodecError::Unknown {
                what: "membership error",
                value: 1000
            })
        );
    }

    #[test]
    fn peer_app_replies_round_trip() {
        for r in [Ok(0u64), Ok(u64::MAX)] {
            assert_eq!(
                read_index_reply_from_pb(wire(&read_index_reply_to_pb(&r))).unwrap(),
                r
            );
        }
        for r in [Ok(Some(30i64)), Ok(None), Ok(Some(-1))] {
            assert_eq!(
                lease_keepalive_reply_from_pb(wire(&lease_keepalive_reply_to_pb(&r))).unwrap(),
                r
            );
        }
        for r in [
            Ok(Some((
                10i64,
                30i64,
                vec![b"a".to_vec(), Vec::new(), b"\xff".to_vec()],
            ))),
            Ok(Some((-1, 0, Vec::new()))),
            Ok(None),
        ] {
            assert_eq!(
                lease_ttl_reply_from_pb(wire(&lease_ttl_reply_to_pb(&r))).unwrap(),
                r
            );
        }
        let ok: Result<(), ProposeError> = Ok(());
        assert_eq!(
            move_leader_reply_from_pb(wire(&move_leader_reply_to_pb(&ok))).unwrap(),
            ok
        );
    }

    #[test]
    fn peer_member_changes_round_trip_every_variant() {
        let changes = [
            MemberChange::Add {
                peer_urls: vec!["http://10.0.0.4:2380".into(), "http://h:2380".into()],
                learner: true,
            },
            MemberChange::Add {
                peer_urls: vec![],
                learner: false,
            },
            MemberChange::Remove { id: u64::MAX },
            MemberChange::Update {
                id: 3,
                peer_urls: vec!["http://10.0.0.5:2380".into()],
            },
            MemberChange::Promote { id: 4 },
            MemberChange::Publish {
                id: 5,
                name: "node-5".into(),
                client_urls: vec!["http://10.0.0.5:2379".into()],
            },
        ];
        for c in changes {
            assert_eq!(
                member_change_from_pb(wire(&member_change_to_pb(&c))).unwrap(),
                c
            );
        }
        assert_eq!(
            member_change_from_pb(pb::MemberChangeRequest { change: None }),
            Err(CodecError::Missing("member change"))
        );
        let info = |id, learner| MemberInfo {
            id,
            node: node(&format!("m{id}"), 3000 + id as u16),
            is_learner: learner,
        };
        for r in [
            MemberChangeResult {
                member: Some(info(4, true)),
                members: vec![info(1, false), info(4, true)],
            },
            MemberChangeResult {
                member: None,
                members: vec![],
            },
        ] {
            assert_eq!(
                member_change_result_from_pb(wire(&member_change_result_to_pb(&r))).unwrap(),
                r
            );
            let ok: Result<MemberChangeResult, ProposeError> = Ok(r);
            assert_eq!(
                member_change_reply_from_pb(wire(&member_change_reply_to_pb(&ok))).unwrap(),
                ok
            );
        }
        assert_eq!(
            member_info_from_pb(pb::MemberInfo {
                member: None,
                is_learner: false
            }),
            Err(CodecError::Missing("member"))
        );
    }
}
