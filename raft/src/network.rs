//! Peer transport, client side: [`PeerNetwork`] plugs tonic into openraft (AppendEntries, Vote,
//! InstallSnapshot), and [`PeerApi`] makes the application calls a follower sends to the leader.
//!
//! Channels connect lazily, so creating a client never blocks and a member that is down costs
//! nothing until an RPC is sent. One channel per peer is cached and shared by every client for
//! that peer: openraft asks for a new client for every election and every linearizable read,
//! and each of those must not open a new TCP connection.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use keel_store::{Command, CommandResponse};
use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RPCTypes, Snapshot};
use parking_lot::Mutex;
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tracing::{debug, warn};

use crate::node::ProposeError;
use crate::peer::codec::{self, pb, CodecError, LeaseTtl};
use crate::peer::server::{
    APPEND_SPLIT_BYTES, CLUSTER_HEADER, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_MESSAGE_BYTES,
    REMOVED_MESSAGE, TO_HEADER,
};
use crate::peer::{MemberChange, MemberChangeResult};
use crate::types::{MemberNode, NodeId, TypeConfig, Vote};

/// How long a TCP connect to a peer may take; a peer that does not answer by then is down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Assumed worst-case snapshot transfer rate, used to size a chunk's timeout.
const SNAPSHOT_BYTES_PER_SEC: f64 = 10.0 * 1024.0 * 1024.0;

/// Assumed worst-case rate at which a receiver installs a snapshot into its state machine; the
/// last chunk's call lasts until the install is done, so its deadline grows with the snapshot.
const SNAPSHOT_INSTALL_BYTES_PER_SEC: f64 = 2.0 * 1024.0 * 1024.0;

/// Failed sends of one snapshot chunk in a row before the transfer is given up (openraft then
/// retries the whole snapshot after its back-off).
const SNAPSHOT_CHUNK_RETRIES: u32 = 5;

/// Restarts from offset 0 (the receiver lost track of the transfer) before giving up.
const SNAPSHOT_RESTARTS: u32 = 3;

/// Chunk size when openraft does not say (its default).
const DEFAULT_SNAPSHOT_CHUNK: usize = 3 << 20;

/// How long one InstallSnapshot call may take: at least openraft's per-chunk timeout, at least
/// the time to move the chunk over a slow link, and for the last chunk also the receiver's
/// install. A deadline that is too short would time out the same chunk forever (the failure
/// openraft users met with big snapshots); a dead peer is still noticed within seconds through
/// connection resets and HTTP/2 keep-alive.
fn chunk_timeout(floor: Duration, chunk: usize, total: usize, done: bool) -> Duration {
    let transfer =
        Duration::from_secs(1) + Duration::from_secs_f64(chunk as f64 / SNAPSHOT_BYTES_PER_SEC);
    let ttl = floor.max(transfer);
    if done {
        ttl + Duration::from_secs(10)
            + Duration::from_secs_f64(total as f64 / SNAPSHOT_INSTALL_BYTES_PER_SEC)
    } else {
        ttl
    }
}

type GrpcClient = pb::peer_client::PeerClient<Channel>;

/// Why a peer's URL cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The member has no peer URL.
    #[error("member {0} has no peer URL")]
    NoUrl(String),
    /// The URL does not parse as `http://host:port`.
    #[error("peer URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    /// The RPC failed in transport (connect, reset, protocol) or the peer refused it.
    #[error("peer RPC: {0}")]
    Rpc(String),
    /// The peer's answer does not decode.
    #[error("peer reply: {0}")]
    Reply(#[from] CodecError),
}

/// Makes an endpoint for a peer URL: lazy connect, bounded connect time, no Nagle delay (Raft
/// messages are small and latency-bound), keep-alive to notice dead connections.
fn endpoint(url: &str) -> Result<Endpoint, TransportError> {
    // etcd-style URLs always carry a scheme; tolerate a bare host:port.
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    let ep = Endpoint::from_shared(url.clone()).map_err(|e| TransportError::BadUrl {
        url: url.clone(),
        reason: e.to_string(),
    })?;
    Ok(ep
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .http2_adaptive_window(true))
}

fn grpc_client(channel: Channel) -> GrpcClient {
    GrpcClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Builds a request with its deadline (sent as `grpc-timeout`, so the receiver stops working on
/// it when the sender has given up) and the cluster/target headers.
fn request<T>(msg: T, timeout: Duration, cluster_id: u64, to: Option<NodeId>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    if let Ok(v) = MetadataValue::try_from(format!("{cluster_id:x}")) {
        req.metadata_mut().insert(CLUSTER_HEADER, v);
    }
    if let Some(to) = to {
        if let Ok(v) = MetadataValue::try_from(format!("{to:x}")) {
            req.metadata_mut().insert(TO_HEADER, v);
        }
    }
    req
}

/// True when a failed call says the peer cannot be reached at all (as opposed to one call that
/// went wrong): openraft then backs off instead of retrying at once.
fn is_unreachable(status: &Status) -> bool {
    use std::io::ErrorKind;
    // Unavailable: connect refused or timed out, connection reset, peer shutting down.
    // Cancelled (not a timeout): the connection closed under the call.
    // FailedPrecondition: another cluster or member answers on that URL; retrying soon won't help.
    if matches!(
        status.code(),
        Code::Unavailable | Code::Cancelled | Code::FailedPrecondition
    ) {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
                    | ErrorKind::AddrNotAvailable
            ) {
                return true;
            }
        }
        source = e.source();
    }
    false
}

/// True when a failed call ran out of time (checked before [`is_unreachable`]).
fn is_timeout(status: &Status) -> bool {
    match status.code() {
        Code::DeadlineExceeded => true,
        // tonic reports an expired `grpc-timeout` as Cancelled with this text; any other
        // cancellation is a connection that went away.
        Code::Cancelled => status.message() == tonic::TimeoutExpired(()).to_string(),
        _ => false,
    }
}

/// Creates [`PeerClient`]s for openraft. Cheap to clone; clones share the channel cache.
#[derive(Debug, Clone, Default)]
pub struct PeerNetwork {
    cluster_id: u64,
    /// Set when a peer refuses this member as removed from the cluster.
    removed: Option<Arc<tokio::sync::watch::Sender<bool>>>,
    /// One channel per member, with the URL it was made for (a changed URL gets a new one).
    channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
}

impl PeerNetwork {
    /// A network for a member of cluster `cluster_id` (sent with every RPC and checked by
    /// receivers that know theirs).
    pub fn new(cluster_id: u64) -> Self {
        PeerNetwork {
            cluster_id,
            removed: None,
            channels: Arc::default(),
        }
    }

    /// Sets `flag` when a peer refuses a Raft call because this member was removed.
    pub fn on_removed(mut self, flag: Arc<tokio::sync::watch::Sender<bool>>) -> Self {
        self.removed = Some(flag);
        self
    }

    /// The cached channel to `target` at `node`'s first peer URL, made if missing or stale.
    fn channel(&self, target: NodeId, node: &MemberNode) -> Result<Channel, TransportError> {
        let url = node
            .peer_urls
            .first()
            .ok_or_else(|| TransportError::NoUrl(format!("{target:016x}")))?;
        let mut channels = self.channels.lock();
        if let Some((cached_url, ch)) = channels.get(&target) {
            if cached_url == url {
                return Ok(ch.clone());
            }
        }
        let ch = endpoint(url)?.connect_lazy();
        channels.insert(target, (url.clone(), ch.clone()));
        Ok(ch)
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &MemberNode) -> PeerClient {
        let client = self.channel(target, node).map(grpc_client);
        if let Err(e) = &client {
            // Each RPC then fails as Unreachable and openraft logs it; this is called for every
            // election and read, so it stays quiet here.
            debug!(target = %format!("{target:016x}"), %e, "peer is unreachable by configuration");
        }
        PeerClient {
            target,
            node: node.clone(),
            cluster_id: self.cluster_id,
            removed: self.removed.clone(),
            client,
        }
    }
}

/// openraft's client for one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    node: MemberNode,
    cluster_id: u64,
    removed: Option<Arc<tokio::sync::watch::Sender<bool>>>,
    /// `Err` when the member's URL is unusable: every RPC then reports it unreachable.
    client: Result<GrpcClient, TransportError>,
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, MemberNode, RaftError<NodeId, E>>>;

impl PeerClient {
    fn grpc(&self) -> Result<GrpcClient, Unreachable> {
        self.client.clone().map_err(|e| Unreachable::new(&e))
    }

    /// Sends one Raft RPC bounded by `ttl` and maps every failure to openraft's taxonomy.
    async fn call<Req, Rep, F, Fut>(
        &self,
        action: RPCTypes,
        from: NodeId,
        ttl: Duration,
        msg: Req,
        send: F,
    ) -> Result<Rep, RPCError<NodeId, MemberNode, openraft::error::Infallible>>
    where
        F: FnOnce(GrpcClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Rep>, Status>>,
    {
        let client = self.grpc()?;
        let req = request(msg, ttl, self.cluster_id, Some(self.target));
        let timeout = || {
            RPCError::Timeout(Timeout {
                action,
                id: from,
                target: self.target,
                timeout: ttl,
            })
        };
        match tokio::time::timeout(ttl, send(client, req)).await {
            Err(_) => Err(timeout()),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => {
                debug!(target = %format!("{:016x}", self.target), ?action, %status, "peer RPC failed");
                if status.code() == Code::PermissionDenied && status.message() == REMOVED_MESSAGE {
                    if let Some(flag) = &self.removed {
                        warn!(peer = %format!("{:016x}", self.target), "{REMOVED_MESSAGE}");
                        let _ = flag.send(true);
                    }
                }
                let err = TransportError::Rpc(status.to_string());
                if is_timeout(&status) {
                    Err(timeout())
                } else if is_unreachable(&status) {
                    Err(RPCError::Unreachable(Unreachable::new(&err)))
                } else {
                    Err(RPCError::Network(NetworkError::new(&err)))
                }
            }
        }
    }

    /// Sends one snapshot chunk with deadline `ttl`.
    async fn send_chunk(
        &self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        ttl: Duration,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let from = rpc.vote.leader_id.node_id;
        let msg = codec::snapshot_request_into_pb(rpc);
        let reply = self
            .call(
                RPCTypes::InstallSnapshot,
                from,
                ttl,
                msg,
                |mut c, r| async move { c.install_snapshot(r).await },
            )
            .await
            .map_err(widen)?;
        self.finish(codec::snapshot_reply_from_pb(reply))
    }

    /// Turns a decoded reply into openraft's result: a receiver's error is a `RemoteError`.
    // The large error is openraft's own type, returned as openraft's trait requires.
    #[allow(clippy::result_large_err)]
    fn finish<T, E>(
        &self,
        reply: Result<Result<T, RaftError<NodeId, E>>, CodecError>,
    ) -> RpcResult<T, E>
    where
        E: std::error::Error,
    {
        match reply {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))),
            // A reply we cannot read is a broken exchange, not a verdict of the peer: retry.
            Err(e) => Err(RPCError::Network(NetworkError::new(
                &TransportError::Reply(e),
            ))),
        }
    }
}

/// Re-types a transport error (which never holds a remote error) for any remote error type.
fn widen<E: std::error::Error>(
    e: RPCError<NodeId, MemberNode, openraft::error::Infallible>,
) -> RPCError<NodeId, MemberNode, RaftError<NodeId, E>> {
    match e {
        RPCError::Timeout(t) => RPCError::Timeout(t),
        RPCError::Unreachable(u) => RPCError::Unreachable(u),
        RPCError::PayloadTooLarge(p) => RPCError::PayloadTooLarge(p),
        RPCError::Network(n) => RPCError::Network(n),
        RPCError::RemoteError(r) => match r.source {},
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let msg = codec::append_request_to_pb(&rpc);
        let size = msg.encoded_len();
        let n = rpc.entries.len();
        if size > APPEND_SPLIT_BYTES && n > 1 {
            // Ask openraft to resend fewer entries rather than push one huge message through a
            // heartbeat-sized timeout (or past the receiver's size limit).
            let hint = ((n as u128 * APPEND_SPLIT_BYTES as u128 / size as u128) as u64).max(1);
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(hint),
            ));
        }
        let from = rpc.vote.leader_id.node_id;
        let reply = self
            .call(
                RPCTypes::AppendEntries,
                from,
                option.hard_ttl(),
                msg,
                |mut c, r| async move { c.append_entries(r).await },
            )
            .await
            .map_err(widen)?;
        self.finish(codec::append_reply_from_pb(reply))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let len = rpc.data.len();
        let total = usize::try_from(rpc.offset)
            .unwrap_or(usize::MAX)
            .saturating_add(len);
        let ttl = chunk_timeout(option.hard_ttl(), len, total, rpc.done);
        self.send_chunk(rpc, ttl).await
    }

    /// Sends a snapshot chunk by chunk, like openraft's default, except that each call's
    /// deadline is sized by [`chunk_timeout`]: the default wraps every chunk, the last one
    /// included, in `install_snapshot_timeout`, so a receiver whose install takes longer would
    /// see the same snapshot sent again and again.
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot<TypeConfig>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let meta = snapshot.meta;
        let data = snapshot.snapshot.into_inner();
        let total = data.len();
        let chunk = option
            .snapshot_chunk_size()
            .unwrap_or(DEFAULT_SNAPSHOT_CHUNK)
            .max(1);
        let mut cancel = std::pin::pin!(cancel);
        let (mut offset, mut failures, mut restarts) = (0usize, 0u32, 0u32);
        loop {
            let end = total.min(offset.saturating_add(chunk));
            let done = end == total;
            let req = InstallSnapshotRequest {
                vote,
                meta: meta.clone(),
                offset: offset as u64,
                data: data[offset..end].to_vec(),
                done,
            };
            let ttl = chunk_timeout(option.hard_ttl(), end - offset, total, done);
            debug!(target = %format!("{:016x}", self.target), offset, end, total, ?ttl, "sending snapshot chunk");
            let res = tokio::select! {
                closed = cancel.as_mut() => return Err(closed.into()),
                res = self.send_chunk(req, ttl) => res,
            };
            let err = match res {
                Ok(resp) => {
                    // A higher vote ends the transfer; openraft steps down on seeing it.
                    if done || resp.vote > vote {
                        return Ok(SnapshotResponse::new(resp.vote));
                    }
                    offset = end;
                    failures = 0;
                    continue;
                }
                Err(RPCError::RemoteError(RemoteError {
                    source: RaftError::APIError(InstallSnapshotError::SnapshotMismatch(m)),
                    ..
                })) => {
                    // The receiver lost the transfer (e.g. it restarted): start over.
                    restarts += 1;
                    if restarts > SNAPSHOT_RESTARTS {
                        return Err(NetworkError::new(&m).into());
                    }
                    warn!(%m, "snapshot transfer restarts from offset 0");
                    (offset, failures) = (0, 0);
                    continue;
                }
                Err(RPCError::RemoteError(RemoteError {
                    target,
                    target_node,
                    source: RaftError::Fatal(fatal),
                })) => {
                    return Err(RemoteError {
                        target,
                        target_node,
                        source: fatal,
                    }
                    .into())
                }
                Err(e) => e,
            };
            failures += 1;
            warn!(target = %format!("{:016x}", self.target), offset, failures, %err, "snapshot chunk failed");
            if failures >= SNAPSHOT_CHUNK_RETRIES {
                return Err(match err {
                    RPCError::Timeout(t) => t.into(),
                    RPCError::Unreachable(u) => u.into(),
                    RPCError::Network(n) => n.into(),
                    RPCError::PayloadTooLarge(p) => NetworkError::new(&p).into(),
                    RPCError::RemoteError(r) => NetworkError::new(&r).into(),
                });
            }
            // An unreachable peer gets openraft's usual pause; a lost chunk a short back-off.
            let delay = match &err {
                RPCError::Unreachable(_) => Duration::from_millis(500),
                _ => Duration::from_millis(10 << failures.min(4)),
            };
            tokio::select! {
                closed = cancel.as_mut() => return Err(closed.into()),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let from = rpc.vote.leader_id.node_id;
        let reply = self
            .call(
                RPCTypes::Vote,
                from,
                option.hard_ttl(),
                codec::vote_request_to_pb(&rpc),
                |mut c, r| async move { c.vote(r).await },
            )
            .await
            .map_err(widen)?;
        self.finish(codec::vote_reply_from_pb(reply))
    }
}

/// Client for the application calls a member makes to the leader (forwarded writes, ReadIndex,
/// leases, membership). Cheap to clone; clones share one channel per peer URL.
///
/// A call that cannot reach the leader, or whose reply is unreadable, fails with
/// [`ProposeError::NoLeader`] (the client should fail over); one that runs out of time fails
/// with [`ProposeError::Timeout`]. Errors the leader returns come back unchanged.
#[derive(Debug, Clone, Default)]
pub struct PeerApi {
    cluster_id: u64,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

impl PeerApi {
    /// A client for a member of cluster `cluster_id`.
    pub fn new(cluster_id: u64) -> Self {
        PeerApi {
            cluster_id,
            channels: Arc::default(),
        }
    }

    fn client(&self, node: &MemberNode) -> Result<GrpcClient, TransportError> {
        let url = node
            .peer_urls
            .first()
            .ok_or_else(|| TransportError::NoUrl(format!("{:?}", node.name)))?;
        let mut channels = self.channels.lock();
        if let Some(ch) = channels.get(url) {
            return Ok(grpc_client(ch.clone()));
        }
        let ch = endpoint(url)?.connect_lazy();
        channels.insert(url.clone(), ch.clone());
        Ok(grpc_client(ch))
    }

    /// Sends one call bounded by `timeout` and decodes its reply.
    async fn call<Req, Rep, T, F, Fut>(
        &self,
        node: &MemberNode,
        what: &'static str,
        msg: Req,
        timeout: Duration,
        send: F,
        decode: fn(Rep) -> Result<Result<T, ProposeError>, CodecError>,
    ) -> Result<T, ProposeError>
    where
        F: FnOnce(GrpcClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Rep>, Status>>,
    {
        let client = self.client(node).map_err(|e| {
            warn!(%e, what, "cannot call the leader");
            ProposeError::NoLeader
        })?;
        let req = request(msg, timeout, self.cluster_id, None);
        let reply = match tokio::time::timeout(timeout, send(client, req)).await {
            Err(_) => return Err(ProposeError::Timeout),
            Ok(Err(status)) if is_timeout(&status) => return Err(ProposeError::Timeout),
            Ok(Err(status)) => {
                debug!(%status, what, leader = ?node.peer_urls, "leader call failed");
                // Never connected: the leader did not get the call, so the caller may retry.
                // Failed later: the outcome is unknown, which etcd reports as a timeout.
                let msg = status.message().to_ascii_lowercase();
                let undelivered = status.code() == tonic::Code::Unavailable
                    && (msg.contains("connect") || msg.contains("refused"));
                return Err(
                    if undelivered || status.code() == tonic::Code::FailedPrecondition {
                        ProposeError::NoLeader
                    } else {
                        ProposeError::Timeout
                    },
                );
            }
            Ok(Ok(resp)) => resp.into_inner(),
        };
        decode(reply).unwrap_or_else(|e| {
            warn!(%e, what, "unreadable reply from the leader");
            Err(ProposeError::NoLeader)
        })
    }

    /// Proposes `cmd` on the leader `node` and returns its result.
    pub async fn forward_propose(
        &self,
        node: &MemberNode,
        cmd: Command,
        timeout: Duration,
    ) -> Result<CommandResponse, ProposeError> {
        let msg = pb::ForwardRequest {
            command: cmd.encode_to_vec(),
        };
        self.call(
            node,
            "Forward",
            msg,
            timeout,
            |mut c, r| async move { c.forward(r).await },
            codec::forward_reply_from_pb,
        )
        .await
    }

    /// Asks the leader `node` for the index a linearizable read must wait for.
    pub async fn read_index(
        &self,
        node: &MemberNode,
        timeout: Duration,
    ) -> Result<u64, ProposeError> {
        self.call(
            node,
            "ReadIndex",
            pb::ReadIndexRequest {},
            timeout,
            |mut c, r| async move { c.read_index(r).await },
            codec::read_index_reply_from_pb,
        )
        .await
    }

    /// Renews lease `id` on the leader; `Ok(None)` if it does not exist.
    pub async fn lease_keepalive(
        &self,
        node: &MemberNode,
        id: i64,
        timeout: Duration,
    ) -> Result<Option<i64>, ProposeError> {
        self.call(
            node,
            "LeaseKeepAlive",
            pb::LeaseKeepAliveRequest { id },
            timeout,
            |mut c, r| async move { c.lease_keep_alive(r).await },
            codec::lease_keepalive_reply_from_pb,
        )
        .await
    }

    /// Remaining TTL, granted TTL and (if `keys`) keys of lease `id`; `Ok(None)` if it does
    /// not exist.
    pub async fn lease_time_to_live(
        &self,
        node: &MemberNode,
        id: i64,
        keys: bool,
        timeout: Duration,
    ) -> Result<Option<LeaseTtl>, ProposeError> {
        self.call(
            node,
            "LeaseTimeToLive",
            pb::LeaseTimeToLiveRequest { id, keys },
            timeout,
            |mut c, r| async move { c.lease_time_to_live(r).await },
            codec::lease_ttl_reply_from_pb,
        )
        .await
    }

    /// Asks the leader `node` to perform a membership change.
    pub async fn member_change(
        &self,
        node: &MemberNode,
        change: MemberChange,
        timeout: Duration,
    ) -> Result<MemberChangeResult, ProposeError> {
        self.call(
            node,
            "MemberChange",
            codec::member_change_to_pb(&change),
            timeout,
            |mut c, r| async move { c.member_change(r).await },
            codec::member_change_reply_from_pb,
        )
        .await
    }

    /// Tells `node` (member `member`) that this member applied a membership without it.
    pub async fn notify_removed(
        &self,
        node: &MemberNode,
        member: NodeId,
        timeout: Duration,
    ) -> Result<(), ProposeError> {
        self.call(
            node,
            "Removed",
            pb::RemovedNotice { member },
            timeout,
            |mut c, r| async move { c.removed(r).await },
            |_: pb::Empty| Ok(Ok(())),
        )
        .await
    }

    /// Asks `node` to take leadership as `target` (etcd's MoveLeader, sent to the transferee).
    pub async fn move_leader(
        &self,
        node: &MemberNode,
        target: NodeId,
        timeout: Duration,
    ) -> Result<(), ProposeError> {
        self.call(
            node,
            "MoveLeader",
            pb::MoveLeaderRequest { target },
            timeout,
            |mut c, r| async move { c.move_leader(r).await },
            codec::move_leader_reply_from_pb,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Cursor;
    use std::net::SocketAddr;

    use keel_store::command::{CommandBatch, CommandKind};
    use keel_store::pb::etcdserverpb::{
        CompactionResponse, PutRequest, PutResponse, ResponseHeader,
    };
    use keel_store::StoreError;
    use openraft::storage::RaftStateMachine;
    use openraft::{
        Config, EntryPayload, Raft, RaftSnapshotBuilder, ServerState, Snapshot, SnapshotMeta,
    };
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::log_store::LogStore;
    use crate::node::{MemberInfo, MembershipError};
    use crate::peer::server::{serve_service_on, PeerError, PeerService};
    use crate::peer::AppHandler;
    use crate::types::{Applied, Entry, LogId, StorageError, StoredMembership};

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

        async fn applied_state(
            &mut self,
        ) -> Result<(Option<LogId>, StoredMembership), StorageError> {
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

        async fn get_current_snapshot(
            &mut self,
        ) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
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
        async fn forward_propose(&self, _: Command) -> Result<CommandResponse, ProposeError> {
            Err(ProposeError::NoLeader)
        }
        async fn read_index(&self) -> Result<u64, ProposeError> {
            Err(ProposeError::NoLeader)
        }
        async fn lease_keepalive(&self, _: i64) -> Result<Option<i64>, ProposeError> {
            Err(ProposeError::NoLeader)
        }
        async fn lease_time_to_live(
            &self,
            _: i64,
            _: bool,
        ) -> Result<Option<LeaseTtl>, ProposeError> {
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
        async fn forward_propose(&self, cmd: Command) -> Result<CommandResponse, ProposeError> {
            match cmd.kind {
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
            }
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
            let server = tokio::spawn(serve_service_on(listener, service, async {
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
        let nodes: BTreeMap<NodeId, MemberNode> =
            members.iter().map(|m| (m.id, m.node())).collect();
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
        fn decode(
            &mut self,
            src: &mut tonic::codec::DecodeBuf<'_>,
        ) -> Result<Option<Vec<u8>>, Status> {
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

        let r = api.forward_propose(&leader, put("abc"), t).await;
        assert_eq!(
            r,
            Ok(CommandResponse::Put(PutResponse {
                header: Some(ResponseHeader {
                    revision: 3,
                    ..Default::default()
                }),
                prev_kv: None,
            }))
        );
        let r = api.forward_propose(&leader, put("fail"), t).await;
        assert_eq!(
            r,
            Err(ProposeError::Store(StoreError::Backend(
                "disk on fire".into()
            )))
        );
        let batch = Command::new(CommandKind::Batch(CommandBatch {
            commands: vec![put("a"), put("b"), put("c")],
        }));
        let r = api.forward_propose(&leader, batch, t).await;
        assert_eq!(
            r,
            Ok(CommandResponse::Batch(vec![
                Ok(CommandResponse::Compaction(CompactionResponse::default())),
                Err(StoreError::Compacted),
                Ok(CommandResponse::Compaction(CompactionResponse::default())),
            ]))
        );
        assert_eq!(
            api.forward_propose(&leader, Command::default(), t).await,
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
}
