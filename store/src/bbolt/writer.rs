//! A streaming, write-once bbolt writer and the etcd 3.4 db layout on top of it.
//!
//! Layout of a written file (page size 4096):
//! - pages 0 and 1: meta pages (txids 2 and 1, both pointing at the same root), written last;
//! - page 2: an empty freelist page (so bbolt's checker sees every page accounted for);
//! - pages 3..: the B+trees of each bucket, built bottom-up while items stream in: a leaf page
//!   is written as soon as the next item would not fit, its (first key, page id) goes to the
//!   branch level above, which is written the same way. Only one partly filled page per tree
//!   level is in memory, so memory stays bounded by the tree height, not the store size. An
//!   item bigger than a page gets a page run of its own (`overflow` = extra pages);
//! - the top-level root leaf (one element per bucket, pointing at the bucket's root page) is
//!   built the same way, as each bucket ends; its root is the last page written.
//!
//! No free space management, no inline buckets, no in-place updates: etcd rewrites whatever it
//! touches on its first commit, and bbolt reads any valid tree shape.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{
    fnv1a64, show_key, DbSummary, Pair, SnapshotError, SummaryHasher, BRANCH_ELEM_SIZE,
    BRANCH_PAGE, BUCKET_HEADER_SIZE, BUCKET_LEAF_FLAG, FREELIST_PAGE, LEAF_ELEM_SIZE, LEAF_PAGE,
    MAGIC, MAX_KEY_SIZE, MAX_VALUE_SIZE, META_CHECKSUMMED, META_OFF, META_PAGE, PAGE_HEADER_SIZE,
    PAGE_SIZE, SHA256_LEN, VERSION,
};
use crate::backend::{Backend, Space};
use crate::mvcc::revision::Revision;

/// A stream of sorted (key, value) pairs feeding one bucket.
pub type PairIter<'a> = Box<dyn Iterator<Item = Result<Pair, SnapshotError>> + 'a>;

/// Page id of the freelist page in files this writer produces.
const FREELIST_PGID: u64 = 2;
/// txid of meta page 0; meta page 1 gets one less (bbolt keeps meta `txid % 2` current).
const META_TXID: u64 = 2;
/// Buffer between the page builder and the output (pages are written whole).
const WRITE_BUFFER: usize = 1 << 20;

/// Pages go out in id order, so the output position is always `next_pgid × PAGE_SIZE`.
struct PageSink<W: Write + Seek> {
    out: BufWriter<W>,
    next_pgid: u64,
    scratch: Vec<u8>,
}

impl<W: Write + Seek> PageSink<W> {
    /// Pads the page image in `scratch` to whole pages, stamps its id and overflow, writes it.
    fn emit(&mut self) -> Result<u64, SnapshotError> {
        let npages = self.scratch.len().div_ceil(PAGE_SIZE).max(1);
        let overflow = u32::try_from(npages - 1)
            .map_err(|_| SnapshotError::InvalidInput("page run too long".into()))?;
        self.scratch.resize(npages * PAGE_SIZE, 0);
        let pgid = self.next_pgid;
        self.scratch[0..8].copy_from_slice(&pgid.to_le_bytes());
        self.scratch[12..16].copy_from_slice(&overflow.to_le_bytes());
        self.out.write_all(&self.scratch)?;
        self.next_pgid += npages as u64;
        Ok(pgid)
    }

    /// Starts a page image in `scratch`: header with flags and count (id/overflow come later).
    fn begin_page(&mut self, flags: u16, count: usize) -> Result<(), SnapshotError> {
        let count = u16::try_from(count)
            .map_err(|_| SnapshotError::InvalidInput("too many elements for one page".into()))?;
        self.scratch.clear();
        self.scratch.extend_from_slice(&[0u8; 8]);
        self.scratch.extend_from_slice(&flags.to_le_bytes());
        self.scratch.extend_from_slice(&count.to_le_bytes());
        self.scratch.extend_from_slice(&[0u8; 4]);
        Ok(())
    }

    fn write_leaf(&mut self, items: &[Pair], elem_flags: u32) -> Result<u64, SnapshotError> {
        self.begin_page(LEAF_PAGE, items.len())?;
        // `pos` is relative to the element itself: data starts after all elements.
        let mut data_off = PAGE_HEADER_SIZE + items.len() * LEAF_ELEM_SIZE;
        for (i, (k, v)) in items.iter().enumerate() {
            let elem_off = PAGE_HEADER_SIZE + i * LEAF_ELEM_SIZE;
            self.scratch.extend_from_slice(&elem_flags.to_le_bytes());
            self.scratch
                .extend_from_slice(&((data_off - elem_off) as u32).to_le_bytes());
            self.scratch
                .extend_from_slice(&(k.len() as u32).to_le_bytes());
            self.scratch
                .extend_from_slice(&(v.len() as u32).to_le_bytes());
            data_off += k.len() + v.len();
        }
        for (k, v) in items {
            self.scratch.extend_from_slice(k);
            self.scratch.extend_from_slice(v);
        }
        self.emit()
    }

    fn write_branch(&mut self, items: &[(Vec<u8>, u64)]) -> Result<u64, SnapshotError> {
        self.begin_page(BRANCH_PAGE, items.len())?;
        let mut data_off = PAGE_HEADER_SIZE + items.len() * BRANCH_ELEM_SIZE;
        for (i, (k, pgid)) in items.iter().enumerate() {
            let elem_off = PAGE_HEADER_SIZE + i * BRANCH_ELEM_SIZE;
            self.scratch
                .extend_from_slice(&((data_off - elem_off) as u32).to_le_bytes());
            self.scratch
                .extend_from_slice(&(k.len() as u32).to_le_bytes());
            self.scratch.extend_from_slice(&pgid.to_le_bytes());
            data_off += k.len();
        }
        for (k, _) in items {
            self.scratch.extend_from_slice(k);
        }
        self.emit()
    }
}

/// One partly filled branch page of a tree being built.
#[derive(Default)]
struct BranchLevel {
    items: Vec<(Vec<u8>, u64)>,
    bytes: usize,
    written: bool,
}

/// Bottom-up bulk loader for one B+tree (a bucket, or the top-level bucket list).
struct TreeBuilder {
    leaf: Vec<Pair>,
    leaf_bytes: usize,
    leaf_written: bool,
    branches: Vec<BranchLevel>,
    elem_flags: u32,
}

impl TreeBuilder {
    fn new(elem_flags: u32) -> Self {
        TreeBuilder {
            leaf: Vec::new(),
            leaf_bytes: 0,
            leaf_written: false,
            branches: Vec::new(),
            elem_flags,
        }
    }

    /// The last key added (the leaf buffer is never empty once something was added).
    fn last_key(&self) -> Option<&[u8]> {
        self.leaf.last().map(|(k, _)| k.as_slice())
    }

    fn put<W: Write + Seek>(
        &mut self,
        sink: &mut PageSink<W>,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), SnapshotError> {
        let need = LEAF_ELEM_SIZE + key.len() + value.len();
        if !self.leaf.is_empty() && PAGE_HEADER_SIZE + self.leaf_bytes + need > PAGE_SIZE {
            self.flush_leaf(sink)?;
        }
        self.leaf.push((key, value));
        self.leaf_bytes += need;
        Ok(())
    }

    fn flush_leaf<W: Write + Seek>(&mut self, sink: &mut PageSink<W>) -> Result<(), SnapshotError> {
        let pgid = sink.write_leaf(&self.leaf, self.elem_flags)?;
        let first = self.leaf.first_mut().map(|(k, _)| std::mem::take(k));
        self.leaf.clear();
        self.leaf_bytes = 0;
        self.leaf_written = true;
        match first {
            Some(k) => self.push_branch(sink, 0, k, pgid),
            None => Ok(()),
        }
    }

    fn push_branch<W: Write + Seek>(
        &mut self,
        sink: &mut PageSink<W>,
        lvl: usize,
        key: Vec<u8>,
        pgid: u64,
    ) -> Result<(), SnapshotError> {
        if lvl == self.branches.len() {
            self.branches.push(BranchLevel::default());
        }
        let need = BRANCH_ELEM_SIZE + key.len();
        let level = &self.branches[lvl];
        if !level.items.is_empty() && PAGE_HEADER_SIZE + level.bytes + need > PAGE_SIZE {
            self.flush_branch(sink, lvl)?;
        }
        let level = &mut self.branches[lvl];
        level.items.push((key, pgid));
        level.bytes += need;
        Ok(())
    }

    fn flush_branch<W: Write + Seek>(
        &mut self,
        sink: &mut PageSink<W>,
        lvl: usize,
    ) -> Result<(), SnapshotError> {
        let level = &mut self.branches[lvl];
        let pgid = sink.write_branch(&level.items)?;
        let first = level.items.first_mut().map(|(k, _)| std::mem::take(k));
        level.items.clear();
        level.bytes = 0;
        level.written = true;
        match first {
            Some(k) => self.push_branch(sink, lvl + 1, k, pgid),
            None => Ok(()),
        }
    }

    /// Writes what is still buffered, level by level, and returns the root page id. The
    /// topmost level that never had to spill a page holds the whole level: it is the root.
    fn finish<W: Write + Seek>(mut self, sink: &mut PageSink<W>) -> Result<u64, SnapshotError> {
        if !self.leaf_written {
            // Everything fits one leaf (possibly empty: an empty bucket is an empty leaf).
            return sink.write_leaf(&self.leaf, self.elem_flags);
        }
        if !self.leaf.is_empty() {
            self.flush_leaf(sink)?;
        }
        let mut lvl = 0;
        while lvl < self.branches.len() {
            let top = lvl + 1 == self.branches.len();
            if top && !self.branches[lvl].written {
                return sink.write_branch(&self.branches[lvl].items);
            }
            if !self.branches[lvl].items.is_empty() {
                self.flush_branch(sink, lvl)?;
            }
            lvl += 1;
        }
        // Unreachable by construction: a level that spilled always has a level above it.
        Err(SnapshotError::InvalidInput(
            "internal: tree builder ended without a root".into(),
        ))
    }
}

/// A streaming bbolt writer: buckets in ascending name order, keys ascending inside each.
///
/// Every bucket becomes a tree of its own pages (never inline). Call [`BoltWriter::finish`] to
/// write the meta pages; the output is then a complete bbolt file of `total_size` bytes.
pub struct BoltWriter<W: Write + Seek> {
    sink: PageSink<W>,
    top: TreeBuilder,
    current: Option<(Vec<u8>, TreeBuilder)>,
    summary: SummaryHasher,
}

impl<W: Write + Seek> BoltWriter<W> {
    /// Starts a file at the current position of `out`, which must be its start (offset 0).
    pub fn new(out: W) -> Result<Self, SnapshotError> {
        let mut sink = PageSink {
            out: BufWriter::with_capacity(WRITE_BUFFER, out),
            next_pgid: 0,
            scratch: Vec::with_capacity(PAGE_SIZE),
        };
        // Placeholders for the two meta pages, rewritten by `finish` once the root is known.
        sink.out.write_all(&[0u8; 2 * PAGE_SIZE])?;
        sink.next_pgid = 2;
        sink.begin_page(FREELIST_PAGE, 0)?;
        let freelist = sink.emit()?;
        debug_assert_eq!(freelist, FREELIST_PGID);
        Ok(BoltWriter {
            sink,
            top: TreeBuilder::new(BUCKET_LEAF_FLAG),
            current: None,
            summary: SummaryHasher::new(),
        })
    }

    /// Opens the next top-level bucket; names must be strictly ascending.
    pub fn begin_bucket(&mut self, name: &[u8]) -> Result<(), SnapshotError> {
        if self.current.is_some() {
            self.end_bucket()?;
        }
        if name.is_empty() || name.len() > MAX_KEY_SIZE {
            return Err(SnapshotError::InvalidInput(format!(
                "bucket name of {} bytes",
                name.len()
            )));
        }
        if let Some(prev) = self.top.last_key() {
            if prev >= name {
                return Err(SnapshotError::UnsortedInput {
                    bucket: "(top level)".into(),
                    prev: show_key(prev),
                    key: show_key(name),
                });
            }
        }
        self.summary.bucket(name);
        self.current = Some((name.to_vec(), TreeBuilder::new(0)));
        Ok(())
    }

    /// Adds one entry to the open bucket; keys must be strictly ascending (byte order).
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), SnapshotError> {
        let Some((name, tree)) = self.current.as_mut() else {
            return Err(SnapshotError::InvalidInput("put outside a bucket".into()));
        };
        if key.is_empty() || key.len() > MAX_KEY_SIZE {
            return Err(SnapshotError::InvalidInput(format!(
                "bucket {}: key of {} bytes (bbolt allows 1..={MAX_KEY_SIZE})",
                show_key(name),
                key.len()
            )));
        }
        if value.len() > MAX_VALUE_SIZE {
            return Err(SnapshotError::InvalidInput(format!(
                "bucket {}: value of {} bytes for key {}",
                show_key(name),
                value.len(),
                show_key(&key)
            )));
        }
        if let Some(prev) = tree.last_key() {
            if prev >= key.as_slice() {
                return Err(SnapshotError::UnsortedInput {
                    bucket: String::from_utf8_lossy(name).into_owned(),
                    prev: show_key(prev),
                    key: show_key(&key),
                });
            }
        }
        self.summary.entry(&key, &value);
        tree.put(&mut self.sink, key, value)
    }

    /// Closes the open bucket: writes its remaining pages and records its root.
    pub fn end_bucket(&mut self) -> Result<(), SnapshotError> {
        let Some((name, tree)) = self.current.take() else {
            return Ok(());
        };
        let root = tree.finish(&mut self.sink)?;
        let mut header = Vec::with_capacity(BUCKET_HEADER_SIZE);
        header.extend_from_slice(&root.to_le_bytes());
        header.extend_from_slice(&0u64.to_le_bytes()); // sequence: etcd never uses it
        self.top.put(&mut self.sink, name, header)
    }

    /// Writes a whole bucket from a sorted stream.
    pub fn bucket<I>(&mut self, name: &[u8], items: I) -> Result<(), SnapshotError>
    where
        I: IntoIterator<Item = Result<Pair, SnapshotError>>,
    {
        self.begin_bucket(name)?;
        for item in items {
            let (k, v) = item?;
            self.put(k, v)?;
        }
        self.end_bucket()
    }

    /// Writes the top-level tree and both meta pages; returns the output (positioned at the
    /// end of the db) and the `etcdctl snapshot status` figures of the file.
    pub fn finish(mut self) -> Result<(W, DbSummary), SnapshotError> {
        self.end_bucket()?;
        let root = self.top.finish(&mut self.sink)?;
        let hwm = self.sink.next_pgid;
        let mut out = self.sink.out;
        out.seek(SeekFrom::Start(0))?;
        out.write_all(&meta_page(0, root, hwm, META_TXID))?;
        out.write_all(&meta_page(1, root, hwm, META_TXID - 1))?;
        let end = out.seek(SeekFrom::Start(hwm * PAGE_SIZE as u64))?;
        let out = out.into_inner().map_err(|e| e.into_error())?;
        Ok((out, self.summary.finish(end)))
    }
}

/// A meta page: bbolt's `meta` struct after the page header, FNV-1a over its first 56 bytes.
fn meta_page(pgid: u64, root: u64, hwm: u64, txid: u64) -> [u8; PAGE_SIZE] {
    let mut p = [0u8; PAGE_SIZE];
    p[0..8].copy_from_slice(&pgid.to_le_bytes());
    p[8..10].copy_from_slice(&META_PAGE.to_le_bytes());
    let m = &mut p[META_OFF..];
    m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    m[4..8].copy_from_slice(&VERSION.to_le_bytes());
    m[8..12].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
    // m[12..16]: flags = 0; m[24..32]: root bucket sequence = 0.
    m[16..24].copy_from_slice(&root.to_le_bytes());
    m[32..40].copy_from_slice(&FREELIST_PGID.to_le_bytes());
    m[40..48].copy_from_slice(&hwm.to_le_bytes());
    m[48..56].copy_from_slice(&txid.to_le_bytes());
    let sum = fnv1a64(&m[..META_CHECKSUMMED]);
    m[56..64].copy_from_slice(&sum.to_le_bytes());
    p
}

/// A cluster member as etcd 3.4 stores it in bucket `members`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EtcdMember {
    /// Member ID (the bucket key is its 16-digit lowercase hex form).
    pub id: u64,
    /// Member name (omitted from the JSON when empty, as etcd does).
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs (omitted when empty).
    pub client_urls: Vec<String>,
    /// Learner flag (only written when true).
    pub is_learner: bool,
}

impl EtcdMember {
    /// The bucket key: the ID as 16 lowercase hex digits.
    pub fn key(&self) -> Vec<u8> {
        format!("{:016x}", self.id).into_bytes()
    }

    /// The JSON etcd writes (Go's `json.Marshal` of `membership.Member`, same field order).
    pub fn to_json(&self) -> String {
        let mut s = format!("{{\"id\":{},\"peerURLs\":", self.id);
        push_json_list(&mut s, &self.peer_urls, true);
        if self.is_learner {
            s.push_str(",\"isLearner\":true");
        }
        if !self.name.is_empty() {
            s.push_str(",\"name\":");
            push_json_str(&mut s, &self.name);
        }
        if !self.client_urls.is_empty() {
            s.push_str(",\"clientURLs\":");
            push_json_list(&mut s, &self.client_urls, false);
        }
        s.push('}');
        s
    }
}

fn push_json_list(s: &mut String, items: &[String], nil_when_empty: bool) {
    if items.is_empty() && nil_when_empty {
        // Go marshals a nil slice as null.
        s.push_str("null");
        return;
    }
    s.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        push_json_str(s, item);
    }
    s.push(']');
}

/// A JSON string escaped as Go's encoder does (HTML-safe escapes included).
fn push_json_str(s: &mut String, v: &str) {
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                s.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => s.push_str(&format!("\\u{:04x}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
}

/// Everything an etcd 3.4 db file holds. Big data comes as sorted streams; the small buckets
/// as vectors (sorted by the writer).
pub struct EtcdDbInput<'a> {
    /// Bucket `key`: revision keys (17 bytes, 18 with the tombstone mark) → `mvccpb.KeyValue`
    /// bytes, ascending (keel's backend `Kv` space, scanned in order).
    pub kvs: PairIter<'a>,
    /// Bucket `lease`: 8-byte big-endian lease ID → `leasepb.Lease` bytes, ascending.
    pub leases: PairIter<'a>,
    /// Bucket `members`.
    pub members: Vec<EtcdMember>,
    /// Bucket `members_removed`: IDs of removed members.
    pub removed_members: Vec<u64>,
    /// `meta/consistent_index`: the last applied Raft index.
    pub consistent_index: u64,
    /// `meta/term` (etcd 3.5+ writes it; 3.4 ignores it). `None` leaves it out.
    pub term: Option<u64>,
    /// Compaction revision: written as both `scheduledCompactRev` and `finishedCompactRev`.
    pub compact_revision: Option<i64>,
    /// `cluster/clusterVersion`, e.g. "3.4.0".
    pub cluster_version: String,
    /// Bucket `alarm` entries (raw).
    pub alarms: Vec<Pair>,
    /// Bucket `auth` entries (raw: `authEnabled`, `authRevision`).
    pub auth: Vec<Pair>,
    /// Bucket `authRoles` entries (raw).
    pub auth_roles: Vec<Pair>,
    /// Bucket `authUsers` entries (raw).
    pub auth_users: Vec<Pair>,
}

impl<'a> EtcdDbInput<'a> {
    /// Input with the given key and lease streams, cluster version 3.4.0 and nothing else.
    pub fn new(kvs: PairIter<'a>, leases: PairIter<'a>) -> Self {
        EtcdDbInput {
            kvs,
            leases,
            members: Vec::new(),
            removed_members: Vec::new(),
            consistent_index: 0,
            term: None,
            compact_revision: None,
            cluster_version: "3.4.0".into(),
            alarms: Vec::new(),
            auth: Vec::new(),
            auth_roles: Vec::new(),
            auth_users: Vec::new(),
        }
    }
}

/// Streams one space of keel's backend (in key order) as writer input: `Space::Kv` is
/// exactly bucket `key`, `Space::Lease` exactly bucket `lease`. The backend must not change
/// while the file is written (hold the apply lock or use a point-in-time view), or the file
/// mixes two states.
pub fn backend_space<B: Backend + ?Sized>(backend: &B, space: Space) -> PairIter<'_> {
    Box::new(
        backend
            .scan(space, &[], None)
            .map(|r| r.map_err(SnapshotError::from)),
    )
}

fn sorted(mut v: Vec<Pair>) -> impl Iterator<Item = Result<Pair, SnapshotError>> {
    v.sort();
    v.into_iter().map(Ok)
}

/// Writes an etcd 3.4 backend file (no trailer) to `out`, which must be at offset 0; returns
/// what `etcdctl snapshot status` will report for it. Streams: memory does not grow with the
/// number of keys.
pub fn write_etcd_db<W: Write + Seek>(
    out: W,
    input: EtcdDbInput<'_>,
) -> Result<DbSummary, SnapshotError> {
    let EtcdDbInput {
        kvs,
        leases,
        members,
        removed_members,
        consistent_index,
        term,
        compact_revision,
        cluster_version,
        alarms,
        auth,
        auth_roles,
        auth_users,
    } = input;
    let mut w = BoltWriter::new(out)?;
    w.bucket(b"alarm", sorted(alarms))?;
    w.bucket(b"auth", sorted(auth))?;
    w.bucket(b"authRoles", sorted(auth_roles))?;
    w.bucket(b"authUsers", sorted(auth_users))?;
    let version = if cluster_version.is_empty() {
        "3.4.0".to_string()
    } else {
        cluster_version
    };
    w.bucket(
        b"cluster",
        sorted(vec![(b"clusterVersion".to_vec(), version.into_bytes())]),
    )?;
    // Only well-formed revision keys: etcd's restore decodes every key of this bucket.
    w.bucket(
        b"key",
        kvs.map(|item| {
            let (k, v) = item?;
            if Revision::from_key(&k).is_none() {
                return Err(SnapshotError::InvalidInput(format!(
                    "bucket key: {} is not a revision key",
                    show_key(&k)
                )));
            }
            Ok((k, v))
        }),
    )?;
    w.bucket(
        b"lease",
        leases.map(|item| {
            let (k, v) = item?;
            if k.len() != 8 {
                return Err(SnapshotError::InvalidInput(format!(
                    "bucket lease: key {} is not an 8-byte lease ID",
                    show_key(&k)
                )));
            }
            Ok((k, v))
        }),
    )?;
    w.bucket(
        b"members",
        sorted(
            members
                .iter()
                .map(|m| (m.key(), m.to_json().into_bytes()))
                .collect(),
        ),
    )?;
    w.bucket(
        b"members_removed",
        sorted(
            removed_members
                .iter()
                .map(|id| (format!("{id:016x}").into_bytes(), b"removed".to_vec()))
                .collect(),
        ),
    )?;
    let mut meta = vec![(
        b"consistent_index".to_vec(),
        consistent_index.to_be_bytes().to_vec(),
    )];
    if let Some(rev) = compact_revision {
        let enc = Revision::new(rev, 0).to_bytes().to_vec();
        meta.push((b"scheduledCompactRev".to_vec(), enc.clone()));
        meta.push((b"finishedCompactRev".to_vec(), enc));
    }
    if let Some(term) = term {
        meta.push((b"term".to_vec(), term.to_be_bytes().to_vec()));
    }
    w.bucket(b"meta", sorted(meta))?;
    let (_, summary) = w.finish()?;
    Ok(summary)
}

/// Output that only counts: lets [`total_size_hint`] run the real layout without writing.
#[derive(Default)]
struct CountingSink {
    pos: u64,
    len: u64,
}

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pos += buf.len() as u64;
        self.len = self.len.max(self.pos);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for CountingSink {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(n) => {
                self.pos = n;
                return Ok(n);
            }
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = base.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek"))?;
        Ok(self.pos)
    }
}

/// Size in bytes of the db [`write_etcd_db`] would write for this input (trailer excluded),
/// found by running the same layout into a counting sink. It consumes the streams, so the
/// caller must be able to produce the identical input again (a consistent store view);
/// otherwise write to a temporary file first and stream that.
pub fn total_size_hint(input: EtcdDbInput<'_>) -> Result<u64, SnapshotError> {
    Ok(write_etcd_db(CountingSink::default(), input)?.total_size)
}

/// Hashes `f` from its start to its end and appends the SHA-256, as `etcdctl snapshot save`
/// leaves the file; returns the digest.
pub fn append_sha256_trailer<F: Read + Write + Seek>(
    f: &mut F,
) -> Result<[u8; SHA256_LEN], SnapshotError> {
    f.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; WRITE_BUFFER];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        hasher.update(&buf[..n]);
    }
    let digest: [u8; SHA256_LEN] = hasher.finalize().into();
    // Reading to the end left the position there.
    f.write_all(&digest)?;
    f.flush()?;
    Ok(digest)
}

/// A snapshot file written by [`write_etcd_snapshot_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    /// What `etcdctl snapshot status` reports for it.
    pub summary: DbSummary,
    /// The SHA-256 trailer (digest of the db bytes).
    pub sha256: [u8; SHA256_LEN],
    /// File length: db size + 32.
    pub file_size: u64,
}

/// Writes an `etcdctl snapshot save`-style file at `path` (db + SHA-256 trailer, mode 0600,
/// fsynced); replaces an existing file.
pub fn write_etcd_snapshot_file(
    path: &Path,
    input: EtcdDbInput<'_>,
) -> Result<SnapshotFile, SnapshotError> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut file: File = opts.open(path)?;
    let summary = write_etcd_db(&mut file, input)?;
    let sha256 = append_sha256_trailer(&mut file)?;
    file.sync_all()?;
    Ok(SnapshotFile {
        summary,
        sha256,
        file_size: summary.total_size + SHA256_LEN as u64,
    })
}
