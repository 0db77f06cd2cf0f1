//! What etcdctl cannot reach, through the `etcd-client` crate against a real `keel server`:
//! many watches on one stream, requested progress, fragmented watch responses, lease expiry,
//! and bad input answered with etcd's errors while the server stays up.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
    WatchStream,
};
use keel_testkit::{keel_bin, Server};
use tonic::Code;

async fn client(s: &Server) -> Client {
    Client::connect([s.endpoint()], None)
        .await
        .expect("connect")
}

async fn next(ws: &mut WatchStream) -> etcd_client::WatchResponse {
    tokio::time::timeout(Duration::from_secs(10), ws.message())
        .await
        .expect("watch response in time")
        .expect("watch stream ok")
        .expect("watch stream open")
}

fn status(e: etcd_client::Error) -> tonic::Status {
    match e {
        etcd_client::Error::GRpcStatus(s) => s,
        other => panic!("expected a gRPC status, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watches_on_one_stream_and_requested_progress() {
    let s = Server::start_keel(keel_bin!());
    let mut c = client(&s).await;
    let mut ws = c.watch("a", None).await.unwrap();
    let r = next(&mut ws).await;
    assert!(r.created() && r.watch_id() == 0);
    ws.watch("b", Some(WatchOptions::new().with_prev_key()))
        .await
        .unwrap();
    let r = next(&mut ws).await;
    assert!(r.created() && r.watch_id() == 1);
    ws.watch("c", Some(WatchOptions::new().with_watch_id(7)))
        .await
        .unwrap();
    let r = next(&mut ws).await;
    assert!(r.created() && r.watch_id() == 7);
    // A client-chosen ID already in use is refused.
    ws.watch("d", Some(WatchOptions::new().with_watch_id(7)))
        .await
        .unwrap();
    let r = next(&mut ws).await;
    assert!(r.created() && r.canceled() && r.watch_id() == -1, "{r:?}");

    c.put("b", "1", None).await.unwrap();
    c.put("b", "2", None).await.unwrap();
    let put_c = c.put("c", "x", None).await.unwrap();
    let r = next(&mut ws).await;
    assert_eq!(r.watch_id(), 1);
    assert_eq!(r.events()[0].kv().unwrap().value(), b"1");
    assert!(
        r.events()[0].prev_kv().is_none(),
        "a creation has no prev_kv"
    );
    let r = next(&mut ws).await;
    assert_eq!(r.events()[0].prev_kv().unwrap().value(), b"1");
    let r = next(&mut ws).await;
    assert_eq!(r.watch_id(), 7);

    // Requested progress: watch_id -1, empty, at the current revision.
    ws.request_progress().await.unwrap();
    let r = next(&mut ws).await;
    assert_eq!(r.watch_id(), -1);
    assert!(r.events().is_empty() && !r.created() && !r.canceled());
    assert_eq!(
        r.header().unwrap().revision(),
        put_c.header().unwrap().revision()
    );

    ws.cancel(1).await.unwrap();
    let r = next(&mut ws).await;
    assert!(r.canceled() && r.watch_id() == 1);
    c.put("b", "3", None).await.unwrap();
    c.put("a", "after", None).await.unwrap();
    let r = next(&mut ws).await;
    assert_eq!(
        r.watch_id(),
        0,
        "watch 1 was cancelled, so the next event is for 'a'"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_revision_is_fragmented_for_watchers_that_ask() {
    let s = Server::start_keel(keel_bin!());
    let mut c = client(&s).await;
    let big = vec![b'v'; 1_000_000];
    for k in ["f/1", "f/2", "f/3"] {
        c.put(k, big.clone(), None).await.unwrap();
    }
    let mut ws = c
        .watch(
            "f/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_prev_key()
                    .with_fragment(),
            ),
        )
        .await
        .unwrap();
    assert!(next(&mut ws).await.created());
    // One revision deleting three keys: with prev_kv that is ~3 MB, over the 2 MiB limit.
    c.delete("f/", Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    let mut parts = Vec::new();
    loop {
        let r = next(&mut ws).await;
        let more = r.0.fragment;
        parts.push(r.events().len());
        if !more {
            break;
        }
    }
    assert!(parts.len() > 1, "expected fragments, got {parts:?}");
    assert_eq!(parts.iter().sum::<usize>(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_deletes_its_keys_in_one_revision() {
    let s = Server::start_keel(keel_bin!());
    let mut c = client(&s).await;
    let g = c.lease_grant(1, None).await.unwrap();
    assert_eq!(g.ttl(), 2, "TTL is raised to etcd's minimum");
    for k in ["l/a", "l/b"] {
        c.put(k, "x", Some(PutOptions::new().with_lease(g.id())))
            .await
            .unwrap();
    }
    let mut ws = c
        .watch("l/", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    assert!(next(&mut ws).await.created());
    let start = Instant::now();
    let r = next(&mut ws).await;
    let waited = start.elapsed();
    assert_eq!(r.events().len(), 2, "both keys go in one response");
    assert!(r
        .events()
        .iter()
        .all(|e| e.event_type() == EventType::Delete));
    let revs: Vec<i64> = r
        .events()
        .iter()
        .map(|e| e.kv().unwrap().mod_revision())
        .collect();
    assert_eq!(revs[0], revs[1], "one revision for the whole revoke");
    assert!(waited < Duration::from_secs(10));
    let ttl = c.lease_time_to_live(g.id(), None).await.unwrap();
    assert_eq!(ttl.ttl(), -1);
    // Keep-alive of an unknown lease answers TTL 0 (not a gRPC error); the client library
    // turns TTL 0 into its own "lease not found" on the first answer.
    let ka = c.lease_keep_alive(g.id()).await;
    match ka.map(|_| ()) {
        Err(etcd_client::Error::LeaseKeepAliveError(m)) => assert_eq!(m, "lease not found"),
        other => panic!("expected TTL 0 for an expired lease, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_etcds_errors_and_the_server_stays_up() {
    let s = Server::start_keel(keel_bin!());
    let mut c = client(&s).await;
    c.put("k", "v", None).await.unwrap();

    let e = status(c.put("big", vec![0u8; 1_600_001], None).await.unwrap_err());
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "etcdserver: request is too large")
    );
    let e = status(c.put("huge", vec![0u8; 2_200_000], None).await.unwrap_err());
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");

    let ops: Vec<TxnOp> = (0..129)
        .map(|i| TxnOp::put(format!("t{i}"), "v", None))
        .collect();
    let e = status(c.txn(Txn::new().and_then(ops)).await.unwrap_err());
    assert_eq!(
        e.message(),
        "etcdserver: too many operations in txn request"
    );
    let e = status(
        c.txn(Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::put("d", "2", None)]))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message(),
        "etcdserver: duplicate key given in txn request"
    );

    let e = status(c.put("", "v", None).await.unwrap_err());
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "etcdserver: key is not provided")
    );

    let e = status(
        c.put("x", "v", Some(PutOptions::new().with_lease(12345)))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "etcdserver: requested lease not found")
    );

    let e = status(
        c.get("k", Some(GetOptions::new().with_revision(1000)))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision"
        )
    );

    // Inverted range: empty result, not an error.
    let r = c
        .get("z", Some(GetOptions::new().with_range("a")))
        .await
        .unwrap();
    assert_eq!(r.count(), 0);

    // Compaction: reads below fail, watches from below are cancelled with the compact revision.
    let cur = c
        .put("k", "v2", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    c.compact(cur, None).await.unwrap();
    let e = status(
        c.get("k", Some(GetOptions::new().with_revision(cur - 1)))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message(),
        "etcdserver: mvcc: required revision has been compacted"
    );
    let e = status(c.compact(cur, None).await.unwrap_err());
    assert_eq!(e.code(), Code::OutOfRange);
    let mut ws = c
        .watch("k", Some(WatchOptions::new().with_start_revision(1)))
        .await
        .unwrap();
    assert!(next(&mut ws).await.created());
    let r = next(&mut ws).await;
    assert!(r.canceled());
    assert_eq!(r.compact_revision(), cur);
    // A watch on an inverted range is refused.
    let mut ws = c
        .watch("z", Some(WatchOptions::new().with_range("a")))
        .await
        .unwrap();
    let r = next(&mut ws).await;
    assert!(r.canceled(), "{r:?}");

    // Txn compare on a missing key against version 0 succeeds (the "create" idiom).
    let t = c
        .txn(
            Txn::new()
                .when([Compare::version("missing", CompareOp::Equal, 0)])
                .and_then([TxnOp::put("missing", "now", None)]),
        )
        .await
        .unwrap();
    assert!(t.succeeded());

    // Defragment answers without a header, as etcd 3.4's does.
    let d = c.defragment().await.unwrap();
    assert!(d.header().is_none(), "{d:?}");

    // Still serving after all of that.
    let r = c.get("k", None).await.unwrap();
    assert_eq!(r.kvs()[0].value(), b"v2");
}
