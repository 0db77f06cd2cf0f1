//! Peer transport, client side. [`raft`] plugs tonic into openraft (AppendEntries, Vote,
//! InstallSnapshot: [`PeerNetwork`]); [`app`] makes the application calls a member sends to the
//! leader (forwarded writes, ReadIndex, leases, membership: [`PeerApi`]). What both need is here:
//! endpoints, request metadata, and how a failed call is classified. What the two ends of the
//! transport agree on (message sizes, headers, keep-alive) is in `crate::peer::wire`.
//!
//! Channels connect lazily, so creating a client never blocks and a member that is down costs
//! nothing until an RPC is sent. One channel per peer is cached and shared by every client for
//! that peer: openraft asks for a new client for every election and every linearizable read,
//! and each of those must not open a new TCP connection.

mod app;
mod raft;
#[cfg(test)]
mod tests;

pub(crate) use app::PeerApi;
pub(crate) use raft::PeerNetwork;

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::peer::codec::{pb, CodecError};
use crate::peer::wire::{
    CLUSTER_HEADER, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_MESSAGE_BYTES, TO_HEADER,
};
use crate::types::NodeId;

/// How long a TCP connect to a peer may take; a peer that does not answer by then is down.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

type GrpcClient = pb::peer_client::PeerClient<Channel>;

/// Why a peer's URL cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum TransportError {
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

/// The client TLS setup peers are dialed with (`https://` peer URLs), shared by every channel.
pub(crate) type PeerTls = Option<std::sync::Arc<rustls::ClientConfig>>;

/// Makes an endpoint for a peer URL: lazy connect, bounded connect time, no Nagle delay (Raft
/// messages are small and latency-bound), keep-alive to notice dead connections.
fn endpoint(url: &str) -> Result<Endpoint, TransportError> {
    let ep = Endpoint::from_shared(url.to_string()).map_err(|e| TransportError::BadUrl {
        url: url.to_string(),
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

/// A lazily connecting channel to a peer URL: plaintext for `http://`, TLS with `tls` (the peer CA
/// verifies the server, this member's peer certificate is its client certificate) for `https://`.
fn connect(url: &str, tls: &PeerTls) -> Result<Channel, TransportError> {
    // etcd-style URLs always carry a scheme; tolerate a bare host:port.
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    let (plain, is_tls) = crate::tls::split_tls_scheme(&url);
    if !is_tls {
        return Ok(endpoint(&url)?.connect_lazy());
    }
    let config = tls.clone().ok_or_else(|| TransportError::BadUrl {
        url: url.clone(),
        reason: "an https:// peer needs peer TLS (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file)".into(),
    })?;
    Ok(crate::tls::lazy_tls_channel(&endpoint(&plain)?, config))
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
