//! The two byte streams the gateway translates between: gRPC's length-prefixed messages, and
//! an HTTP body holding a sequence of JSON values (one per streamed request).

use axum::body::{Body, Bytes};
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use tonic::{Code, Status};

/// Length prefix of a gRPC message: a compression flag and a big-endian u32.
const PREFIX: usize = 5;

/// `message` as one uncompressed gRPC frame.
pub(super) fn encode(message: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(PREFIX + message.len());
    frame.extend_from_slice(&[0]);
    // Requests are bounded by MAX_JSON_BODY, far below u32::MAX.
    frame.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    frame.extend_from_slice(message);
    frame.freeze()
}

/// The response messages of one gRPC call, then its status.
pub(super) struct GrpcReader {
    body: Body,
    buf: BytesMut,
    /// From the trailers, or from the headers of a trailers-only answer.
    status: Option<Status>,
    ended: bool,
}

impl GrpcReader {
    pub(super) fn new(resp: axum::http::Response<Body>) -> GrpcReader {
        let status = Status::from_header_map(resp.headers());
        GrpcReader {
            body: resp.into_body(),
            buf: BytesMut::new(),
            status,
            ended: false,
        }
    }

    /// The next message, `None` once the call ended well, or the status it failed with.
    pub(super) async fn next(&mut self) -> Result<Option<Bytes>, Status> {
        loop {
            if let Some(msg) = self.take_message()? {
                return Ok(Some(msg));
            }
            if self.ended {
                return self.end_status().map(|()| None);
            }
            match self.body.frame().await {
                None => self.ended = true,
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.buf.extend_from_slice(&data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.status = Status::from_header_map(&trailers);
                        }
                    }
                },
                Some(Err(e)) => return Err(Status::internal(format!("gateway: {e}"))),
            }
        }
    }

    /// Reads to the end of a call whose answer was taken: its status.
    pub(super) async fn finish(&mut self) -> Result<(), Status> {
        while self.next().await?.is_some() {}
        Ok(())
    }

    fn take_message(&mut self) -> Result<Option<Bytes>, Status> {
        if self.buf.len() < PREFIX {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(Status::internal("gateway: compressed response"));
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if self.buf.len() < PREFIX + len {
            return Ok(None);
        }
        self.buf.advance(PREFIX);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    fn end_status(&self) -> Result<(), Status> {
        if !self.buf.is_empty() {
            return Err(Status::internal("gateway: truncated response message"));
        }
        match &self.status {
            Some(s) if s.code() == Code::Ok => Ok(()),
            Some(s) => Err(s.clone()),
            None => Err(Status::internal("gateway: call ended without a status")),
        }
    }
}

/// Why the JSON values of a request body stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum ValuesError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    #[error("request body: {0}")]
    Body(String),
}

/// The JSON values of a request body, taken as they arrive (a watch's requests come one by one).
pub(super) struct RequestValues {
    body: Body,
    buf: Vec<u8>,
    /// Most bytes buffered waiting for one value to complete.
    limit: usize,
    done: bool,
}

impl RequestValues {
    pub(super) fn new(body: Body, limit: usize) -> RequestValues {
        RequestValues {
            body,
            buf: Vec::new(),
            limit,
            done: false,
        }
    }

    /// The next complete JSON value, or `None` at the end of the body.
    pub(super) async fn next(&mut self) -> Result<Option<Vec<u8>>, ValuesError> {
        loop {
            if let Some(value) = self.take_value()? {
                return Ok(Some(value));
            }
            if self.done {
                return Ok(None);
            }
            match self.body.frame().await {
                None => self.done = true,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                        if self.buf.len() > self.limit {
                            return Err(ValuesError::TooLarge(self.limit));
                        }
                    }
                }
                Some(Err(e)) => return Err(ValuesError::Body(e.to_string())),
            }
        }
    }

    fn take_value(&mut self) -> Result<Option<Vec<u8>>, ValuesError> {
        let Some(start) = self.buf.iter().position(|b| !b.is_ascii_whitespace()) else {
            self.buf.clear();
            return Ok(None);
        };
        let mut values = serde_json::Deserializer::from_slice(&self.buf[start..])
            .into_iter::<serde::de::IgnoredAny>();
        match values.next() {
            Some(Ok(_)) => {
                let end = start + values.byte_offset();
                let value = self.buf[start..end].to_vec();
                self.buf.drain(..end);
                Ok(Some(value))
            }
            // An incomplete value waits for more of the body, unless the body has ended.
            Some(Err(e)) if e.is_eof() && !self.done => Ok(None),
            Some(Err(e)) => Err(e.into()),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(chunks: &[&'static str]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|c| Ok(Bytes::from_static(c.as_bytes())))
            .collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    async fn all(chunks: &[&'static str]) -> Result<Vec<String>, ValuesError> {
        let mut values = RequestValues::new(body_of(chunks), 1024);
        let mut out = Vec::new();
        while let Some(v) = values.next().await? {
            out.push(String::from_utf8_lossy(&v).into_owned());
        }
        Ok(out)
    }

    #[tokio::test]
    async fn values_split_across_chunks_and_run_together() {
        let got = all(&["{\"a\":", "1}{\"b\"", ":2}\n {\"c\":3}  "]).await;
        assert_eq!(
            got.ok(),
            Some(vec![
                "{\"a\":1}".into(),
                "{\"b\":2}".into(),
                "{\"c\":3}".into()
            ])
        );
        assert_eq!(all(&["   "]).await.ok(), Some(Vec::new()));
    }

    #[tokio::test]
    async fn a_truncated_or_broken_value_is_an_error() {
        assert!(all(&["{\"a\":1}{\"b\":"]).await.is_err());
        assert!(all(&["garbage"]).await.is_err());
        let big = RequestValues::new(body_of(&["{\"a\":\"", "xxxxxxxxxx"]), 8)
            .next()
            .await;
        assert!(matches!(big, Err(ValuesError::TooLarge(8))));
    }

    #[tokio::test]
    async fn responses_decode_frame_by_frame_and_end_with_the_status() {
        let mut data = encode(b"one").to_vec();
        data.extend_from_slice(&encode(b"two"));
        let mut trailers = axum::http::HeaderMap::new();
        trailers.insert("grpc-status", axum::http::HeaderValue::from_static("5"));
        trailers.insert(
            "grpc-message",
            axum::http::HeaderValue::from_static("not%20here"),
        );
        let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = vec![
            Ok(http_body::Frame::data(Bytes::from(data[..6].to_vec()))),
            Ok(http_body::Frame::data(Bytes::from(data[6..].to_vec()))),
            Ok(http_body::Frame::trailers(trailers)),
        ];
        let body = Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )));
        let mut reader = GrpcReader::new(axum::http::Response::new(body));
        assert_eq!(
            reader.next().await.ok().flatten().as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(
            reader.next().await.ok().flatten().as_deref(),
            Some(&b"two"[..])
        );
        let end = reader.next().await;
        assert!(
            matches!(&end, Err(s) if s.code() == Code::NotFound && s.message() == "not here"),
            "{end:?}"
        );
    }
}
