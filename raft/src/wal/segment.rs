//! One segment file: an 8-byte magic header followed by framed records.
//!
//! A frame is `u32 LE payload length | u32 LE crc32 of payload | payload`. Empty payloads are
//! never written, so a zero-filled region (length 0) can never parse as a valid frame.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::WalError;

/// Magic bytes at the start of every segment (the trailing digit is the format version).
pub(crate) const MAGIC: &[u8; 8] = b"KEELWAL1";
/// Bytes of frame header before each payload.
pub(crate) const FRAME_HEADER: usize = 8;
/// Largest payload a frame may carry; a bigger length field is treated as garbage.
pub(crate) const MAX_RECORD_LEN: usize = 64 << 20;
/// Buffered bytes above which a write is pushed to the OS without waiting for a sync.
const FLUSH_THRESHOLD: usize = 1 << 20;

/// File name of segment `seq`.
pub(crate) fn segment_name(seq: u64) -> String {
    format!("{seq:016x}.wal")
}

/// Parses a segment file name back to its sequence number.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".wal")?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Appends one frame for `payload` to `buf`.
pub(crate) fn encode_frame(buf: &mut Vec<u8>, payload: &[u8]) {
    // Callers check the size limit first, so the length always fits in a u32.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    buf.extend_from_slice(payload);
}

/// Checks the frame starting at `off`; returns the payload length or why it is invalid.
pub(crate) fn check_frame(data: &[u8], off: usize) -> Result<usize, &'static str> {
    let rest = data.len().saturating_sub(off);
    if rest < FRAME_HEADER {
        return Err("incomplete frame header");
    }
    let word = |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let len = word(off) as usize;
    let crc = word(off + 4);
    if len == 0 {
        return Err("zero-length frame");
    }
    if len > MAX_RECORD_LEN {
        return Err("frame length exceeds the record size limit");
    }
    if len > rest - FRAME_HEADER {
        return Err("frame extends past the end of the segment");
    }
    let payload = &data[off + FRAME_HEADER..off + FRAME_HEADER + len];
    if crc32fast::hash(payload) != crc {
        return Err("crc mismatch");
    }
    Ok(len)
}

/// What a segment scan found after its last valid frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The segment ends exactly after its last valid frame.
    Clean,
    /// Invalid bytes from `offset` on, with no valid frame after them: an interrupted write.
    Torn { offset: u64, reason: String },
    /// Invalid bytes at `offset` followed by valid data (or a bad header): real corruption.
    Corrupt { offset: u64, reason: String },
}

/// The result of scanning one segment's bytes.
#[derive(Debug)]
pub(crate) struct Scan {
    /// `(offset of frame, payload range)` of each valid frame, in order.
    pub frames: Vec<(u64, std::ops::Range<usize>)>,
    /// Bytes up to the end of the last valid frame.
    pub valid_len: u64,
    /// How the segment ends.
    pub tail: Tail,
}

/// Parses every frame of a segment and classifies whatever follows the last valid one.
pub(crate) fn scan(data: &[u8]) -> Scan {
    let mut frames = Vec::new();
    if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
        // Segments are created under a temporary name and renamed only after their header is
        // durable, so a bad header is never the result of a crash.
        let tail = Tail::Corrupt {
            offset: 0,
            reason: "missing or bad segment header".to_string(),
        };
        return Scan {
            frames,
            valid_len: 0,
            tail,
        };
    }
    let mut off = MAGIC.len();
    loop {
        if off == data.len() {
            return Scan {
                frames,
                valid_len: off as u64,
                tail: Tail::Clean,
            };
        }
        match check_frame(data, off) {
            Ok(len) => {
                let start = off + FRAME_HEADER;
                frames.push((off as u64, start..start + len));
                off = start + len;
            }
            Err(reason) => {
                let tail = match find_valid_frame_after(data, off) {
                    Some(next) => Tail::Corrupt {
                        offset: off as u64,
                        reason: format!("{reason}, but a valid record follows at offset {next}"),
                    },
                    None => Tail::Torn {
                        offset: off as u64,
                        reason: reason.to_string(),
                    },
                };
                return Scan {
                    frames,
                    valid_len: off as u64,
                    tail,
                };
            }
        }
    }
}

/// Finds a valid frame starting anywhere after the bad frame at `bad`.
///
/// A torn write leaves garbage or zeros at the very end; valid data after a bad frame means the
/// bad frame was once durable and has been damaged since.
fn find_valid_frame_after(data: &[u8], bad: usize) -> Option<usize> {
    // Fast path: a flipped bit in a payload or crc leaves the length intact, so the next frame
    // sits where the bad frame's length says.
    if data.len() >= bad + FRAME_HEADER {
        let len =
            u32::from_le_bytes([data[bad], data[bad + 1], data[bad + 2], data[bad + 3]]) as usize;
        if (1..=MAX_RECORD_LEN).contains(&len) {
            let next = bad + FRAME_HEADER + len;
            if next < data.len() && check_frame(data, next).is_ok() {
                return Some(next);
            }
        }
    }
    (bad + 1..data.len().saturating_sub(FRAME_HEADER)).find(|&p| check_frame(data, p).is_ok())
}

/// The segment currently written to: a file opened for append plus a write buffer.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub seq: u64,
    pub path: PathBuf,
    file: Arc<File>,
    buf: Vec<u8>,
    /// Logical length: bytes in the file plus bytes still buffered.
    pub len: u64,
    /// Highest raft index written to this segment, if the caller supplied any.
    pub max_index: Option<u64>,
}

impl ActiveSegment {
    /// Creates segment `seq` holding the header and `seed` records, durably, under its final name.
    pub(crate) fn create(dir: &Path, seq: u64, seed: &[Vec<u8>]) -> Result<Self, WalError> {
        let path = dir.join(segment_name(seq));
        let tmp = dir.join(format!("{}.tmp", segment_name(seq)));
        let mut bytes = MAGIC.to_vec();
        for record in seed {
            check_len(record)?;
            encode_frame(&mut bytes, record);
        }
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&tmp)
            .map_err(WalError::io(&tmp))?;
        file.write_all(&bytes).map_err(WalError::io(&tmp))?;
        file.sync_all().map_err(WalError::io(&tmp))?;
        drop(file);
        // The rename makes the segment appear complete or not at all.
        std::fs::rename(&tmp, &path).map_err(WalError::io(&path))?;
        sync_dir(dir)?;
        Self::open(path, seq, bytes.len() as u64, None)
    }

    /// Opens an existing segment for appending at `len` (its verified length).
    pub(crate) fn open(
        path: PathBuf,
        seq: u64,
        len: u64,
        max_index: Option<u64>,
    ) -> Result<Self, WalError> {
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(WalError::io(&path))?;
        Ok(ActiveSegment {
            seq,
            path,
            file: Arc::new(file),
            buf: Vec::new(),
            len,
            max_index,
        })
    }

    /// Buffers one record; returns the offset of its frame in the segment.
    pub(crate) fn write(&mut self, payload: &[u8], index: Option<u64>) -> Result<u64, WalError> {
        check_len(payload)?;
        encode_frame(&mut self.buf, payload);
        let offset = self.len;
        self.len += (FRAME_HEADER + payload.len()) as u64;
        if let Some(i) = index {
            self.max_index = Some(self.max_index.map_or(i, |m| m.max(i)));
        }
        if self.buf.len() >= FLUSH_THRESHOLD {
            self.flush()?;
        }
        Ok(offset)
    }

    /// Hands buffered bytes to the OS (not yet durable).
    pub(crate) fn flush(&mut self) -> Result<(), WalError> {
        if !self.buf.is_empty() {
            (&*self.file)
                .write_all(&self.buf)
                .map_err(WalError::io(&self.path))?;
            self.buf.clear();
        }
        Ok(())
    }

    /// A shared handle on the file, to `fdatasync` it without holding the segment.
    pub(crate) fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }
}

/// Reads back the payload of the frame at `offset` (`frame_len` bytes, header included) of the
/// segment at `path`, checking its checksum.
pub(crate) fn read_frame(path: &Path, offset: u64, frame_len: usize) -> Result<Vec<u8>, WalError> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).map_err(WalError::io(path))?;
    let mut buf = vec![0u8; frame_len];
    file.read_exact_at(&mut buf, offset)
        .map_err(WalError::io(path))?;
    match check_frame(&buf, 0) {
        Ok(len) if FRAME_HEADER + len == frame_len => {
            buf.drain(..FRAME_HEADER);
            Ok(buf)
        }
        Ok(_) => Err(WalError::Corrupt {
            segment: path.to_path_buf(),
            offset,
            reason: "record length differs from the one written".into(),
        }),
        Err(reason) => Err(WalError::Corrupt {
            segment: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }),
    }
}

/// Rejects payloads the frame format cannot carry.
pub(crate) fn check_len(payload: &[u8]) -> Result<(), WalError> {
    if payload.is_empty() || payload.len() > MAX_RECORD_LEN {
        return Err(WalError::BadRecordSize {
            len: payload.len(),
            max: MAX_RECORD_LEN,
        });
    }
    Ok(())
}

/// Makes creations, renames and removals in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(WalError::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(records: &[&[u8]]) -> Vec<u8> {
        let mut data = MAGIC.to_vec();
        for r in records {
            encode_frame(&mut data, r);
        }
        data
    }

    #[test]
    fn frame_golden_bytes() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, b"abc");
        // len 3, crc32("abc") = 0x352441c2, payload.
        assert_eq!(buf, [3, 0, 0, 0, 0xc2, 0x41, 0x24, 0x35, b'a', b'b', b'c']);
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(0x2a), "000000000000002a.wal");
        assert_eq!(parse_segment_name("000000000000002a.wal"), Some(0x2a));
        assert_eq!(parse_segment_name("2a.wal"), None);
        assert_eq!(parse_segment_name("000000000000002a.wal.tmp"), None);
    }

    #[test]
    fn clean_scan() {
        let data = segment(&[b"one", b"two"]);
        let s = scan(&data);
        assert_eq!(s.tail, Tail::Clean);
        assert_eq!(s.frames.len(), 2);
        assert_eq!(&data[s.frames[1].1.clone()], b"two");
        assert_eq!(s.valid_len, data.len() as u64);
    }

    #[test]
    fn cut_frame_and_zeros_are_torn() {
        let full = segment(&[b"one", b"two-two"]);
        let good = segment(&[b"one"]).len();
        for cut in good + 1..full.len() {
            let mut data = full[..cut].to_vec();
            let s = scan(&data);
            assert!(
                matches!(s.tail, Tail::Torn { offset, .. } if offset == good as u64),
                "cut {cut}"
            );
            data.extend_from_slice(&[0u8; 4096]);
            let s = scan(&data);
            assert!(
                matches!(s.tail, Tail::Torn { offset, .. } if offset == good as u64),
                "cut {cut} + zeros"
            );
        }
    }

    #[test]
    fn bad_last_frame_is_torn() {
        let mut data = segment(&[b"one", b"two"]);
        let last = data.len() - 1;
        data[last] ^= 0x01;
        let s = scan(&data);
        assert!(matches!(s.tail, Tail::Torn { .. }));
        assert_eq!(s.frames.len(), 1);
    }

    #[test]
    fn bad_frame_before_valid_data_is_corrupt() {
        let clean = segment(&[b"one", b"two", b"three"]);
        let second = segment(&[b"one"]).len();
        // Damage the payload, the crc and the length field in turn.
        for at in [second + FRAME_HEADER, second + 4, second] {
            let mut data = clean.clone();
            data[at] ^= 0x40;
            let s = scan(&data);
            assert!(
                matches!(s.tail, Tail::Corrupt { offset, .. } if offset == second as u64),
                "flip at {at}: {:?}",
                s.tail
            );
        }
    }

    #[test]
    fn bad_header_is_corrupt() {
        let mut data = segment(&[b"one"]);
        data[0] = b'X';
        assert!(matches!(scan(&data).tail, Tail::Corrupt { offset: 0, .. }));
        assert!(matches!(scan(&[]).tail, Tail::Corrupt { offset: 0, .. }));
    }
}
