//! Errors of the bbolt reader and writer.

use thiserror::Error;

/// Everything that can go wrong reading or writing an etcd-format (bbolt) snapshot.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The underlying file or stream failed.
    #[error("snapshot i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The file ends before the data its metadata promises.
    #[error("snapshot file is truncated: {what} needs {needed} bytes, the file has {available}")]
    Truncated {
        what: String,
        needed: u64,
        available: u64,
    },
    /// A meta page does not start with bbolt's magic: not a bbolt file (or a wrecked one).
    #[error("not a bbolt database: meta page {page} has magic {found:#010x}, expected 0xed0cdaed")]
    BadMagic { page: u64, found: u32 },
    /// A meta page has a format version other than 2.
    #[error("unsupported bbolt format version {found} in meta page {page} (expected 2)")]
    BadVersion { page: u64, found: u32 },
    /// A meta page's FNV-1a checksum does not match its contents.
    #[error(
        "meta page {page} checksum mismatch: stored {stored:#018x}, computed {computed:#018x}"
    )]
    BadMetaChecksum {
        page: u64,
        stored: u64,
        computed: u64,
    },
    /// A meta page is well-formed but describes an impossible database.
    #[error("invalid meta page {page}: {reason}")]
    InvalidMeta { page: u64, reason: String },
    /// The SHA-256 trailer does not match the database bytes.
    #[error(
        "sha256 checksum mismatch: the trailer says {expected}, the database hashes to {actual}"
    )]
    Sha256Mismatch { expected: String, actual: String },
    /// A snapshot was required to carry etcd's SHA-256 trailer but does not.
    #[error("snapshot missing hash: file size {size} is not 512·k+32 bytes, so there is no sha256 trailer")]
    MissingHashTrailer { size: u64 },
    /// A page reference points at or past the high-water mark.
    #[error("page {pgid} (with {overflow} overflow pages) is outside the database (high-water mark {hwm})")]
    PageOutOfRange { pgid: u64, overflow: u64, hwm: u64 },
    /// A page is reached a second time: a loop in the tree or a page shared by two parents.
    #[error("page {pgid} is reached twice (a loop or a shared page in the tree)")]
    PageLoop { pgid: u64 },
    /// A tree page is not a branch or leaf page.
    #[error("{at}: unexpected page type {flags:#06x}, expected a branch or leaf page")]
    BadPageType { at: String, flags: u16 },
    /// A page's contents are inconsistent (element outside the page, wrong id, ...).
    #[error("{at}: corrupt page: {reason}")]
    CorruptPage { at: String, reason: String },
    /// Keys are not strictly ascending where bbolt requires them to be.
    #[error("bucket {bucket}: keys out of order at {at}: {detail}")]
    UnsortedKeys {
        bucket: String,
        at: String,
        detail: String,
    },
    /// The writer was given keys that are not strictly ascending.
    #[error("writer input for bucket {bucket} is not strictly ascending: {prev} then {key}")]
    UnsortedInput {
        bucket: String,
        prev: String,
        key: String,
    },
    /// The writer was given something bbolt or etcd cannot store.
    #[error("invalid snapshot input: {0}")]
    InvalidInput(String),
    /// Reading keel's store for the input failed.
    #[error(transparent)]
    Store(#[from] crate::error::StoreError),
}
