//! The gRPC codec of the etcd services: prost messages, with the output buffer grown once to
//! the message's encoded length before it is written.
//!
//! The stock prost encoder lets the buffer double as it writes, so a large response (a 500-key
//! range page is ~150 KiB) costs a chain of ever larger reallocations; on a heap fragmented by a
//! long write history each of those is a slow search through glibc's free lists.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::ProstDecoder;

/// prost codec whose encoder reserves the whole message first.
#[derive(Debug)]
pub struct SizedProstCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SizedProstCodec<T, U> {
    fn default() -> Self {
        SizedProstCodec(PhantomData)
    }
}

impl<T, U> Codec for SizedProstCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SizedProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        SizedProstEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

/// Encodes `T` into a buffer reserved to its exact encoded length.
#[derive(Debug)]
pub struct SizedProstEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for SizedProstEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        // `encode` would compute the length a second time only to compare it with a growable
        // buffer's practically unlimited room; the fields are written the same way.
        item.encode_raw(buf);
        Ok(())
    }
}
