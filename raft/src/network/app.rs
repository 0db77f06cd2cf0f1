//! The application calls a member makes to the leader over the peer transport: forwarded
//! proposals, ReadIndex, lease keep-alive and time-to-live, membership changes, MoveLeader, and
//! the notice to a removed member. The leader answers them through `crate::peer::AppHandler`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use keel_store::Command;
use parking_lot::Mutex;
use prost::Message;
use tonic::transport::Channel;
use tonic::Status;
use tracing::{debug, warn};

use super::{connect, grpc_client, is_timeout, request, GrpcClient, PeerTls, TransportError};
use crate::error::ProposeError;
use crate::peer::codec::{self, pb, CodecError, LeaseTtl};
use crate::proposer::Answer;
use crate::types::{MemberChange, MemberChangeResult, MemberNode, NodeId};

/// Client for the application calls a member makes to the leader (forwarded writes, ReadIndex,
/// leases, membership). Cheap to clone; clones share one channel per peer URL.
///
/// A call that cannot reach the leader, or whose reply is unreadable, fails with
/// [`ProposeError::NoLeader`] (the client should fail over); one that runs out of time fails
/// with [`ProposeError::Timeout`]. Errors the leader returns come back unchanged.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerApi {
    cluster_id: u64,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    tls: PeerTls,
}

impl PeerApi {
    /// A client for a member of cluster `cluster_id`.
    pub(crate) fn new(cluster_id: u64) -> Self {
        PeerApi {
            cluster_id,
            channels: Arc::default(),
            tls: None,
        }
    }

    /// Dials `https://` peers with this TLS client setup.
    pub(crate) fn with_tls(mut self, tls: PeerTls) -> Self {
        self.tls = tls;
        self
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
        let ch = connect(url, &self.tls)?;
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

    /// Proposes `cmd` on the leader `node` and returns its result and the entry's index.
    pub(crate) async fn forward_propose(
        &self,
        node: &MemberNode,
        cmd: Command,
        timeout: Duration,
    ) -> Answer {
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
        .unwrap_or_else(Answer::err)
    }

    /// Asks the leader `node` for the index a linearizable read must wait for.
    pub(crate) async fn read_index(
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
    pub(crate) async fn lease_keepalive(
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
    pub(crate) async fn lease_time_to_live(
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
    pub(crate) async fn member_change(
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
    pub(crate) async fn notify_removed(
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
    pub(crate) async fn move_leader(
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
