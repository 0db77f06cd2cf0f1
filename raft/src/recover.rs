//! Quorum-loss recovery, offline: a member's data directory is brought up to everything it knew
//! committed, so its store can become a new one-member cluster (etcd's `--force-new-cluster`).
//!
//! [`replay_committed`] opens the log and the store as a start would and applies the entries up to the
//! committed index this member recorded; entries past it are discarded, as etcd does (they may never
//! have reached a majority). [`standalone_raft_meta`] and [`write_standalone_vote`] make the new
//! directory's Raft state: this member the only voter, at the old applied index with a term above every
//! term this member saw, so its log wins against any stale member's and terms never go backwards.
//! [`write_removed_members`] records the previous members, whose Raft calls the new cluster refuses
//! (telling them they were removed) until one is added again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_store::{Store, StoreOptions};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::RaftLogReader;

use crate::codec::{
    applied_to_bytes, log_id_from_pb, membership_from_pb, LogIdPb, MemberPb, MembershipPb,
    VoterSetPb,
};
use crate::log_store::{write_vote_file, LogStore};
use crate::state_machine::{reconcile_with_snapshot, StateMachine};
use crate::types::{MemberNode, NodeId, StoredMembership, Vote};

/// The file of a recovered data directory that lists the previous members (hex IDs, one per line).
pub const REMOVED_MEMBERS_FILE: &str = "removed-members";

/// Why recovery could not prepare a data directory.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Data(String),
    #[error("store: {0}")]
    Store(#[from] keel_store::StoreError),
}

/// A member's state brought up to its committed index.
pub struct Replayed {
    /// This member's ID, from its `member` file.
    pub member_id: NodeId,
    /// Its cluster ID, from the same file.
    pub cluster_id: u64,
    /// The store, open, with every committed entry applied.
    pub store: Arc<Store>,
    /// The index applied now.
    pub applied_index: u64,
    /// The highest term this member saw (its vote's).
    pub term: u64,
    /// The membership as of the applied index.
    pub members: Vec<(NodeId, MemberNode, bool)>,
    /// Entries of the log past the committed index, which recovery drops.
    pub discarded: u64,
}

/// Reads `<dir>/member`: this member's ID and its cluster's.
pub fn read_identity(dir: &Path) -> Result<(NodeId, u64), RecoverError> {
    let path = dir.join("member");
    let text = std::fs::read_to_string(&path).map_err(|source| RecoverError::Io {
        path: path.clone(),
        source,
    })?;
    let mut it = text.split_whitespace().map(|t| u64::from_str_radix(t, 16));
    match (it.next(), it.next()) {
        (Some(Ok(m)), Some(Ok(c))) if m != 0 => Ok((m, c)),
        _ => Err(RecoverError::Data(format!(
            "{} is malformed",
            path.display()
        ))),
    }
}

/// Opens the member data directory `dir` (which no process may be using) and applies every entry up to
/// the committed index it recorded.
pub async fn replay_committed(dir: &Path, opts: StoreOptions) -> Result<Replayed, RecoverError> {
    let (member_id, cluster_id) = read_identity(dir)?;
    let data = |e: &dyn std::fmt::Display| RecoverError::Data(e.to_string());
    let min_lease_ttl = opts.min_lease_ttl;
    // The store first: it is locked while a member runs on it, and the log must not be touched then.
    let store = Store::open(&dir.join("store"), opts).map_err(|e| {
        RecoverError::Data(format!(
            "cannot open the store of {} ({e}); is a member still running on it? Stop it first",
            dir.display()
        ))
    })?;
    let mut log = LogStore::open(dir.join("wal")).map_err(|e| data(&e))?;
    reconcile_with_snapshot(&store, &dir.join("snap"), min_lease_ttl, log.last_index())?;
    let mut sm = StateMachine::new(
        store.clone(),
        dir.join("snap"),
        min_lease_ttl,
        crate::applied::AppliedIndex::new(crate::state_machine::applied_index(&store)),
    )
    .map_err(|source| RecoverError::Io {
        path: dir.join("snap"),
        source,
    })?;
    let (applied, _) = sm.applied_state().await.map_err(|e| data(&e))?;
    let committed = log.read_committed().await.map_err(|e| data(&e))?;
    let from = applied.map(|l| l.index + 1).unwrap_or(0);
    let to = committed.map(|l| l.index).unwrap_or(0);
    if committed > applied {
        // In bounded batches: the log may hold many entries past the last snapshot.
        let mut next = from;
        while next <= to {
            let end = to.min(next + 1023);
            let entries = log
                .try_get_log_entries(next..=end)
                .await
                .map_err(|e| data(&e))?;
            if entries.is_empty() {
                return Err(RecoverError::Data(format!(
                    "the log has no entry {next} though it records {to} as committed"
                )));
            }
            next = entries
                .last()
                .map(|e| e.log_id.index + 1)
                .unwrap_or(end + 1);
            sm.apply(entries).await.map_err(|e| data(&e))?;
        }
    }
    let (applied, membership) = sm.applied_state().await.map_err(|e| data(&e))?;
    let applied_index = applied.map(|l| l.index).unwrap_or(0);
    let last = log.last_index().unwrap_or(0);
    let vote: Option<Vote> = log.read_vote().await.map_err(|e| data(&e))?;
    let term = vote
        .map(|v| v.leader_id.term)
        .unwrap_or(0)
        .max(applied.map(|l| l.leader_id.term).unwrap_or(0));
    let learners: Vec<NodeId> = membership.membership().learner_ids().collect();
    let members = membership
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.clone(), learners.contains(id)))
        .collect();
    drop(sm);
    drop(log);
    Ok(Replayed {
        member_id,
        cluster_id,
        store,
        applied_index,
        term,
        members,
        discarded: last.saturating_sub(applied_index),
    })
}

/// The Raft state (applied log ID and membership) of a one-member cluster of `me` at `index`, in a
/// term above `old_term`, as the store's Raft metadata.
pub fn standalone_raft_meta(me: NodeId, node: &MemberNode, old_term: u64, index: u64) -> Vec<u8> {
    let membership = membership_from_pb(&MembershipPb {
        configs: vec![VoterSetPb { ids: vec![me] }],
        nodes: vec![MemberPb {
            id: me,
            name: node.name.clone(),
            peer_urls: node.peer_urls.clone(),
            client_urls: node.client_urls.clone(),
        }],
    });
    let at = log_id_from_pb(&LogIdPb {
        term: old_term + 1,
        node_id: me,
        index,
    });
    let stored: StoredMembership = StoredMembership::new(Some(at), membership);
    applied_to_bytes(Some(&at), &stored)
}

/// Writes the vote of a recovered member into its new `wal` directory: its own, uncommitted, in the
/// term of [`standalone_raft_meta`], so its first election opens the term after it.
pub fn write_standalone_vote(
    wal_dir: &Path,
    me: NodeId,
    old_term: u64,
) -> Result<(), RecoverError> {
    std::fs::create_dir_all(wal_dir).map_err(|source| RecoverError::Io {
        path: wal_dir.to_path_buf(),
        source,
    })?;
    let vote = Vote::new(old_term + 1, me);
    write_vote_file(wal_dir, &vote).map_err(|e| RecoverError::Data(e.to_string()))
}

/// Records `ids` as removed members of the cluster whose data directory is `dir`.
pub fn write_removed_members(dir: &Path, ids: &[NodeId]) -> Result<(), RecoverError> {
    let path = dir.join(REMOVED_MEMBERS_FILE);
    let text: String = ids.iter().map(|id| format!("{id:016x}\n")).collect();
    let io = |source| RecoverError::Io {
        path: path.clone(),
        source,
    };
    std::fs::write(&path, text).map_err(io)?;
    std::fs::File::open(&path)
        .and_then(|f| f.sync_all())
        .map_err(io)
}

/// The members a recovery removed, from `<dir>/removed-members` (none when absent or unreadable).
pub(crate) fn read_removed_members(dir: &Path) -> Vec<NodeId> {
    std::fs::read_to_string(dir.join(REMOVED_MEMBERS_FILE))
        .map(|t| {
            t.lines()
                .filter_map(|l| u64::from_str_radix(l.trim(), 16).ok())
                .collect()
        })
        .unwrap_or_default()
}
