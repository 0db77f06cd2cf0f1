//! SPDY/3.1 framing, as much as a client of a container runtime's streaming server needs (the agent
//! speaks it to containerd when it translates kubectl's WebSocket `v5.channel.k8s.io`, see [`super::ws`]).
//!
//! The wire format (draft-mbelshe-httpbis-spdy-00, version 3):
//!
//! - a control frame is `1 | version:15 | type:16`, `flags:8 | length:24`, then `length` bytes of
//!   payload; a data frame is `0 | stream id:31`, `flags:8 | length:24`, then the data. Flag `0x01`
//!   is FIN on both (the sender's half of the stream is done).
//! - SYN_STREAM (1): stream id, associated stream id, `priority:3 | unused:5 | slot:8`, header block;
//!   SYN_REPLY (2) and HEADERS (8): stream id, header block; RST_STREAM (3): stream id, status;
//!   SETTINGS (4): count, then `flags:8 | id:24 | value:32` entries; PING (6): id; GOAWAY (7): last good
//!   stream id, status; WINDOW_UPDATE (9): stream id, delta. Other types are skipped.
//! - A header block is `count:32`, then per header `len:32 name len:32 value` (several values of one
//!   name joined by NUL), names lower-case. Every header block a peer sends is one more piece of a
//!   single zlib stream per direction, compressed with the SPDY/3 dictionary ([`DICTIONARY`]) and
//!   sync-flushed at the end of each block: [`HeaderEncoder`] and [`HeaderDecoder`] keep that state, so
//!   one of each belongs to one connection.
//!
//! Flow control: SPDY/3.1 has 64 KiB windows, but the Go implementation kubelets and containerd use
//! (spdystream) neither enforces nor sends WINDOW_UPDATE, so neither does this module; a frame is
//! limited only by the 24-bit length ([`MAX_DATA`]).
//!
//! Everything read is checked: a malformed frame is an [`Error`], never a panic. A frame longer than
//! [`MAX_FRAME`] is refused before its payload is buffered.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

/// SPDY/3.
pub const VERSION: u16 = 3;
/// The FIN flag of data and control frames.
pub const FLAG_FIN: u8 = 0x01;
/// The most data one frame carries (24-bit length).
pub const MAX_DATA: usize = (1 << 24) - 1;
/// The largest frame [`FrameReader`] accepts.
pub const MAX_FRAME: usize = 1 << 20;
/// The most bytes a header block may expand to.
const MAX_HEADER_BLOCK: usize = 1 << 20;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// Header names and values, in order; names lower-case.
pub type Headers = Vec<(String, String)>;

/// One SPDY frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Opens a stream.
    SynStream {
        /// Odd for client-initiated streams.
        stream_id: u32,
        /// The stream this one belongs to (0: none).
        associated_to: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// [`FLAG_FIN`], `0x02` (unidirectional).
        flags: u8,
        /// The stream's headers.
        headers: Headers,
    },
    /// Accepts a stream.
    SynReply {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// Reply headers.
        headers: Headers,
    },
    /// Ends a stream abnormally.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Why (1 protocol error, 5 cancel, …).
        status: u32,
    },
    /// Connection settings: `(flags, id, value)`.
    Settings(Vec<(u8, u32, u32)>),
    /// A ping to echo back (ids of the peer's own pings have the other parity).
    Ping(u32),
    /// The sender accepts no new streams.
    GoAway {
        /// The last stream the sender handled.
        last_good_stream_id: u32,
        /// 0 OK, 1 protocol error, 2 internal error.
        status: u32,
    },
    /// More headers for a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The headers.
        headers: Headers,
    },
    /// Flow control credit.
    WindowUpdate {
        /// The stream (0: the connection).
        stream_id: u32,
        /// Bytes added to the window.
        delta: u32,
    },
    /// Stream data.
    Data {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The bytes.
        data: Bytes,
    },
    /// A control frame of a type this module does not know (skipped).
    Unknown {
        /// Its type.
        frame_type: u16,
    },
}

/// What can go wrong reading or writing SPDY.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed.
    #[error("spdy connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not SPDY/3.
    #[error("spdy protocol error: {0}")]
    Protocol(String),
    /// A header block did not (de)compress.
    #[error("spdy header compression: {0}")]
    Compression(String),
}

fn protocol(msg: impl Into<String>) -> Error {
    Error::Protocol(msg.into())
}

/// The SPDY/3 header compression dictionary: the length-prefixed words, then the text that follows.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information",
    "204 No Content",
    "301 Moved Permanently",
    "400 Bad Request",
    "401 Unauthorized",
    "403 Forbidden",
    "404 Not Found",
    "500 Internal Server Error",
    "501 Not Implemented",
    "503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,",
    "text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch",
    "charset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The dictionary's bytes (1423 of them).
pub fn dictionary() -> &'static [u8] {
    static DICT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DICT.get_or_init(|| {
        let mut d = Vec::with_capacity(1423);
        for w in DICTIONARY_WORDS {
            d.put_u32(w.len() as u32);
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
        d
    })
}

/// The sending half of a connection's header compression.
pub struct HeaderEncoder {
    z: Compress,
}

impl std::fmt::Debug for HeaderEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderEncoder")
    }
}

impl HeaderEncoder {
    /// A new zlib stream primed with the dictionary.
    pub fn new() -> Result<HeaderEncoder, Error> {
        let mut z = Compress::new(Compression::best(), true);
        z.set_dictionary(dictionary())
            .map_err(|e| Error::Compression(e.to_string()))?;
        Ok(HeaderEncoder { z })
    }

    /// One compressed header block (sync-flushed, so the peer can decode it on its own).
    pub fn encode(&mut self, headers: &[(String, String)]) -> Result<Vec<u8>, Error> {
        let mut plain = Vec::new();
        plain.put_u32(headers.len() as u32);
        for (k, v) in headers {
            plain.put_u32(k.len() as u32);
            plain.extend_from_slice(k.to_ascii_lowercase().as_bytes());
            plain.put_u32(v.len() as u32);
            plain.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut input = plain.as_slice();
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(256));
            }
            let before = self.z.total_in();
            self.z
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| Error::Compression(e.to_string()))?;
            let used = usize::try_from(self.z.total_in() - before).unwrap_or(input.len());
            input = input.get(used..).unwrap_or_default();
            // Done once all input is in and the flush left spare room (nothing more pending).
            if input.is_empty() && out.capacity() > out.len() {
                return Ok(out);
            }
        }
    }
}

/// The receiving half of a connection's header compression.
pub struct HeaderDecoder {
    z: Decompress,
}

impl std::fmt::Debug for HeaderDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderDecoder")
    }
}

impl Default for HeaderDecoder {
    fn default() -> Self {
        HeaderDecoder::new()
    }
}

impl HeaderDecoder {
    /// A decoder for a new connection.
    pub fn new() -> HeaderDecoder {
        HeaderDecoder {
            z: Decompress::new(true),
        }
    }

    /// Decodes one header block.
    pub fn decode(&mut self, block: &[u8]) -> Result<Headers, Error> {
        let mut out: Vec<u8> = Vec::with_capacity(block.len() * 4 + 64);
        let mut input = block;
        loop {
            if out.len() > MAX_HEADER_BLOCK {
                return Err(Error::Compression("header block too large".into()));
            }
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(1024));
            }
            let before = self.z.total_in();
            let res = self
                .z
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = usize::try_from(self.z.total_in() - before).unwrap_or(input.len());
            input = input.get(used..).unwrap_or_default();
            match res {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {
                    if input.is_empty() && out.capacity() > out.len() {
                        break;
                    }
                }
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(dictionary())
                        .map_err(|e| Error::Compression(e.to_string()))?;
                }
                Err(e) => return Err(Error::Compression(e.to_string())),
            }
        }
        parse_header_block(&out)
    }
}

fn parse_header_block(mut b: &[u8]) -> Result<Headers, Error> {
    let take_u32 = |b: &mut &[u8]| -> Result<u32, Error> {
        if b.len() < 4 {
            return Err(protocol("truncated header block"));
        }
        Ok(b.get_u32())
    };
    let take_str = |b: &mut &[u8]| -> Result<String, Error> {
        let n = take_u32(b)? as usize;
        if b.len() < n {
            return Err(protocol("truncated header block"));
        }
        let s = String::from_utf8_lossy(&b[..n]).into_owned();
        b.advance(n);
        Ok(s)
    };
    let count = take_u32(&mut b)?;
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = take_str(&mut b)?;
        let value = take_str(&mut b)?;
        for v in value.split('\0') {
            headers.push((name.clone(), v.to_string()));
        }
    }
    Ok(headers)
}

fn control(out: &mut BytesMut, frame_type: u16, flags: u8, payload: &[u8]) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(frame_type);
    out.put_u32((u32::from(flags) << 24) | (payload.len() as u32 & 0x00ff_ffff));
    out.extend_from_slice(payload);
}

/// Appends the wire form of `frame` to `out`; header blocks go through `enc`. Data longer than
/// [`MAX_DATA`] is an error (callers split it).
pub fn encode(frame: &Frame, enc: &mut HeaderEncoder, out: &mut BytesMut) -> Result<(), Error> {
    let mut p = BytesMut::new();
    match frame {
        Frame::SynStream {
            stream_id,
            associated_to,
            priority,
            flags,
            headers,
        } => {
            p.put_u32(stream_id & 0x7fff_ffff);
            p.put_u32(associated_to & 0x7fff_ffff);
            p.put_u8((priority & 0x07) << 5);
            p.put_u8(0);
            p.extend_from_slice(&enc.encode(headers)?);
            control(out, SYN_STREAM, *flags, &p);
        }
        Frame::SynReply {
            stream_id,
            flags,
            headers,
        } => {
            p.put_u32(stream_id & 0x7fff_ffff);
            p.extend_from_slice(&enc.encode(headers)?);
            control(out, SYN_REPLY, *flags, &p);
        }
        Frame::Headers {
            stream_id,
            flags,
            headers,
        } => {
            p.put_u32(stream_id & 0x7fff_ffff);
            p.extend_from_slice(&enc.encode(headers)?);
            control(out, HEADERS, *flags, &p);
        }
        Frame::RstStream { stream_id, status } => {
            p.put_u32(stream_id & 0x7fff_ffff);
            p.put_u32(*status);
            control(out, RST_STREAM, 0, &p);
        }
        Frame::Settings(entries) => {
            p.put_u32(entries.len() as u32);
            for (flags, id, value) in entries {
                p.put_u32((u32::from(*flags) << 24) | (id & 0x00ff_ffff));
                p.put_u32(*value);
            }
            control(out, SETTINGS, 0, &p);
        }
        Frame::Ping(id) => {
            p.put_u32(*id);
            control(out, PING, 0, &p);
        }
        Frame::GoAway {
            last_good_stream_id,
            status,
        } => {
            p.put_u32(last_good_stream_id & 0x7fff_ffff);
            p.put_u32(*status);
            control(out, GOAWAY, 0, &p);
        }
        Frame::WindowUpdate { stream_id, delta } => {
            p.put_u32(stream_id & 0x7fff_ffff);
            p.put_u32(delta & 0x7fff_ffff);
            control(out, WINDOW_UPDATE, 0, &p);
        }
        Frame::Data {
            stream_id,
            flags,
            data,
        } => {
            if data.len() > MAX_DATA {
                return Err(protocol("data frame longer than 2^24-1 bytes"));
            }
            out.put_u32(stream_id & 0x7fff_ffff);
            out.put_u32((u32::from(*flags) << 24) | data.len() as u32);
            out.extend_from_slice(data);
        }
        Frame::Unknown { frame_type } => {
            return Err(protocol(format!("cannot write frame type {frame_type}")))
        }
    }
    Ok(())
}

/// Decodes one frame from its 8-byte header and payload.
pub fn decode(head: [u8; 8], payload: Bytes, dec: &mut HeaderDecoder) -> Result<Frame, Error> {
    let w0 = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let flags = head[4];
    if w0 & 0x8000_0000 == 0 {
        return Ok(Frame::Data {
            stream_id: w0 & 0x7fff_ffff,
            flags,
            data: payload,
        });
    }
    let version = ((w0 >> 16) & 0x7fff) as u16;
    if version != VERSION {
        return Err(protocol(format!("SPDY version {version}, not 3")));
    }
    let frame_type = (w0 & 0xffff) as u16;
    let mut p = payload;
    let need = |p: &Bytes, n: usize, what: &str| -> Result<(), Error> {
        if p.len() < n {
            Err(protocol(format!("{what} frame too short")))
        } else {
            Ok(())
        }
    };
    Ok(match frame_type {
        SYN_STREAM => {
            need(&p, 10, "SYN_STREAM")?;
            let stream_id = p.get_u32() & 0x7fff_ffff;
            let associated_to = p.get_u32() & 0x7fff_ffff;
            let priority = p.get_u8() >> 5;
            let _slot = p.get_u8();
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                flags,
                headers: dec.decode(&p)?,
            }
        }
        SYN_REPLY | HEADERS => {
            need(&p, 4, "SYN_REPLY/HEADERS")?;
            let stream_id = p.get_u32() & 0x7fff_ffff;
            let headers = dec.decode(&p)?;
            if frame_type == SYN_REPLY {
                Frame::SynReply {
                    stream_id,
                    flags,
                    headers,
                }
            } else {
                Frame::Headers {
                    stream_id,
                    flags,
                    headers,
                }
            }
        }
        RST_STREAM => {
            need(&p, 8, "RST_STREAM")?;
            Frame::RstStream {
                stream_id: p.get_u32() & 0x7fff_ffff,
                status: p.get_u32(),
            }
        }
        SETTINGS => {
            need(&p, 4, "SETTINGS")?;
            let n = p.get_u32() as usize;
            if p.len() / 8 < n {
                return Err(protocol("SETTINGS frame too short"));
            }
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let fid = p.get_u32();
                entries.push(((fid >> 24) as u8, fid & 0x00ff_ffff, p.get_u32()));
            }
            Frame::Settings(entries)
        }
        PING => {
            need(&p, 4, "PING")?;
            Frame::Ping(p.get_u32())
        }
        GOAWAY => {
            need(&p, 8, "GOAWAY")?;
            Frame::GoAway {
                last_good_stream_id: p.get_u32() & 0x7fff_ffff,
                status: p.get_u32(),
            }
        }
        WINDOW_UPDATE => {
            need(&p, 8, "WINDOW_UPDATE")?;
            Frame::WindowUpdate {
                stream_id: p.get_u32() & 0x7fff_ffff,
                delta: p.get_u32() & 0x7fff_ffff,
            }
        }
        other => Frame::Unknown { frame_type: other },
    })
}

/// Reads frames from one direction of a connection.
#[derive(Debug)]
pub struct FrameReader<R> {
    r: R,
    dec: HeaderDecoder,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Frames from `r`.
    pub fn new(r: R) -> FrameReader<R> {
        FrameReader {
            r,
            dec: HeaderDecoder::new(),
        }
    }

    /// The next frame; `None` at a clean end of the connection (between frames).
    pub async fn next(&mut self) -> Result<Option<Frame>, Error> {
        let mut head = [0u8; 8];
        let mut got = 0;
        while got < head.len() {
            let n = self.r.read(&mut head[got..]).await?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                return Err(protocol("connection ended inside a frame header"));
            }
            got += n;
        }
        let len = (u32::from_be_bytes([0, head[5], head[6], head[7]])) as usize;
        if len > MAX_FRAME {
            return Err(protocol(format!("frame of {len} bytes")));
        }
        let mut payload = vec![0u8; len];
        self.r.read_exact(&mut payload).await?;
        decode(head, Bytes::from(payload), &mut self.dec).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn split(buf: &[u8]) -> Vec<([u8; 8], Bytes)> {
        let mut out = Vec::new();
        let mut b = buf;
        while !b.is_empty() {
            let mut head = [0u8; 8];
            head.copy_from_slice(&b[..8]);
            let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
            out.push((head, Bytes::copy_from_slice(&b[8..8 + len])));
            b = &b[8 + len..];
        }
        out
    }

    #[test]
    fn dictionary_is_the_spdy3_one() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\0\0\0\x07options");
        assert!(d.ends_with(b",*,enq=0."));
    }

    #[test]
    fn every_frame_round_trips_and_headers_share_one_zlib_stream() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: h(&[("streamtype", "error")]),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 0,
                priority: 7,
                flags: FLAG_FIN,
                headers: h(&[("streamtype", "stdin"), ("port", "8080")]),
            },
            Frame::SynReply {
                stream_id: 3,
                flags: 0,
                headers: vec![],
            },
            Frame::Headers {
                stream_id: 3,
                flags: FLAG_FIN,
                headers: h(&[("x", "a"), ("x", "b")]),
            },
            Frame::RstStream {
                stream_id: 5,
                status: 5,
            },
            Frame::Settings(vec![(1, 7, 65536), (0, 4, 100)]),
            Frame::Ping(2),
            Frame::GoAway {
                last_good_stream_id: 9,
                status: 0,
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 1 << 20,
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Data {
                stream_id: 5,
                flags: 0,
                data: Bytes::new(),
            },
        ];
        let mut enc = HeaderEncoder::new().unwrap();
        let mut wire = BytesMut::new();
        for f in &frames {
            encode(f, &mut enc, &mut wire).unwrap();
        }
        let mut dec = HeaderDecoder::new();
        let back: Vec<Frame> = split(&wire)
            .into_iter()
            .map(|(head, p)| decode(head, p, &mut dec).unwrap())
            .collect();
        let mut want = frames.clone();
        // Several values of one name travel NUL-joined only when the sender joins them; ours are
        // separate entries, which read back the same.
        want[3] = Frame::Headers {
            stream_id: 3,
            flags: FLAG_FIN,
            headers: h(&[("x", "a"), ("x", "b")]),
        };
        assert_eq!(back, want);
    }

    #[test]
    fn header_blocks_use_the_dictionary() {
        let mut enc = HeaderEncoder::new().unwrap();
        let block = enc.encode(&h(&[("content-type", "text/plain")])).unwrap();
        // zlib header with FDICT set, then the dictionary's Adler-32.
        assert_eq!(block[1] & 0x20, 0x20);
        let adler = {
            let (mut a, mut b) = (1u32, 0u32);
            for &x in dictionary() {
                a = (a + u32::from(x)) % 65521;
                b = (b + a) % 65521;
            }
            (b << 16) | a
        };
        assert_eq!(
            u32::from_be_bytes([block[2], block[3], block[4], block[5]]),
            adler
        );
        // A decoder without the dictionary cannot read it; ours can.
        let mut plain = Decompress::new(true);
        let mut out = Vec::with_capacity(1024);
        assert!(plain
            .decompress_vec(&block, &mut out, FlushDecompress::Sync)
            .is_err());
        let mut dec = HeaderDecoder::new();
        assert_eq!(
            dec.decode(&block).unwrap(),
            h(&[("content-type", "text/plain")])
        );
    }

    #[test]
    fn nul_joined_values_split() {
        let mut plain = Vec::new();
        plain.put_u32(1);
        plain.put_u32(1);
        plain.extend_from_slice(b"x");
        plain.put_u32(3);
        plain.extend_from_slice(b"a\0b");
        assert_eq!(
            parse_header_block(&plain).unwrap(),
            h(&[("x", "a"), ("x", "b")])
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let mut dec = HeaderDecoder::new();
        // Wrong version.
        let head = [0x80, 2, 0, 1, 0, 0, 0, 0];
        assert!(decode(head, Bytes::new(), &mut dec).is_err());
        // Short control payloads.
        for t in [1u8, 2, 3, 4, 6, 7, 8, 9] {
            let head = [0x80, 3, 0, t, 0, 0, 0, 2];
            assert!(decode(head, Bytes::from_static(&[0, 1]), &mut dec).is_err());
        }
        // A header block that is not zlib, and one that lies about its count.
        let head = [0x80, 3, 0, 2, 0, 0, 0, 8];
        let junk = Bytes::from_static(&[0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
        assert!(decode(head, junk, &mut HeaderDecoder::new()).is_err());
        let mut lie = Vec::new();
        lie.put_u32(5);
        assert!(parse_header_block(&lie).is_err());
        // SETTINGS claiming more entries than it holds.
        let head = [0x80, 3, 0, 4, 0, 0, 0, 4];
        assert!(decode(
            head,
            Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]),
            &mut dec
        )
        .is_err());
        // Unknown control types are skipped.
        let head = [0x80, 3, 0, 0x0a, 0, 0, 0, 0];
        assert_eq!(
            decode(head, Bytes::new(), &mut dec).unwrap(),
            Frame::Unknown { frame_type: 10 }
        );
    }

    #[tokio::test]
    async fn reader_frames_a_byte_stream() {
        let mut enc = HeaderEncoder::new().unwrap();
        let mut wire = BytesMut::new();
        let a = Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers: vec![],
        };
        let b = Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: Bytes::from_static(b"{\"status\":\"Success\"}"),
        };
        encode(&a, &mut enc, &mut wire).unwrap();
        encode(&b, &mut enc, &mut wire).unwrap();
        let mut r = FrameReader::new(&wire[..]);
        assert_eq!(r.next().await.unwrap(), Some(a));
        assert_eq!(r.next().await.unwrap(), Some(b));
        assert_eq!(r.next().await.unwrap(), None);
        // Cut mid-frame: an error.
        let mut r = FrameReader::new(&wire[..5]);
        assert!(r.next().await.is_err());
        // Oversized.
        let big = [0u8, 0, 0, 1, 0, 0xff, 0xff, 0xff];
        let mut r = FrameReader::new(&big[..]);
        assert!(r.next().await.is_err());
    }
}
