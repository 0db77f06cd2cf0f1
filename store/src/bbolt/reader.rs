//! A validating, streaming bbolt reader for etcd backend files and `etcdctl snapshot save`
//! output.
//!
//! Pages are read on demand with positioned reads (never the whole file, never mmap), so a
//! multi-gigabyte snapshot costs memory proportional to the tree height. Everything read from
//! the file is bounds-checked: a damaged file gives a [`SnapshotError`], never a panic.
//! Checks (a superset of bbolt 1.3's `tx.Check` for the reachable part): meta magic, version
//! and checksum; pages inside the high-water mark and stamped with their own id; tree pages are
//! branch or leaf pages; no page reached twice; keys strictly ascending inside a page, across
//! pages, and within the bounds the parent branch keys give (bbolt 1.4's key order check).

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{
    fnv1a64, hex, show_key, DbSummary, Pair, SnapshotError, SummaryHasher, BRANCH_ELEM_SIZE,
    BRANCH_PAGE, BUCKET_HEADER_SIZE, BUCKET_LEAF_FLAG, LEAF_ELEM_SIZE, LEAF_PAGE, MAGIC,
    META_CHECKSUMMED, META_LEN, META_OFF, META_PAGE, NO_FREELIST, PAGE_HEADER_SIZE, PAGE_SIZE,
    SHA256_LEN, VERSION,
};

/// Chunk size for hashing the file.
const HASH_CHUNK: usize = 1 << 20;

/// The meta page the reader chose (the valid one with the larger txid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Which meta page (0 or 1) this is.
    pub page: u64,
    /// Page size of the file.
    pub page_size: u32,
    /// bbolt meta flags (unused by bbolt today).
    pub flags: u32,
    /// Root page of the top-level bucket list.
    pub root: u64,
    /// Freelist page, or `u64::MAX` when the file was written without one (etcd's way).
    pub freelist: u64,
    /// High-water mark: number of pages in use.
    pub hwm: u64,
    /// Transaction id of the last commit.
    pub txid: u64,
}

/// Where a tree lives: its own pages, or inline in its parent's leaf value.
#[derive(Debug, Clone)]
enum Root {
    Page(u64),
    Inline(Vec<u8>),
}

/// A top-level bucket: its name and where its tree lives.
type NamedRoot = (Vec<u8>, Root);

/// Page location for error messages.
#[derive(Debug, Clone)]
enum Loc {
    Page(u64),
    Inline(String),
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loc::Page(p) => write!(f, "page {p}"),
            Loc::Inline(b) => write!(f, "inline page of bucket {b}"),
        }
    }
}

fn corrupt(at: &Loc, reason: impl Into<String>) -> SnapshotError {
    SnapshotError::CorruptPage {
        at: at.to_string(),
        reason: reason.into(),
    }
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    // Callers check `off + 2 <= b.len()`; the fallback keeps this total anyway.
    b.get(off..off + 2)
        .and_then(|s| s.try_into().ok())
        .map(u16::from_le_bytes)
        .unwrap_or(0)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

/// Pages seen during one walk; a second visit means a loop or a shared page.
#[derive(Debug, Default)]
struct Visited {
    bits: Vec<u64>,
}

impl Visited {
    fn new(hwm: u64) -> Self {
        Visited {
            bits: vec![0; hwm.div_ceil(64) as usize],
        }
    }

    /// Marks `first..first+n`; callers have checked the range is below the high-water mark.
    fn mark(&mut self, first: u64, n: u64) -> Result<(), SnapshotError> {
        for p in first..first + n {
            let (w, b) = ((p / 64) as usize, p % 64);
            let word = self.bits.get_mut(w).ok_or(SnapshotError::PageOutOfRange {
                pgid: p,
                overflow: 0,
                hwm: 0,
            })?;
            if *word & (1 << b) != 0 {
                return Err(SnapshotError::PageLoop { pgid: p });
            }
            *word |= 1 << b;
        }
        Ok(())
    }
}

/// One element read from a leaf: flags, key, value.
type LeafElem<'b> = (u32, &'b [u8], &'b [u8]);

/// A page (or inline page image) being walked.
struct Frame {
    buf: Vec<u8>,
    at: Loc,
    leaf: bool,
    count: usize,
    idx: usize,
    /// Keys of this subtree must be >= low (the parent's separator) ...
    low: Option<Vec<u8>>,
    /// ... and < high (the next separator up the tree).
    high: Option<Vec<u8>>,
}

impl Frame {
    fn new(
        buf: Vec<u8>,
        at: Loc,
        low: Option<Vec<u8>>,
        high: Option<Vec<u8>>,
    ) -> Result<Self, SnapshotError> {
        if buf.len() < PAGE_HEADER_SIZE {
            return Err(corrupt(&at, "shorter than a page header"));
        }
        let flags = u16_at(&buf, 8);
        let leaf = match flags {
            LEAF_PAGE => true,
            BRANCH_PAGE => false,
            _ => {
                return Err(SnapshotError::BadPageType {
                    at: at.to_string(),
                    flags,
                })
            }
        };
        let count = usize::from(u16_at(&buf, 10));
        // Both element kinds are 16 bytes.
        if PAGE_HEADER_SIZE + count * LEAF_ELEM_SIZE > buf.len() {
            return Err(corrupt(
                &at,
                format!("{count} elements do not fit in {} bytes", buf.len()),
            ));
        }
        if !leaf && count == 0 {
            return Err(corrupt(&at, "branch page without elements"));
        }
        Ok(Frame {
            buf,
            at,
            leaf,
            count,
            idx: 0,
            low,
            high,
        })
    }

    /// Key bytes of element `i`: `pos` counts from the element's own start.
    fn slice(&self, elem_off: usize, pos: u32, len: u64) -> Result<(usize, usize), SnapshotError> {
        let start = elem_off as u64 + u64::from(pos);
        let end = start + len;
        if end > self.buf.len() as u64 {
            return Err(corrupt(
                &self.at,
                format!(
                    "element at offset {elem_off} points past the page end ({end} > {})",
                    self.buf.len()
                ),
            ));
        }
        Ok((start as usize, end as usize))
    }

    fn leaf_elem(&self, i: usize) -> Result<LeafElem<'_>, SnapshotError> {
        let off = PAGE_HEADER_SIZE + i * LEAF_ELEM_SIZE;
        let flags = u32_at(&self.buf, off);
        let pos = u32_at(&self.buf, off + 4);
        let ksize = u64::from(u32_at(&self.buf, off + 8));
        let vsize = u64::from(u32_at(&self.buf, off + 12));
        let (ks, ke) = self.slice(off, pos, ksize + vsize)?;
        let split = ks + ksize as usize;
        Ok((flags, &self.buf[ks..split], &self.buf[split..ke]))
    }

    fn branch_elem(&self, i: usize) -> Result<(&[u8], u64), SnapshotError> {
        let off = PAGE_HEADER_SIZE + i * BRANCH_ELEM_SIZE;
        let pos = u32_at(&self.buf, off);
        let ksize = u64::from(u32_at(&self.buf, off + 4));
        let pgid = u64_at(&self.buf, off + 8);
        let (ks, ke) = self.slice(off, pos, ksize)?;
        Ok((&self.buf[ks..ke], pgid))
    }
}

/// A raw leaf entry of some tree.
struct RawEntry {
    flags: u32,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// In-order walk of one B+tree with all structural checks.
struct TreeIter<'r> {
    reader: &'r BoltReader,
    bucket: String,
    stack: Vec<Frame>,
    prev: Option<Vec<u8>>,
    visited: Visited,
}

impl<'r> TreeIter<'r> {
    fn new(
        reader: &'r BoltReader,
        bucket: String,
        root: Root,
        mut visited: Visited,
    ) -> Result<Self, SnapshotError> {
        let frame = match root {
            Root::Page(pgid) => Frame::new(
                reader.read_page(pgid, &mut visited)?,
                Loc::Page(pgid),
                None,
                None,
            )?,
            Root::Inline(buf) => {
                let at = Loc::Inline(bucket.clone());
                let frame = Frame::new(buf, at, None, None)?;
                if !frame.leaf {
                    // bbolt only inlines leaves; a branch here would point at arbitrary pages.
                    return Err(SnapshotError::BadPageType {
                        at: frame.at.to_string(),
                        flags: BRANCH_PAGE,
                    });
                }
                frame
            }
        };
        Ok(TreeIter {
            reader,
            bucket,
            stack: vec![frame],
            prev: None,
            visited,
        })
    }

    fn unsorted(&self, at: &Loc, detail: String) -> SnapshotError {
        SnapshotError::UnsortedKeys {
            bucket: self.bucket.clone(),
            at: at.to_string(),
            detail,
        }
    }

    fn next_entry(&mut self) -> Result<Option<RawEntry>, SnapshotError> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return Ok(None);
            };
            if top.idx >= top.count {
                self.stack.pop();
                continue;
            }
            let i = top.idx;
            top.idx += 1;
            let top = &self.stack[self.stack.len() - 1];
            if top.leaf {
                let (flags, key, value) = top.leaf_elem(i)?;
                if let Some(low) = &top.low {
                    if key < low.as_slice() {
                        return Err(self.unsorted(
                            &top.at,
                            format!(
                                "key {} is below its parent's separator {}",
                                show_key(key),
                                show_key(low)
                            ),
                        ));
                    }
                }
                if let Some(high) = &top.high {
                    if key >= high.as_slice() {
                        return Err(self.unsorted(
                            &top.at,
                            format!(
                                "key {} is not below the next separator {}",
                                show_key(key),
                                show_key(high)
                            ),
                        ));
                    }
                }
                if let Some(prev) = &self.prev {
                    if key <= prev.as_slice() {
                        return Err(self.unsorted(
                            &top.at,
                            format!("key {} follows {}", show_key(key), show_key(prev)),
                        ));
                    }
                }
                let entry = RawEntry {
                    flags,
                    key: key.to_vec(),
                    value: value.to_vec(),
                };
                self.prev = Some(entry.key.clone());
                return Ok(Some(entry));
            }
            let (key, child) = top.branch_elem(i)?;
            if i == 0 {
                if let Some(low) = &top.low {
                    if key < low.as_slice() {
                        return Err(self.unsorted(
                            &top.at,
                            format!(
                                "separator {} is below its parent's separator {}",
                                show_key(key),
                                show_key(low)
                            ),
                        ));
                    }
                }
            } else {
                let (prev, _) = top.branch_elem(i - 1)?;
                if key <= prev {
                    return Err(self.unsorted(
                        &top.at,
                        format!("separator {} follows {}", show_key(key), show_key(prev)),
                    ));
                }
            }
            let high = if i + 1 < top.count {
                Some(top.branch_elem(i + 1)?.0.to_vec())
            } else {
                top.high.clone()
            };
            let low = Some(key.to_vec());
            let buf = self.reader.read_page(child, &mut self.visited)?;
            let frame = Frame::new(buf, Loc::Page(child), low, high)?;
            self.stack.push(frame);
        }
    }
}

/// One item of [`BoltReader::entries`]: a bucket starts, or an entry of the current bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A top-level bucket begins (buckets come in name order).
    Bucket(Vec<u8>),
    /// A key and value of the bucket last announced.
    Pair(Vec<u8>, Vec<u8>),
}

/// Streams every top-level bucket and its entries, in file order, checking as it goes.
pub struct EntryIter<'r> {
    reader: &'r BoltReader,
    pending: VecDeque<NamedRoot>,
    current: Option<TreeIter<'r>>,
    visited: Option<Visited>,
    done: bool,
}

impl EntryIter<'_> {
    fn step(&mut self) -> Result<Option<Entry>, SnapshotError> {
        if let Some(tree) = self.current.as_mut() {
            match tree.next_entry()? {
                Some(e) if e.flags & BUCKET_LEAF_FLAG != 0 => {
                    return Err(nested_bucket(&tree.bucket, &e.key))
                }
                Some(e) => return Ok(Some(Entry::Pair(e.key, e.value))),
                None => {
                    let tree = self.current.take();
                    self.visited = tree.map(|t| t.visited);
                }
            }
        }
        let Some((name, root)) = self.pending.pop_front() else {
            return Ok(None);
        };
        let visited = self.visited.take().unwrap_or_default();
        let label = String::from_utf8_lossy(&name).into_owned();
        self.current = Some(TreeIter::new(self.reader, label, root, visited)?);
        Ok(Some(Entry::Bucket(name)))
    }
}

impl Iterator for EntryIter<'_> {
    type Item = Result<Entry, SnapshotError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step();
        // Stop after the end or the first error: a damaged tree gives one error, not a storm.
        if !matches!(r, Ok(Some(_))) {
            self.done = true;
        }
        r.transpose()
    }
}

/// Streams the (key, value) pairs of one bucket in key order, checking as it goes.
pub struct BucketIter<'r> {
    tree: TreeIter<'r>,
    done: bool,
}

impl Iterator for BucketIter<'_> {
    type Item = Result<Pair, SnapshotError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = match self.tree.next_entry() {
            Ok(Some(e)) if e.flags & BUCKET_LEAF_FLAG != 0 => {
                Err(nested_bucket(&self.tree.bucket, &e.key))
            }
            Ok(Some(e)) => Ok(Some((e.key, e.value))),
            other => other.map(|_| None),
        };
        if !matches!(r, Ok(Some(_))) {
            self.done = true;
        }
        r.transpose()
    }
}

fn nested_bucket(bucket: &str, key: &[u8]) -> SnapshotError {
    SnapshotError::CorruptPage {
        at: format!("bucket {bucket}"),
        reason: format!(
            "nested bucket {} (etcd's buckets hold no sub-buckets)",
            show_key(key)
        ),
    }
}

/// etcd bookkeeping read from buckets `meta` and `cluster`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdMeta {
    /// `meta/consistent_index`.
    pub consistent_index: Option<u64>,
    /// `meta/term` (etcd 3.5+).
    pub term: Option<u64>,
    /// Main revision of `meta/scheduledCompactRev`.
    pub scheduled_compact_rev: Option<i64>,
    /// Main revision of `meta/finishedCompactRev`.
    pub finished_compact_rev: Option<i64>,
    /// `cluster/clusterVersion`.
    pub cluster_version: Option<String>,
}

/// An open bbolt file: the chosen meta and positioned reads of pages.
#[derive(Debug)]
pub struct BoltReader {
    file: File,
    file_len: u64,
    db_len: u64,
    trailer: Option<[u8; SHA256_LEN]>,
    meta: Meta,
}

impl BoltReader {
    /// Opens a bbolt file (a raw `member/snap/db` or a snapshot with etcd's SHA-256 trailer,
    /// detected like etcdctl: size = 512·k + 32) and picks its meta page. Does not hash.
    pub fn open(path: &Path) -> Result<Self, SnapshotError> {
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        let (db_len, trailer) = if file_len >= SHA256_LEN as u64 && file_len % 512 == 32 {
            let db_len = file_len - SHA256_LEN as u64;
            let mut t = [0u8; SHA256_LEN];
            file.read_exact_at(&mut t, db_len)?;
            (db_len, Some(t))
        } else {
            (file_len, None)
        };
        let m0 = read_meta(&file, db_len, 0, PAGE_SIZE as u64);
        // Meta 1 sits one page in; the page size comes from meta 0 when that one is readable.
        let ps = m0.as_ref().map(|m| m.page_size).unwrap_or(PAGE_SIZE as u32);
        let m1 = read_meta(&file, db_len, 1, u64::from(ps));
        let meta = match (m0, m1) {
            (Ok(a), Ok(b)) => {
                if b.txid > a.txid {
                    b
                } else {
                    a
                }
            }
            (Ok(a), Err(_)) => a,
            (Err(_), Ok(b)) => b,
            // Prefer the error that says most: a checksum-valid meta whose database is cut
            // short or impossible, over a meta that is simply garbage.
            (Err(e0), Err(e1)) => {
                return Err(match (&e0, &e1) {
                    (
                        SnapshotError::BadMagic { .. }
                        | SnapshotError::BadVersion { .. }
                        | SnapshotError::BadMetaChecksum { .. },
                        SnapshotError::Truncated { .. } | SnapshotError::InvalidMeta { .. },
                    ) => e1,
                    _ => e0,
                })
            }
        };
        Ok(BoltReader {
            file,
            file_len,
            db_len,
            trailer,
            meta,
        })
    }

    /// Opens an `etcdctl snapshot save` file: requires the SHA-256 trailer and verifies it.
    pub fn open_snapshot(path: &Path) -> Result<Self, SnapshotError> {
        let r = Self::open(path)?;
        r.verify_sha256()?;
        Ok(r)
    }

    /// The meta page in use.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Database size as etcd reports it: high-water mark × page size.
    pub fn db_size(&self) -> u64 {
        self.meta.hwm * u64::from(self.meta.page_size)
    }

    /// Whether the file ends with etcd's SHA-256 trailer (by etcdctl's size rule).
    pub fn has_sha256_trailer(&self) -> bool {
        self.trailer.is_some()
    }

    /// Hashes the database bytes and compares them with the trailer; returns the digest.
    pub fn verify_sha256(&self) -> Result<[u8; SHA256_LEN], SnapshotError> {
        let Some(expected) = self.trailer else {
            return Err(SnapshotError::MissingHashTrailer {
                size: self.file_len,
            });
        };
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; HASH_CHUNK];
        let mut off = 0u64;
        while off < self.db_len {
            let n = (self.db_len - off).min(HASH_CHUNK as u64) as usize;
            self.read_exact(&mut buf[..n], off, "the database")?;
            hasher.update(&buf[..n]);
            off += n as u64;
        }
        let actual: [u8; SHA256_LEN] = hasher.finalize().into();
        if actual != expected {
            return Err(SnapshotError::Sha256Mismatch {
                expected: hex(&expected),
                actual: hex(&actual),
            });
        }
        Ok(actual)
    }

    fn read_exact(&self, buf: &mut [u8], off: u64, what: &str) -> Result<(), SnapshotError> {
        let end = off + buf.len() as u64;
        if end > self.db_len {
            return Err(SnapshotError::Truncated {
                what: what.to_string(),
                needed: end,
                available: self.db_len,
            });
        }
        self.file.read_exact_at(buf, off).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                // The file shrank under us.
                SnapshotError::Truncated {
                    what: what.to_string(),
                    needed: end,
                    available: self.file.metadata().map(|m| m.len()).unwrap_or(0),
                }
            } else {
                e.into()
            }
        })
    }

    /// Reads the page run starting at `pgid` after checking it lies inside the database and
    /// has not been reached before.
    fn read_page(&self, pgid: u64, visited: &mut Visited) -> Result<Vec<u8>, SnapshotError> {
        let hwm = self.meta.hwm;
        if pgid >= hwm {
            return Err(SnapshotError::PageOutOfRange {
                pgid,
                overflow: 0,
                hwm,
            });
        }
        let ps = u64::from(self.meta.page_size);
        let mut buf = vec![0u8; ps as usize];
        let what = format!("page {pgid}");
        self.read_exact(&mut buf, pgid * ps, &what)?;
        let id = u64_at(&buf, 0);
        if id != pgid {
            return Err(corrupt(&Loc::Page(pgid), format!("header says page {id}")));
        }
        let overflow = u64::from(u32_at(&buf, 12));
        if pgid + overflow >= hwm {
            return Err(SnapshotError::PageOutOfRange {
                pgid,
                overflow,
                hwm,
            });
        }
        visited.mark(pgid, overflow + 1)?;
        if overflow > 0 {
            // Bounded by the high-water mark, which `open` checked against the file size.
            buf.resize(((overflow + 1) * ps) as usize, 0);
            self.read_exact(&mut buf[ps as usize..], (pgid + 1) * ps, &what)?;
        }
        Ok(buf)
    }

    /// A fresh page-visit set with the meta pages and the freelist page already taken.
    fn new_visited(&self) -> Result<Visited, SnapshotError> {
        let mut v = Visited::new(self.meta.hwm);
        v.mark(0, 2)?;
        if self.meta.freelist != NO_FREELIST {
            v.mark(self.meta.freelist, 1)?;
        }
        Ok(v)
    }

    /// The top-level buckets (name, root), in order, and the visit set after walking them.
    fn top_level(&self) -> Result<(Vec<NamedRoot>, Visited), SnapshotError> {
        let visited = self.new_visited()?;
        let mut tree = TreeIter::new(
            self,
            "(top level)".into(),
            Root::Page(self.meta.root),
            visited,
        )?;
        let mut out = Vec::new();
        while let Some(e) = tree.next_entry()? {
            let name = show_key(&e.key);
            if e.flags & BUCKET_LEAF_FLAG == 0 {
                return Err(SnapshotError::CorruptPage {
                    at: "top-level bucket list".into(),
                    reason: format!("entry {name} is not a bucket"),
                });
            }
            if e.value.len() < BUCKET_HEADER_SIZE {
                return Err(SnapshotError::CorruptPage {
                    at: "top-level bucket list".into(),
                    reason: format!("bucket {name} has a {}-byte header", e.value.len()),
                });
            }
            let root = u64_at(&e.value, 0);
            let root = if root == 0 {
                Root::Inline(e.value[BUCKET_HEADER_SIZE..].to_vec())
            } else {
                Root::Page(root)
            };
            out.push((e.key, root));
        }
        Ok((out, tree.visited))
    }

    /// Names of the top-level buckets, in order.
    pub fn bucket_names(&self) -> Result<Vec<Vec<u8>>, SnapshotError> {
        Ok(self.top_level()?.0.into_iter().map(|(n, _)| n).collect())
    }

    /// Streams one top-level bucket; `None` when the file has no such bucket.
    pub fn bucket(&self, name: &[u8]) -> Result<Option<BucketIter<'_>>, SnapshotError> {
        let (buckets, visited) = self.top_level()?;
        let Some((_, root)) = buckets.into_iter().find(|(n, _)| n == name) else {
            return Ok(None);
        };
        let label = String::from_utf8_lossy(name).into_owned();
        let tree = TreeIter::new(self, label, root, visited)?;
        Ok(Some(BucketIter { tree, done: false }))
    }

    /// Streams every bucket and entry in file order, with one visit set for the whole walk
    /// (so a page shared between buckets is caught too).
    pub fn entries(&self) -> Result<EntryIter<'_>, SnapshotError> {
        let (buckets, visited) = self.top_level()?;
        Ok(EntryIter {
            reader: self,
            pending: buckets.into(),
            current: None,
            visited: Some(visited),
            done: false,
        })
    }

    /// Walks the whole file (all checks) and computes what `etcdctl snapshot status` reports.
    pub fn summary(&self) -> Result<DbSummary, SnapshotError> {
        let mut h = SummaryHasher::new();
        for e in self.entries()? {
            match e? {
                Entry::Bucket(name) => h.bucket(&name),
                Entry::Pair(k, v) => h.entry(&k, &v),
            }
        }
        Ok(h.finish(self.db_size()))
    }

    /// Reads etcd's bookkeeping (consistent index, compaction marks, cluster version).
    pub fn etcd_meta(&self) -> Result<EtcdMeta, SnapshotError> {
        let mut m = EtcdMeta::default();
        let be64 = |v: &[u8]| -> Option<u64> { v.try_into().ok().map(u64::from_be_bytes) };
        let rev = |v: &[u8]| -> Option<i64> {
            v.get(..8)
                .and_then(|b| b.try_into().ok())
                .map(|b| u64::from_be_bytes(b) as i64)
        };
        if let Some(it) = self.bucket(b"meta")? {
            for pair in it {
                let (k, v) = pair?;
                match k.as_slice() {
                    b"consistent_index" => m.consistent_index = be64(&v),
                    b"term" => m.term = be64(&v),
                    b"scheduledCompactRev" => m.scheduled_compact_rev = rev(&v),
                    b"finishedCompactRev" => m.finished_compact_rev = rev(&v),
                    _ => {}
                }
            }
        }
        if let Some(it) = self.bucket(b"cluster")? {
            for pair in it {
                let (k, v) = pair?;
                if k == b"clusterVersion" {
                    m.cluster_version = Some(String::from_utf8_lossy(&v).into_owned());
                }
            }
        }
        Ok(m)
    }
}

/// Reads and validates meta page `page` (at `page × page_size`).
fn read_meta(file: &File, db_len: u64, page: u64, page_size: u64) -> Result<Meta, SnapshotError> {
    let off = page * page_size;
    let need = off + (META_OFF + META_LEN) as u64;
    if need > db_len {
        return Err(SnapshotError::Truncated {
            what: format!("meta page {page}"),
            needed: need,
            available: db_len,
        });
    }
    let mut b = [0u8; META_OFF + META_LEN];
    file.read_exact_at(&mut b, off)?;
    let m = &b[META_OFF..];
    let magic = u32_at(m, 0);
    if magic != MAGIC {
        return Err(SnapshotError::BadMagic { page, found: magic });
    }
    let version = u32_at(m, 4);
    if version != VERSION {
        return Err(SnapshotError::BadVersion {
            page,
            found: version,
        });
    }
    let stored = u64_at(m, META_CHECKSUMMED);
    let computed = fnv1a64(&m[..META_CHECKSUMMED]);
    if stored != computed {
        return Err(SnapshotError::BadMetaChecksum {
            page,
            stored,
            computed,
        });
    }
    let meta = Meta {
        page,
        page_size: u32_at(m, 8),
        flags: u32_at(m, 12),
        root: u64_at(m, 16),
        freelist: u64_at(m, 32),
        hwm: u64_at(m, 40),
        txid: u64_at(m, 48),
    };
    let invalid = |reason: String| SnapshotError::InvalidMeta { page, reason };
    if u16_at(&b, 8) & META_PAGE == 0 {
        return Err(invalid(format!(
            "page type {:#06x} is not a meta page",
            u16_at(&b, 8)
        )));
    }
    let ps = meta.page_size;
    if !ps.is_power_of_two() || !(1024..=65536).contains(&ps) {
        return Err(invalid(format!("page size {ps}")));
    }
    if u64::from(ps) != page_size && page == 1 {
        return Err(invalid(format!(
            "page size {ps} differs from the {page_size} it was found with"
        )));
    }
    if meta.root < 2 || meta.root >= meta.hwm {
        return Err(invalid(format!(
            "root page {} outside 2..{}",
            meta.root, meta.hwm
        )));
    }
    if meta.freelist != NO_FREELIST && (meta.freelist < 2 || meta.freelist >= meta.hwm) {
        return Err(invalid(format!(
            "freelist page {} outside 2..{}",
            meta.freelist, meta.hwm
        )));
    }
    let size = meta
        .hwm
        .checked_mul(u64::from(ps))
        .ok_or_else(|| invalid(format!("high-water mark {} overflows", meta.hwm)))?;
    if size > db_len {
        return Err(SnapshotError::Truncated {
            what: format!(
                "the database ({} pages of {ps} bytes, meta page {page})",
                meta.hwm
            ),
            needed: size,
            available: db_len,
        });
    }
    Ok(meta)
}
