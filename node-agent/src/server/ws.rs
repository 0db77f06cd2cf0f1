//! kubectl's WebSocket streaming, terminated by the agent and spoken to the runtime as SPDY/3.1.
//!
//! kubectl 1.31+ first asks for a WebSocket (`GET` with `Upgrade: websocket`) and falls back to SPDY
//! only when that upgrade is refused. containerd 1.6's streaming server refuses every WebSocket
//! protocol kubectl offers, so the agent, which knows the runtime's URL, does what kube-apiserver's
//! stream translator does upstream:
//!
//! - **exec and attach** (`v5.channel.k8s.io`, or `v4.channel.k8s.io` for older clients): every
//!   WebSocket message is binary, its first byte a channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4
//!   resize) and the rest that channel's bytes; v5 adds channel 255, whose one-byte payload names a
//!   channel the client has finished writing (kubectl sends `255 0` at the end of its stdin). The agent
//!   opens a SPDY/3.1 connection to the runtime (`X-Stream-Protocol-Version: v4.channel.k8s.io`) with one
//!   stream per channel, created as the kubelet expects them (header `streamtype`: `error`, then `stdin`,
//!   `stdout`, `stderr` unless there is a TTY, `resize` with one), and relays: stdin and resize data
//!   onto their streams, the close signal as FIN of the stdin stream, and the runtime's stdout, stderr
//!   and error data back on channels 1, 2 and 3. The runtime's error stream carries the v4 Status JSON
//!   (with the exit code as a `NonZeroExitCode` cause), which kubectl reads from channel 3 unchanged.
//!   When the runtime has finished every stream it writes (or closes), the agent sends a WebSocket close
//!   and waits, briefly, for the client's.
//! - **port-forward** (`SPDY/3.1+portforward.k8s.io`): kubectl runs SPDY itself and only tunnels its
//!   bytes through WebSocket binary messages. The agent strips the `SPDY/3.1+` prefix, upgrades to the
//!   runtime with the remaining protocols as `X-Stream-Protocol-Version`, answers the WebSocket with the
//!   prefix plus the protocol the runtime chose, and copies bytes: no SPDY parsing.
//!
//! An upgrade the runtime refuses is answered with the runtime's status and body, before any WebSocket
//! is accepted, so the client sees an ordinary upgrade failure. Sessions are counted in
//! [`SESSIONS`] by kind, transport and protocol (`keel_agent_stream_sessions_total` in `/metrics`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tracing::debug;

use super::spdy::{self, Frame, HeaderEncoder, FLAG_FIN};
use super::stream::{connect_runtime, text, RuntimeHttp};

/// The remote-command protocol with the close signal.
pub const V5: &str = "v5.channel.k8s.io";
/// The remote-command protocol before it (also what the agent speaks to the runtime over SPDY).
pub const V4: &str = "v4.channel.k8s.io";
/// kubectl's port-forward tunnel: a SPDY protocol behind this prefix.
pub const TUNNEL_PREFIX: &str = "SPDY/3.1+";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// How long the agent waits for the client to answer its WebSocket close.
const CLOSE_WAIT: Duration = Duration::from_secs(15);
/// Largest data frame the agent writes to the runtime.
const CHUNK: usize = 32 * 1024;

/// Streaming sessions since start: `(kind, transport, protocol)` → count.
pub static SESSIONS: Mutex<BTreeMap<(String, String, String), u64>> = Mutex::new(BTreeMap::new());

/// Counts one session that got past its upgrade.
pub fn count(kind: &str, transport: &str, protocol: &str) {
    if let Ok(mut m) = SESSIONS.lock() {
        *m.entry((kind.into(), transport.into(), protocol.into()))
            .or_default() += 1;
    }
}

/// Which streams an exec or attach asked for (the kubelet's `input`, `output`, `error`, `tty`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Streams {
    /// stdin.
    pub stdin: bool,
    /// stdout.
    pub stdout: bool,
    /// stderr (none with a TTY).
    pub stderr: bool,
    /// A TTY, and so a resize stream.
    pub tty: bool,
}

/// Whether `headers` ask for a WebSocket.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
        })
}

/// The subprotocols the client offers, in its order.
pub fn offered(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The 101 answer to a WebSocket request (RFC 6455 §4.2.2) with `protocol`, or what makes a malformed
/// request a 400.
fn accept(headers: &HeaderMap, protocol: Option<&str>) -> Result<Response, String> {
    let version_ok = headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "13");
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| version_ok)
    else {
        return Err(
            "websocket: a Sec-WebSocket-Key and Sec-WebSocket-Version 13 are required".into(),
        );
    };
    let mut r = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "Upgrade")
        .header(
            header::SEC_WEBSOCKET_ACCEPT,
            derive_accept_key(key.as_bytes()),
        );
    if let Some(p) = protocol {
        if let Ok(v) = HeaderValue::from_str(p) {
            r = r.header(header::SEC_WEBSOCKET_PROTOCOL, v);
        }
    }
    r.body(Body::empty()).map_err(|e| e.to_string())
}

/// An upgraded SPDY/3.1 connection to the runtime and the protocol it chose.
struct RuntimeConn {
    io: TokioIo<Upgraded>,
    protocol: Option<String>,
}

/// `POST`s a SPDY/3.1 upgrade with `protocols` to the runtime's streaming `url`. A refusal comes back
/// as the response to hand the client.
async fn upgrade_runtime(url: &str, protocols: &[String]) -> Result<RuntimeConn, Response> {
    let RuntimeHttp {
        addr,
        path,
        mut sender,
    } = connect_runtime(url).await?;
    let gateway = |e: &dyn std::fmt::Display| {
        text(
            StatusCode::BAD_GATEWAY,
            format!("runtime streaming server {addr}: {e}"),
        )
    };
    let mut out = hyper::Request::builder()
        .method("POST")
        .uri(path)
        .header(header::HOST, addr.as_str())
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1");
    for p in protocols {
        out = out.header("X-Stream-Protocol-Version", p.as_str());
    }
    let out = out
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| gateway(&e))?;
    let mut resp = sender.send_request(out).await.map_err(|e| gateway(&e))?;
    let status = resp.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let ct = resp.headers().get(header::CONTENT_TYPE).cloned();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut r = Response::builder().status(status);
        if let Some(ct) = ct {
            r = r.header(header::CONTENT_TYPE, ct);
        }
        return Err(r.body(Body::from(body)).unwrap_or_default());
    }
    let protocol = resp
        .headers()
        .get("X-Stream-Protocol-Version")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let upgraded = hyper::upgrade::on(&mut resp)
        .await
        .map_err(|e| gateway(&e))?;
    Ok(RuntimeConn {
        io: TokioIo::new(upgraded),
        protocol,
    })
}

/// The SPDY stream ids of one exec/attach session, by channel.
#[derive(Debug, Default, Clone)]
struct StreamIds {
    by_channel: BTreeMap<u8, u32>,
}

impl StreamIds {
    fn id(&self, channel: u8) -> Option<u32> {
        self.by_channel.get(&channel).copied()
    }

    fn channel(&self, id: u32) -> Option<u8> {
        self.by_channel
            .iter()
            .find(|(_, &i)| i == id)
            .map(|(&c, _)| c)
    }
}

/// The SYN_STREAM frames that open a session's streams (client stream ids are odd, in order), and
/// the ids by channel.
fn open_streams(s: Streams) -> (Vec<Frame>, StreamIds) {
    let mut wanted = vec![(ERROR, "error")];
    if s.stdin {
        wanted.push((STDIN, "stdin"));
    }
    if s.stdout {
        wanted.push((STDOUT, "stdout"));
    }
    if s.stderr && !s.tty {
        wanted.push((STDERR, "stderr"));
    }
    if s.tty {
        wanted.push((RESIZE, "resize"));
    }
    let mut ids = StreamIds::default();
    let frames = wanted
        .into_iter()
        .enumerate()
        .map(|(i, (channel, ty))| {
            let stream_id = 1 + 2 * i as u32;
            ids.by_channel.insert(channel, stream_id);
            Frame::SynStream {
                stream_id,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: vec![("streamtype".into(), ty.into())],
            }
        })
        .collect();
    (frames, ids)
}

/// `exec` or `attach` for a WebSocket client: see the module docs.
pub async fn exec(mut req: Request, url: &str, kind: &'static str, s: Streams) -> Response {
    let offered = offered(req.headers());
    debug!(kind, protocols = ?offered, "websocket streaming request");
    let Some(protocol) = offered.iter().find(|p| *p == V5 || *p == V4).cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("unable to upgrade: requested protocol(s) are not supported: {offered:?}; supports [\"{V5}\" \"{V4}\"]"),
        );
    };
    // Checked before the runtime is asked for anything.
    if let Err(e) = accept(req.headers(), Some(&protocol)) {
        return text(StatusCode::BAD_REQUEST, e);
    }
    let rt = match upgrade_runtime(url, &[V4.to_string()]).await {
        Ok(rt) => rt,
        Err(r) => return r,
    };
    let (frames, ids) = open_streams(s);
    let (rd, mut wr) = tokio::io::split(rt.io);
    let mut enc = match HeaderEncoder::new() {
        Ok(e) => e,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut buf = BytesMut::new();
    for f in &frames {
        if let Err(e) = spdy::encode(f, &mut enc, &mut buf) {
            return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
    }
    if let Err(e) = wr.write_all(&buf).await {
        return text(
            StatusCode::BAD_GATEWAY,
            format!("runtime streaming server: {e}"),
        );
    }
    let resp = match accept(req.headers(), Some(&protocol)) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    count(kind, "websocket", &protocol);
    let client = hyper::upgrade::on(&mut req);
    let first = if s.stdout {
        STDOUT
    } else if s.stderr {
        STDERR
    } else {
        ERROR
    };
    tokio::spawn(async move {
        let up = match client.await {
            Ok(u) => u,
            Err(e) => {
                debug!(error = %e, "websocket upgrade failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
        let session = ExecSession {
            ids,
            enc,
            wr,
            v5: protocol == V5,
        };
        session.run(ws, rd, first).await;
    });
    resp
}

/// One exec or attach session: the client's WebSocket on one side, the runtime's SPDY connection
/// (whose streams are already open) on the other.
struct ExecSession<W> {
    ids: StreamIds,
    enc: HeaderEncoder,
    wr: W,
    v5: bool,
}

/// The SPDY frames one client message on `channel` (its first byte already stripped) turns into:
/// stdin and resize data onto their streams (in frames of at most [`CHUNK`] bytes), the v5 close
/// signal as FIN of the named stream; anything else is dropped.
fn client_frames(ids: &StreamIds, v5: bool, channel: u8, data: &[u8]) -> Vec<Frame> {
    match channel {
        STDIN | RESIZE => {
            let Some(stream_id) = ids.id(channel) else {
                return Vec::new();
            };
            data.chunks(CHUNK)
                .map(|chunk| Frame::Data {
                    stream_id,
                    flags: 0,
                    data: Bytes::copy_from_slice(chunk),
                })
                .collect()
        }
        CLOSE if v5 => data
            .iter()
            .filter(|&&c| c == STDIN || c == RESIZE)
            .filter_map(|&c| ids.id(c))
            .map(|stream_id| Frame::Data {
                stream_id,
                flags: FLAG_FIN,
                data: Bytes::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> ExecSession<W> {
    /// Relays until the runtime has finished its streams (or either side is gone), then closes.
    ///
    /// Three tasks, so that neither direction waits on the other (a `cat` fed faster than it can
    /// write back would otherwise stall both): this one copies the runtime's frames to the client, a
    /// reader parses the runtime's frames, and the client's messages become frames for a writer
    /// that owns the runtime connection's sending half and header compression.
    async fn run<S, R>(self, ws: WebSocketStream<S>, rd: R, first: u8)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        R: AsyncRead + Unpin + Send + 'static,
    {
        let ExecSession { ids, enc, wr, v5 } = self;
        let (mut sink, mut src) = ws.split();
        // An empty message on the first channel the client reads tells it the session is up.
        if sink
            .send(Message::Binary(Bytes::from(vec![first])))
            .await
            .is_err()
        {
            return;
        }
        let (ftx, mut frx) = tokio::sync::mpsc::channel::<Frame>(64);
        let writer = tokio::spawn(async move {
            let (mut enc, mut wr) = (enc, wr);
            while let Some(f) = frx.recv().await {
                let mut buf = BytesMut::new();
                if let Err(e) = spdy::encode(&f, &mut enc, &mut buf) {
                    debug!(error = %e, "encoding a frame for the runtime");
                    break;
                }
                if let Err(e) = wr.write_all(&buf).await {
                    debug!(error = %e, "writing to the runtime");
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame, spdy::Error>>(16);
        let reader = tokio::spawn(async move {
            let mut r = spdy::FrameReader::new(rd);
            loop {
                match r.next().await {
                    Ok(Some(f)) => {
                        if tx.send(Ok(f)).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        break;
                    }
                }
            }
        });
        // The client's messages, until its close (answered on the read after it) or its end.
        let client_ids = ids.clone();
        let to_runtime = ftx.clone();
        let mut client = tokio::spawn(async move {
            while let Some(Ok(m)) = src.next().await {
                if let Message::Binary(b) = m {
                    let Some((&ch, data)) = b.split_first() else {
                        continue;
                    };
                    for f in client_frames(&client_ids, v5, ch, data) {
                        if to_runtime.send(f).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        // The runtime's streams the session waits for: error, stdout, stderr.
        let mut open: BTreeSet<u32> = [ERROR, STDOUT, STDERR]
            .iter()
            .filter_map(|&c| ids.id(c))
            .collect();
        let mut status_bytes = 0usize;
        let mut client_gone = false;
        while !open.is_empty() {
            tokio::select! {
                f = rx.recv() => match f {
                    Some(Ok(Frame::Data { stream_id, flags, data })) => {
                        if let Some(ch) = ids.channel(stream_id).filter(|c| [ERROR, STDOUT, STDERR].contains(c)) {
                            if ch == ERROR {
                                status_bytes += data.len();
                            }
                            if !data.is_empty() {
                                let mut m = Vec::with_capacity(data.len() + 1);
                                m.push(ch);
                                m.extend_from_slice(&data);
                                if sink.send(Message::Binary(Bytes::from(m))).await.is_err() {
                                    client_gone = true;
                                    break;
                                }
                            }
                        }
                        if flags & FLAG_FIN != 0 {
                            open.remove(&stream_id);
                        }
                    }
                    Some(Ok(Frame::SynReply { stream_id, flags, .. } | Frame::Headers { stream_id, flags, .. })) => {
                        if flags & FLAG_FIN != 0 {
                            open.remove(&stream_id);
                        }
                    }
                    Some(Ok(Frame::RstStream { stream_id, .. })) => {
                        open.remove(&stream_id);
                    }
                    Some(Ok(Frame::Ping(id))) => {
                        // Never waits: a ping answer lost to a full queue costs nothing.
                        let _ = ftx.try_send(Frame::Ping(id));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        debug!(error = %e, "runtime spdy stream");
                        break;
                    }
                    None => break,
                },
                _ = &mut client => {
                    client_gone = true;
                    break;
                }
            }
        }
        if !client_gone {
            if open.contains(&ids.id(ERROR).unwrap_or(0)) && status_bytes == 0 {
                // The runtime went away without a status: say so rather than let it read as success.
                let status = serde_json::json!({
                    "metadata": {},
                    "status": "Failure",
                    "message": "the container runtime closed the stream without a status",
                    "reason": "InternalError",
                    "code": 500,
                });
                let mut m = vec![ERROR];
                m.extend_from_slice(status.to_string().as_bytes());
                let _ = sink.send(Message::Binary(Bytes::from(m))).await;
            }
            let _ = sink
                .send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "".into(),
                })))
                .await;
            // Wait for the client's close: it closes once it has read everything.
            let _ = tokio::time::timeout(CLOSE_WAIT, &mut client).await;
        }
        client.abort();
        let _ = ftx.try_send(Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        });
        drop(ftx);
        // The writer drains what is queued, then shuts the runtime connection down.
        let mut writer = writer;
        if tokio::time::timeout(Duration::from_secs(5), &mut writer)
            .await
            .is_err()
        {
            debug!("the runtime did not take the session's last frames");
            writer.abort();
        }
        reader.abort();
    }
}

/// `port-forward` for a WebSocket client: the SPDY tunnel (see the module docs).
pub async fn port_forward(mut req: Request, url: &str) -> Response {
    debug!(protocols = ?offered(req.headers()), "websocket port-forward request");
    let protocols: Vec<String> = offered(req.headers())
        .into_iter()
        .filter_map(|p| p.strip_prefix(TUNNEL_PREFIX).map(str::to_string))
        .filter(|p| p.ends_with(".k8s.io"))
        .collect();
    if protocols.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: no tunneling spdy protocols provided".into(),
        );
    }
    if let Err(e) = accept(req.headers(), None) {
        return text(StatusCode::BAD_REQUEST, e);
    }
    let rt = match upgrade_runtime(url, &protocols).await {
        Ok(rt) => rt,
        Err(r) => return r,
    };
    let chosen = rt.protocol.as_ref().map(|p| format!("{TUNNEL_PREFIX}{p}"));
    let resp = match accept(req.headers(), chosen.as_deref()) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    count(
        "portforward",
        "websocket",
        chosen.as_deref().unwrap_or(TUNNEL_PREFIX),
    );
    let client = hyper::upgrade::on(&mut req);
    tokio::spawn(tunnel(client, rt.io));
    resp
}

/// Copies the tunnel's binary messages to the runtime and the runtime's bytes back as binary messages.
async fn tunnel(client: OnUpgrade, rt: TokioIo<Upgraded>) {
    let up = match client.await {
        Ok(u) => u,
        Err(e) => {
            debug!(error = %e, "websocket upgrade failed");
            return;
        }
    };
    let ws = WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
    let (mut sink, mut src) = ws.split();
    let (mut rd, mut wr) = tokio::io::split(rt);
    let mut buf = vec![0u8; 32 * 1024];
    let mut client_gone = false;
    loop {
        tokio::select! {
            n = rd.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let data = Bytes::copy_from_slice(buf.get(..n).unwrap_or_default());
                    if sink.send(Message::Binary(data)).await.is_err() {
                        client_gone = true;
                        break;
                    }
                }
            },
            m = src.next() => match m {
                Some(Ok(Message::Binary(b))) => {
                    if wr.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    client_gone = true;
                    break;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = wr.shutdown().await;
    if !client_gone {
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(Ok(m)) = src.next().await {
                if let Message::Close(_) = m {
                    break;
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::DuplexStream;

    /// A session between a WebSocket client and a fake runtime, both in process: (client, runtime
    /// frames, runtime writer, the session's task).
    async fn session(
        s: Streams,
    ) -> (
        WebSocketStream<DuplexStream>,
        spdy::FrameReader<tokio::io::ReadHalf<DuplexStream>>,
        tokio::io::WriteHalf<DuplexStream>,
        tokio::task::JoinHandle<()>,
    ) {
        let (client_io, agent_io) = tokio::io::duplex(1 << 20);
        let (agent_rt, runtime_io) = tokio::io::duplex(1 << 20);
        let (rt_rd, mut rt_wr) = tokio::io::split(agent_rt);
        let (frames, ids) = open_streams(s);
        let mut enc = HeaderEncoder::new().unwrap();
        let mut buf = BytesMut::new();
        for f in &frames {
            spdy::encode(f, &mut enc, &mut buf).unwrap();
        }
        rt_wr.write_all(&buf).await.unwrap();
        let session = ExecSession {
            ids,
            enc,
            wr: rt_wr,
            v5: true,
        };
        let task = tokio::spawn(async move {
            let ws = WebSocketStream::from_raw_socket(agent_io, Role::Server, None).await;
            session.run(ws, rt_rd, STDOUT).await;
        });
        let client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let (r, w) = tokio::io::split(runtime_io);
        (client, spdy::FrameReader::new(r), w, task)
    }

    fn bin(b: &[u8]) -> Message {
        Message::Binary(Bytes::copy_from_slice(b))
    }

    #[test]
    fn client_messages_become_frames() {
        let (_, ids) = open_streams(Streams {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true,
        });
        // error 1, stdin 3, stdout 5, resize 7.
        let big = vec![b'x'; CHUNK * 2 + 1];
        let frames = client_frames(&ids, true, STDIN, &big);
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| matches!(
            f,
            Frame::Data {
                stream_id: 3,
                flags: 0,
                ..
            }
        )));
        assert_eq!(
            client_frames(&ids, true, RESIZE, br#"{"Width":80,"Height":24}"#),
            vec![Frame::Data {
                stream_id: 7,
                flags: 0,
                data: Bytes::from_static(br#"{"Width":80,"Height":24}"#)
            }]
        );
        let fin = vec![Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: Bytes::new(),
        }];
        assert_eq!(client_frames(&ids, true, CLOSE, &[STDIN]), fin);
        // v4 has no close signal; output channels and unknown ones are not the client's to write.
        assert!(client_frames(&ids, false, CLOSE, &[STDIN]).is_empty());
        assert!(client_frames(&ids, true, CLOSE, &[STDOUT, 9]).is_empty());
        assert!(client_frames(&ids, true, STDOUT, b"x").is_empty());
        assert!(client_frames(&ids, true, 42, b"x").is_empty());
        // No stdin stream: stdin data is dropped.
        let (_, no_stdin) = open_streams(Streams::default());
        assert!(client_frames(&no_stdin, true, STDIN, b"x").is_empty());
    }

    #[tokio::test]
    async fn exec_session_translates_both_ways_and_ends_with_the_status() {
        let (mut client, mut rt, mut rt_wr, task) = session(Streams {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        })
        .await;
        for want in ["error", "stdin", "stdout", "stderr"] {
            match rt.next().await.unwrap().unwrap() {
                Frame::SynStream { headers, .. } => {
                    assert_eq!(headers, vec![("streamtype".to_string(), want.to_string())])
                }
                f => panic!("{f:?}"),
            }
        }
        // The session is announced on stdout.
        assert_eq!(client.next().await.unwrap().unwrap(), bin(&[STDOUT]));
        // stdin, then the v5 close signal: data, then FIN on the stdin stream (3).
        client.send(bin(b"\x00hi")).await.unwrap();
        client.send(bin(&[CLOSE, STDIN])).await.unwrap();
        let data = |stream_id, flags, d: &'static [u8]| Frame::Data {
            stream_id,
            flags,
            data: Bytes::from_static(d),
        };
        assert_eq!(rt.next().await.unwrap().unwrap(), data(3, 0, b"hi"));
        assert_eq!(rt.next().await.unwrap().unwrap(), data(3, FLAG_FIN, b""));
        // The runtime answers, writes stdout, stderr and the status, then resets its streams.
        let status = br#"{"metadata":{},"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        let mut enc = HeaderEncoder::new().unwrap();
        let mut out = BytesMut::new();
        for stream_id in [1, 3, 5, 7] {
            let reply = Frame::SynReply {
                stream_id,
                flags: 0,
                headers: vec![],
            };
            spdy::encode(&reply, &mut enc, &mut out).unwrap();
        }
        for f in [
            Frame::Ping(2),
            data(5, 0, b"out"),
            data(7, 0, b"err"),
            data(1, 0, status),
        ] {
            spdy::encode(&f, &mut enc, &mut out).unwrap();
        }
        for stream_id in [1, 3, 5, 7] {
            let rst = Frame::RstStream {
                stream_id,
                status: 5,
            };
            spdy::encode(&rst, &mut enc, &mut out).unwrap();
        }
        rt_wr.write_all(&out).await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), bin(b"\x01out"));
        assert_eq!(client.next().await.unwrap().unwrap(), bin(b"\x02err"));
        let mut want = vec![ERROR];
        want.extend_from_slice(status);
        assert_eq!(client.next().await.unwrap().unwrap(), bin(&want));
        assert!(matches!(
            client.next().await.unwrap().unwrap(),
            Message::Close(_)
        ));
        // The close is answered (tungstenite does so on the next read), the session ends.
        assert!(client.next().await.is_none());
        task.await.unwrap();
        // The runtime got its ping back, then GOAWAY, then the end of the connection.
        assert_eq!(rt.next().await.unwrap().unwrap(), Frame::Ping(2));
        assert!(matches!(
            rt.next().await.unwrap().unwrap(),
            Frame::GoAway { .. }
        ));
        assert_eq!(rt.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_runtime_gone_without_a_status_is_a_failure_not_a_success() {
        let (mut client, mut rt, rt_wr, task) = session(Streams {
            stdin: false,
            stdout: true,
            stderr: false,
            tty: false,
        })
        .await;
        for _ in 0..2 {
            assert!(matches!(
                rt.next().await.unwrap().unwrap(),
                Frame::SynStream { .. }
            ));
        }
        assert_eq!(client.next().await.unwrap().unwrap(), bin(&[STDOUT]));
        drop(rt_wr);
        drop(rt);
        match client.next().await.unwrap().unwrap() {
            Message::Binary(b) => {
                assert_eq!(b[0], ERROR);
                let v: serde_json::Value = serde_json::from_slice(&b[1..]).unwrap();
                assert_eq!(v["status"], "Failure");
            }
            m => panic!("{m:?}"),
        }
        assert!(matches!(
            client.next().await.unwrap().unwrap(),
            Message::Close(_)
        ));
        assert!(client.next().await.is_none());
        task.await.unwrap();
    }

    #[test]
    fn streams_are_opened_as_the_kubelet_expects() {
        let (frames, ids) = open_streams(Streams {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        });
        let types: Vec<(u32, String)> = frames
            .iter()
            .map(|f| match f {
                Frame::SynStream {
                    stream_id, headers, ..
                } => (*stream_id, headers[0].1.clone()),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            types,
            vec![
                (1, "error".to_string()),
                (3, "stdin".to_string()),
                (5, "stdout".to_string()),
                (7, "stderr".to_string())
            ]
        );
        assert_eq!(ids.channel(5), Some(STDOUT));
        assert_eq!(ids.id(RESIZE), None);
        // A TTY merges stderr into stdout and adds the resize stream.
        let (frames, ids) = open_streams(Streams {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        });
        assert_eq!(frames.len(), 4);
        assert_eq!(ids.id(STDERR), None);
        assert_eq!(ids.id(RESIZE), Some(7));
    }

    #[test]
    fn websocket_requests_and_protocols_are_recognised() {
        let mut h = HeaderMap::new();
        assert!(!is_websocket(&h));
        h.insert(header::UPGRADE, HeaderValue::from_static("WebSocket"));
        assert!(is_websocket(&h));
        h.append(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v5.channel.k8s.io, v4.channel.k8s.io"),
        );
        h.append(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("SPDY/3.1+portforward.k8s.io"),
        );
        assert_eq!(
            offered(&h),
            vec![
                "v5.channel.k8s.io",
                "v4.channel.k8s.io",
                "SPDY/3.1+portforward.k8s.io"
            ]
        );
        // RFC 6455's example key.
        assert!(accept(&h, None).is_err());
        h.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        let r = accept(&h, Some(V5)).unwrap();
        assert_eq!(r.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            r.headers()[header::SEC_WEBSOCKET_ACCEPT],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(r.headers()[header::SEC_WEBSOCKET_PROTOCOL], V5);
    }
}
