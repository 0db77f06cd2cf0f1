//! keel's own snapshot format: every backend entry of the replicated state, framed and
//! checksummed, so a member can be rebuilt without the log before the snapshot.
//!
//! Layout: magic `KEELSNP1`, then frames of `u32 LE length | u32 LE crc32 | record`, where the
//! first record is a header, then one record per entry, then an end record with the count.
//! (etcd-format bbolt snapshots for `etcdctl snapshot` are a separate concern.)

use std::io::{Read, Write};

use crate::backend::{Backend, BackendView, Space, WriteBatch};
use crate::error::StoreError;

const MAGIC: &[u8; 8] = b"KEELSNP1";
const FORMAT_VERSION: u32 = 1;
/// Frames larger than this are refused as corrupt (the largest entry is ~1.5 MiB).
const MAX_FRAME: usize = 64 * 1024 * 1024;

/// One snapshot record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotRecord {
    #[prost(oneof = "Record", tags = "1, 2, 3")]
    pub record: Option<Record>,
}

/// Record variants.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Record {
    #[prost(message, tag = "1")]
    Header(SnapshotHeader),
    #[prost(message, tag = "2")]
    Entry(SnapshotEntry),
    #[prost(uint64, tag = "3")]
    End(u64),
}

/// First record of a snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotHeader {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(int64, tag = "2")]
    pub revision: i64,
    #[prost(bytes = "vec", optional, tag = "3")]
    pub raft_meta: Option<Vec<u8>>,
}

/// One backend entry.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotEntry {
    /// 0 = kv, 1 = meta, 2 = lease.
    #[prost(uint32, tag = "1")]
    pub space: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub value: Vec<u8>,
}

/// What a written snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSummary {
    pub revision: i64,
    pub entries: u64,
    pub raft_meta: Option<Vec<u8>>,
}

const SPACES: [(Space, u32); 3] = [(Space::Kv, 0), (Space::Meta, 1), (Space::Lease, 2)];

fn frame(w: &mut dyn Write, rec: Record) -> Result<(), StoreError> {
    let body = prost::Message::encode_to_vec(&SnapshotRecord { record: Some(rec) });
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(&crc32fast::hash(&body).to_le_bytes())?;
    w.write_all(&body)?;
    Ok(())
}

/// Writes every entry of a backend view (taken together with `raft_meta` and `revision`).
pub fn write(
    backend: &dyn BackendView,
    raft_meta: Option<Vec<u8>>,
    revision: i64,
    w: &mut dyn Write,
) -> Result<SnapshotSummary, StoreError> {
    w.write_all(MAGIC)?;
    frame(
        w,
        Record::Header(SnapshotHeader {
            version: FORMAT_VERSION,
            revision,
            raft_meta: raft_meta.clone(),
        }),
    )?;
    let mut n = 0u64;
    for (space, tag) in SPACES {
        for pair in backend.scan_space(space) {
            let (key, value) = pair?;
            frame(
                w,
                Record::Entry(SnapshotEntry {
                    space: tag,
                    key,
                    value,
                }),
            )?;
            n += 1;
        }
    }
    frame(w, Record::End(n))?;
    w.flush()?;
    Ok(SnapshotSummary {
        revision,
        entries: n,
        raft_meta,
    })
}

fn read_frame(r: &mut dyn Read) -> Result<Record, StoreError> {
    let mut hdr = [0u8; 8];
    r.read_exact(&mut hdr)
        .map_err(|e| StoreError::Corrupt(format!("snapshot truncated: {e}")))?;
    let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
    let crc = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    if len > MAX_FRAME {
        return Err(StoreError::Corrupt(format!(
            "snapshot frame of {len} bytes"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .map_err(|e| StoreError::Corrupt(format!("snapshot truncated: {e}")))?;
    if crc32fast::hash(&body) != crc {
        return Err(StoreError::Corrupt(
            "snapshot frame checksum mismatch".into(),
        ));
    }
    let rec: SnapshotRecord = prost::Message::decode(body.as_slice())?;
    rec.record
        .ok_or_else(|| StoreError::Corrupt("empty snapshot record".into()))
}

/// Reads a snapshot's header without loading it.
pub fn read_header(r: &mut dyn Read) -> Result<SnapshotHeader, StoreError> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|e| StoreError::Corrupt(format!("snapshot truncated: {e}")))?;
    if &magic != MAGIC {
        return Err(StoreError::Corrupt(
            "not a keel snapshot (bad magic)".into(),
        ));
    }
    match read_frame(r)? {
        Record::Header(h) if h.version == FORMAT_VERSION => Ok(h),
        Record::Header(h) => Err(StoreError::Corrupt(format!(
            "snapshot format version {}",
            h.version
        ))),
        _ => Err(StoreError::Corrupt(
            "snapshot does not start with a header".into(),
        )),
    }
}

/// Loads a snapshot into an empty backend, verifying every frame and the final count.
pub fn read_into(backend: &dyn Backend, r: &mut dyn Read) -> Result<SnapshotHeader, StoreError> {
    let header = read_header(r)?;
    let mut batch = WriteBatch::default();
    let mut n = 0u64;
    loop {
        match read_frame(r)? {
            Record::Entry(e) => {
                let space = match e.space {
                    0 => Space::Kv,
                    1 => Space::Meta,
                    2 => Space::Lease,
                    s => return Err(StoreError::Corrupt(format!("snapshot space {s}"))),
                };
                batch.put(space, e.key, e.value);
                n += 1;
                if batch.ops.len() >= 256 {
                    backend.write(std::mem::take(&mut batch))?;
                }
            }
            Record::End(count) if count == n => break,
            Record::End(count) => {
                return Err(StoreError::Corrupt(format!(
                    "snapshot holds {n} entries, end says {count}"
                )))
            }
            Record::Header(_) => return Err(StoreError::Corrupt("second snapshot header".into())),
        }
    }
    backend.write(batch)?;
    Ok(header)
}
