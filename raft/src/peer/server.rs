//! The peer transport's server: Raft RPCs go to openraft, application RPCs to the
//! [`AppHandler`]. A request that does not decode is `InvalidArgument`; nothing here panics on
//! input.

use std::future::Future;
use std::sync::Arc;

use openraft::Raft;
use tokio::net::TcpListener;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tracing::debug;

use crate::peer::codec::{self, pb, CodecError};
use crate::peer::wire::{
    CLUSTER_HEADER, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_MESSAGE_BYTES,
    RECOVERED_AWAY_MESSAGE, REMOVED_MESSAGE, TO_HEADER,
};
use crate::peer::AppHandler;
use crate::types::{NodeId, TypeConfig};

pub(crate) use pb::peer_server::PeerServer;

/// The peer service's codec: prost, except that a message that does not parse is
/// `InvalidArgument` (the sender is at fault) instead of prost's `Internal`. Generated code
/// uses it through `build.rs`'s `codec_path`.
#[derive(Debug, Clone)]
pub(crate) struct PeerCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for PeerCodec<T, U> {
    fn default() -> Self {
        PeerCodec(ProstCodec::default())
    }
}

impl<T, U> Codec for PeerCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = PeerDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        PeerDecoder(self.0.decoder())
    }
}

/// Decoder of [`PeerCodec`].
#[derive(Debug)]
pub(crate) struct PeerDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for PeerDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(src).map_err(|s| {
            if s.code() == tonic::Code::Internal {
                Status::invalid_argument(format!("undecodable message: {}", s.message()))
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// Why the peer server stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    /// The server failed while serving.
    #[error("peer transport: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Called with the refusal text when a caller names another cluster.
pub(crate) type MismatchHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Serves the `keel.peer.Peer` service for one member.
#[derive(Clone)]
pub(crate) struct PeerService {
    raft: Raft<TypeConfig>,
    app: Arc<dyn AppHandler>,
    id: NodeId,
    cluster_id: Option<u64>,
    on_mismatch: Option<MismatchHook>,
}

impl PeerService {
    /// A service for `raft` (this member) and `app`; accepts callers from any cluster.
    pub(crate) fn new(raft: Raft<TypeConfig>, app: Arc<dyn AppHandler>) -> Self {
        let id = raft.metrics().borrow().id;
        PeerService {
            raft,
            app,
            id,
            cluster_id: None,
            on_mismatch: None,
        }
    }

    /// Calls `hook` with the refusal text whenever a caller names another cluster.
    pub(crate) fn on_cluster_mismatch(mut self, hook: MismatchHook) -> Self {
        self.on_mismatch = Some(hook);
        self
    }

    /// Refuses callers that name a different cluster (etcd's cluster-ID check).
    pub(crate) fn with_cluster_id(mut self, cluster_id: u64) -> Self {
        self.cluster_id = Some(cluster_id);
        self
    }

    /// Wraps the service in its tonic server with keel's message size limits.
    pub(crate) fn into_server(self) -> PeerServer<PeerService> {
        PeerServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Checks the cluster header and, for Raft RPCs, that this member is the intended target:
    /// a URL reused by another member or cluster must not accept votes or entries.
    fn check(&self, md: &MetadataMap, raft_rpc: bool) -> Result<(), Status> {
        if let Some(want) = self.cluster_id {
            match header_u64(md, CLUSTER_HEADER) {
                Some(got) if got == want => {}
                got => {
                    let msg = format!(
                        "cluster ID mismatch: this member is in cluster {want:016x}, the caller named {}",
                        got.map(|g| format!("{g:016x}")).unwrap_or_else(|| "none".into())
                    );
                    if let Some(hook) = &self.on_mismatch {
                        hook(&msg);
                    }
                    return Err(Status::failed_precondition(msg));
                }
            }
        }
        if raft_rpc {
            if let Some(to) = header_u64(md, TO_HEADER) {
                if to != self.id {
                    return Err(Status::failed_precondition(format!(
                        "request for member {to:016x} reached member {:016x}",
                        self.id
                    )));
                }
            }
        }
        Ok(())
    }
}

impl PeerService {
    /// Refuses Raft calls from a member removed from the cluster, with [`REMOVED_MESSAGE`], which
    /// tells it to stop (a restarted removed member would otherwise disturb elections).
    fn refuse_removed(&self, from: NodeId) -> Result<(), Status> {
        if self.app.is_removed(from) {
            let msg = if self.app.left_out_by_recovery(from) {
                RECOVERED_AWAY_MESSAGE
            } else {
                REMOVED_MESSAGE
            };
            return Err(Status::permission_denied(msg));
        }
        Ok(())
    }
}

/// Parses a hex header; absent or malformed = `None`.
fn header_u64(md: &MetadataMap, key: &str) -> Option<u64> {
    let v = md.get(key)?.to_str().ok()?;
    u64::from_str_radix(v, 16).ok()
}

fn invalid(what: &str, e: CodecError) -> Status {
    debug!(%e, "undecodable {what} request");
    Status::invalid_argument(format!("{what}: {e}"))
}

/// Serves a configured [`PeerService`] (e.g. with a cluster-ID check) on `listener`; with `tls`,
/// every connection must complete a TLS handshake first (and, when the config requires it, show a
/// client certificate signed by the peer CA).
pub(crate) async fn serve_service_on(
    listener: TcpListener,
    service: PeerService,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), PeerError> {
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .http2_adaptive_window(Some(true))
        .add_service(service.into_server());
    match tls {
        Some(config) => {
            let incoming = crate::tls::tls_incoming(listener, config, "peer");
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await?
        }
        None => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await?
        }
    }
    Ok(())
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesReply>, Status> {
        self.check(request.metadata(), true)?;
        let rpc = codec::append_request_from_pb(request.into_inner())
            .map_err(|e| invalid("AppendEntries", e))?;
        self.refuse_removed(rpc.vote.leader_id.node_id)?;
        let res = self.raft.append_entries(rpc).await;
        Ok(Response::new(codec::append_reply_to_pb(&res)))
    }

    async fn vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteReply>, Status> {
        self.check(request.metadata(), true)?;
        let rpc =
            codec::vote_request_from_pb(request.into_inner()).map_err(|e| invalid("Vote", e))?;
        self.refuse_removed(rpc.vote.leader_id.node_id)?;
        let res = self.raft.vote(rpc).await;
        Ok(Response::new(codec::vote_reply_to_pb(&res)))
    }

    async fn install_snapshot(
        &self,
        request: Request<pb::InstallSnapshotRequest>,
    ) -> Result<Response<pb::InstallSnapshotReply>, Status> {
        self.check(request.metadata(), true)?;
        let rpc = codec::snapshot_request_from_pb(request.into_inner())
            .map_err(|e| invalid("InstallSnapshot", e))?;
        let res = self.raft.install_snapshot(rpc).await;
        Ok(Response::new(codec::snapshot_reply_to_pb(&res)))
    }

    async fn forward(
        &self,
        request: Request<pb::ForwardRequest>,
    ) -> Result<Response<pb::ForwardReply>, Status> {
        self.check(request.metadata(), false)?;
        let bytes = request.into_inner().command;
        let cmd = <keel_store::Command as prost::Message>::decode(bytes.as_slice())
            .map_err(|e| invalid("Forward", e.into()))?;
        let res = self.app.forward_propose(cmd).await;
        Ok(Response::new(codec::forward_reply_to_pb(&res)))
    }

    async fn read_index(
        &self,
        request: Request<pb::ReadIndexRequest>,
    ) -> Result<Response<pb::ReadIndexReply>, Status> {
        self.check(request.metadata(), false)?;
        let res = self.app.read_index().await;
        Ok(Response::new(codec::read_index_reply_to_pb(&res)))
    }

    async fn lease_keep_alive(
        &self,
        request: Request<pb::LeaseKeepAliveRequest>,
    ) -> Result<Response<pb::LeaseKeepAliveReply>, Status> {
        self.check(request.metadata(), false)?;
        let res = self.app.lease_keepalive(request.into_inner().id).await;
        Ok(Response::new(codec::lease_keepalive_reply_to_pb(&res)))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveReply>, Status> {
        self.check(request.metadata(), false)?;
        let req = request.into_inner();
        let res = self.app.lease_time_to_live(req.id, req.keys).await;
        Ok(Response::new(codec::lease_ttl_reply_to_pb(&res)))
    }

    async fn member_change(
        &self,
        request: Request<pb::MemberChangeRequest>,
    ) -> Result<Response<pb::MemberChangeReply>, Status> {
        self.check(request.metadata(), false)?;
        let change = codec::member_change_from_pb(request.into_inner())
            .map_err(|e| invalid("MemberChange", e))?;
        let res = self.app.member_change(change).await;
        Ok(Response::new(codec::member_change_reply_to_pb(&res)))
    }

    async fn removed(
        &self,
        request: Request<pb::RemovedNotice>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.check(request.metadata(), false)?;
        let member = request.into_inner().member;
        if member != self.id {
            return Err(Status::failed_precondition(format!(
                "removal of member {member:016x} reached member {:016x}",
                self.id
            )));
        }
        tracing::warn!("a peer applied a membership without this member");
        self.app.removed_from_cluster();
        Ok(Response::new(pb::Empty {}))
    }

    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderReply>, Status> {
        self.check(request.metadata(), false)?;
        let res = self.app.move_leader(request.into_inner().target).await;
        Ok(Response::new(codec::move_leader_reply_to_pb(&res)))
    }
}
