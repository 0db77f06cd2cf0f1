//! openraft's network: [`PeerNetwork`] makes a [`PeerClient`] per peer, which sends
//! AppendEntries, Vote and InstallSnapshot over the peer transport and maps every failure to
//! openraft's error taxonomy (timeout, unreachable, network, remote).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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
use tonic::transport::Channel;
use tonic::{Code, Status};
use tracing::{debug, warn};

use super::{grpc_client, is_timeout, is_unreachable, request, GrpcClient, TransportError};
use crate::peer::codec::{self, CodecError};
use crate::peer::wire::{APPEND_SPLIT_BYTES, RECOVERED_AWAY_MESSAGE, REMOVED_MESSAGE};
use crate::types::{MemberNode, NodeId, TypeConfig, Vote};

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
pub(super) fn chunk_timeout(floor: Duration, chunk: usize, total: usize, done: bool) -> Duration {
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

/// Creates [`PeerClient`]s for openraft. Cheap to clone; clones share the channel cache.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerNetwork {
    cluster_id: u64,
    /// Set when a peer refuses this member as removed from the cluster.
    removed: Option<Arc<tokio::sync::watch::Sender<bool>>>,
    /// The peer that refused this member because a recovery left it out (it may join again).
    left_out_by: Option<Arc<parking_lot::Mutex<Option<NodeId>>>>,
    /// One channel per member, with the URL it was made for (a changed URL gets a new one).
    channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
    /// How `https://` peers are dialed.
    tls: super::PeerTls,
}

impl PeerNetwork {
    /// A network for a member of cluster `cluster_id` (sent with every RPC and checked by
    /// receivers that know theirs).
    pub(crate) fn new(cluster_id: u64) -> Self {
        PeerNetwork {
            cluster_id,
            removed: None,
            left_out_by: None,
            channels: Arc::default(),
            tls: None,
        }
    }

    /// Dials `https://` peers with this TLS client setup.
    pub(crate) fn with_tls(mut self, tls: super::PeerTls) -> Self {
        self.tls = tls;
        self
    }

    /// Sets `flag` when a peer refuses a Raft call because this member was removed.
    pub(crate) fn on_removed(mut self, flag: Arc<tokio::sync::watch::Sender<bool>>) -> Self {
        self.removed = Some(flag);
        self
    }

    /// Records in `by` which peer refused this member because a recovery left it out.
    pub(crate) fn on_left_out(mut self, by: Arc<parking_lot::Mutex<Option<NodeId>>>) -> Self {
        self.left_out_by = Some(by);
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
        let ch = super::connect(url, &self.tls)?;
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
            left_out_by: self.left_out_by.clone(),
            client,
        }
    }
}

/// openraft's client for one peer.
#[derive(Debug)]
pub(crate) struct PeerClient {
    target: NodeId,
    node: MemberNode,
    cluster_id: u64,
    removed: Option<Arc<tokio::sync::watch::Sender<bool>>>,
    left_out_by: Option<Arc<parking_lot::Mutex<Option<NodeId>>>>,
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
                let left_out = status.message() == RECOVERED_AWAY_MESSAGE;
                if status.code() == Code::PermissionDenied
                    && (status.message() == REMOVED_MESSAGE || left_out)
                {
                    if let (true, Some(by)) = (left_out, &self.left_out_by) {
                        *by.lock() = Some(self.target);
                    }
                    if let Some(flag) = &self.removed {
                        warn!(peer = %format!("{:016x}", self.target), "{}", status.message());
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
