//! Fuzzing of the SPDY/3.1 reader the agent runs on the container runtime's streaming connection
//! (when it translates kubectl's WebSocket to SPDY): every damaged frame sequence or header block
//! must give a `spdy::Error`, never a panic, a hang or an allocation sized by a length field. Seeds
//! are frames keel's own encoder writes. A smoke pass by default; see docs/fuzzing.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use bytes::{Bytes, BytesMut};
use keel_fuzz::{Target, Verdict};
use keel_node_agent::server::spdy::{
    encode, Frame, FrameReader, HeaderDecoder, HeaderEncoder, FLAG_FIN,
};

#[global_allocator]
static ALLOC: keel_fuzz::CappedAlloc = keel_fuzz::CappedAlloc;

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a runtime sends a client: replies, data, status, resets, pings, settings, GOAWAY.
fn session_seed() -> Vec<u8> {
    let mut enc = HeaderEncoder::new().unwrap();
    let mut out = BytesMut::new();
    let frames = [
        Frame::Settings(vec![(0, 7, 65536)]),
        Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: vec![],
        },
        Frame::SynReply {
            stream_id: 3,
            flags: 0,
            headers: headers(&[("streamtype", "stdout"), ("x", "a")]),
        },
        Frame::Headers {
            stream_id: 3,
            flags: 0,
            headers: headers(&[("content-type", "text/plain")]),
        },
        Frame::Data {
            stream_id: 3,
            flags: 0,
            data: Bytes::from_static(b"hello\n"),
        },
        Frame::Ping(2),
        Frame::WindowUpdate {
            stream_id: 3,
            delta: 65536,
        },
        Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: Bytes::from_static(br#"{"metadata":{},"status":"Success"}"#),
        },
        Frame::RstStream {
            stream_id: 3,
            status: 5,
        },
        Frame::GoAway {
            last_good_stream_id: 3,
            status: 0,
        },
    ];
    for f in &frames {
        encode(f, &mut enc, &mut out).unwrap();
    }
    out.to_vec()
}

/// Header blocks as a peer's encoder writes them (each the start of a connection's zlib stream).
fn header_block_seeds() -> Vec<Vec<u8>> {
    let block = |h: &[(&str, &str)]| HeaderEncoder::new().unwrap().encode(&headers(h)).unwrap();
    vec![
        block(&[("streamtype", "error")]),
        block(&[("port", "8080"), ("requestid", "0")]),
        block(&[]),
    ]
}

#[test]
fn fuzz_spdy_frames() {
    Target::new("spdy_frames")
        .seeds([session_seed()])
        .dict([&[0x80u8, 0x03][..], &[0xff, 0xff, 0xff], &[0x78, 0xbb]])
        .max_len(1 << 20)
        .run(|b| {
            let mut r = FrameReader::new(b);
            let res = futures::executor::block_on(async {
                let mut n = 0usize;
                while let Some(f) = r.next().await? {
                    if let Frame::Data { data, .. } = f {
                        n += data.len();
                    }
                }
                Ok::<usize, keel_node_agent::server::spdy::Error>(n)
            });
            Verdict::from(res.map(drop))
        })
        .assert_clean();
}

#[test]
fn fuzz_spdy_header_blocks() {
    Target::new("spdy_header_blocks")
        .seeds(header_block_seeds())
        .max_len(1 << 16)
        .run(|b| Verdict::from(HeaderDecoder::new().decode(b).map(drop)))
        .assert_clean();
}
