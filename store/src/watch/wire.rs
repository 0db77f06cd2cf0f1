//! Watch events encoded once, in the wire form of `WatchResponse.events`, and shared by every
//! watcher that gets them. Fanning one revision out to a thousand watchers then costs a slice
//! and a copy per watcher instead of a clone and a protobuf encoding of every event.

use std::borrow::Borrow;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::pb::etcdserverpb::WatchResponse;
use crate::pb::mvccpb::Event;

/// Field number of `WatchResponse.events`.
const EVENTS_FIELD: u32 = 11;

/// Encoded `events` fields of one response (tag and length included), in order. Each chunk
/// holds one or more whole fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireEvents {
    chunks: Vec<Bytes>,
}

impl WireEvents {
    /// Encodes `events` (used for tests and for responses that were not built from a batch).
    pub fn encode(events: &[Event]) -> Self {
        let mut buf = BytesMut::with_capacity(
            events
                .iter()
                .map(|ev| encoding::message::encoded_len(EVENTS_FIELD, ev))
                .sum(),
        );
        for ev in events {
            encoding::message::encode(EVENTS_FIELD, ev, &mut buf);
        }
        let mut out = WireEvents::default();
        out.push(buf.freeze());
        out
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The encoded bytes, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.chunks.push(chunk);
        }
    }

    /// The events one field each, for splitting a response into fragments. The bytes are ours,
    /// so they always parse; a chunk that somehow did not is kept whole rather than dropped.
    pub fn split(&self) -> Vec<Bytes> {
        let mut out = Vec::new();
        for chunk in &self.chunks {
            let mut rest = chunk.clone();
            while !rest.is_empty() {
                match field_len(&rest) {
                    Some(n) if n <= rest.len() => out.push(rest.split_to(n)),
                    _ => {
                        out.push(rest);
                        break;
                    }
                }
            }
        }
        out
    }

    /// The events from single-field pieces made by [`split`](Self::split).
    pub fn from_fields(fields: impl IntoIterator<Item = Bytes>) -> Self {
        let mut out = WireEvents::default();
        for f in fields {
            out.push(f);
        }
        out
    }

    /// Decodes the events (what a client would see).
    pub fn decode(&self) -> Result<Vec<Event>, DecodeError> {
        let mut all = Vec::with_capacity(self.encoded_len());
        for c in &self.chunks {
            all.extend_from_slice(c);
        }
        Ok(WatchResponse::decode(all.as_slice())?.events)
    }
}

/// Length of the whole field at the start of `buf` (key, length prefix and body).
fn field_len(buf: &[u8]) -> Option<usize> {
    let mut b = buf;
    let (_, wire_type) = encoding::decode_key(&mut b).ok()?;
    if wire_type != WireType::LengthDelimited {
        return None;
    }
    let body = usize::try_from(encoding::decode_varint(&mut b).ok()?).ok()?;
    let prefix = buf.len() - b.len();
    prefix.checked_add(body)
}

/// One published batch's events, each encoded once; watchers take slices of it.
#[derive(Debug)]
pub(crate) struct EncodedBatch {
    buf: Bytes,
    /// `ends[i]` is where event `i` ends in `buf`.
    ends: Vec<usize>,
}

impl EncodedBatch {
    /// Encodes every event of a batch, in order.
    pub(crate) fn new<E: Borrow<Event>>(events: impl ExactSizeIterator<Item = E>) -> Self {
        let mut buf = BytesMut::new();
        let mut ends = Vec::with_capacity(events.len());
        for ev in events {
            let ev = ev.borrow();
            buf.reserve(encoding::message::encoded_len(EVENTS_FIELD, ev));
            encoding::message::encode(EVENTS_FIELD, ev, &mut buf);
            ends.push(buf.len());
        }
        EncodedBatch {
            buf: buf.freeze(),
            ends,
        }
    }

    /// The events at `idxs` (ascending indices into the batch), as one slice per contiguous run.
    pub(crate) fn select(&self, idxs: &[usize]) -> WireEvents {
        let start_of = |i: usize| if i == 0 { 0 } else { self.ends[i - 1] };
        let mut out = WireEvents::default();
        let mut run: Option<(usize, usize)> = None;
        for &i in idxs {
            if i >= self.ends.len() {
                continue;
            }
            run = match run {
                Some((first, last)) if i == last + 1 => Some((first, i)),
                Some((first, last)) => {
                    out.push(self.buf.slice(start_of(first)..self.ends[last]));
                    Some((i, i))
                }
                None => Some((i, i)),
            };
        }
        if let Some((first, last)) = run {
            out.push(self.buf.slice(start_of(first)..self.ends[last]));
        }
        out
    }
}

/// A `WatchResponse` whose events may be pre-encoded: what the etcd front door sends. On the
/// wire it is `response` followed by `events`, which a client decodes as one response whose
/// event list is `response.events` then `events`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireResponse {
    /// Everything but the pre-encoded events.
    pub response: WatchResponse,
    /// Events appended after `response`'s own fields.
    pub events: WireEvents,
}

impl WireResponse {
    /// The response as a client decodes it.
    pub fn decoded(&self) -> Result<WatchResponse, DecodeError> {
        WatchResponse::decode(self.encode_to_vec().as_slice())
    }
}

impl Message for WireResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        // Field 11 comes after fields 1-7, so this is also the canonical field order.
        self.response.encode_raw(buf);
        for chunk in &self.events.chunks {
            buf.put_slice(chunk);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        self.response.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.response.encoded_len() + self.events.encoded_len()
    }

    fn clear(&mut self) {
        self.response.clear();
        self.events = WireEvents::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::etcdserverpb::ResponseHeader;
    use crate::pb::mvccpb::{event::EventType, KeyValue};

    fn ev(i: usize) -> Event {
        Event {
            r#type: if i % 3 == 2 {
                EventType::Delete as i32
            } else {
                EventType::Put as i32
            },
            kv: Some(KeyValue {
                key: Bytes::from(format!("/registry/pods/ns/p{i}")),
                create_revision: 10,
                mod_revision: 10 + i as i64,
                version: i as i64,
                value: Bytes::from(vec![b'v'; i * 37]),
                lease: i as i64,
            }),
            prev_kv: (i % 2 == 1).then(|| KeyValue {
                key: Bytes::from(format!("/registry/pods/ns/p{i}")),
                value: Bytes::from_static(b"old"),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn wire_response_is_byte_identical_to_the_plain_encoding() {
        let events: Vec<Event> = (0..6).map(ev).collect();
        let batch = EncodedBatch::new(events.iter().cloned());
        for idxs in [
            vec![],
            vec![0],
            vec![5],
            vec![0, 1, 2, 3, 4, 5],
            vec![1, 2, 4],
            vec![0, 2, 3, 5],
        ] {
            let plain = WatchResponse {
                header: Some(ResponseHeader {
                    cluster_id: 1,
                    member_id: 2,
                    revision: 15,
                    raft_term: 3,
                }),
                watch_id: 7,
                events: idxs.iter().map(|&i| events[i].clone()).collect(),
                ..Default::default()
            };
            let mut shell = plain.clone();
            shell.events.clear();
            let wire = WireResponse {
                response: shell,
                events: batch.select(&idxs),
            };
            assert_eq!(wire.encoded_len(), plain.encoded_len(), "{idxs:?}");
            assert_eq!(wire.encode_to_vec(), plain.encode_to_vec(), "{idxs:?}");
            assert_eq!(wire.decoded().unwrap(), plain);
            // Contiguous runs share one slice.
            let runs = 1 + idxs.windows(2).filter(|w| w[1] != w[0] + 1).count();
            assert_eq!(wire.events.chunks().len(), runs.min(idxs.len()));
        }
        // Indices outside the batch are ignored, not a panic.
        assert_eq!(
            batch.select(&[4, 9]).decode().unwrap(),
            vec![events[4].clone()]
        );
    }

    #[test]
    fn split_gives_one_field_per_event_and_joins_back() {
        let events: Vec<Event> = (0..9).map(ev).collect();
        let batch = EncodedBatch::new(events.iter().cloned());
        let wire = batch.select(&[0, 1, 2, 4, 5, 8]);
        let fields = wire.split();
        assert_eq!(fields.len(), 6);
        for (f, i) in fields.iter().zip([0, 1, 2, 4, 5, 8]) {
            let one = WireEvents::from_fields([f.clone()]);
            assert_eq!(one.decode().unwrap(), vec![events[i].clone()]);
            assert_eq!(
                f.len(),
                encoding::message::encoded_len(EVENTS_FIELD, &events[i])
            );
        }
        assert_eq!(
            WireEvents::from_fields(fields).decode().unwrap(),
            wire.decode().unwrap()
        );
        assert_eq!(WireEvents::encode(&events).decode().unwrap(), events);
        // Garbage stays whole instead of being lost or panicking.
        let junk = WireEvents::from_fields([Bytes::from_static(&[0x5a, 0xff])]);
        assert_eq!(junk.split().len(), 1);
    }
}
