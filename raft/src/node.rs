//! One member: the Raft instance, its log, the store, and the in-process handle that every
//! front door uses (propose, read linearizably or serializably, watch).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::LeaseRevokeRequest;
use keel_store::{Command, CommandResponse, LeaseId, Store, StoreError, StoreOptions};
use openraft::error::RaftError;
use openraft::{Config, Raft, ServerState, SnapshotPolicy};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::log_store::LogStore;
use crate::network::PeerNetwork;
use crate::proposer::Proposer;
use crate::state_machine::{reconcile_with_snapshot, StateMachine};
use crate::types::{MemberNode, NodeId, TypeConfig};

/// How a member is configured.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// Data directory holding `wal/`, `store/`, `snap/`.
    pub data_dir: PathBuf,
    /// URLs peers reach this member on.
    pub peer_urls: Vec<String>,
    /// URLs clients reach this member on.
    pub client_urls: Vec<String>,
    /// Leader heartbeat interval (etcd: 100 ms).
    pub heartbeat: Duration,
    /// Election timeout (etcd: 1 s).
    pub election_timeout: Duration,
    /// Applied entries between snapshots.
    pub snapshot_count: u64,
    /// How long a proposal may wait before the client gets a timeout (etcd: 7 s).
    pub request_timeout: Duration,
    /// Store tunables.
    pub store: StoreOptions,
}

impl NodeConfig {
    /// A config with etcd's timings for a member named `name` in `data_dir`.
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        NodeConfig {
            name: name.into(),
            data_dir: data_dir.into(),
            peer_urls: vec!["http://127.0.0.1:2380".into()],
            client_urls: vec!["http://127.0.0.1:2379".into()],
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            snapshot_count: 10_000,
            request_timeout: Duration::from_secs(7),
            store: StoreOptions::default(),
        }
    }
}

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
}

/// A snapshot of this member's Raft status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub member_id: NodeId,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: u64,
    pub applied_index: u64,
    pub is_learner: bool,
    pub is_leader: bool,
}

/// One member of the cluster as the Cluster API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: NodeId,
    pub node: MemberNode,
    pub is_learner: bool,
}

/// The running member.
pub struct Node {
    raft: Raft<TypeConfig>,
    store: Arc<Store>,
    id: NodeId,
    cluster_id: u64,
    cfg: NodeConfig,
    proposer: Proposer,
    stop: watch::Sender<bool>,
}

/// FNV-1a 64: a stable, dependency-free hash for deriving IDs from names and URLs.
fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Reads the member and cluster IDs from `dir/member`, creating them on first start.
fn load_identity(dir: &Path, cfg: &NodeConfig) -> Result<(NodeId, u64), StartError> {
    let path = dir.join("member");
    let io = |source| StartError::Io {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let mut it = s.split_whitespace().map(|t| u64::from_str_radix(t, 16));
            match (it.next(), it.next()) {
                (Some(Ok(m)), Some(Ok(c))) if m != 0 => Ok((m, c)),
                _ => Err(StartError::Unrecoverable(format!(
                    "{} is malformed",
                    path.display()
                ))),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut parts: Vec<&str> = vec![&cfg.name];
            parts.extend(cfg.peer_urls.iter().map(String::as_str));
            let member = fnv64(&parts).max(1);
            let cluster = fnv64(&[&format!("{member:016x}"), "keel-cluster"]);
            let tmp = dir.join("member.tmp");
            std::fs::write(&tmp, format!("{member:016x} {cluster:016x}\n")).map_err(io)?;
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(io)?;
            Ok((member, cluster))
        }
        Err(e) => Err(io(e)),
    }
}

impl Node {
    /// Opens the data directory, recovers (snapshot + WAL replay) and starts Raft.
    pub async fn start(cfg: NodeConfig) -> Result<Arc<Node>, StartError> {
        let dir = cfg.data_dir.clone();
        for sub in ["wal", "store", "snap"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|source| StartError::Io {
                path: p.clone(),
                source,
            })?;
        }
        let (id, cluster_id) = load_identity(&dir, &cfg)?;
        let log_store =
            LogStore::open(dir.join("wal")).map_err(|e| StartError::Wal(e.to_string()))?;
        let store = open_store(&dir, &cfg)?;
        let snap = reconcile_with_snapshot(&store, &dir.join("snap"), cfg.store.min_lease_ttl)?;
        check_recoverable(
            &store,
            &log_store,
            snap.as_ref().and_then(|s| s.last_applied.map(|l| l.index)),
        )?;

        let election_ms = cfg.election_timeout.as_millis() as u64;
        let raft_cfg = Config {
            cluster_name: "keel".into(),
            heartbeat_interval: cfg.heartbeat.as_millis() as u64,
            election_timeout_min: election_ms,
            election_timeout_max: election_ms * 3 / 2,
            install_snapshot_timeout: 10_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_count),
            max_in_snapshot_log_to_keep: 5_000,
            purge_batch_size: 256,
            ..Default::default()
        }
        .validate()
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let sm = StateMachine::new(store.clone(), dir.join("snap"), cfg.store.min_lease_ttl)
            .map_err(|source| StartError::Io {
                path: dir.join("snap"),
                source,
            })?;
        let raft = Raft::new(id, Arc::new(raft_cfg), PeerNetwork, log_store, sm)
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        let me = MemberNode {
            name: cfg.name.clone(),
            peer_urls: cfg.peer_urls.clone(),
            client_urls: cfg.client_urls.clone(),
        };
        if !initialized {
            info!(member = %format!("{id:x}"), name = %cfg.name, "bootstrapping a new single-member cluster");
            raft.initialize(BTreeMap::from([(id, me)]))
                .await
                .map_err(|e| StartError::Raft(e.to_string()))?;
        }
        // A lone voter need not wait out an election timeout to lead.
        if let Err(e) = raft.trigger().elect().await {
            warn!(%e, "could not trigger election");
        }
        let (stop, _) = watch::channel(false);
        let proposer = Proposer::start(raft.clone(), cfg.request_timeout);
        let node = Arc::new(Node {
            proposer,
            raft,
            store,
            id,
            cluster_id,
            cfg,
            stop,
        });
        tokio::spawn(lease_loop(node.clone()));
        Ok(node)
    }

    /// The store (serializable reads, watches, lease lookups).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// This member's ID.
    pub fn member_id(&self) -> NodeId {
        self.id
    }

    /// The cluster's ID.
    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    /// This member's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// Current Raft term.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// Replicates a command and returns its result once applied here.
    pub async fn propose(&self, cmd: Command) -> Result<CommandResponse, ProposeError> {
        self.proposer.propose(cmd).await
    }

    /// Waits until this member has applied everything committed before the call (ReadIndex),
    /// so a local read after it is linearizable.
    pub async fn read_barrier(&self) -> Result<(), ProposeError> {
        let fut = self.raft.ensure_linearizable();
        match tokio::time::timeout(self.cfg.request_timeout, fut).await {
            Err(_) => Err(ProposeError::Timeout),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RaftError::APIError(e))) => {
                debug!(%e, "linearizable read refused");
                Err(ProposeError::NoLeader)
            }
            Ok(Err(RaftError::Fatal(_))) => Err(ProposeError::Stopped),
        }
    }

    /// Raft status for Maintenance.Status.
    pub fn status(&self) -> NodeStatus {
        let m = self.raft.metrics().borrow().clone();
        let is_learner = !m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == self.id);
        NodeStatus {
            member_id: self.id,
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index.unwrap_or(0),
            applied_index: m.last_applied.map(|l| l.index).unwrap_or(0),
            is_learner,
            is_leader: m.state == ServerState::Leader,
        }
    }

    /// Every member known to the current membership.
    pub fn members(&self) -> Vec<MemberInfo> {
        let m = self.raft.metrics().borrow().clone();
        let mem = m.membership_config.membership();
        let voters: Vec<NodeId> = mem.voter_ids().collect();
        mem.nodes()
            .map(|(id, n)| MemberInfo {
                id: *id,
                node: n.clone(),
                is_learner: !voters.contains(id),
            })
            .collect()
    }

    /// Renews a lease on the leader; `Ok(None)` if the lease does not exist.
    pub async fn lease_keepalive(&self, id: LeaseId) -> Result<Option<i64>, ProposeError> {
        // The renewal must see every grant committed before it.
        self.read_barrier().await?;
        if !self.status().is_leader {
            return Err(ProposeError::NotLeader);
        }
        Ok(self.store.lease_renew(id))
    }

    /// Stops Raft and flushes the store.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.raft.shutdown().await {
            warn!(%e, "raft shutdown");
        }
        if let Err(e) = self.store.flush() {
            warn!(%e, "store flush on shutdown");
        }
    }
}

fn open_store(dir: &Path, cfg: &NodeConfig) -> Result<Arc<Store>, StartError> {
    let store_dir = dir.join("store");
    match Store::open(&store_dir, cfg.store.clone()) {
        Ok(s) => Ok(s),
        Err(e) => {
            // The store is a view of snapshot + log; when it will not open, rebuild it.
            warn!(%e, dir = %store_dir.display(), "store does not open; rebuilding it from snapshot and log");
            let aside = dir.join(format!("store.broken.{}", std::process::id()));
            std::fs::rename(&store_dir, &aside).map_err(|source| StartError::Io {
                path: store_dir.clone(),
                source,
            })?;
            Ok(Store::open(&store_dir, cfg.store.clone())?)
        }
    }
}

/// Refuses to start when the log no longer holds what the store needs to catch up.
fn check_recoverable(
    store: &Store,
    log: &LogStore,
    snapshot_index: Option<u64>,
) -> Result<(), StartError> {
    let (applied, _) = crate::codec::applied_from_bytes(store.raft_meta().as_deref())
        .map_err(|e| StartError::Store(StoreError::Corrupt(e.to_string())))?;
    let applied = applied.map(|l| l.index);
    let purged = log.last_purged_index();
    if purged.is_some() && applied < purged && snapshot_index < purged {
        return Err(StartError::Unrecoverable(format!(
            "the store has applied up to {applied:?} but the log is purged up to {purged:?} and no snapshot covers the gap"
        )));
    }
    Ok(())
}

/// On the leader, revokes expired leases through the log (etcd's primary lessor).
async fn lease_loop(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let status = node.status();
        let store = node.store();
        if status.is_leader {
            if !store.lease_is_primary() {
                store.lease_promote(node.cfg.election_timeout);
            }
            for id in store.expired_leases(1000) {
                let cmd = Command::new(CommandKind::LeaseRevoke(LeaseRevokeRequest { id: id.0 }));
                match node.propose(cmd).await {
                    Ok(_) | Err(ProposeError::Store(StoreError::LeaseNotFound)) => {
                        debug!(lease = id.0, "expired lease revoked")
                    }
                    Err(e) => {
                        warn!(lease = id.0, %e, "could not revoke expired lease");
                        break;
                    }
                }
            }
        } else if store.lease_is_primary() {
            store.lease_demote();
        }
    }
}
