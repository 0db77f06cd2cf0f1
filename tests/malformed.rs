//! Malformed protobuf on every KV method and on Lease and Maintenance calls: each gets a gRPC
//! error (never a crash), and the server keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use bytes::{Buf, BufMut};
use keel_testkit::{keel_bin, Server};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// Sends raw bytes as the request message and returns raw response bytes.
#[derive(Default, Clone)]
struct RawCodec;

struct RawEnc;
struct RawDec;

impl Encoder for RawEnc {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut v = vec![0u8; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEnc;
    type Decoder = RawDec;
    fn encoder(&mut self) -> RawEnc {
        RawEnc
    }
    fn decoder(&mut self) -> RawDec {
        RawDec
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_and_the_server_stays_up() {
    let s = Server::start_keel(keel_bin!());
    let channel = tonic::transport::Endpoint::from_shared(s.client_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let garbage: Vec<Vec<u8>> = vec![
        vec![0xff; 16],                     // invalid tag/wire type
        vec![0x0a, 0x80, 0x80, 0x80, 0x80], // truncated varint length
        vec![0x0a, 0x05, b'a'],             // length past the end
        vec![0x12, 0x7f],                   // bytes field longer than the message
    ];
    for method in [
        "/etcdserverpb.KV/Range",
        "/etcdserverpb.KV/Put",
        "/etcdserverpb.KV/DeleteRange",
        "/etcdserverpb.KV/Txn",
        "/etcdserverpb.KV/Compact",
        "/etcdserverpb.Lease/LeaseGrant",
        "/etcdserverpb.Lease/LeaseTimeToLive",
        "/etcdserverpb.Maintenance/HashKV",
    ] {
        for g in &garbage {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            grpc.ready().await.unwrap();
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
            let res = grpc
                .unary(tonic::Request::new(g.clone()), path, RawCodec)
                .await;
            let err = res.expect_err("malformed request accepted");
            assert!(
                matches!(
                    err.code(),
                    tonic::Code::Internal | tonic::Code::InvalidArgument
                ),
                "{method}: unexpected {err:?}"
            );
        }
    }
    let mut c = etcd_client::Client::connect([s.endpoint()], None)
        .await
        .unwrap();
    c.put("still", "up", None).await.unwrap();
    assert_eq!(c.get("still", None).await.unwrap().kvs()[0].value(), b"up");
}
