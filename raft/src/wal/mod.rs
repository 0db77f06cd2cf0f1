//! A segmented write-ahead log of opaque byte records.
//!
//! The log is a directory of segment files named by a 16-hex-digit sequence number. Records are
//! framed with a length and a crc32 (see [`segment`]). Writes are buffered; [`Wal::sync`] makes
//! them durable with one `fdatasync`. Old segments are deleted whole, oldest first.

pub(crate) mod record;
pub(crate) mod segment;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use segment::{ActiveSegment, Tail};

/// Errors of the write-ahead log.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WalError {
    /// An operating-system call failed.
    #[error("wal i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The log is damaged somewhere other than an interrupted tail; the member must not start.
    #[error(
        "wal segment {} is corrupt at offset {offset}: {reason}; refusing to start \
         (restore this member's data from a backup or re-add it to the cluster)",
        segment.display()
    )]
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A record was empty or larger than a frame can carry.
    #[error("wal record of {len} bytes is empty or exceeds the {max} byte limit")]
    BadRecordSize { len: usize, max: usize },
    /// An earlier write or sync failed, so nothing written since can be trusted to be durable.
    #[error("wal stopped after an earlier failure: {0}")]
    Failed(String),
}

impl WalError {
    /// Builds a `map_err` adapter that attaches `path` to an io error.
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WalError + '_ {
        move |source| WalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Tunables of the write-ahead log.
#[derive(Debug, Clone)]
pub(crate) struct WalOptions {
    /// Size after which the active segment is sealed and a new one started.
    pub segment_size: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size: 64 << 20,
        }
    }
}

/// What the log knows about one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentInfo {
    /// Sequence number (the file name).
    pub seq: u64,
    /// Bytes in the segment, header included.
    pub bytes: u64,
    /// Highest raft index the caller reported for the segment's records.
    pub max_index: Option<u64>,
}

/// Sync bookkeeping shared with [`PendingSync`] handles.
#[derive(Debug, Default)]
struct SyncState {
    syncs: AtomicU64,
    /// The first write or sync failure; once set the log refuses all further work (fail-stop:
    /// after a failed fsync the kernel may have dropped dirty pages, so retrying could lie).
    failed: OnceLock<String>,
    /// Makes the next sync fail, to test fail-stop handling.
    #[cfg(test)]
    inject_failure: std::sync::atomic::AtomicBool,
    /// Where sync timings go, once the owner gave one.
    metrics: OnceLock<Arc<crate::metrics::RaftMetrics>>,
}

impl SyncState {
    fn check(&self) -> Result<(), WalError> {
        match self.failed.get() {
            Some(reason) => Err(WalError::Failed(reason.clone())),
            None => Ok(()),
        }
    }

    fn fail(&self, err: &WalError) {
        let _ = self.failed.set(err.to_string());
    }
}

/// Where one record lies: its segment, and its frame's offset and length (header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordPos {
    pub seq: u64,
    pub offset: u64,
    pub frame_len: u32,
}

/// A segmented write-ahead log.
#[derive(Debug)]
pub(crate) struct Wal {
    dir: PathBuf,
    options: WalOptions,
    /// Sealed segments, oldest first.
    sealed: Vec<SegmentInfo>,
    active: ActiveSegment,
    state: Arc<SyncState>,
}

/// Buffered records handed to the OS whose `fdatasync` has not been done yet.
#[must_use = "the records are not durable until `wait` returns Ok"]
pub(crate) struct PendingSync {
    file: Arc<File>,
    path: PathBuf,
    state: Arc<SyncState>,
}

impl PendingSync {
    /// Runs the `fdatasync`; on failure the log is stopped for good.
    pub(crate) fn wait(self) -> Result<(), WalError> {
        self.state.check()?;
        self.state.syncs.fetch_add(1, Ordering::Relaxed);
        #[cfg(test)]
        let injected = self.state.inject_failure.swap(false, Ordering::Relaxed);
        #[cfg(not(test))]
        let injected = false;
        let started = std::time::Instant::now();
        let res = if injected {
            Err(std::io::Error::other("injected sync failure"))
        } else {
            self.file.sync_data()
        };
        if let Some(m) = self.state.metrics.get() {
            m.fsync(started.elapsed());
        }
        if let Err(source) = res {
            let err = WalError::Io {
                path: self.path,
                source,
            };
            self.state.fail(&err);
            return Err(err);
        }
        Ok(())
    }
}

impl Wal {
    /// Opens (or creates) the log in `dir` and returns every record in order.
    #[cfg(test)]
    pub(crate) fn open(dir: &Path, options: WalOptions) -> Result<(Wal, Vec<Vec<u8>>), WalError> {
        let mut records = Vec::new();
        let wal = Self::open_with(dir, options, |payload, _| {
            records.push(payload.to_vec());
            Ok(None)
        })?;
        Ok((wal, records))
    }

    /// Opens (or creates) the log in `dir`, feeding each record and its position to `replay` in order.
    ///
    /// `replay` returns the highest raft index the record holds (kept as segment metadata for
    /// [`Wal::remove_segments`]) or a reason the record is unreadable, which fails the open as
    /// corruption. A torn tail of the last segment is cut off; damage anywhere else is
    /// [`WalError::Corrupt`].
    pub(crate) fn open_with(
        dir: &Path,
        options: WalOptions,
        mut replay: impl FnMut(&[u8], RecordPos) -> Result<Option<u64>, String>,
    ) -> Result<Wal, WalError> {
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(WalError::io(dir))?;
            // The new directory's own entry must be durable too, or a power loss could take
            // the whole log with it after records were acknowledged.
            let parent = dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            segment::sync_dir(parent)?;
        }
        let seqs = list_segments(dir)?;
        let state = Arc::new(SyncState::default());
        let Some(&last_seq) = seqs.last() else {
            let active = ActiveSegment::create(dir, 0, &[])?;
            return Ok(Wal {
                dir: dir.to_path_buf(),
                options,
                sealed: Vec::new(),
                active,
                state,
            });
        };
        let mut sealed = Vec::new();
        let mut expected = seqs[0];
        for &seq in &seqs {
            let path = dir.join(segment::segment_name(seq));
            if seq != expected {
                let missing = dir.join(segment::segment_name(expected));
                return Err(WalError::Corrupt {
                    segment: missing,
                    offset: 0,
                    reason: "segment file is missing".into(),
                });
            }
            expected = seq + 1;
            let data = std::fs::read(&path).map_err(WalError::io(&path))?;
            let scan = segment::scan(&data);
            let is_last = seq == last_seq;
            match scan.tail {
                Tail::Clean => {}
                Tail::Torn { offset, reason } if is_last => {
                    tracing::warn!(
                        segment = %path.display(), offset, %reason, cut = data.len() as u64 - offset,
                        "truncating torn tail of the write-ahead log"
                    );
                    truncate_file(&path, offset)?;
                }
                Tail::Torn { offset, reason } => {
                    // Sealed segments were fully synced before the next one was created.
                    let reason = format!("{reason} in a sealed segment");
                    return Err(WalError::Corrupt {
                        segment: path,
                        offset,
                        reason,
                    });
                }
                Tail::Corrupt { offset, reason } => {
                    return Err(WalError::Corrupt {
                        segment: path,
                        offset,
                        reason,
                    })
                }
            }
            let mut max_index = None;
            for (offset, range) in scan.frames {
                let pos = RecordPos {
                    seq,
                    offset,
                    frame_len: (range.end as u64 - offset) as u32,
                };
                let index = replay(&data[range], pos).map_err(|reason| WalError::Corrupt {
                    segment: path.clone(),
                    offset,
                    reason: format!("undecodable record: {reason}"),
                })?;
                if let Some(i) = index {
                    max_index = Some(max_index.map_or(i, |m: u64| m.max(i)));
                }
            }
            if !is_last {
                sealed.push(SegmentInfo {
                    seq,
                    bytes: data.len() as u64,
                    max_index,
                });
            } else {
                let active = ActiveSegment::open(path, seq, scan.valid_len, max_index)?;
                return Ok(Wal {
                    dir: dir.to_path_buf(),
                    options,
                    sealed,
                    active,
                    state,
                });
            }
        }
        // `seqs` is non-empty, so the loop returned at the last segment.
        Err(WalError::Failed(
            "segment listing changed while opening".into(),
        ))
    }

    /// Buffers a record that carries no raft index.
    pub(crate) fn write(&mut self, payload: &[u8]) -> Result<(), WalError> {
        self.write_indexed(payload, None).map(drop)
    }

    /// Buffers a record, noting the highest raft index it holds (if any) for segment removal;
    /// returns where the record lies, for [`Wal::read`] once it has been handed to the OS.
    pub(crate) fn write_indexed(
        &mut self,
        payload: &[u8],
        index: Option<u64>,
    ) -> Result<RecordPos, WalError> {
        self.state.check()?;
        let res = self.active.write(payload, index);
        let offset = self.fail_on_io(res)?;
        Ok(RecordPos {
            seq: self.active.seq,
            offset,
            frame_len: (segment::FRAME_HEADER + payload.len()) as u32,
        })
    }

    /// Reads back the payload of the record at `pos` in the log in `dir`. The record must have
    /// been handed to the OS (a sync began after it was written) and its segment not removed.
    pub(crate) fn read(dir: &Path, pos: RecordPos) -> Result<Vec<u8>, WalError> {
        let path = dir.join(segment::segment_name(pos.seq));
        segment::read_frame(&path, pos.offset, pos.frame_len as usize)
    }

    /// Records the time of every later `fdatasync` in `metrics`.
    pub(crate) fn instrument(&self, metrics: Arc<crate::metrics::RaftMetrics>) {
        let _ = self.state.metrics.set(metrics);
    }

    /// Makes everything written so far durable (flush plus `fdatasync`).
    pub(crate) fn sync(&mut self) -> Result<(), WalError> {
        self.begin_sync()?.wait()
    }

    /// Hands buffered records to the OS and returns a handle that does the `fdatasync`.
    ///
    /// The handle does not borrow the log, so the caller can release its lock while the disk
    /// works and let new records accumulate for the next sync (group commit).
    pub(crate) fn begin_sync(&mut self) -> Result<PendingSync, WalError> {
        self.state.check()?;
        let res = self.active.flush();
        self.fail_on_io(res)?;
        Ok(PendingSync {
            file: self.active.file(),
            path: self.active.path.clone(),
            state: Arc::clone(&self.state),
        })
    }

    /// Seals the active segment once it reached the segment size and starts the next one with
    /// the `seed` records (e.g. the latest checkpoint records, so they survive segment removal).
    pub(crate) fn rotate_if_full(&mut self, seed: &[Vec<u8>]) -> Result<bool, WalError> {
        if self.active.len < self.options.segment_size {
            return Ok(false);
        }
        // The sealed segment must be complete on disk before a newer one exists: open() only
        // tolerates a torn tail in the last segment.
        self.sync()?;
        let next = ActiveSegment::create(&self.dir, self.active.seq + 1, seed);
        let next = self.fail_on_io(next)?;
        let old = std::mem::replace(&mut self.active, next);
        tracing::debug!(
            sealed = old.seq,
            bytes = old.len,
            "rotated write-ahead log segment"
        );
        self.sealed.push(SegmentInfo {
            seq: old.seq,
            bytes: old.len,
            max_index: old.max_index,
        });
        Ok(true)
    }

    /// Deletes sealed segments oldest first, stopping at the first one `keep` wants kept.
    ///
    /// Only a prefix is ever removed, so replaying the remaining segments in order still yields
    /// the right state. Returns how many segments were deleted.
    pub(crate) fn remove_segments(
        &mut self,
        keep: impl Fn(&SegmentInfo) -> bool,
    ) -> Result<usize, WalError> {
        self.state.check()?;
        let mut removed = 0;
        while let Some(oldest) = self.sealed.first() {
            if keep(oldest) {
                break;
            }
            let path = self.dir.join(segment::segment_name(oldest.seq));
            std::fs::remove_file(&path).map_err(WalError::io(&path))?;
            // One directory sync per removal keeps removals in order on disk, so a crash can
            // never leave a gap in the sequence (which open() rejects).
            segment::sync_dir(&self.dir)?;
            tracing::debug!(segment = %path.display(), "removed write-ahead log segment");
            self.sealed.remove(0);
            removed += 1;
        }
        Ok(removed)
    }

    /// All segments, oldest first; the last one is the active segment.
    #[cfg(test)]
    pub(crate) fn segments(&self) -> Vec<SegmentInfo> {
        let mut all = self.sealed.clone();
        all.push(SegmentInfo {
            seq: self.active.seq,
            bytes: self.active.len,
            max_index: self.active.max_index,
        });
        all
    }

    /// Number of `fdatasync` calls made on segments so far (for tests).
    #[cfg(test)]
    pub(crate) fn sync_count(&self) -> u64 {
        self.state.syncs.load(Ordering::Relaxed)
    }

    /// Makes the next `fdatasync` fail (tests of fail-stop handling).
    #[cfg(test)]
    pub(crate) fn inject_sync_failure(&self) {
        self.state.inject_failure.store(true, Ordering::Relaxed);
    }

    /// Stops the log for good if `res` is an error: a failed write may have left a partial
    /// frame in the page cache, so nothing after it may be reported durable.
    fn fail_on_io<T>(&self, res: Result<T, WalError>) -> Result<T, WalError> {
        if let Err(err) = &res {
            if !matches!(err, WalError::BadRecordSize { .. }) {
                self.state.fail(err);
            }
        }
        res
    }
}

/// Lists segment sequence numbers in `dir`, ascending, and removes leftover temporary files.
fn list_segments(dir: &Path) -> Result<Vec<u64>, WalError> {
    let mut seqs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(WalError::io(dir))? {
        let entry = entry.map_err(WalError::io(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = segment::parse_segment_name(name) {
            seqs.push(seq);
        } else if name.ends_with(".wal.tmp") {
            // A segment whose creation was interrupted before its rename: never part of the log.
            let path = entry.path();
            tracing::warn!(file = %path.display(), "removing unfinished segment file");
            std::fs::remove_file(&path).map_err(WalError::io(&path))?;
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Cuts `path` to `len` bytes durably.
fn truncate_file(path: &Path, len: u64) -> Result<(), WalError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(WalError::io(path))?;
    file.set_len(len).map_err(WalError::io(path))?;
    file.sync_all().map_err(WalError::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> WalOptions {
        WalOptions { segment_size: 256 }
    }

    fn seg_path(dir: &Path, seq: u64) -> PathBuf {
        dir.join(segment::segment_name(seq))
    }

    #[test]
    fn write_sync_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, recs) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert!(recs.is_empty());
        wal.write(b"alpha").unwrap();
        wal.write(b"beta").unwrap();
        wal.sync().unwrap();
        assert_eq!(wal.sync_count(), 1);
        drop(wal);
        let (mut wal, recs) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert_eq!(recs, vec![b"alpha".to_vec(), b"beta".to_vec()]);
        wal.write(b"gamma").unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, recs) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert_eq!(recs.len(), 3);
    }

    #[test]
    fn empty_record_rejected_without_stopping() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert!(matches!(
            wal.write(b""),
            Err(WalError::BadRecordSize { .. })
        ));
        wal.write(b"x").unwrap();
        wal.sync().unwrap();
    }

    #[test]
    fn torn_tail_is_truncated_and_appendable() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        wal.write(b"first record").unwrap();
        wal.write(b"second record").unwrap();
        wal.sync().unwrap();
        drop(wal);
        let path = seg_path(dir.path(), 0);
        let full = std::fs::read(&path).unwrap();
        // Cut the second record in half and append a zero-filled page.
        let mut data = full[..full.len() - 6].to_vec();
        data.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&path, &data).unwrap();
        let (mut wal, recs) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert_eq!(recs, vec![b"first record".to_vec()]);
        let cut = (segment::MAGIC.len() + segment::FRAME_HEADER + 12) as u64;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), cut);
        wal.write(b"third").unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, recs) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert_eq!(recs, vec![b"first record".to_vec(), b"third".to_vec()]);
    }

    #[test]
    fn flipped_byte_mid_log_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        for i in 0..10u8 {
            wal.write(&[i + 1; 20]).unwrap();
        }
        wal.sync().unwrap();
        drop(wal);
        let path = seg_path(dir.path(), 0);
        let mut data = std::fs::read(&path).unwrap();
        let mid = data.len() / 2;
        data[mid] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let err = Wal::open(dir.path(), WalOptions::default()).unwrap_err();
        match &err {
            WalError::Corrupt { segment, .. } => assert_eq!(segment, &path),
            other => panic!("expected corruption, got {other}"),
        }
        assert!(err.to_string().contains("0000000000000000.wal"), "{err}");
        // Nothing was truncated: the evidence stays for the operator.
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn rotation_seeds_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), small()).unwrap();
        for i in 1..=40u64 {
            wal.write_indexed(&[7u8; 30], Some(i)).unwrap();
            wal.sync().unwrap();
            wal.rotate_if_full(&[b"seed".to_vec()]).unwrap();
        }
        let segs = wal.segments();
        assert!(segs.len() > 3, "{segs:?}");
        assert_eq!(segs[0].max_index, Some(7));
        // Remove every sealed segment whose indexes are all <= 20.
        let removed = wal
            .remove_segments(|s| s.max_index.is_some_and(|m| m > 20))
            .unwrap();
        assert!(removed >= 2);
        let left = wal.segments();
        assert!(left[0].max_index.unwrap() > 20);
        assert!(!seg_path(dir.path(), 0).exists());
        drop(wal);
        let (wal, recs) = Wal::open(dir.path(), small()).unwrap();
        assert_eq!(
            wal.segments().first().map(|s| s.seq),
            left.first().map(|s| s.seq)
        );
        // Every remaining segment starts with the seed record.
        assert_eq!(
            recs.iter().filter(|r| r.as_slice() == b"seed").count(),
            left.len()
        );
    }

    #[test]
    fn bad_sealed_segment_tail_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), small()).unwrap();
        for _ in 0..20 {
            wal.write(&[1u8; 60]).unwrap();
            wal.sync().unwrap();
            wal.rotate_if_full(&[]).unwrap();
        }
        drop(wal);
        let first = seg_path(dir.path(), 0);
        let data = std::fs::read(&first).unwrap();
        std::fs::write(&first, &data[..data.len() - 3]).unwrap();
        assert!(
            matches!(Wal::open(dir.path(), small()), Err(WalError::Corrupt { segment, .. }) if segment == first)
        );
    }

    #[test]
    fn missing_middle_segment_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), small()).unwrap();
        for _ in 0..20 {
            wal.write(&[1u8; 60]).unwrap();
            wal.sync().unwrap();
            wal.rotate_if_full(&[]).unwrap();
        }
        drop(wal);
        std::fs::remove_file(seg_path(dir.path(), 1)).unwrap();
        let err = Wal::open(dir.path(), small()).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn undecodable_record_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        wal.write(b"fine").unwrap();
        wal.write(b"bad").unwrap();
        wal.sync().unwrap();
        drop(wal);
        let res = Wal::open_with(dir.path(), WalOptions::default(), |r, _| {
            if r == b"bad" {
                Err("nope".into())
            } else {
                Ok(None)
            }
        });
        assert!(matches!(res, Err(WalError::Corrupt { offset, .. }) if offset > 8));
    }

    #[test]
    fn leftover_tmp_segment_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        drop(Wal::open(dir.path(), WalOptions::default()).unwrap());
        let tmp = dir.path().join("0000000000000001.wal.tmp");
        std::fs::write(&tmp, b"KEEL").unwrap();
        let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        assert!(!tmp.exists());
        assert_eq!(wal.segments().len(), 1);
    }
}
