//! The etcd v3 `Watch` service (`etcdserver/api/v3rpc/watch.go`): one bidirectional gRPC stream
//! per call, multiplexing many watchers, all driven by the store's [`WatchHub`].
//!
//! Per call, one task reads the client's requests and drives the hub's [`HubStream`] handle;
//! tonic reads the hub's response queue directly ([`WatchResponses`]), adding the header, so the
//! responses that are ready together are encoded into one HTTP/2 write. Live events come from
//! the hub already encoded, once for every watcher ([`WireResponse`]). The hub's own queue
//! decides who is slow; this layer only forwards.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use keel_store::pb::etcdserverpb::{
    watch_request::RequestUnion, ResponseHeader, WatchCreateRequest, WatchRequest,
};
use keel_store::watch::{
    StreamMessage, WatchHub, WatchReceiver, WatchStream as HubStream, WireResponse,
};
use tokio::sync::mpsc;
use tonic::{Code, Request, Response, Status, Streaming};

use crate::auth::AuthGate;
use crate::header::HeaderSource;
use crate::pb::watch_server::Watch;

/// etcd's `ErrGRPCWatchCanceled`: how a watch call ends when the client cancels it.
pub const WATCH_CANCELED: &str = "etcdserver: watch canceled";

/// Builds the response header for a revision (cluster, member and term filled in).
type HeaderFn = Arc<dyn Fn(i64) -> ResponseHeader + Send + Sync>;

/// The `etcdserverpb.Watch` gRPC service.
#[derive(Clone)]
pub struct WatchService {
    hub: Arc<WatchHub>,
    header: HeaderFn,
    /// Permission checks of creates (none in unit tests without a member).
    gate: Option<AuthGate>,
}

impl std::fmt::Debug for WatchService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchService")
            .field("hub", &self.hub)
            .finish_non_exhaustive()
    }
}

impl WatchService {
    /// A service over `hub`, with headers from `header`.
    pub fn new(hub: Arc<WatchHub>, header: HeaderSource, gate: AuthGate) -> Self {
        let header = Arc::new(header);
        let mut s = Self::with_header_fn(hub, Arc::new(move |rev| header.header(rev)));
        s.gate = Some(gate);
        s
    }

    /// A service with headers from any function (tests use it without a cluster).
    fn with_header_fn(hub: Arc<WatchHub>, header: HeaderFn) -> Self {
        WatchService {
            hub,
            header,
            gate: None,
        }
    }

    /// Serves one watch call: `requests` is the client's side, the result the server's.
    fn serve<S>(&self, conn: u64, requests: S, auth: Option<Caller>) -> WatchResponses
    where
        S: Stream<Item = Result<WatchRequest, Status>> + Send + Unpin + 'static,
    {
        let (stream, rx) = self.hub.open_wire_stream(conn);
        let (end_tx, end_rx) = mpsc::channel(1);
        let ended = Arc::new(AtomicBool::new(false));
        tokio::spawn(recv_loop(
            requests,
            stream,
            auth,
            End {
                tx: end_tx,
                flag: ended.clone(),
            },
        ));
        WatchResponses {
            rx,
            header: self.header.clone(),
            end: end_rx,
            ended,
            done: false,
        }
    }
}

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = WatchResponses;

    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let conn = request.remote_addr().map_or(0, |a| {
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&a, &mut h);
            std::hash::Hasher::finish(&h)
        });
        let auth = self.gate.clone().map(|gate| Caller {
            gate,
            md: request.metadata().clone(),
        });
        Ok(Response::new(self.serve(conn, request.into_inner(), auth)))
    }
}

/// Adds the header. Its revision is exactly the hub's: created and progress revisions are
/// promises clients resume from, and the compaction cancel keeps etcd's 0.
fn with_header(msg: StreamMessage, header: &HeaderFn) -> WireResponse {
    let StreamMessage {
        revision,
        mut response,
        wire,
    } = msg;
    let mut h = header(revision);
    h.revision = revision;
    response.header = Some(h);
    WireResponse {
        response,
        events: wire,
    }
}

/// The response side of one watch call, polled by tonic: the hub's queue plus the error, if any,
/// that the request side ends the call with. Dropping it (the client went away) stops the request
/// side, which cancels the call's watchers.
pub struct WatchResponses {
    rx: WatchReceiver,
    header: HeaderFn,
    end: mpsc::Receiver<Status>,
    /// Set once `end` holds the error: one atomic load per response instead of polling (and
    /// registering a waker on) a second channel.
    ended: Arc<AtomicBool>,
    done: bool,
}

impl std::fmt::Debug for WatchResponses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchResponses")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Stream for WatchResponses {
    type Item = Result<WireResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // An error ends the call at once, even ahead of queued responses. No waker is needed
        // for it: the request side drops the hub stream right after, which closes `rx`.
        if this.ended.load(Ordering::Acquire) {
            if let Ok(status) = this.end.try_recv() {
                this.done = true;
                return Poll::Ready(Some(Err(status)));
            }
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(msg)) => Poll::Ready(Some(Ok(with_header(msg, &this.header)))),
            Poll::Ready(None) => {
                // The request side sends its error before it drops the hub stream.
                this.done = true;
                Poll::Ready(this.end.try_recv().ok().map(Err))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// How the request side ends the call with an error.
struct End {
    tx: mpsc::Sender<Status>,
    flag: Arc<AtomicBool>,
}

impl End {
    async fn closed(&self) {
        self.tx.closed().await
    }

    fn fail(&self, status: Status) {
        // The channel holds one and this is the only send: it cannot be full.
        if self.tx.try_send(status).is_ok() {
            self.flag.store(true, Ordering::Release);
        }
    }
}

/// Reads the client's requests and applies them to the hub stream, in order (creates must be
/// answered in arrival order). Dropping `stream` on return cancels all the call's watchers and
/// closes the response queue, which wakes the response side to see an error in `end`.
async fn recv_loop<S>(mut requests: S, stream: HubStream, auth: Option<Caller>, end: End)
where
    S: Stream<Item = Result<WatchRequest, Status>> + Send + Unpin + 'static,
{
    loop {
        let next = tokio::select! {
            next = requests.next() => next,
            _ = end.closed() => return,
        };
        match next {
            Some(Ok(req)) => {
                if apply(&stream, req, auth.as_ref()).await.is_err() {
                    return;
                }
            }
            None => {
                // The client closed its side; like etcd, keep delivering until the call ends.
                end.closed().await;
                return;
            }
            Some(Err(status)) => {
                let status = if status.code() == Code::Cancelled {
                    Status::cancelled(WATCH_CANCELED)
                } else {
                    tracing::debug!(%status, "watch: request stream failed");
                    status
                };
                end.fail(status);
                return;
            }
        }
    }
}

/// The identity of a watch call's client, for etcd's permission check of each create.
struct Caller {
    gate: AuthGate,
    md: tonic::metadata::MetadataMap,
}

impl Caller {
    /// Why a create is refused (etcd 3.4's cancel reasons), or `None` if it may go on: the
    /// client needs READ on the watched range.
    async fn refusal(&self, create: &WatchCreateRequest) -> Option<String> {
        if self.gate.idle(&self.md) {
            return None;
        }
        // The key and range end as etcd checks them: an empty key is "\0", and a range end of
        // "\0" is dropped (so only the start key is checked, as in etcd 3.4).
        let key: &[u8] = if create.key.is_empty() {
            &[0]
        } else {
            &create.key
        };
        let end: &[u8] = if create.range_end.as_ref() == [0] {
            &[]
        } else {
            &create.range_end
        };
        let res = self
            .gate
            .check_read(&self.md, |a, ai| a.range_permitted(ai, key, end))
            .await;
        let status = res.err()?;
        // etcd puts the text of its gRPC status error there, as gRPC-Go prints it.
        Some(match status.message() {
            m
            @ ("etcdserver: revision of auth store is old" | "etcdserver: user name is empty") => {
                format!("rpc error: code = InvalidArgument desc = {m}")
            }
            m @ "etcdserver: invalid auth token" => {
                format!("rpc error: code = Unauthenticated desc = {m}")
            }
            _ => "rpc error: code = PermissionDenied desc = etcdserver: permission denied".into(),
        })
    }
}

/// One client request. Err means the call's response side is gone.
async fn apply(
    stream: &HubStream,
    req: WatchRequest,
    auth: Option<&Caller>,
) -> Result<(), keel_store::watch::StreamClosed> {
    match req.request_union {
        Some(RequestUnion::CreateRequest(create)) => {
            if let Some(reason) = match auth {
                Some(c) => c.refusal(&create).await,
                None => None,
            } {
                return stream.refuse(reason).await;
            }
            stream.create(create).await.map(drop)
        }
        Some(RequestUnion::CancelRequest(cancel)) => stream.cancel(cancel.watch_id).await,
        Some(RequestUnion::ProgressRequest(_)) => stream.request_progress().await,
        // etcd ignores requests it does not know (e.g. from a newer client) rather than ending
        // the stream with every watcher on it.
        None => {
            tracing::debug!("watch: ignoring a request without a known request_union");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_store::pb::etcdserverpb::{
        WatchCancelRequest, WatchCreateRequest, WatchProgressRequest, WatchResponse,
    };
    use keel_store::pb::mvccpb::{event::EventType, Event, KeyValue};
    use keel_store::watch::History;
    use keel_store::StoreError;
    use std::time::Duration;
    use tokio::time::timeout;
    use tokio_stream::wrappers::ReceiverStream;

    /// A store that never changed: enough for live events published by hand.
    struct Empty;

    impl History for Empty {
        fn current_revision(&self) -> i64 {
            1
        }
        fn compact_revision(&self) -> i64 {
            0
        }
        fn events(&self, _: i64, _: i64, _: usize) -> Result<Vec<Event>, StoreError> {
            Ok(Vec::new())
        }
        fn kv_at(&self, _: &[u8], _: i64) -> Result<Option<KeyValue>, StoreError> {
            Ok(None)
        }
    }

    fn service() -> (WatchService, Arc<WatchHub>) {
        let hub = WatchHub::new(Arc::new(Empty), Duration::from_secs(600));
        let header: HeaderFn = Arc::new(|revision| ResponseHeader {
            cluster_id: 7,
            member_id: 9,
            revision: revision + 1000, // the service must override it
            raft_term: 3,
        });
        (WatchService::with_header_fn(hub.clone(), header), hub)
    }

    fn create(key: &str) -> WatchRequest {
        WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: key.as_bytes().to_vec().into(),
                ..Default::default()
            })),
        }
    }

    fn put(key: &str, rev: i64) -> Event {
        Event {
            r#type: EventType::Put as i32,
            kv: Some(KeyValue {
                key: key.as_bytes().to_vec().into(),
                create_revision: rev,
                mod_revision: rev,
                version: 1,
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    type Client = (mpsc::Sender<Result<WatchRequest, Status>>, WatchResponses);

    fn call(svc: &WatchService) -> Client {
        let (tx, rx) = mpsc::channel(8);
        (tx, svc.serve(0, ReceiverStream::new(rx), None))
    }

    /// Waits up to a second for the hub to drop the call's watchers (done by the request side).
    async fn until_no_watchers(hub: &WatchHub) {
        for _ in 0..100 {
            if hub.watcher_count() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The next response as the client decodes it off the wire.
    async fn next(out: &mut WatchResponses) -> Result<WatchResponse, Status> {
        timeout(Duration::from_secs(5), out.next())
            .await
            .expect("no response within 5s")
            .expect("stream ended")
            .map(|r| r.decoded().expect("our encoding decodes"))
    }

    #[tokio::test]
    async fn every_response_has_a_header_and_requests_apply_in_order() {
        let (svc, hub) = service();
        let (tx, mut out) = call(&svc);
        tx.send(Ok(create("a"))).await.unwrap();
        tx.send(Ok(create("b"))).await.unwrap();
        let r = next(&mut out).await.unwrap();
        let h = r.header.unwrap();
        assert_eq!((r.watch_id, r.created), (0, true));
        assert_eq!(
            (h.cluster_id, h.member_id, h.raft_term, h.revision),
            (7, 9, 3, 1)
        );
        assert_eq!(next(&mut out).await.unwrap().watch_id, 1);

        hub.publish(vec![put("b", 2)], 2);
        let r = next(&mut out).await.unwrap();
        assert_eq!(
            (r.watch_id, r.events.len(), r.header.unwrap().revision),
            (1, 1, 2)
        );

        // A request without a known kind is ignored, as etcd does.
        tx.send(Ok(WatchRequest::default())).await.unwrap();
        let progress = WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        };
        tx.send(Ok(progress)).await.unwrap();
        let r = next(&mut out).await.unwrap();
        assert_eq!((r.watch_id, r.header.unwrap().revision), (-1, 2));

        let cancel = WatchRequest {
            request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest {
                watch_id: 0,
            })),
        };
        tx.send(Ok(cancel)).await.unwrap();
        let r = next(&mut out).await.unwrap();
        assert_eq!((r.watch_id, r.canceled), (0, true));
        assert!(r.header.is_some());
        assert_eq!(hub.watcher_count(), 1);

        // Half-close: watchers keep delivering.
        drop(tx);
        hub.publish(vec![put("b", 3)], 3);
        let r = next(&mut out).await.unwrap();
        assert_eq!((r.watch_id, r.events.len()), (1, 1));

        // The client goes away: the watchers go too.
        drop(out);
        until_no_watchers(&hub).await;
        assert_eq!(hub.watcher_count(), 0);
    }

    #[tokio::test]
    async fn client_cancel_ends_with_watch_canceled() {
        let (svc, hub) = service();
        let (tx, mut out) = call(&svc);
        tx.send(Ok(create("a"))).await.unwrap();
        next(&mut out).await.unwrap();
        tx.send(Err(Status::cancelled("context canceled")))
            .await
            .unwrap();
        let err = next(&mut out).await.unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (Code::Cancelled, WATCH_CANCELED)
        );

        let (tx, mut out) = call(&svc);
        tx.send(Err(Status::internal("failed to decode Protobuf message")))
            .await
            .unwrap();
        let err = next(&mut out).await.unwrap_err();
        assert_eq!(err.code(), Code::Internal);
        until_no_watchers(&hub).await;
        assert_eq!(hub.watcher_count(), 0);
    }

    #[tokio::test]
    async fn an_error_overtakes_queued_events() {
        let (svc, hub) = service();
        let (tx, mut out) = call(&svc);
        tx.send(Ok(create("a"))).await.unwrap();
        next(&mut out).await.unwrap();
        for rev in 2..6 {
            hub.publish(vec![put("a", rev)], rev);
        }
        tx.send(Err(Status::cancelled("context canceled")))
            .await
            .unwrap();
        // The request side fails the call and lets go of the hub stream.
        until_no_watchers(&hub).await;
        let err = next(&mut out).await.unwrap_err();
        assert_eq!(err.code(), Code::Cancelled);
        assert!(out.next().await.is_none(), "nothing after the error");
    }
}
