//! A directory of snapshot files (`<data-dir>/snapshots` by default): each file is an etcd-format
//! snapshot (the bbolt file followed by its SHA-256, what `etcdctl snapshot save` writes), beside a
//! `<file>.json` that records where and when it was taken, its revision, the membership and the SHA-256
//! of the whole file (what `sha256sum` prints). Scheduled snapshots are pruned to a retention count;
//! on-demand ones are kept until an operator prunes them.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// File-name prefix of scheduled snapshots: `keel-snapshot-<member>-<UTC time>.db`.
pub(crate) const SCHEDULED_PREFIX: &str = "keel-snapshot-";
/// File-name prefix of on-demand snapshots: `on-demand-<member>-<UTC time>.db`.
pub(crate) const ON_DEMAND_PREFIX: &str = "on-demand-";
/// Suffix of a snapshot still being written (removed if the process dies before it is sealed).
pub(crate) const PART_SUFFIX: &str = ".part";

/// How a snapshot came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Origin {
    /// Taken by the member's schedule; pruned to the retention count.
    Scheduled,
    /// Asked for by an operator (`keel snapshot save` into a snapshot directory).
    OnDemand,
}

/// A member as recorded in a snapshot's metadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MetaMember {
    pub name: String,
    /// Member ID in etcd's hex form.
    pub id: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

/// The `<file>.json` beside each snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta {
    /// The snapshot's file name (in the same directory).
    pub file: String,
    pub origin: Origin,
    /// When the snapshot was taken (RFC 3339, UTC).
    pub created: String,
    /// The store revision it holds.
    pub revision: i64,
    /// Entries of the bbolt file, as `etcdctl snapshot status` counts them.
    pub total_key: u64,
    /// Size of the file in bytes, trailer included.
    pub size: u64,
    /// SHA-256 of the whole file, lowercase hex (as `sha256sum` prints it).
    pub sha256: String,
    /// The member that took it (empty when saved from a remote endpoint that did not say).
    pub member: String,
    /// The cluster ID, hex (empty when unknown).
    pub cluster_id: String,
    /// The membership when it was taken.
    pub members: Vec<MetaMember>,
    /// The keel version that wrote it.
    pub keel_version: String,
}

/// One snapshot file of a directory, with its metadata when the sidecar is there and readable.
#[derive(Debug)]
pub(crate) struct Entry {
    pub path: PathBuf,
    pub meta: Option<Meta>,
    pub size: u64,
    /// The file's modification time, seconds since the epoch (orders files without metadata).
    pub modified: i64,
}

impl Entry {
    /// Scheduled snapshots are named by the schedule; metadata says so too.
    pub(crate) fn origin(&self) -> Origin {
        match &self.meta {
            Some(m) => m.origin,
            None => {
                let name = self
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                if name.is_some_and(|n| n.starts_with(SCHEDULED_PREFIX)) {
                    Origin::Scheduled
                } else {
                    Origin::OnDemand
                }
            }
        }
    }

    /// The creation time used for ordering: the metadata's, else the file's modification time.
    fn created(&self) -> i64 {
        self.meta
            .as_ref()
            .and_then(|m| m.created.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
            .unwrap_or(self.modified)
    }
}

/// The metadata file of `snapshot`.
pub(crate) fn sidecar(snapshot: &Path) -> PathBuf {
    let mut s = snapshot.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}

/// A snapshot file name: `<prefix><member>-<UTC time>.db` (the member name made file-safe).
pub(crate) fn file_name(origin: Origin, member: &str, now: jiff::Timestamp) -> String {
    let prefix = match origin {
        Origin::Scheduled => SCHEDULED_PREFIX,
        Origin::OnDemand => ON_DEMAND_PREFIX,
    };
    let safe: String = member
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{prefix}{safe}-{}.db", now.strftime("%Y%m%dT%H%M%SZ"))
}

/// Appends the SHA-256 trailer to the bbolt file `path` and fsyncs it; returns the size of the sealed
/// file and the SHA-256 of all of it (the sidecar's `sha256`).
pub(crate) fn seal(path: &Path) -> std::io::Result<(u64, String)> {
    let mut f = OpenOptions::new().read(true).write(true).open(path)?;
    let (mut db, mut whole) = (Sha256::new(), Sha256::new());
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    {
        let mut r = BufReader::new(&mut f);
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            db.update(&buf[..n]);
            whole.update(&buf[..n]);
            size += n as u64;
        }
    }
    let trailer = db.finalize();
    whole.update(trailer);
    f.seek(SeekFrom::End(0))?;
    f.write_all(&trailer)?;
    f.sync_all()?;
    Ok((size + trailer.len() as u64, hex(&whole.finalize())))
}

/// SHA-256 of a whole file, lowercase hex.
pub(crate) fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut r = BufReader::new(File::open(path)?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(hex(&h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

/// Writes `meta` beside `snapshot` (a temporary file, fsynced, renamed into place).
pub(crate) fn write_meta(snapshot: &Path, meta: &Meta) -> std::io::Result<()> {
    let path = sidecar(snapshot);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(PART_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let text = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(&text)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)
}

/// Reads the metadata of `snapshot`: None when there is no sidecar, an error when it is unreadable.
pub(crate) fn read_meta(snapshot: &Path) -> std::io::Result<Option<Meta>> {
    match std::fs::read(sidecar(snapshot)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The snapshots (`*.db`) of `dir`, oldest first; an absent directory holds none.
pub(crate) fn list(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != "db") {
            continue;
        }
        let md = e.metadata()?;
        if !md.is_file() {
            continue;
        }
        let modified = md
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        // A damaged sidecar must not hide the snapshot: it is listed without metadata.
        let meta = read_meta(&path).unwrap_or(None);
        out.push(Entry {
            path,
            meta,
            size: md.len(),
            modified,
        });
    }
    out.sort_by(|a, b| (a.created(), &a.path).cmp(&(b.created(), &b.path)));
    Ok(out)
}

/// Removes the oldest scheduled snapshots of `dir` (and their sidecars) until `keep` remain; on-demand
/// ones are never touched. Returns what was removed.
pub(crate) fn prune(dir: &Path, keep: usize) -> std::io::Result<Vec<PathBuf>> {
    let scheduled: Vec<Entry> = list(dir)?
        .into_iter()
        .filter(|e| e.origin() == Origin::Scheduled)
        .collect();
    let excess = scheduled.len().saturating_sub(keep);
    let mut removed = Vec::new();
    for e in scheduled.into_iter().take(excess) {
        std::fs::remove_file(&e.path)?;
        match std::fs::remove_file(sidecar(&e.path)) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        removed.push(e.path);
    }
    if !removed.is_empty() {
        File::open(dir)?.sync_all()?;
    }
    Ok(removed)
}

/// Removes `.part` files a killed process left in `dir`.
pub(crate) fn remove_partial(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().ends_with(PART_SUFFIX) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(file: &str, origin: Origin, created: &str) -> Meta {
        Meta {
            file: file.into(),
            origin,
            created: created.into(),
            revision: 1,
            total_key: 1,
            size: 1,
            sha256: String::new(),
            member: "m1".into(),
            cluster_id: String::new(),
            members: Vec::new(),
            keel_version: String::new(),
        }
    }

    #[test]
    fn names_are_file_safe_and_ordered_by_time() {
        let t: jiff::Timestamp = "2026-12-06T12:00:05Z".parse().unwrap_or_default();
        assert_eq!(
            file_name(Origin::Scheduled, "m/1 x", t),
            "keel-snapshot-m_1_x-20261206T120005Z.db"
        );
        assert_eq!(
            file_name(Origin::OnDemand, "m1", t),
            "on-demand-m1-20261206T120005Z.db"
        );
    }

    #[test]
    fn prune_keeps_the_newest_scheduled_and_every_on_demand() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let put = |name: &str, origin: Origin, created: &str| -> std::io::Result<()> {
            let p = dir.path().join(name);
            std::fs::write(&p, b"db")?;
            write_meta(&p, &meta(name, origin, created))
        };
        put(
            "keel-snapshot-a.db",
            Origin::Scheduled,
            "2026-01-01T00:00:03Z",
        )?;
        put(
            "keel-snapshot-b.db",
            Origin::Scheduled,
            "2026-01-01T00:00:01Z",
        )?;
        put(
            "keel-snapshot-c.db",
            Origin::Scheduled,
            "2026-01-01T00:00:02Z",
        )?;
        put("on-demand-d.db", Origin::OnDemand, "2026-01-01T00:00:00Z")?;
        std::fs::write(dir.path().join("x.db.part"), b"partial")?;
        let removed = prune(dir.path(), 2)?;
        assert_eq!(removed, vec![dir.path().join("keel-snapshot-b.db")]);
        assert!(!sidecar(&dir.path().join("keel-snapshot-b.db")).exists());
        let names: Vec<String> = list(dir.path())?
            .iter()
            .map(|e| {
                e.path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(
            names,
            ["on-demand-d.db", "keel-snapshot-c.db", "keel-snapshot-a.db"]
        );
        remove_partial(dir.path());
        assert!(!dir.path().join("x.db.part").exists());
        Ok(())
    }

    #[test]
    fn seal_appends_the_trailer_and_hashes_the_whole_file() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("s.db");
        std::fs::write(&p, b"hello")?;
        let (size, sha) = seal(&p)?;
        let bytes = std::fs::read(&p)?;
        assert_eq!(size, 5 + 32);
        assert_eq!(&bytes[5..], Sha256::digest(b"hello").as_slice());
        assert_eq!(sha, hex(&Sha256::digest(&bytes)));
        assert_eq!(file_sha256(&p)?, sha);
        Ok(())
    }
}
