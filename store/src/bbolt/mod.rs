//! etcd-format snapshots: the bbolt database file that `etcdctl snapshot save/status/restore`
//! and etcd's own backend use, plus etcd's SHA-256 trailer.
//!
//! [`writer`] streams keel's state into a fresh bbolt file laid out exactly as etcd 3.4 expects
//! (buckets `key`, `lease`, `meta`, ...); [`reader`] validates and streams the buckets of any
//! bbolt file etcd produced. The file format facts (page layout, meta checksum, element
//! encodings) are in the research notes, §2.4 and §2.5; they are repeated where the code relies
//! on them.

mod error;
pub mod reader;
pub mod writer;

#[cfg(test)]
mod tests;

pub use error::SnapshotError;
pub use reader::{BoltReader, BucketIter, Entry, EntryIter, EtcdMeta, Meta};
pub use writer::{
    append_sha256_trailer, backend_space, total_size_hint, write_etcd_db, write_etcd_snapshot_file,
    BoltWriter, EtcdDbInput, EtcdMember, PairIter, SnapshotFile,
};

/// A key and its value, as stored in a bucket.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Page size of the files keel writes (bbolt uses the OS page size; etcd on amd64 has 4096).
pub const PAGE_SIZE: usize = 4096;
/// bbolt's magic number in both meta pages.
pub const MAGIC: u32 = 0xED0C_DAED;
/// bbolt file format version.
pub const VERSION: u32 = 2;
/// Length of the SHA-256 trailer that `etcdctl snapshot save` appends.
pub const SHA256_LEN: usize = 32;

/// Bucket names of an etcd 3.4 backend, in the (byte) order bbolt keeps them.
pub const ETCD_BUCKETS: [&str; 10] = [
    "alarm",
    "auth",
    "authRoles",
    "authUsers",
    "cluster",
    "key",
    "lease",
    "members",
    "members_removed",
    "meta",
];

// Page header: id u64, flags u16, count u16, overflow u32 (all little-endian).
pub(crate) const PAGE_HEADER_SIZE: usize = 16;
// Leaf element: flags u32, pos u32, ksize u32, vsize u32.
pub(crate) const LEAF_ELEM_SIZE: usize = 16;
// Branch element: pos u32, ksize u32, pgid u64.
pub(crate) const BRANCH_ELEM_SIZE: usize = 16;
// Bucket value header: root pgid u64, sequence u64.
pub(crate) const BUCKET_HEADER_SIZE: usize = 16;

pub(crate) const BRANCH_PAGE: u16 = 0x01;
pub(crate) const LEAF_PAGE: u16 = 0x02;
pub(crate) const META_PAGE: u16 = 0x04;
pub(crate) const FREELIST_PAGE: u16 = 0x10;
/// Leaf element flag marking a nested bucket.
pub(crate) const BUCKET_LEAF_FLAG: u32 = 0x01;
/// Meta `freelist` value of a file written with `NoFreelistSync` (how etcd writes).
pub(crate) const NO_FREELIST: u64 = u64::MAX;

// Meta body offsets inside a meta page (after the page header).
pub(crate) const META_OFF: usize = PAGE_HEADER_SIZE;
/// Bytes covered by the meta checksum (magic .. txid).
pub(crate) const META_CHECKSUMMED: usize = 56;
/// Meta body length including its checksum.
pub(crate) const META_LEN: usize = META_CHECKSUMMED + 8;

/// bbolt's largest key.
pub(crate) const MAX_KEY_SIZE: usize = 32_768;
/// bbolt's largest value.
pub(crate) const MAX_VALUE_SIZE: usize = (1 << 31) - 2;

/// What `etcdctl snapshot status` reports about a db file, computed the same way so the
/// numbers can be compared with etcdctl's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DbSummary {
    /// CRC-32C over every bucket name followed by its keys and values, in file order.
    pub hash: u32,
    /// Main revision of the last key of bucket `key` (0 when it is empty).
    pub revision: i64,
    /// Entries across all buckets.
    pub total_key: u64,
    /// Database size in bytes: high-water mark × page size (trailer excluded).
    pub total_size: u64,
}

static CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// Accumulates a [`DbSummary`] while buckets are walked in order (etcdctl's algorithm).
pub(crate) struct SummaryHasher {
    digest: crc::Digest<'static, u32>,
    in_key_bucket: bool,
    revision: i64,
    total_key: u64,
}

impl SummaryHasher {
    pub(crate) fn new() -> Self {
        SummaryHasher {
            digest: CASTAGNOLI.digest(),
            in_key_bucket: false,
            revision: 0,
            total_key: 0,
        }
    }

    pub(crate) fn bucket(&mut self, name: &[u8]) {
        self.digest.update(name);
        self.in_key_bucket = name == b"key";
    }

    pub(crate) fn entry(&mut self, key: &[u8], value: &[u8]) {
        self.digest.update(key);
        self.digest.update(value);
        if self.in_key_bucket {
            // etcdctl's bytesToRev reads the first 8 bytes big-endian; shorter keys do not
            // occur in a valid etcd file and are left out rather than guessed at.
            if let Some(b) = key.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                self.revision = u64::from_be_bytes(b) as i64;
            }
        }
        self.total_key += 1;
    }

    pub(crate) fn finish(self, total_size: u64) -> DbSummary {
        DbSummary {
            hash: self.digest.finalize(),
            revision: self.revision,
            total_key: self.total_key,
            total_size,
        }
    }
}

/// FNV-1a 64, the meta page checksum.
pub(crate) fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Renders a key for an error message: text when printable, hex otherwise, shortened.
pub(crate) fn show_key(k: &[u8]) -> String {
    let shown = &k[..k.len().min(48)];
    let more = if k.len() > shown.len() { "…" } else { "" };
    if shown.iter().all(|b| (0x20..0x7f).contains(b)) {
        format!("{:?}{more}", String::from_utf8_lossy(shown))
    } else {
        let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}{more}")
    }
}

/// Lowercase hex of a digest.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}
