use std::collections::BTreeMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keel_store::command::{CommandBatch, CommandKind};
use keel_store::pb::etcdserverpb::{CompactionResponse, PutRequest, PutResponse, ResponseHeader};
use keel_store::{Command, CommandResponse, StoreError};
use openraft::error::{RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::storage::RaftStateMachine;
use openraft::{
    Config, EntryPayload, Raft, RaftSnapshotBuilder, ServerState, Snapshot, SnapshotMeta,
};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::raft::chunk_timeout;
use super::*;
use crate::error::{MembershipError, ProposeError};
use crate::log_store::LogStore;
use crate::peer::codec::LeaseTtl;
use crate::peer::server::{serve_service_on, PeerError, PeerService};
use crate::peer::AppHandler;
use crate::proposer::Answer;
use crate::types::{
    Applied, Entry, Leadership, LogId, MemberChange, MemberChangeResult, MemberInfo, MemberNode,
    StorageError, StoredMembership, TypeConfig, Vote,
};

const CLUSTER: u64 = 0x6b65_656c;
const WAIT: Duration = Duration::from_secs(20);

// ---- a tiny in-memory state machine: the keys of applied puts, in order ----

#[derive(Clone, Default)]
struct MemSm(Arc<Mutex<SmState>>);

#[derive(Default)]
struct SmState {
    applied: Option<LogId>,
    membership: StoredMembership,
    keys: Vec<Vec<u8>>,
    snapshot: Option<(SnapshotMeta<NodeId, MemberNode>, Vec<u8>)>,
    built: u64,
    installed: u64,
}

fn encode_keys(keys: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for k in keys {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
    }
    out
}

fn decode_keys(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    while b.len() >= 4 {
        let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        keys.push(b[4..4 + n].to_vec());
        b = &b[4 + n..];
    }
    keys
}

impl MemSm {
    fn keys(&self) -> Vec<Vec<u8>> {
        self.0.lock().keys.clone()
    }
    fn installed(&self) -> u64 {
        self.0.lock().installed
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MemSm {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let mut s = self.0.lock();
        s.built += 1;
        let data = encode_keys(&s.keys);
        let meta = SnapshotMeta {
            last_log_id: s.applied,
            last_membership: s.membership.clone(),
            snapshot_id: format!("{:?}-{}", s.applied.map(|l| l.index), s.built),
        };
        s.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for MemSm {
    type SnapshotBuilder = MemSm;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let s = self.0.lock();
        Ok((s.applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut s = self.0.lock();
        let mut out = Vec::new();
        for e in entries {
            s.applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Normal(Command {
                    kind: Some(CommandKind::Put(p)),
                }) => {
                    s.keys.push(p.key.to_vec());
                    out.push(Applied(Ok(Some(CommandResponse::Put(
                        PutResponse::default(),
                    )))));
                    continue;
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m)
                }
                _ => {}
            }
            out.push(Applied(Ok(None)));
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> MemSm {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, MemberNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let mut s = self.0.lock();
        s.applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.keys = decode_keys(&data);
        s.snapshot = Some((meta.clone(), data));
        s.installed += 1;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let s = self.0.lock();
        Ok(s.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}

// ---- application handlers ----

/// For the Raft tests: no application calls expected.
struct NoApp;

#[tonic::async_trait]
impl AppHandler for NoApp {
    async fn forward_propose(&self, _: Command) -> Answer {
        Answer {
            result: Err(ProposeError::NoLeader),
            index: None,
        }
    }
    async fn read_index(&self) -> Result<u64, ProposeError> {
        Err(ProposeError::NoLeader)
    }
    async fn lease_keepalive(&self, _: i64) -> Result<Option<i64>, ProposeError> {
        Err(ProposeError::NoLeader)
    }
    async fn lease_time_to_live(&self, _: i64, _: bool) -> Result<Option<LeaseTtl>, ProposeError> {
        Err(ProposeError::NoLeader)
    }
    async fn member_change(&self, _: MemberChange) -> Result<MemberChangeResult, ProposeError> {
        Err(ProposeError::NoLeader)
    }
    async fn move_leader(&self, _: NodeId) -> Result<(), ProposeError> {
        Err(ProposeError::NoLeader)
    }
}

fn info(id: NodeId, learner: bool) -> MemberInfo {
    MemberInfo {
        id,
        node: MemberNode {
            name: format!("m{id}"),
            peer_urls: vec![format!("http://10.0.0.{id}:2380")],
            client_urls: vec![format!("http://10.0.0.{id}:2379")],
        },
        is_learner: learner,
    }
}

/// Canned answers, so the test can check that each crosses the wire unchanged.
struct StubApp;

#[tonic::async_trait]
impl AppHandler for StubApp {
    async fn forward_propose(&self, cmd: Command) -> Answer {
        // The entry index is made up too: 7 for any command that "was written".
        let index = matches!(cmd.kind, Some(CommandKind::Put(_))).then_some(7);
        let result = match cmd.kind {
            Some(CommandKind::Put(p)) if p.key.as_ref() == b"fail" => {
                Err(StoreError::Backend("disk on fire".into()).into())
            }
            Some(CommandKind::Put(p)) => Ok(CommandResponse::Put(PutResponse {
                header: Some(ResponseHeader {
                    revision: p.key.len() as i64,
                    ..Default::default()
                }),
                prev_kv: None,
            })),
            Some(CommandKind::Batch(b)) => Ok(CommandResponse::Batch(
                (0..b.commands.len())
                    .map(|i| {
                        if i % 2 == 0 {
                            Ok(CommandResponse::Compaction(CompactionResponse::default()))
                        } else {
                            Err(StoreError::Compacted)
                        }
                    })
                    .collect(),
            )),
            _ => Err(ProposeError::NotLeader),
        };
        Answer { result, index }
    }
    async fn read_index(&self) -> Result<u64, ProposeError> {
        Ok(42)
    }
    async fn lease_keepalive(&self, id: i64) -> Result<Option<i64>, ProposeError> {
        match id {
            1 => Ok(Some(30)),
            2 => Ok(None),
            _ => Err(ProposeError::NotLeader),
        }
    }
    async fn lease_time_to_live(
        &self,
        id: i64,
        keys: bool,
    ) -> Result<Option<LeaseTtl>, ProposeError> {
        if id != 1 {
            return Ok(None);
        }
        let ks = if keys {
            vec![b"a".to_vec(), b"b".to_vec()]
        } else {
            Vec::new()
        };
        Ok(Some((20, 30, ks)))
    }
    async fn member_change(
        &self,
        change: MemberChange,
    ) -> Result<MemberChangeResult, ProposeError> {
        match change {
            MemberChange::Remove { id: 0 } => Err(MembershipError::NotFound.into()),
            MemberChange::Promote { id } => Ok(MemberChangeResult {
                member: None,
                members: vec![info(1, false), info(id, false)],
            }),
            _ => Ok(MemberChangeResult {
                member: Some(info(9, true)),
                members: vec![info(1, false), info(9, true)],
            }),
        }
    }
    async fn move_leader(&self, target: NodeId) -> Result<(), ProposeError> {
        match target {
            7 => Ok(()),
            99 => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(())
            }
            _ => Err(MembershipError::BadTransferee.into()),
        }
    }
}

// ---- members on loopback ----

fn config() -> Arc<Config> {
    Arc::new(
        Config {
            cluster_name: "keel-test".into(),
            heartbeat_interval: 50,
            election_timeout_min: 400,
            election_timeout_max: 800,
            install_snapshot_timeout: 2_000,
            // Small chunks: a snapshot crosses the wire in many InstallSnapshot calls.
            snapshot_max_chunk_size: 1024,
            ..Default::default()
        }
        .validate()
        .expect("valid config"),
    )
}

struct Member {
    id: NodeId,
    addr: SocketAddr,
    dir: Arc<tempfile::TempDir>,
    sm: MemSm,
    raft: Raft<TypeConfig>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), PeerError>>>,
}

impl Member {
    /// Opens the log in `dir` and serves this member on `listener`.
    async fn start(
        id: NodeId,
        listener: TcpListener,
        dir: Arc<tempfile::TempDir>,
        sm: MemSm,
        app: Arc<dyn AppHandler>,
    ) -> Member {
        let addr = listener.local_addr().expect("local addr");
        let log = LogStore::open(dir.path()).expect("open log");
        let raft = Raft::new(id, config(), PeerNetwork::new(CLUSTER), log, sm.clone())
            .await
            .expect("raft");
        let (tx, rx) = oneshot::channel::<()>();
        let service = PeerService::new(raft.clone(), app).with_cluster_id(CLUSTER);
        let server = tokio::spawn(serve_service_on(listener, service, None, async {
            let _ = rx.await;
        }));
        Member {
            id,
            addr,
            dir,
            sm,
            raft,
            stop: Some(tx),
            server: Some(server),
        }
    }

    async fn fresh(id: NodeId) -> Member {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let dir = Arc::new(tempfile::tempdir().expect("tempdir"));
        Member::start(id, listener, dir, MemSm::default(), Arc::new(NoApp)).await
    }

    fn node(&self) -> MemberNode {
        MemberNode {
            name: format!("m{}", self.id),
            peer_urls: vec![format!("http://{}", self.addr)],
            client_urls: Vec::new(),
        }
    }

    /// Stops the server and Raft; the log directory and state machine survive.
    async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(WAIT, server)
                .await
                .expect("server stops")
                .expect("server task")
                .expect("server result");
        }
        self.raft.shutdown().await.expect("raft shutdown");
    }

    async fn wait_applied(&self, index: u64) {
        self.raft
            .wait(Some(WAIT))
            .applied_index_at_least(Some(index), "applied")
            .await
            .expect("applied in time");
    }
}

fn put(key: impl Into<Vec<u8>>) -> Command {
    Command::new(CommandKind::Put(PutRequest {
        key: key.into().into(),
        value: b"v".to_vec().into(),
        ..Default::default()
    }))
}

/// Writes through whichever running member leads (an election may move it), returning the
/// entry's index.
async fn write(members: &[&Member], cmd: Command) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leader = members
            .iter()
            .find(|m| m.raft.metrics().borrow().state == ServerState::Leader);
        if let Some(m) = leader {
            match m.raft.client_write(cmd.clone()).await {
                Ok(resp) => return resp.log_id.index,
                Err(e) => tracing::info!(%e, "write refused; retrying"),
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader accepted the write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn keys(range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range.map(|i| format!("k{i:04}").into_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn network_three_members_replicate_and_restarted_follower_catches_up() {
    let mut members = vec![
        Member::fresh(1).await,
        Member::fresh(2).await,
        Member::fresh(3).await,
    ];
    let nodes: BTreeMap<NodeId, MemberNode> = members.iter().map(|m| (m.id, m.node())).collect();
    members[0].raft.initialize(nodes).await.expect("initialize");
    members[0]
        .raft
        .wait(Some(WAIT))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .expect("elected");

    let mut last = 0;
    for k in keys(0..10) {
        last = write(&members.iter().collect::<Vec<_>>(), put(k)).await;
    }
    for m in &members {
        m.wait_applied(last).await;
        assert_eq!(m.sm.keys(), keys(0..10), "member {}", m.id);
    }

    // Stop a follower; the other two are still a quorum.
    let f = members
        .iter()
        .position(|m| m.raft.metrics().borrow().state != ServerState::Leader)
        .expect("a follower");
    members[f].stop().await;
    let (id, addr, dir, sm) = (
        members[f].id,
        members[f].addr,
        members[f].dir.clone(),
        members[f].sm.clone(),
    );
    for k in keys(10..30) {
        let running: Vec<&Member> = members.iter().filter(|m| m.id != id).collect();
        last = write(&running, put(k)).await;
    }
    for m in members.iter().filter(|m| m.id != id) {
        m.wait_applied(last).await;
        assert_eq!(m.sm.keys(), keys(0..30));
    }
    assert_eq!(sm.keys(), keys(0..10), "the stopped member saw nothing new");

    // Restart it on a new server at the same address: the leader's cached channel
    // reconnects and replication resumes from the member's log.
    let listener = TcpListener::bind(addr)
        .await
        .expect("rebind the same address");
    members[f] = Member::start(id, listener, dir, sm, Arc::new(NoApp)).await;
    members[f].wait_applied(last).await;
    assert_eq!(members[f].sm.keys(), keys(0..30));
    assert_eq!(
        members[f].sm.installed(),
        0,
        "caught up from the log, not a snapshot"
    );

    for m in &mut members {
        m.stop().await;
    }
}

/// Waits until `rx` holds a value `ok` accepts, and returns it.
async fn wait_for(
    rx: &mut tokio::sync::watch::Receiver<Leadership>,
    what: &str,
    ok: impl Fn(&Leadership) -> bool,
) -> Leadership {
    tokio::time::timeout(WAIT, rx.wait_for(|l| ok(l)))
        .await
        .unwrap_or_else(|_| panic!("{what}: not seen in time"))
        .map(|l| *l)
        .unwrap_or_else(|_| panic!("{what}: the stream ended first"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leadership_stream_reports_leadership_gained_and_lost() {
    let mut members = [
        Member::fresh(1).await,
        Member::fresh(2).await,
        Member::fresh(3).await,
    ];
    let mut streams: Vec<_> = members
        .iter()
        .map(|m| crate::leadership::follow(&m.raft))
        .collect();
    assert!(streams.iter().all(|s| *s.borrow() == Leadership::NotLeader));
    let nodes: BTreeMap<NodeId, MemberNode> = members.iter().map(|m| (m.id, m.node())).collect();
    members[0].raft.initialize(nodes).await.expect("initialize");
    members[0]
        .raft
        .wait(Some(WAIT))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .expect("elected");

    // The leader's stream says so, with its term; the others' say they do not lead.
    let first = members
        .iter()
        .position(|m| m.raft.metrics().borrow().state == ServerState::Leader)
        .expect("a leader");
    let term = members[first].raft.metrics().borrow().current_term;
    let seen = wait_for(&mut streams[first], "leader", |l| l.is_leader()).await;
    assert_eq!(seen, Leadership::Leader { term });
    for (i, s) in streams.iter().enumerate().filter(|(i, _)| *i != first) {
        assert_eq!(
            *s.borrow(),
            Leadership::NotLeader,
            "member {}",
            members[i].id
        );
    }

    // Writes change openraft's metrics but not leadership: the stream wakes only for a real
    // change (which only an election on a stalled machine could bring here).
    streams[first].borrow_and_update();
    for k in keys(0..5) {
        write(&members.iter().collect::<Vec<_>>(), put(k)).await;
    }
    if streams[first].has_changed().expect("stream open") {
        assert_ne!(*streams[first].borrow(), Leadership::Leader { term });
    }

    // Stop the leader: its stream ends on NotLeader, and another member's says it leads now,
    // in a later term.
    members[first].stop().await;
    let last = wait_for(&mut streams[first], "stopped leader", |l| !l.is_leader()).await;
    assert_eq!(last, Leadership::NotLeader);
    let deadline = tokio::time::Instant::now() + WAIT;
    let next = loop {
        let leading = streams
            .iter()
            .enumerate()
            .find(|(i, s)| *i != first && s.borrow().is_leader());
        if let Some((i, s)) = leading {
            break (i, *s.borrow());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let new_term = next.1.term().expect("leads");
    assert!(new_term > term, "{new_term} after {term}");
    assert_eq!(
        members[next.0].raft.metrics().borrow().current_term,
        new_term
    );

    for (i, m) in members.iter_mut().enumerate() {
        if i != first {
            m.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn network_fresh_learner_receives_a_snapshot_in_chunks() {
    let mut leader = Member::fresh(1).await;
    leader
        .raft
        .initialize(BTreeMap::from([(1, leader.node())]))
        .await
        .expect("initialize");
    leader
        .raft
        .wait(Some(WAIT))
        .state(ServerState::Leader, "leader")
        .await
        .expect("leads");
    // ~20 KiB of keys: about twenty 1 KiB chunks.
    let big: Vec<Vec<u8>> = (0..100).map(|i| format!("{i:0200}").into_bytes()).collect();
    let mut last = 0;
    for k in &big {
        last = write(&[&leader], put(k.clone())).await;
    }

    leader
        .raft
        .trigger()
        .snapshot()
        .await
        .expect("trigger snapshot");
    leader
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.snapshot.map(|s| s.index) >= Some(last),
            "snapshot built",
        )
        .await
        .expect("snapshot");
    leader
        .raft
        .trigger()
        .purge_log(last)
        .await
        .expect("trigger purge");
    leader
        .raft
        .wait(Some(WAIT))
        .metrics(|m| m.purged.map(|p| p.index) >= Some(last), "log purged")
        .await
        .expect("purged");

    // The learner's log would start after the purged prefix: only a snapshot can help.
    let mut learner = Member::fresh(2).await;
    leader
        .raft
        .add_learner(2, learner.node(), true)
        .await
        .expect("add learner");
    learner.wait_applied(last).await;
    assert_eq!(learner.sm.installed(), 1, "installed exactly one snapshot");
    assert_eq!(learner.sm.keys(), big);
    let snap = learner.raft.metrics().borrow().snapshot;
    assert!(
        snap.map(|s| s.index) >= Some(last),
        "learner snapshot {snap:?}"
    );

    // Log replication continues after the snapshot.
    let next = write(&[&leader], put("after")).await;
    learner.wait_applied(next).await;
    assert_eq!(
        learner.sm.keys().last().map(Vec::as_slice),
        Some(&b"after"[..])
    );

    learner.stop().await;
    leader.stop().await;
}

/// Sends raw bytes as a gRPC message, to feed the server garbage.
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

#[test]
fn network_status_codes_classify_as_openraft_expects() {
    let expired = Status::cancelled(tonic::TimeoutExpired(()).to_string());
    assert!(is_timeout(&expired));
    assert!(is_timeout(&Status::deadline_exceeded("late")));
    assert!(!is_timeout(&Status::cancelled("connection closed")));
    assert!(is_unreachable(&Status::cancelled("connection closed")));
    assert!(is_unreachable(&Status::unavailable("tcp connect error")));
    assert!(is_unreachable(&Status::failed_precondition(
        "cluster ID mismatch"
    )));
    assert!(is_unreachable(&Status::from_error(Box::new(
        std::io::Error::from(std::io::ErrorKind::ConnectionReset)
    ))));
    assert!(!is_unreachable(&Status::internal("h2 protocol error")));
    assert!(!is_unreachable(&Status::invalid_argument("garbage")));
}

#[test]
fn network_snapshot_chunk_deadlines_grow_with_size() {
    let mib = 1 << 20;
    // openraft's per-chunk timeout is a floor.
    assert_eq!(
        chunk_timeout(Duration::from_secs(10), 1024, 10 * 1024, false),
        Duration::from_secs(10)
    );
    // A big chunk gets the time to cross a 10 MiB/s link, whatever openraft said.
    assert_eq!(
        chunk_timeout(Duration::from_millis(200), 30 * mib, 300 * mib, false),
        Duration::from_secs(4)
    );
    // The last chunk also waits for the install: 10 s + 2 MiB/s over the whole snapshot.
    assert_eq!(
        chunk_timeout(Duration::from_millis(200), mib, 100 * mib, true),
        Duration::from_millis(1100) + Duration::from_secs(10 + 50)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_transport_failures_map_to_openraft_errors() {
    let mut m = Member::fresh(1).await;
    let mut net = PeerNetwork::new(CLUSTER);
    let vote = || VoteRequest::new(Vote::new(1, 5), None);
    let opt = || RPCOption::new(Duration::from_secs(2));

    // The right member answers.
    let mut c = net.new_client(1, &m.node()).await;
    let resp = c.vote(vote(), opt()).await.expect("vote answered");
    assert!(resp.vote_granted);

    // Another member's ID at that URL: refused, and reported unreachable (back off).
    let mut c = net.new_client(2, &m.node()).await;
    let e = c.vote(vote(), opt()).await.expect_err("wrong target");
    assert!(matches!(e, RPCError::Unreachable(_)), "{e:?}");

    // Another cluster: refused the same way.
    let mut other = PeerNetwork::new(CLUSTER + 1);
    let mut c = other.new_client(1, &m.node()).await;
    let e = c.vote(vote(), opt()).await.expect_err("wrong cluster");
    assert!(matches!(e, RPCError::Unreachable(_)), "{e:?}");

    // No URL, or nobody listening.
    let mut c = net.new_client(3, &MemberNode::default()).await;
    let e = c.vote(vote(), opt()).await.expect_err("no url");
    assert!(matches!(e, RPCError::Unreachable(_)), "{e:?}");
    let dead = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let node = MemberNode {
        peer_urls: vec![format!("http://{dead_addr}")],
        ..Default::default()
    };
    let mut c = net.new_client(4, &node).await;
    let e = c.vote(vote(), opt()).await.expect_err("refused");
    assert!(matches!(e, RPCError::Unreachable(_)), "{e:?}");

    // Too many bytes in one AppendEntries: openraft is asked to send fewer entries.
    let mut c = net.new_client(1, &m.node()).await;
    let big = |i| Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(1, 5), i),
        payload: EntryPayload::Normal(Command::new(CommandKind::Put(PutRequest {
            key: b"k".to_vec().into(),
            value: vec![0u8; 3 << 20].into(),
            ..Default::default()
        }))),
    };
    let req = AppendEntriesRequest {
        vote: Vote::new_committed(1, 5),
        prev_log_id: None,
        entries: vec![big(1), big(2), big(3)],
        leader_commit: None,
    };
    match c.append_entries(req, opt()).await {
        Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 1),
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }

    // A request that does not decode is InvalidArgument, and the server keeps serving.
    let ch = Endpoint::from_shared(format!("http://{}", m.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut raw = grpc_client(ch.clone());
    let status = raw
        .append_entries(request(
            pb::AppendEntriesRequest::default(),
            Duration::from_secs(2),
            CLUSTER,
            Some(1),
        ))
        .await
        .expect_err("no vote");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let status = raw
        .forward(request(
            pb::ForwardRequest {
                command: vec![0xff; 3],
            },
            Duration::from_secs(2),
            CLUSTER,
            None,
        ))
        .await
        .expect_err("bad command");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // Bytes that are not protobuf at all: InvalidArgument too.
    for method in [
        "AppendEntries",
        "Vote",
        "InstallSnapshot",
        "Forward",
        "MemberChange",
    ] {
        let mut grpc = tonic::client::Grpc::new(ch.clone());
        grpc.ready().await.expect("ready");
        let path = format!("/keel.peer.Peer/{method}");
        let status = grpc
            .unary(
                request(
                    vec![0xff, 0xff, 0xff],
                    Duration::from_secs(2),
                    CLUSTER,
                    Some(1),
                ),
                tonic::codegen::http::uri::PathAndQuery::try_from(path).expect("path"),
                RawCodec,
            )
            .await
            .expect_err("garbage");
        assert_eq!(status.code(), Code::InvalidArgument, "{method}: {status:?}");
    }
    let resp = c.vote(vote(), opt()).await.expect("still serving");
    assert!(resp.vote_granted);

    // The receiver's Raft has stopped: a remote error, not a transport one.
    m.raft.shutdown().await.expect("shutdown");
    let e = c.vote(vote(), opt()).await.expect_err("stopped");
    assert!(
        matches!(
            &e,
            RPCError::RemoteError(RemoteError {
                target: 1,
                source: RaftError::Fatal(openraft::error::Fatal::Stopped),
                ..
            })
        ),
        "{e:?}"
    );
    m.stop.take().map(|tx| tx.send(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_peer_api_round_trips_app_rpcs() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dir = Arc::new(tempfile::tempdir().expect("tempdir"));
    let mut m = Member::start(1, listener, dir, MemSm::default(), Arc::new(StubApp)).await;
    let leader = m.node();
    let api = PeerApi::new(CLUSTER);
    let t = Duration::from_secs(5);

    let a = api.forward_propose(&leader, put("abc"), t).await;
    assert_eq!(a.index, Some(7));
    assert_eq!(
        a.result,
        Ok(CommandResponse::Put(PutResponse {
            header: Some(ResponseHeader {
                revision: 3,
                ..Default::default()
            }),
            prev_kv: None,
        }))
    );
    let a = api.forward_propose(&leader, put("fail"), t).await;
    assert_eq!(a.index, Some(7));
    assert_eq!(
        a.result,
        Err(ProposeError::Store(StoreError::Backend(
            "disk on fire".into()
        )))
    );
    let batch = Command::new(CommandKind::Batch(CommandBatch {
        commands: vec![put("a"), put("b"), put("c")],
    }));
    let a = api.forward_propose(&leader, batch, t).await;
    assert_eq!(a.index, None);
    assert_eq!(
        a.result,
        Ok(CommandResponse::Batch(vec![
            Ok(CommandResponse::Compaction(CompactionResponse::default())),
            Err(StoreError::Compacted),
            Ok(CommandResponse::Compaction(CompactionResponse::default())),
        ]))
    );
    assert_eq!(
        api.forward_propose(&leader, Command::default(), t)
            .await
            .result,
        Err(ProposeError::NotLeader)
    );

    assert_eq!(api.read_index(&leader, t).await, Ok(42));
    assert_eq!(api.lease_keepalive(&leader, 1, t).await, Ok(Some(30)));
    assert_eq!(api.lease_keepalive(&leader, 2, t).await, Ok(None));
    assert_eq!(
        api.lease_keepalive(&leader, 3, t).await,
        Err(ProposeError::NotLeader)
    );
    assert_eq!(
        api.lease_time_to_live(&leader, 1, true, t).await,
        Ok(Some((20, 30, vec![b"a".to_vec(), b"b".to_vec()])))
    );
    assert_eq!(
        api.lease_time_to_live(&leader, 1, false, t).await,
        Ok(Some((20, 30, Vec::new())))
    );
    assert_eq!(api.lease_time_to_live(&leader, 5, true, t).await, Ok(None));

    let add = MemberChange::Add {
        peer_urls: vec!["http://10.0.0.9:2380".into()],
        learner: true,
    };
    assert_eq!(
        api.member_change(&leader, add, t).await,
        Ok(MemberChangeResult {
            member: Some(info(9, true)),
            members: vec![info(1, false), info(9, true)],
        })
    );
    assert_eq!(
        api.member_change(&leader, MemberChange::Promote { id: 9 }, t)
            .await,
        Ok(MemberChangeResult {
            member: None,
            members: vec![info(1, false), info(9, false)],
        })
    );
    assert_eq!(
        api.member_change(&leader, MemberChange::Remove { id: 0 }, t)
            .await,
        Err(ProposeError::Membership(MembershipError::NotFound))
    );
    assert_eq!(api.move_leader(&leader, 7, t).await, Ok(()));
    assert_eq!(
        api.move_leader(&leader, 8, t).await,
        Err(ProposeError::Membership(MembershipError::BadTransferee))
    );

    // A leader that does not answer in time: Timeout, promptly.
    let started = tokio::time::Instant::now();
    assert_eq!(
        api.move_leader(&leader, 99, Duration::from_millis(200))
            .await,
        Err(ProposeError::Timeout)
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // Unreachable or foreign leaders: NoLeader, so the client fails over.
    let other_cluster = PeerApi::new(CLUSTER + 1);
    assert_eq!(
        other_cluster.read_index(&leader, t).await,
        Err(ProposeError::NoLeader)
    );
    assert_eq!(
        api.read_index(&MemberNode::default(), t).await,
        Err(ProposeError::NoLeader)
    );
    let dead = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let gone = MemberNode {
        peer_urls: vec![format!("http://{dead_addr}")],
        ..Default::default()
    };
    let started = tokio::time::Instant::now();
    assert_eq!(api.read_index(&gone, t).await, Err(ProposeError::NoLeader));
    assert!(started.elapsed() < Duration::from_secs(2));

    m.stop().await;
}
