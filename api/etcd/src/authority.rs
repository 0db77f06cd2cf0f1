//! A connection adapter that repairs URL-shaped HTTP/2 `:authority` values.
//!
//! etcdctl 3.4 dials its per-endpoint maintenance client (endpoint status, hashkv, defrag,
//! snapshot) with the raw endpoint string as the gRPC target, so it sends
//! `:authority: http://127.0.0.1:2379`. Go's gRPC server shrugs; h2 treats the request as
//! malformed and resets the stream. We cannot patch h2, so [`AuthorityFix`] sits between the
//! socket and the server: it re-frames the client's HEADERS blocks with the authority cut down
//! to `host:port` and passes every other byte through untouched.
//!
//! HPACK is stateful per connection, so every block is decoded with this connection's decoder
//! and re-encoded as "literal without indexing" fields: the server-side decoder's dynamic table
//! then stays empty and can never disagree with what the client's encoder believes. A connection
//! whose first header block needs no repair (every client but etcdctl's maintenance dial) is
//! passed through byte for byte from then on, so ordinary traffic pays no HPACK decoding.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use futures::{Stream, StreamExt};
use loona_hpack::Decoder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::server::Connected;

use super::coalesce::Coalesce;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Size of an HTTP/2 frame header.
const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// Largest frame payload we emit: the protocol default SETTINGS_MAX_FRAME_SIZE, which every
/// peer must accept whatever it advertised (hyper's server advertises exactly this).
const MAX_OUT_FRAME: usize = 16_384;
/// Cap on a header block, both as received and as re-encoded. The server only accepts 16 KiB
/// header lists anyway; this keeps a hostile client from making us buffer without bound.
const MAX_BLOCK: usize = 1 << 20;
/// Cap on the HPACK dynamic table size a client may switch to. The server never advertises a
/// SETTINGS_HEADER_TABLE_SIZE, so a conforming client stays at the 4096 default.
const MAX_TABLE: usize = 64 * 1024;
/// How much we ask the socket for when we need bytes to parse.
const READ_CHUNK: usize = 8 * 1024;

/// Where the read side is in the client's byte stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Waiting for the 24-byte client preface.
    Preface,
    /// Parsing frames.
    Frames,
    /// Not HTTP/2 (the preface did not match): pass everything through and let the server
    /// produce its usual error.
    Raw,
    /// We rejected the client's bytes; every further read fails.
    Failed,
}

/// A HEADERS frame whose block is still waiting for CONTINUATION frames.
struct PendingBlock {
    stream_id: u32,
    end_stream: bool,
    fragment: Vec<u8>,
}

/// An accepted HTTP/2 connection whose client `:authority` values are rewritten from
/// `scheme://host:port[/...]` to `host:port`; writes and every non-header frame pass through.
pub struct AuthorityFix<S> {
    inner: S,
    mode: Mode,
    /// Bytes read from `inner` that have not been handled yet.
    inbuf: BytesMut,
    /// Bytes ready for the reader (frame headers, preface, re-encoded header frames).
    out: BytesMut,
    /// Payload bytes of the current pass-through frame still to hand over verbatim.
    pass_left: usize,
    block: Option<PendingBlock>,
    decoder: Decoder<'static>,
    /// Whether the connection's first header block was seen. A client that names itself
    /// properly there keeps doing so (a gRPC channel's authority is fixed), so such a
    /// connection is passed through untouched from then on and costs no HPACK work.
    first_block_seen: bool,
    /// An error found after bytes were already handed out in the same read; AsyncRead must
    /// not report both at once, so it waits for the next read.
    error: Option<io::Error>,
}

impl<S> AuthorityFix<S> {
    /// Wraps a freshly accepted connection (nothing may have been read from it yet).
    pub fn new(inner: S) -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(MAX_TABLE);
        AuthorityFix {
            inner,
            mode: Mode::Preface,
            inbuf: BytesMut::new(),
            out: BytesMut::new(),
            pass_left: 0,
            block: None,
            decoder,
            first_block_seen: false,
            error: None,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Handles whatever complete unit sits at the front of `inbuf` (preface, frame header, or
    /// a whole HEADERS/CONTINUATION frame). Returns false when more input is needed.
    fn step(&mut self) -> io::Result<bool> {
        match self.mode {
            Mode::Raw => Ok(false),
            Mode::Failed => Err(invalid("connection already rejected")),
            Mode::Preface => {
                let have = self.inbuf.len().min(PREFACE.len());
                if self.inbuf[..have] != PREFACE[..have] {
                    self.mode = Mode::Raw;
                    return Ok(true);
                }
                if have < PREFACE.len() {
                    return Ok(false);
                }
                self.out
                    .extend_from_slice(&self.inbuf.split_to(PREFACE.len()));
                self.mode = Mode::Frames;
                Ok(true)
            }
            Mode::Frames => self.step_frame(),
        }
    }

    fn step_frame(&mut self) -> io::Result<bool> {
        if self.inbuf.len() < FRAME_HEADER_LEN {
            return Ok(false);
        }
        let h = &self.inbuf[..FRAME_HEADER_LEN];
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let ty = h[3];
        let flags = h[4];
        let stream_id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;

        if self.block.is_some() && ty != TYPE_CONTINUATION {
            // RFC 9113 §6.10: nothing may interleave with a header block. We have swallowed
            // the HEADERS frame, so we cannot forward this for h2 to reject; end it here.
            return Err(invalid("frame interleaved with a header block"));
        }
        let is_block = ty == TYPE_HEADERS || (ty == TYPE_CONTINUATION && self.block.is_some());
        if !is_block {
            // Everything else (DATA above all) is copied verbatim by poll_read.
            self.out.extend_from_slice(&self.inbuf[..FRAME_HEADER_LEN]);
            self.inbuf.advance(FRAME_HEADER_LEN);
            self.pass_left = len;
            return Ok(true);
        }
        if len > MAX_BLOCK {
            return Err(invalid("header frame too large"));
        }
        if self.inbuf.len() < FRAME_HEADER_LEN + len {
            self.inbuf
                .reserve(FRAME_HEADER_LEN + len - self.inbuf.len());
            return Ok(false);
        }
        let frame = self.inbuf.split_to(FRAME_HEADER_LEN + len);
        let payload = &frame[FRAME_HEADER_LEN..];

        match self.block.as_mut() {
            None => {
                let fragment = headers_fragment(flags, payload)?;
                self.block = Some(PendingBlock {
                    stream_id,
                    end_stream: flags & FLAG_END_STREAM != 0,
                    fragment: fragment.to_vec(),
                });
            }
            Some(b) => {
                if b.stream_id != stream_id {
                    return Err(invalid("CONTINUATION on another stream"));
                }
                if b.fragment.len() + payload.len() > MAX_BLOCK {
                    return Err(invalid("header block too large"));
                }
                b.fragment.extend_from_slice(payload);
            }
        }
        if flags & FLAG_END_HEADERS != 0 {
            if let Some(b) = self.block.take() {
                self.rewrite(b)?;
            }
        }
        Ok(true)
    }

    /// Decodes a complete header block and appends the re-encoded HEADERS (+ CONTINUATION)
    /// frames to `out`; or, for a first block that needs no repair, the block as it came,
    /// switching the connection to pass-through.
    fn rewrite(&mut self, b: PendingBlock) -> io::Result<()> {
        let mut enc = Vec::with_capacity(b.fragment.len() * 2 + 64);
        let mut too_big = false;
        let mut repaired = false;
        self.decoder
            .decode_with_cb(&b.fragment, |name, value| {
                if too_big {
                    return;
                }
                let value = if &*name == b":authority" {
                    let fixed = fix_authority(&value);
                    repaired |= fixed.len() != value.len();
                    fixed
                } else {
                    &value
                };
                encode_literal(&mut enc, &name, value);
                too_big = enc.len() > MAX_BLOCK;
            })
            .map_err(|e| invalid(&format!("HPACK decoding failed: {e}")))?;
        if too_big {
            return Err(invalid("decoded header block too large"));
        }
        if !std::mem::replace(&mut self.first_block_seen, true) && !repaired {
            // The server's decoder starts from the same empty state ours did, so the client's
            // own encoding stays valid for this and every later block.
            self.emit_block(b.stream_id, b.end_stream, &b.fragment);
            self.mode = Mode::Raw;
            return Ok(());
        }
        self.emit_block(b.stream_id, b.end_stream, &enc);
        Ok(())
    }

    /// Appends a header block to `out` as HEADERS plus CONTINUATION frames.
    fn emit_block(&mut self, stream_id: u32, end_stream: bool, block: &[u8]) {
        let mut rest = block;
        let mut first = true;
        loop {
            let n = rest.len().min(MAX_OUT_FRAME);
            let (chunk, tail) = rest.split_at(n);
            let (ty, mut flags) = if first {
                let es = if end_stream { FLAG_END_STREAM } else { 0 };
                (TYPE_HEADERS, es)
            } else {
                (TYPE_CONTINUATION, 0)
            };
            if tail.is_empty() {
                flags |= FLAG_END_HEADERS;
            }
            put_frame_header(&mut self.out, chunk.len(), ty, flags, stream_id);
            self.out.extend_from_slice(chunk);
            rest = tail;
            first = false;
            if rest.is_empty() {
                return;
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AuthorityFix<S> {
    /// Reads up to [`READ_CHUNK`] more bytes into `inbuf`; `Ok(0)` means end of stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let start = self.inbuf.len();
        self.inbuf.resize(start + READ_CHUNK, 0);
        let mut rb = ReadBuf::new(&mut self.inbuf[start..]);
        let res = Pin::new(&mut self.inner).poll_read(cx, &mut rb);
        let n = rb.filled().len();
        self.inbuf.truncate(start + n);
        match res {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(n)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.error.take() {
            return Poll::Ready(Err(e));
        }
        let start = buf.filled().len();
        loop {
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                buf.put_slice(&this.out[..n]);
                this.out.advance(n);
                continue;
            }
            let passing = this.mode == Mode::Raw || this.pass_left > 0;
            if passing && !this.inbuf.is_empty() {
                let mut n = this.inbuf.len().min(buf.remaining());
                if this.mode != Mode::Raw {
                    n = n.min(this.pass_left);
                    this.pass_left -= n;
                }
                buf.put_slice(&this.inbuf[..n]);
                this.inbuf.advance(n);
                continue;
            }
            if passing {
                // Verbatim bytes go straight from the socket into the caller's buffer. Once we
                // have produced something we return rather than risk a Pending.
                if buf.filled().len() > start {
                    return Poll::Ready(Ok(()));
                }
                if this.mode == Mode::Raw {
                    return Pin::new(&mut this.inner).poll_read(cx, buf);
                }
                let want = this.pass_left.min(buf.remaining());
                let mut rb = ReadBuf::new(buf.initialize_unfilled_to(want));
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
                let n = rb.filled().len();
                buf.advance(n);
                this.pass_left -= n;
                // n == 0 is end of stream mid-frame: report it, the server deals with it.
                return Poll::Ready(Ok(()));
            }
            match this.step() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    this.mode = Mode::Failed;
                    if buf.filled().len() > start {
                        this.error = Some(e);
                        return Poll::Ready(Ok(()));
                    }
                    return Poll::Ready(Err(e));
                }
            }
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            if ready!(this.poll_fill(cx))? == 0 {
                if this.mode == Mode::Preface && !this.inbuf.is_empty() {
                    // A short non-preface: hand the bytes over as they are.
                    this.mode = Mode::Raw;
                    continue;
                }
                // End of stream; a partial frame we held back is dropped, which the server
                // sees as the connection closing at a frame boundary.
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// tonic asks the IO type for connection info; hand out the socket's, so request extensions
/// carry the same `TcpConnectInfo` as without the adapter.
impl<S: Connected> Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The accepted connections of `listener`, each wrapped in [`AuthorityFix`]; a drop-in for
/// `TcpListenerStream::new(listener)` as tonic's `serve_with_incoming*` argument.
pub fn wrap_incoming(
    listener: TcpListener,
) -> impl Stream<Item = io::Result<AuthorityFix<Coalesce<TcpStream>>>> + Send + 'static {
    TcpListenerStream::new(listener).map(|conn| {
        conn.map(|c| {
            // Small request/response RPCs: never wait on Nagle's algorithm.
            let _ = c.set_nodelay(true);
            AuthorityFix::new(Coalesce::new(c))
        })
    })
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from client: {msg}"),
    )
}

/// The header block fragment of a HEADERS payload, without padding and priority fields.
fn headers_fragment(flags: u8, payload: &[u8]) -> io::Result<&[u8]> {
    let mut p = payload;
    let mut pad = 0;
    if flags & FLAG_PADDED != 0 {
        let (&n, rest) = p
            .split_first()
            .ok_or_else(|| invalid("PADDED HEADERS without pad length"))?;
        pad = usize::from(n);
        p = rest;
    }
    if flags & FLAG_PRIORITY != 0 {
        // Stream dependency and weight: h2 ignores priorities, so we drop them.
        p = p
            .get(5..)
            .ok_or_else(|| invalid("HEADERS too short for PRIORITY"))?;
    }
    let end = p
        .len()
        .checked_sub(pad)
        .ok_or_else(|| invalid("HEADERS padding exceeds payload"))?;
    Ok(&p[..end])
}

/// `scheme://host:port[/...]` becomes `host:port`; anything else is left alone.
fn fix_authority(v: &[u8]) -> &[u8] {
    let Some(i) = v.windows(3).position(|w| w == b"://") else {
        return v;
    };
    let rest = &v[i + 3..];
    let rest = match rest.iter().position(|&c| c == b'/') {
        Some(j) => &rest[..j],
        None => rest,
    };
    // An empty result is no better than the original; let the server reject that.
    if rest.is_empty() {
        v
    } else {
        rest
    }
}

fn put_frame_header(out: &mut BytesMut, len: usize, ty: u8, flags: u8, stream_id: u32) {
    // len <= MAX_OUT_FRAME, so it fits the 24-bit field.
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], ty, flags]);
    out.extend_from_slice(&stream_id.to_be_bytes());
}

/// Appends one "literal header field without indexing" (RFC 7541 §6.2.2), naming the field by
/// static-table index where there is one; strings are raw (no Huffman).
fn encode_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match static_name_index(name) {
        Some(i) => encode_int(out, 0x00, 4, i),
        None => {
            out.push(0x00);
            encode_str(out, name);
        }
    }
    encode_str(out, value);
}

fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    encode_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

/// RFC 7541 §5.1 integer with an N-bit prefix; `high` holds the bits above the prefix.
fn encode_int(out: &mut Vec<u8>, high: u8, prefix: u8, v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    let mut v = v - max;
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// First index of `name` in the HPACK static table (RFC 7541 Appendix A).
fn static_name_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loona_hpack::Encoder;
    use tokio::io::AsyncReadExt;

    type Headers = Vec<(Vec<u8>, Vec<u8>)>;

    /// An inner stream that yields its bytes a few at a time and is Pending every other poll,
    /// to exercise partial reads and wake-ups on both sides of the adapter.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        polls: usize,
    }

    impl Trickle {
        fn new(data: Vec<u8>) -> Self {
            Trickle {
                data,
                pos: 0,
                polls: 0,
            }
        }
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            this.polls += 1;
            if this.polls.is_multiple_of(2) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let step = 1 + this.polls % 11;
            let n = step.min(buf.remaining()).min(this.data.len() - this.pos);
            buf.put_slice(&this.data[this.pos..this.pos + n]);
            this.pos += n;
            Poll::Ready(Ok(()))
        }
    }

    fn hdrs(list: &[(&str, &str)]) -> Headers {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn frame(out: &mut Vec<u8>, ty: u8, flags: u8, stream: u32, payload: &[u8]) {
        let l = (payload.len() as u32).to_be_bytes();
        out.extend_from_slice(&[l[1], l[2], l[3], ty, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
    }

    fn encode(enc: &mut Encoder<'_>, h: &Headers) -> Vec<u8> {
        enc.encode(h.iter().map(|(n, v)| (&n[..], &v[..])))
    }

    /// Reads everything through the adapter with read buffers of 1 to 7 bytes.
    async fn read_all_small<S: AsyncRead + Unpin>(s: &mut AuthorityFix<S>) -> io::Result<Vec<u8>> {
        let mut got = Vec::new();
        let mut i = 0;
        loop {
            let mut small = [0u8; 7];
            let size = 1 + i % 7;
            i += 1;
            let n = s.read(&mut small[..size]).await?;
            if n == 0 {
                return Ok(got);
            }
            got.extend_from_slice(&small[..n]);
        }
    }

    #[derive(Debug, PartialEq)]
    struct Frame {
        ty: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    }

    fn parse_frames(mut b: &[u8]) -> Vec<Frame> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let len = ((b[0] as usize) << 16) | ((b[1] as usize) << 8) | b[2] as usize;
            v.push(Frame {
                ty: b[3],
                flags: b[4],
                stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]),
                payload: b[9..9 + len].to_vec(),
            });
            b = &b[9 + len..];
        }
        v
    }

    /// Decodes an output block with a fresh decoder: it must not lean on any dynamic table.
    fn decode_fresh(block: &[u8]) -> Headers {
        Decoder::new().decode(block).expect("output block decodes")
    }

    fn request(path: &str) -> Headers {
        hdrs(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "http://127.0.0.1:2379"),
            ("content-type", "application/grpc"),
            ("user-agent", "grpc-go/1.26.0"),
            ("te", "trailers"),
            ("x-custom", "something"),
        ])
    }

    fn fixed(mut h: Headers) -> Headers {
        for (n, v) in h.iter_mut() {
            if n == b":authority" {
                *v = b"127.0.0.1:2379".to_vec();
            }
        }
        h
    }

    #[tokio::test]
    async fn rewrites_authority_and_passes_the_rest() {
        let mut enc = Encoder::new();
        let mut input = PREFACE.to_vec();
        let settings = [0u8, 3, 0, 0, 0, 100];
        frame(&mut input, 0x4, 0, 0, &settings);

        // Stream 1: HEADERS (padded, with priority) + two CONTINUATIONs.
        let req1 = request("/etcdserverpb.Maintenance/Status");
        let block1 = encode(&mut enc, &req1);
        let (a, rest) = block1.split_at(10);
        let (b, c) = rest.split_at(7);
        let mut p = vec![5u8];
        p.extend_from_slice(&[0x80, 0, 0, 3, 15]);
        p.extend_from_slice(a);
        p.extend_from_slice(&[0; 5]);
        frame(&mut input, TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY, 1, &p);
        frame(&mut input, TYPE_CONTINUATION, 0, 1, b);
        frame(&mut input, TYPE_CONTINUATION, FLAG_END_HEADERS, 1, c);
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        frame(&mut input, 0x0, FLAG_END_STREAM, 1, &data);

        // Stream 3: a table size update (to the current 4096) then indexed references into
        // the dynamic table stream 1 filled.
        let req3 = request("/etcdserverpb.Maintenance/HashKV");
        let mut block3 = vec![0x3f, 0xe1, 0x1f];
        block3.extend_from_slice(&encode(&mut enc, &req3));
        frame(
            &mut input,
            TYPE_HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM,
            3,
            &block3,
        );
        assert!(
            Decoder::new().decode(&block3).is_err(),
            "the second block must lean on the dynamic table the first one filled"
        );

        // Stream 5: RFC 7541 C.4.1 (Huffman strings, incremental indexing).
        let block5 = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        frame(&mut input, TYPE_HEADERS, FLAG_END_HEADERS, 5, &block5);
        // Stream 7: shrink the table to 0 (evicting everything), then a literal authority.
        let mut block7 = vec![0x20, 0x82, 0x86, 0x84, 0x01, 0x14];
        block7.extend_from_slice(b"https://example.com/");
        frame(&mut input, TYPE_HEADERS, FLAG_END_HEADERS, 7, &block7);
        frame(&mut input, 0x6, 0, 0, b"pingpong");
        frame(&mut input, 0x8, 0, 0, &[0, 0, 1, 0]);

        let mut s = AuthorityFix::new(Trickle::new(input));
        let got = read_all_small(&mut s).await.expect("reads cleanly");

        assert_eq!(&got[..24], PREFACE);
        let frames = parse_frames(&got[24..]);
        let kinds: Vec<(u8, u8, u32)> = frames.iter().map(|f| (f.ty, f.flags, f.stream)).collect();
        assert_eq!(
            kinds,
            vec![
                (0x4, 0, 0),
                (TYPE_HEADERS, FLAG_END_HEADERS, 1),
                (0x0, FLAG_END_STREAM, 1),
                (TYPE_HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 3),
                (TYPE_HEADERS, FLAG_END_HEADERS, 5),
                (TYPE_HEADERS, FLAG_END_HEADERS, 7),
                (0x6, 0, 0),
                (0x8, 0, 0),
            ]
        );
        assert_eq!(frames[0].payload, settings);
        assert_eq!(decode_fresh(&frames[1].payload), fixed(req1));
        assert_eq!(frames[2].payload, data);
        assert_eq!(decode_fresh(&frames[3].payload), fixed(req3));
        assert_eq!(
            decode_fresh(&frames[4].payload),
            hdrs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ])
        );
        assert_eq!(
            decode_fresh(&frames[5].payload),
            hdrs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "example.com"),
            ])
        );
        assert_eq!(frames[6].payload, b"pingpong");
        assert_eq!(frames[7].payload, [0, 0, 1, 0]);
    }

    #[tokio::test]
    async fn a_proper_first_block_switches_to_pass_through() {
        let mut enc = Encoder::new();
        let mut input = PREFACE.to_vec();
        let good = fixed(request("/etcdserverpb.KV/Put"));
        let block1 = encode(&mut enc, &good);
        frame(&mut input, TYPE_HEADERS, FLAG_END_HEADERS, 1, &block1);
        frame(&mut input, 0x0, FLAG_END_STREAM, 1, b"payload");
        // Later blocks lean on the dynamic table the first one filled; a bad authority there
        // is no longer repaired (real clients keep one authority per connection).
        let block3 = encode(&mut enc, &request("/etcdserverpb.KV/Range"));
        frame(&mut input, TYPE_HEADERS, FLAG_END_HEADERS, 3, &block3);

        let mut fix = AuthorityFix::new(Trickle::new(input.clone()));
        let got = read_all_small(&mut fix).await.unwrap();
        assert_eq!(got, input, "every byte passes through unchanged");
        assert_eq!(fix.mode, Mode::Raw);

        // The same connection with a URL-shaped authority first stays in repair mode.
        let mut enc = Encoder::new();
        let mut input = PREFACE.to_vec();
        let bad = encode(&mut enc, &request("/etcdserverpb.Maintenance/Status"));
        frame(&mut input, TYPE_HEADERS, FLAG_END_HEADERS, 1, &bad);
        let mut fix = AuthorityFix::new(Trickle::new(input));
        let got = read_all_small(&mut fix).await.unwrap();
        let frames = parse_frames(&got[PREFACE.len()..]);
        assert_eq!(
            decode_fresh(&frames[0].payload),
            fixed(request("/etcdserverpb.Maintenance/Status"))
        );
        assert_eq!(fix.mode, Mode::Frames);
    }

    #[tokio::test]
    async fn large_block_is_split_into_continuations() {
        let mut enc = Encoder::new();
        let mut req = request("/big");
        let big = "v".repeat(40_000);
        req.push((b"x-big".to_vec(), big.clone().into_bytes()));
        let block = encode(&mut enc, &req);
        let mut input = PREFACE.to_vec();
        let (a, b) = block.split_at(16_384);
        let (b, c) = b.split_at(16_384);
        frame(&mut input, TYPE_HEADERS, FLAG_END_STREAM, 1, a);
        frame(&mut input, TYPE_CONTINUATION, 0, 1, b);
        frame(&mut input, TYPE_CONTINUATION, FLAG_END_HEADERS, 1, c);
        frame(&mut input, 0x0, FLAG_END_STREAM, 3, b"tail");

        let mut s = AuthorityFix::new(&input[..]);
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("reads cleanly");
        let frames = parse_frames(&got[24..]);
        let kinds: Vec<(u8, u8)> = frames.iter().map(|f| (f.ty, f.flags)).collect();
        assert_eq!(
            kinds,
            vec![
                (TYPE_HEADERS, FLAG_END_STREAM),
                (TYPE_CONTINUATION, 0),
                (TYPE_CONTINUATION, FLAG_END_HEADERS),
                (0x0, FLAG_END_STREAM),
            ]
        );
        assert!(frames[..3].iter().all(|f| f.stream == 1));
        assert_eq!(frames[0].payload.len(), MAX_OUT_FRAME);
        assert_eq!(frames[1].payload.len(), MAX_OUT_FRAME);
        let block: Vec<u8> = frames[..3].iter().flat_map(|f| f.payload.clone()).collect();
        assert_eq!(decode_fresh(&block), fixed(req));
        assert_eq!(frames[3].payload, b"tail");
    }

    async fn read_err(input: Vec<u8>) -> io::Error {
        let mut s = AuthorityFix::new(&input[..]);
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect_err("must fail")
    }

    #[tokio::test]
    async fn garbage_is_an_error_not_a_panic() {
        // Bad HPACK: an index far past both tables.
        let mut input = PREFACE.to_vec();
        frame(
            &mut input,
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &[0xff, 0xff, 0x7f],
        );
        assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);

        // Bad HPACK: an over-long integer and a truncated string.
        for block in [
            &[0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..],
            &[0x00, 0x05, b'a'],
        ] {
            let mut input = PREFACE.to_vec();
            frame(&mut input, TYPE_HEADERS, FLAG_END_HEADERS, 1, block);
            assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);
        }

        // Padding longer than the payload.
        let mut input = PREFACE.to_vec();
        frame(
            &mut input,
            TYPE_HEADERS,
            FLAG_END_HEADERS | FLAG_PADDED,
            1,
            &[9, 0x82],
        );
        assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);

        // A table size update past our cap.
        let mut input = PREFACE.to_vec();
        frame(
            &mut input,
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &[0x3f, 0xff, 0xff, 0x7f, 0x82],
        );
        assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);

        // Another frame in the middle of a header block.
        let mut input = PREFACE.to_vec();
        frame(&mut input, TYPE_HEADERS, 0, 1, &[0x82]);
        frame(&mut input, 0x0, 0, 1, b"x");
        assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);

        // A header block that never ends.
        let mut input = PREFACE.to_vec();
        frame(&mut input, TYPE_HEADERS, 0, 1, &[0x82]);
        for _ in 0..70 {
            frame(&mut input, TYPE_CONTINUATION, 0, 1, &[0x82; 16_384]);
        }
        assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);

        // Indexed references that would expand past the cap once re-encoded.
        let mut input = PREFACE.to_vec();
        let mut block = vec![0x40, 0x01, b'x', 0x7f, 0xa1, 0x1e];
        block.extend_from_slice(&[b'y'; 4000]);
        block.extend_from_slice(&[0xbe; 16_000]);
        frame(&mut input, TYPE_HEADERS, 0, 1, &block[..16_000]);
        frame(
            &mut input,
            TYPE_CONTINUATION,
            FLAG_END_HEADERS,
            1,
            &block[16_000..],
        );
        assert_eq!(read_err(input).await.kind(), io::ErrorKind::InvalidData);

        // Pseudo-random frames: any outcome but a panic.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let mut input = PREFACE.to_vec();
            for _ in 0..50 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                input.extend_from_slice(&seed.to_le_bytes());
                if seed.is_multiple_of(5) {
                    let len = (seed >> 40) as usize % 40;
                    let ty = [TYPE_HEADERS, TYPE_CONTINUATION][(seed >> 20) as usize % 2];
                    let body: Vec<u8> = (0..len).map(|i| (seed >> (i % 56)) as u8).collect();
                    frame(&mut input, ty, (seed >> 8) as u8, 1, &body);
                }
            }
            let mut s = AuthorityFix::new(&input[..]);
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got).await;
        }
    }

    #[tokio::test]
    async fn non_http2_passes_through() {
        let input = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        let mut s = AuthorityFix::new(Trickle::new(input.clone()));
        assert_eq!(read_all_small(&mut s).await.expect("reads"), input);
        let mut s = AuthorityFix::new(&b"PRI * HT"[..]);
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("reads");
        assert_eq!(got, b"PRI * HT");
    }

    #[test]
    fn authority_forms() {
        assert_eq!(fix_authority(b"http://127.0.0.1:2379"), b"127.0.0.1:2379");
        assert_eq!(fix_authority(b"https://h:1/"), b"h:1");
        assert_eq!(fix_authority(b"http://h:1/x/y"), b"h:1");
        assert_eq!(fix_authority(b"127.0.0.1:2379"), b"127.0.0.1:2379");
        assert_eq!(fix_authority(b"http://"), b"http://");
    }

    #[test]
    fn integers_round_trip_through_the_decoder() {
        for v in [0usize, 14, 15, 16, 127, 128, 1337, 16_384, 1 << 20] {
            let mut b = Vec::new();
            encode_literal(&mut b, b"x-n", &vec![b'a'; v]);
            encode_literal(&mut b, b":path", b"/");
            let h = decode_fresh(&b);
            assert_eq!(h[0].1.len(), v);
            assert_eq!(h[1], (b":path".to_vec(), b"/".to_vec()));
        }
    }
}
