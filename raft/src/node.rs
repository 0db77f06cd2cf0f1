//! One member: the Raft instance, its log, the store, and the in-process handle that every
//! front door uses (propose, read linearizably or serializably, watch).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use keel_store::command::CommandKind;
use keel_store::pb::etcdserverpb::LeaseRevokeRequest;
use keel_store::{Command, CommandResponse, LeaseId, Store, StoreError, StoreOptions};
use openraft::error::{Fatal, RaftError};
use openraft::{Config, Raft, ServerState, SnapshotPolicy};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::codec::applied_from_bytes;
use crate::error::{MembershipError, ProposeError, StartError};
use crate::leadership;
use crate::log_store::LogStore;
use crate::membership::{self, cluster_id, member_id, members_of, ClusterState, InitialMember};
use crate::metrics::RaftMetrics;
use crate::network::{PeerApi, PeerNetwork};
use crate::peer::server::{serve_service_on, PeerService};
use crate::peer::AppHandler;
use crate::proposer::Proposer;
use crate::read_index::ReadIndexBatcher;
use crate::state_machine::{reconcile_with_snapshot, StateMachine};
use crate::timing::RaftTimers;
use crate::types::{
    Leadership, MemberChange, MemberChangeResult, MemberInfo, MemberNode, NodeId, NodeStatus,
    TypeConfig,
};

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
    /// Election timeout (etcd: 1 s): a follower that hears no leader for this less one heartbeat,
    /// up to a fifth of it more, stands for election (etcd: up to twice as long; see `timing.rs`).
    pub election_timeout: Duration,
    /// Applied entries between snapshots.
    pub snapshot_count: u64,
    /// How long a proposal may wait before the client gets a timeout (etcd: 7 s).
    pub request_timeout: Duration,
    /// Store tunables.
    pub store: StoreOptions,
    /// URLs to serve peer traffic on (`--listen-peer-urls`).
    pub listen_peer_urls: Vec<String>,
    /// `--initial-cluster` (empty = this member alone).
    pub initial_cluster: Vec<InitialMember>,
    /// `--initial-cluster-state`.
    pub cluster_state: ClusterState,
    /// `--initial-cluster-token`: members and cluster IDs derive from it.
    pub cluster_token: String,
    /// UNSAFE, for testing the Jepsen checker only: answer linearizable reads from local state without a
    /// ReadIndex round, so a partitioned or lagging member serves stale data.
    pub unsafe_local_linearizable_reads: bool,
    /// UNSAFE, for testing the Jepsen checker only: a follower answers a write it forwarded as soon as the
    /// leader answers, before applying it itself, so a read from the same member may miss the write.
    pub unsafe_early_forwarded_answer: bool,
    /// Peer TLS (etcd's `--peer-cert-file` family): served on `https://` listen peer URLs and used to
    /// dial `https://` peers. Required when any of those URLs is `https://`.
    pub peer_tls: Option<crate::tls::TlsPem>,
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
            listen_peer_urls: vec!["http://127.0.0.1:2380".into()],
            initial_cluster: Vec::new(),
            cluster_state: ClusterState::New,
            cluster_token: "keel-cluster".into(),
            unsafe_local_linearizable_reads: false,
            unsafe_early_forwarded_answer: false,
            peer_tls: None,
        }
    }

    /// The initial cluster, defaulting to this member alone.
    pub fn initial_members(&self) -> Vec<InitialMember> {
        if self.initial_cluster.is_empty() {
            vec![InitialMember {
                name: self.name.clone(),
                peer_urls: self.peer_urls.clone(),
            }]
        } else {
            self.initial_cluster.clone()
        }
    }
}

/// The running member.
pub struct Node {
    raft: Raft<TypeConfig>,
    store: Arc<Store>,
    id: NodeId,
    cluster_id: u64,
    cfg: NodeConfig,
    proposer: Proposer,
    reads: ReadIndexBatcher,
    /// What this member's state machine has applied (reads and forwarded writes wait on it).
    applied: crate::applied::AppliedIndex,
    peers: PeerApi,
    stop: watch::Sender<bool>,
    fatal: watch::Sender<Option<String>>,
    /// Set once this member learns it was removed from the cluster (see `watchdog_loop`).
    removed: Arc<watch::Sender<bool>>,
    /// Members removed while this one ran: their Raft calls are refused, which stops them.
    removed_ids: parking_lot::Mutex<std::collections::HashSet<NodeId>>,
    /// The members this member's quorum-loss recovery left out (told they may join again).
    left_out: std::collections::HashSet<NodeId>,
    /// The peer that told this member a recovery left it out.
    left_out_by: Arc<parking_lot::Mutex<Option<NodeId>>>,
    /// Whether this member leads, following openraft's metrics (see leadership.rs).
    leadership: watch::Receiver<Leadership>,
    metrics: Arc<RaftMetrics>,
    /// Serialises membership changes with the leader loop's finishing of a joint configuration
    /// (`membership::change` and `membership::finish_joint`): while a change sits between its two
    /// steps, a finish from the loop would make the change's own second step fail for a change that
    /// completed (found by jepsen-tests, fault member-replace).
    membership_change: tokio::sync::Mutex<()>,
}

/// Reads the member and cluster IDs from `dir/member`, creating them on first start.
fn load_identity(dir: &Path, cfg: &NodeConfig) -> Result<(NodeId, u64), StartError> {
    let path = dir.join("member");
    let io = |source| StartError::Io {
        path: path.clone(),
        source,
    };
    let given_cluster = cluster_id(&cfg.cluster_token);
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let mut it = s.split_whitespace().map(|t| u64::from_str_radix(t, 16));
            match (it.next(), it.next()) {
                (Some(Ok(m)), Some(Ok(c))) if m != 0 => {
                    if c != given_cluster {
                        return Err(StartError::ClusterMismatch {
                            stored: c,
                            given: given_cluster,
                        });
                    }
                    Ok((m, c))
                }
                _ => Err(StartError::Unrecoverable(format!(
                    "{} is malformed",
                    path.display()
                ))),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let member = member_id(&cfg.peer_urls, &cfg.cluster_token);
            let tmp = dir.join("member.tmp");
            std::fs::write(&tmp, format!("{member:016x} {given_cluster:016x}\n")).map_err(io)?;
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(io)?;
            Ok((member, given_cluster))
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
        let mut log_store =
            LogStore::open(dir.join("wal")).map_err(|e| StartError::Wal(e.to_string()))?;
        let led_before = log_store.step_down_after_restart(id);
        let metrics = log_store.metrics();
        let store = open_store(&dir, &cfg)?;
        let snap = reconcile_with_snapshot(
            &store,
            &dir.join("snap"),
            cfg.store.min_lease_ttl,
            log_store.last_index(),
        )?;
        check_recoverable(
            &store,
            &log_store,
            snap.as_ref().and_then(|s| s.last_applied.map(|l| l.index)),
        )?;

        // A follower stands for election after 0.9 to 1.1 election timeouts without a leader,
        // plus up to a tick (etcd: 0.9 to 1.9); see timing.rs for why and why reads and writes
        // stay safe.
        let timers = RaftTimers::for_etcd(cfg.heartbeat, cfg.election_timeout);
        let raft_cfg = Config {
            cluster_name: "keel".into(),
            heartbeat_interval: timers.heartbeat_ms,
            election_timeout_min: timers.election_min_ms,
            election_timeout_max: timers.election_max_ms,
            // A member that led before it stopped holds its elections off for a while (below).
            enable_elect: !led_before,
            install_snapshot_timeout: 10_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_count),
            max_in_snapshot_log_to_keep: 5_000,
            purge_batch_size: 256,
            ..Default::default()
        }
        .validate()
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let applied =
            crate::applied::AppliedIndex::new(crate::state_machine::applied_index(&store));
        let sm = StateMachine::new(
            store.clone(),
            dir.join("snap"),
            cfg.store.min_lease_ttl,
            applied.clone(),
        )
        .map_err(|source| StartError::Io {
            path: dir.join("snap"),
            source,
        })?;
        let (peer_server_tls, peer_client_tls) = peer_tls_configs(&cfg)?;
        let peers = PeerApi::new(cluster_id).with_tls(peer_client_tls.clone());
        let removed = Arc::new(watch::channel(false).0);
        let left_out_by = Arc::new(parking_lot::Mutex::new(None));
        let raft = Raft::new(
            id,
            Arc::new(raft_cfg),
            PeerNetwork::new(cluster_id)
                .on_removed(removed.clone())
                .on_left_out(left_out_by.clone())
                .with_tls(peer_client_tls),
            log_store,
            sm,
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        if led_before {
            // Its vote is no longer a leader's, so openraft would let it stand after one election
            // timeout draw (0.35-0.55 E), before the leader's next contact (a peer that was down
            // is retried every 500 ms). Such a premature candidacy bumps the term, or fails and
            // marks this member as behind, which delays its next real candidacy by 1.1 E. Hold
            // elections off for as long as a follower would wait (see timing.rs).
            let raft = raft.clone();
            let hold = timers.restart_hold_off();
            tokio::spawn(async move {
                tokio::time::sleep(hold).await;
                raft.runtime_config().elect(true);
            });
        }
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        let initial = cfg.initial_members();
        if !initialized {
            match cfg.cluster_state {
                ClusterState::New => {
                    // Every initial member proposes the same membership, so any of them may lead.
                    let members: BTreeMap<NodeId, MemberNode> = initial
                        .iter()
                        .map(|m| {
                            // Identical on every member (same log id, same content); each
                            // member publishes its client URLs once the cluster runs.
                            let node = MemberNode {
                                name: m.name.clone(),
                                peer_urls: m.peer_urls.clone(),
                                client_urls: Vec::new(),
                            };
                            (member_id(&m.peer_urls, &cfg.cluster_token), node)
                        })
                        .collect();
                    info!(member = %format!("{id:x}"), name = %cfg.name, members = members.len(), "bootstrapping a new cluster");
                    raft.initialize(members)
                        .await
                        .map_err(|e| StartError::Raft(e.to_string()))?;
                }
                ClusterState::Existing => {
                    info!(member = %format!("{id:x}"), name = %cfg.name, "joining an existing cluster: waiting for its leader");
                }
            }
        }
        if initial.len() == 1 && cfg.cluster_state == ClusterState::New {
            // A lone voter need not wait out an election timeout to lead.
            if let Err(e) = raft.trigger().elect().await {
                warn!(%e, "could not trigger election");
            }
        }
        let (stop, _) = watch::channel(false);
        let (fatal, _) = watch::channel(None);
        let proposer = Proposer::start(
            raft.clone(),
            cfg.request_timeout,
            peers.clone(),
            metrics.clone(),
            applied.clone(),
            cfg.unsafe_early_forwarded_answer,
        );
        let leadership = leadership::follow(&raft);
        crate::metrics::count_leader_changes(&raft, metrics.clone());
        let node = Arc::new_cyclic(|me: &std::sync::Weak<Node>| {
            let me = me.clone();
            // Weak: the batching task must not keep the member alive.
            let reads = ReadIndexBatcher::start(move || {
                let me = me.clone();
                async move {
                    match me.upgrade() {
                        Some(node) => node.read_index_round().await,
                        None => Err(ProposeError::Stopped),
                    }
                }
            });
            Node {
                applied,
                proposer,
                reads,
                peers,
                raft,
                store,
                id,
                cluster_id,
                cfg,
                stop,
                fatal,
                removed,
                // After a quorum-loss recovery, the previous members are refused until added again.
                removed_ids: parking_lot::Mutex::new(
                    crate::recover::read_removed_members(&dir)
                        .into_iter()
                        .filter(|m| *m != id)
                        .collect(),
                ),
                left_out: crate::recover::read_removed_members(&dir)
                    .into_iter()
                    .filter(|m| *m != id)
                    .collect(),
                left_out_by,
                leadership,
                metrics,
                membership_change: tokio::sync::Mutex::new(()),
            }
        });
        node.clone().serve_peers(peer_server_tls).await?;
        tokio::spawn(leader_loop(node.clone()));
        tokio::spawn(publish_loop(node.clone()));
        tokio::spawn(watchdog_loop(node.clone()));
        Ok(node)
    }

    /// Starts the peer transport on every listen peer URL.
    async fn serve_peers(
        self: Arc<Self>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Result<(), StartError> {
        for url in &self.cfg.listen_peer_urls {
            let (plain, is_tls) = crate::tls::split_tls_scheme(url);
            let addr = parse_http_addr(&plain).ok_or_else(|| {
                StartError::Peer(format!(
                    "--listen-peer-urls {url:?}: expected http://HOST:PORT or https://HOST:PORT"
                ))
            })?;
            let tls = if is_tls {
                Some(tls.clone().ok_or_else(|| {
                    StartError::Peer(format!(
                        "--listen-peer-urls {url}: https needs --peer-cert-file and --peer-key-file"
                    ))
                })?)
            } else {
                None
            };
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| StartError::Peer(format!("listen on {addr}: {e}")))?;
            let mut stop = self.stop.subscribe();
            let app: Arc<dyn AppHandler> = self.clone();
            let raft = self.raft.clone();
            let cluster = self.cluster_id;
            let fatal = self.fatal.clone();
            tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stop.changed().await;
                };
                let service = PeerService::new(raft.clone(), app)
                    .with_cluster_id(cluster)
                    .on_cluster_mismatch(Arc::new(move |msg: &str| {
                        // A member that never joined and is contacted by another cluster was
                        // started with the wrong token: stop with a clear error instead of waiting.
                        let never_joined = raft.metrics().borrow().membership_config.membership().nodes().next().is_none();
                        if never_joined {
                            let _ = fatal.send(Some(format!(
                                "{msg}: another cluster contacts this member; check --initial-cluster-token"
                            )));
                        }
                    }));
                if let Err(e) = serve_service_on(listener, service, tls, shutdown).await {
                    warn!(%e, "peer transport stopped");
                }
            });
            info!(url = %url, "serving peer traffic");
        }
        Ok(())
    }

    /// The current leader's ID and node, if known.
    fn leader(&self) -> Option<(NodeId, MemberNode)> {
        let m = self.raft.metrics().borrow().clone();
        let id = m.current_leader?;
        let node = m
            .membership_config
            .membership()
            .nodes()
            .find(|(n, _)| **n == id)
            .map(|(_, n)| n.clone())?;
        Some((id, node))
    }

    /// Set when the member hits an error it cannot serve through (the process should exit).
    pub fn fatal_error(&self) -> watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }

    /// Becomes true once this member applied a membership it is no longer part of (it was removed
    /// from the cluster; like etcd's removed members, the process should stop).
    pub fn removed(&self) -> watch::Receiver<bool> {
        self.removed.subscribe()
    }

    /// The member that refused this one because a quorum-loss recovery left it out (so it may join
    /// the recovered cluster again as a new member); None for an ordinary removal.
    pub fn left_out_by(&self) -> Option<NodeId> {
        *self.left_out_by.lock()
    }

    /// Waits (up to `timeout`) until this member's name and client URLs are in the membership,
    /// as etcd publishes them before it serves clients. Returns whether they are.
    pub async fn wait_published(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.members().iter().any(|m| {
                m.id == self.id
                    && m.node.name == self.cfg.name
                    && m.node.client_urls == self.cfg.client_urls
            });
            if done {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// True while this member leads (a snapshot; [`Node::leadership`] tells when it changes).
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Lets a write (`kind`) through if the store has room for it; otherwise raises NOSPACE for
    /// this member through the log (as etcd, whether or not that proposal succeeds) and refuses it
    /// with etcd's "database space exceeded". Front doors call it where a write enters the member,
    /// as etcd's quota interceptors do.
    pub async fn admit(&self, kind: &CommandKind) -> Result<(), ProposeError> {
        if !crate::quota::exceeds(&self.store, kind) {
            return Ok(());
        }
        if let Err(e) = self.propose(crate::quota::nospace_alarm(self.id)).await {
            warn!(%e, "could not raise the NOSPACE alarm");
        }
        Err(ProposeError::Store(StoreError::NoSpace))
    }

    /// Leadership as a stream: the receiver holds [`Leadership::Leader`] with the term while this
    /// member is the Raft leader and [`Leadership::NotLeader`] otherwise, and wakes only when
    /// that changes (gained, lost, or led again in a new term). It follows openraft's metrics
    /// watch, no polling; after shutdown it says `NotLeader` and then reports its sender closed.
    ///
    /// Work that must run only on the leader (controllers, the scheduler) can follow it:
    ///
    /// ```ignore
    /// let mut leadership = node.leadership();
    /// loop {
    ///     let now = *leadership.borrow_and_update();
    ///     match now {
    ///         Leadership::Leader { term } => { /* (re)start leader work for `term` */ }
    ///         Leadership::NotLeader => { /* stop it */ }
    ///     }
    ///     if leadership.changed().await.is_err() {
    ///         break; // Raft stopped
    ///     }
    /// }
    /// ```
    ///
    /// Raft leadership is not a lock: a leader cut off from the others goes on saying `Leader`
    /// (openraft 0.9 has no check-quorum step-down) until it hears of a newer term, while a new
    /// leader may already lead. Writes stay
    /// safe (they need a quorum); work that must never run twice has to be fenced by the store
    /// (for example a guarded update), not by this signal alone.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
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

    /// What the Raft layer recorded (fsyncs, proposals, leader changes, commit index).
    pub fn metrics(&self) -> &Arc<RaftMetrics> {
        &self.metrics
    }

    /// The newest Raft snapshot file of this member, if any.
    pub fn newest_snapshot(&self) -> Option<crate::metrics::SnapshotFile> {
        crate::metrics::newest_snapshot(&self.cfg.data_dir)
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
    /// so a local read after it is linearizable. A follower asks the leader for the index.
    pub async fn read_barrier(&self) -> Result<(), ProposeError> {
        if self.cfg.unsafe_local_linearizable_reads {
            // Deliberately broken (see NodeConfig): the Jepsen harness must catch the stale reads this allows.
            return Ok(());
        }
        let timeout = self.cfg.request_timeout;
        // Concurrent reads share one round (see read_index.rs).
        let index = self.reads.read_index().await?;
        self.applied.wait_for(index, timeout).await
    }

    /// One ReadIndex round: on the leader a quorum check, on a follower a request to the
    /// leader. Returns the index a read must wait to have applied.
    async fn read_index_round(&self) -> Result<u64, ProposeError> {
        let timeout = self.cfg.request_timeout;
        if self.is_leader() {
            return match tokio::time::timeout(timeout, self.raft.get_read_log_id()).await {
                Err(_) => Err(ProposeError::Timeout),
                Ok(Ok((read, _))) => Ok(read.map_or(0, |l| l.index)),
                Ok(Err(RaftError::APIError(e))) => {
                    debug!(%e, "linearizable read refused");
                    Err(ProposeError::NoLeader)
                }
                Ok(Err(RaftError::Fatal(_))) => Err(ProposeError::Stopped),
            };
        }
        let (_, leader) = self.leader().ok_or(ProposeError::NoLeader)?;
        self.peers.read_index(&leader, timeout).await
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
        members_of(&self.raft)
    }

    /// Renews a lease (on the leader, forwarding if needed); `Ok(None)` if it does not exist.
    pub async fn lease_keepalive(&self, id: LeaseId) -> Result<Option<i64>, ProposeError> {
        if self.is_leader() {
            return self.lease_keepalive_here(id).await;
        }
        let (_, leader) = self.leader().ok_or(ProposeError::NoLeader)?;
        self.peers
            .lease_keepalive(&leader, id.0, self.cfg.request_timeout)
            .await
    }

    async fn lease_keepalive_here(&self, id: LeaseId) -> Result<Option<i64>, ProposeError> {
        // The renewal must see every grant committed before it.
        self.read_barrier().await?;
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        Ok(self.store.lease_renew(id))
    }

    /// A lease's remaining TTL (known on the leader), granted TTL and keys.
    pub async fn lease_time_to_live(
        &self,
        id: LeaseId,
        keys: bool,
    ) -> Result<Option<(i64, i64, Vec<Vec<u8>>)>, ProposeError> {
        if !self.is_leader() {
            let (_, leader) = self.leader().ok_or(ProposeError::NoLeader)?;
            return self
                .peers
                .lease_time_to_live(&leader, id.0, keys, self.cfg.request_timeout)
                .await;
        }
        self.read_barrier().await?;
        Ok(self
            .store
            .lease_time_to_live(id, keys)
            .map(|(ttl, granted, ks)| (ttl, granted, ks.into_iter().map(|k| k.to_vec()).collect())))
    }

    /// Performs a membership change on the leader (forwarding if needed).
    pub async fn member_change(
        &self,
        change: MemberChange,
    ) -> Result<MemberChangeResult, ProposeError> {
        if self.is_leader() {
            return membership::change(
                &self.raft,
                &self.membership_change,
                &self.cfg.cluster_token,
                change,
                self.cfg.request_timeout,
            )
            .await;
        }
        let (_, leader) = self.leader().ok_or(ProposeError::NoLeader)?;
        self.peers
            .member_change(&leader, change, self.cfg.request_timeout)
            .await
    }

    /// Hands leadership to `target` once it has the whole log (etcd's MoveLeader; leader only).
    pub async fn move_leader(&self, target: NodeId) -> Result<(), ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        if target == self.id {
            return Ok(());
        }
        let m = self
            .members()
            .into_iter()
            .find(|m| m.id == target && !m.is_learner)
            .ok_or(MembershipError::BadTransferee)?;
        let deadline = tokio::time::Instant::now() + self.cfg.request_timeout;
        loop {
            let last = self.raft.metrics().borrow().last_log_index;
            let matched = membership::matched(&self.raft, target);
            if matched.is_some() && matched == last {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ProposeError::Timeout);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.peers
            .move_leader(&m.node, target, self.cfg.request_timeout)
            .await?;
        let deadline = tokio::time::Instant::now() + self.cfg.request_timeout;
        while tokio::time::Instant::now() < deadline {
            if self.raft.metrics().borrow().current_leader == Some(target) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(ProposeError::Timeout)
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

/// Leader duties: revoke expired leases through the log (etcd's primary lessor) and finish a
/// joint membership change a previous leader left behind.
async fn leader_loop(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let store = node.store();
        if node.is_leader() {
            if !store.lease_is_primary() {
                store.lease_promote(node.cfg.election_timeout);
            }
            membership::finish_joint(
                &node.raft,
                &node.membership_change,
                node.cfg.request_timeout,
            )
            .await;
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

/// Ends a member's life where etcd ends it too: its Raft core stopped with a fatal error (a member
/// that goes on answering status requests without Raft only misleads clients and supervisors), or a
/// membership without it was applied (it was removed; it would otherwise keep serving stale reads).
async fn watchdog_loop(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    let metrics = node.raft.metrics();
    // The last applied membership: members in it and not in the next one were removed. (A member
    // catching up applies memberships from before it was added; those never had it, so they
    // never count as its removal.)
    let mut last: Option<BTreeMap<NodeId, MemberNode>> = None;
    loop {
        let failure = match &metrics.borrow().running_state {
            Err(Fatal::Stopped) | Ok(()) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(e) = failure {
            let msg = format!("raft stopped: {e}");
            tracing::error!("{msg}");
            let _ = node.fatal.send(Some(msg));
            return;
        }
        if let Ok((_, applied)) = applied_from_bytes(node.store.raft_meta().as_deref()) {
            let now: BTreeMap<NodeId, MemberNode> = applied
                .membership()
                .nodes()
                .map(|(id, n)| (*id, n.clone()))
                .collect();
            let gone: Vec<(NodeId, MemberNode)> = match &last {
                Some(prev) if !now.is_empty() => prev
                    .iter()
                    .filter(|(id, _)| !now.contains_key(id))
                    .map(|(id, n)| (*id, n.clone()))
                    .collect(),
                _ => Vec::new(),
            };
            {
                // A member added (again) is no longer a removed one.
                let mut removed = node.removed_ids.lock();
                for id in now.keys() {
                    removed.remove(id);
                }
            }
            last = Some(now);
            for (id, member) in gone {
                if id == node.id {
                    // Let the commit of the change reach the others before this member goes (etcd waits too).
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    node.removed_from_cluster();
                    return;
                }
                node.removed_ids.lock().insert(id);
                // A removed follower may never learn that its removal committed: tell it.
                tokio::spawn(notify_removed(node.clone(), id, member));
            }
        }
        // Polled: metrics change on every apply, far more often than this needs looking at.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Tells a removed member so, for up to 30 s (it may be down; if it comes back later, its Raft
/// calls are refused, which stops it too).
async fn notify_removed(node: Arc<Node>, id: NodeId, member: MemberNode) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        match node
            .peers
            .notify_removed(&member, id, Duration::from_secs(2))
            .await
        {
            Ok(()) => return,
            Err(e) => {
                debug!(%e, member = %format!("{id:016x}"), "telling a removed member; will retry")
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Publishes this member's name and client URLs into the membership once it is part of it
/// (etcd's attribute publication after start).
async fn publish_loop(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    loop {
        let me = node.members().into_iter().find(|m| m.id == node.id);
        match me {
            Some(m)
                if m.node.name == node.cfg.name && m.node.client_urls == node.cfg.client_urls =>
            {
                return
            }
            Some(_) if node.leader().is_some() => {
                let change = MemberChange::Publish {
                    id: node.id,
                    name: node.cfg.name.clone(),
                    client_urls: node.cfg.client_urls.clone(),
                };
                match node.member_change(change).await {
                    Ok(_) => info!("published member attributes"),
                    Err(ProposeError::Membership(MembershipError::NameInUse)) => {
                        let msg = format!(
                            "the cluster already has a member named {:?}; refusing to join under that name",
                            node.cfg.name
                        );
                        tracing::error!("{msg}");
                        let _ = node.fatal.send(Some(msg));
                        return;
                    }
                    Err(e) => debug!(%e, "publishing member attributes; will retry"),
                }
            }
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The peer server's and the peer client's rustls setups from `cfg.peer_tls`, checked against the
/// URLs: an `https://` listen or advertised peer URL needs a certificate and key, and dialing
/// `https://` peers needs the peer CA to verify them.
type PeerTlsConfigs = (
    Option<Arc<rustls::ServerConfig>>,
    Option<Arc<rustls::ClientConfig>>,
);

fn peer_tls_configs(cfg: &NodeConfig) -> Result<PeerTlsConfigs, StartError> {
    let https = |urls: &[String]| urls.iter().find(|u| u.starts_with("https://")).cloned();
    let any_https = https(&cfg.listen_peer_urls).or_else(|| https(&cfg.peer_urls));
    let Some(pem) = &cfg.peer_tls else {
        if let Some(u) = any_https {
            return Err(StartError::Peer(format!(
                "peer URL {u}: https needs --peer-cert-file and --peer-key-file"
            )));
        }
        return Ok((None, None));
    };
    let server = pem
        .server_config()
        .map_err(|e| StartError::Peer(format!("peer TLS: {e}")))?;
    let client = match pem.client_config() {
        Ok(c) => Some(c),
        Err(crate::tls::TlsError::ClientAuthWithoutCa) => {
            if let Some(u) = any_https {
                return Err(StartError::Peer(format!(
                    "peer URL {u}: dialing https:// peers needs --peer-trusted-ca-file to verify them"
                )));
            }
            None
        }
        Err(e) => return Err(StartError::Peer(format!("peer TLS: {e}"))),
    };
    Ok((Some(server), client))
}

/// Parses `http://host:port` (localhost allowed) into a socket address.
pub fn parse_http_addr(url: &str) -> Option<std::net::SocketAddr> {
    let rest = url.strip_prefix("http://")?.trim_end_matches('/');
    let rest = rest.replacen("localhost:", "127.0.0.1:", 1);
    rest.parse().ok()
}

#[tonic::async_trait]
impl AppHandler for Node {
    async fn forward_propose(&self, cmd: Command) -> crate::proposer::Answer {
        self.proposer.propose_here(cmd).await
    }

    async fn read_index(&self) -> Result<u64, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        match tokio::time::timeout(self.cfg.request_timeout, self.raft.get_read_log_id()).await {
            Err(_) => Err(ProposeError::Timeout),
            Ok(Ok((read, _))) => Ok(read.map(|l| l.index).unwrap_or(0)),
            Ok(Err(RaftError::APIError(_))) => Err(ProposeError::NotLeader),
            Ok(Err(RaftError::Fatal(_))) => Err(ProposeError::Stopped),
        }
    }

    async fn lease_keepalive(&self, id: i64) -> Result<Option<i64>, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        self.lease_keepalive_here(LeaseId(id)).await
    }

    async fn lease_time_to_live(
        &self,
        id: i64,
        keys: bool,
    ) -> Result<Option<(i64, i64, Vec<Vec<u8>>)>, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        Node::lease_time_to_live(self, LeaseId(id), keys).await
    }

    async fn member_change(
        &self,
        change: MemberChange,
    ) -> Result<MemberChangeResult, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        membership::change(
            &self.raft,
            &self.membership_change,
            &self.cfg.cluster_token,
            change,
            self.cfg.request_timeout,
        )
        .await
    }

    fn removed_from_cluster(&self) {
        if !*self.removed.borrow() {
            tracing::error!("this member was removed from the cluster");
            let _ = self.removed.send(true);
        }
    }

    fn is_removed(&self, id: NodeId) -> bool {
        self.removed_ids.lock().contains(&id)
    }

    fn left_out_by_recovery(&self, id: NodeId) -> bool {
        self.left_out.contains(&id)
    }

    async fn move_leader(&self, target: NodeId) -> Result<(), ProposeError> {
        if target != self.id {
            return Err(MembershipError::BadTransferee.into());
        }
        // We were chosen and have the whole log: stand for election now.
        self.raft
            .trigger()
            .elect()
            .await
            .map_err(|_| ProposeError::Stopped)
    }
}
