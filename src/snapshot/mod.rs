//! `keel snapshot save|restore|list|prune`: etcd-format snapshots from the command line, and the
//! snapshot directory a member fills on its schedule ([`schedule`], [`archive`]).
//!
//! `save` streams `Maintenance.Snapshot` from one member into `<file>.part`, checks the
//! SHA-256 the member sends last, fsyncs and renames: the result is byte for byte what
//! `etcdctl snapshot save` writes (the bbolt file followed by its SHA-256), so etcdctl, etcd
//! and keel all read it. `restore` checks a snapshot (trailer, then every page) before creating
//! anything, loads it into a temporary directory next to `--data-dir`, and renames that into
//! place only when it is complete: an error or an interrupt never leaves a half-restored
//! data directory. Every member of the new cluster restores the same file with the same
//! cluster flags, then starts with `keel server ... --initial-cluster-state new`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use keel_raft::codec::{
    applied_to_bytes, log_id_from_pb, membership_from_pb, LogIdPb, MemberPb, MembershipPb,
    VoterSetPb,
};
use keel_raft::membership::{
    check_self, cluster_id, member_id, parse_initial_cluster, InitialMember,
};
use keel_raft::types::StoredMembership;
use keel_store::bbolt::{BoltReader, SHA256_LEN};
use keel_store::etcd_snapshot::{
    import_etcd, verify_etcd_file, EtcdSnapshotError, ImportOptions, SnapshotDigest,
};

use crate::cli::{
    SnapshotArgs, SnapshotCommand, SnapshotDirArgs, SnapshotPruneArgs, SnapshotRestoreArgs,
    SnapshotSaveArgs,
};

pub(crate) mod archive;
pub(crate) mod schedule;

use archive::{Meta, MetaMember, Origin};

/// Why a snapshot command failed; every message names the file or flag involved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotCmdError {
    /// A flag is unusable.
    #[error("{0}")]
    Flags(String),
    /// The member could not be reached or the stream failed.
    #[error("snapshot from {endpoint}: {reason}")]
    Remote { endpoint: String, reason: String },
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The snapshot is damaged, or is not an etcd snapshot.
    #[error("{path}: {source}")]
    Snapshot {
        path: PathBuf,
        source: EtcdSnapshotError,
    },
    /// The user interrupted the command (what it had written is removed).
    #[error("interrupted; {0} was removed")]
    Interrupted(PathBuf),
    /// The blocking part of the command panicked or was cancelled.
    #[error("internal error: {0}")]
    Internal(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotCmdError + '_ {
    move |source| SnapshotCmdError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn snap_err<E: Into<EtcdSnapshotError>>(path: &Path) -> impl FnOnce(E) -> SnapshotCmdError + '_ {
    move |e| SnapshotCmdError::Snapshot {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// Runs `keel snapshot ...`.
pub(crate) async fn run(args: SnapshotArgs) -> Result<(), SnapshotCmdError> {
    match args.command {
        SnapshotCommand::Save(a) => save(a).await,
        SnapshotCommand::List(a) => list(a),
        SnapshotCommand::Prune(a) => prune(a),
        SnapshotCommand::Restore(a) => {
            let tmp = restore_tmp_dir(&a.data_dir)?;
            let cleanup = tmp.clone();
            let work = tokio::task::spawn_blocking(move || restore(a, &tmp));
            tokio::select! {
                r = work => r.map_err(|e| SnapshotCmdError::Internal(e.to_string()))?,
                _ = tokio::signal::ctrl_c() => {
                    // The data directory does not exist yet (it appears by rename at the end).
                    let _ = std::fs::remove_dir_all(&cleanup);
                    Err(SnapshotCmdError::Interrupted(cleanup))
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// save

async fn save(a: SnapshotSaveArgs) -> Result<(), SnapshotCmdError> {
    crate::etcd_tls::install(&a.tls, a.data_dir.as_deref()).map_err(SnapshotCmdError::Flags)?;
    let endpoint = match a.endpoints.as_slice() {
        [one] => one.clone(),
        _ => {
            // As etcdctl: a snapshot is one member's state.
            return Err(SnapshotCmdError::Flags(format!(
                "snapshot must be requested from exactly one endpoint, got {}",
                a.endpoints.len()
            )));
        }
    };
    // Into a snapshot directory, the file is named after the member and described by a sidecar.
    let into_dir = match &a.file {
        Some(_) => None,
        None => {
            let dir = snapshot_dir(a.dir.as_deref(), a.data_dir.as_deref(), "save")?;
            let who = remote_identity(&endpoint, a.dial_timeout, a.user.as_deref()).await?;
            Some((dir, who))
        }
    };
    let target = match (&a.file, &into_dir) {
        (Some(f), _) => f.clone(),
        (None, Some((dir, who))) => {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            dir.join(archive::file_name(
                Origin::OnDemand,
                &who.0,
                jiff::Timestamp::now(),
            ))
        }
        (None, None) => return Err(SnapshotCmdError::Internal("no target".into())),
    };
    let mut part = target.clone().into_os_string();
    part.push(".part");
    let part = PathBuf::from(part);
    let res = tokio::select! {
        r = save_to(&endpoint, &part, a.dial_timeout, a.user.as_deref()) => r,
        _ = tokio::signal::ctrl_c() => Err(SnapshotCmdError::Interrupted(part.clone())),
    };
    let (size, digest) = match res {
        Ok(v) => v,
        Err(e) => {
            // As etcdctl, nothing is left under the final name; the partial file goes too.
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
    };
    if let Err(e) = finish_file(&part, &target) {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    // Walk the saved file as `etcdctl snapshot status` would, so a bad snapshot is noticed
    // now and not on the day it is needed.
    let file = target.clone();
    let status = tokio::task::spawn_blocking(move || {
        let reader = BoltReader::open(&file).map_err(snap_err(&file))?;
        verify_etcd_file(&reader).map_err(snap_err(&file))
    })
    .await
    .map_err(|e| SnapshotCmdError::Internal(e.to_string()))??;
    if let Some((_, (member, cluster_id, members))) = into_dir {
        let meta = Meta {
            file: target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            origin: Origin::OnDemand,
            created: jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string(),
            revision: status.revision,
            total_key: status.total_key,
            size: size + SHA256_LEN as u64,
            sha256: archive::file_sha256(&target).map_err(io_err(&target))?,
            member,
            cluster_id,
            members,
            keel_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        archive::write_meta(&target, &meta).map_err(io_err(&target))?;
        sync_parent(&target)?;
    }
    println!("Snapshot saved at {}", target.display());
    println!(
        "revision {}, {} keys, {} bytes (+{SHA256_LEN}-byte sha256 {})",
        status.revision,
        status.total_key,
        size,
        hex(&digest)
    );
    Ok(())
}

/// The snapshot directory named by `--dir`, else `<--data-dir>/snapshots`.
fn snapshot_dir(
    dir: Option<&Path>,
    data_dir: Option<&Path>,
    cmd: &str,
) -> Result<PathBuf, SnapshotCmdError> {
    match (dir, data_dir) {
        (Some(d), _) => Ok(d.to_path_buf()),
        (None, Some(d)) => Ok(d.join("snapshots")),
        (None, None) => Err(SnapshotCmdError::Flags(format!(
            "keel snapshot {cmd}: name the snapshot directory with --dir or --data-dir"
        ))),
    }
}

/// The name of the member behind `endpoint`, its cluster ID (hex) and the membership it reports.
async fn remote_identity(
    endpoint: &str,
    dial_timeout: Duration,
    user: Option<&str>,
) -> Result<(String, String, Vec<MetaMember>), SnapshotCmdError> {
    let remote = |reason: String| SnapshotCmdError::Remote {
        endpoint: endpoint.to_string(),
        reason,
    };
    let mut client = connect(endpoint, dial_timeout, user).await?;
    let status = client.status().await.map_err(|e| remote(e.to_string()))?;
    let header = status
        .header()
        .ok_or_else(|| remote("the status answer has no header".into()))?;
    let (me, cluster) = (header.member_id(), header.cluster_id());
    let list = client
        .member_list()
        .await
        .map_err(|e| remote(e.to_string()))?;
    let members: Vec<MetaMember> = list
        .members()
        .iter()
        .map(|m| MetaMember {
            name: m.name().to_string(),
            id: format!("{:x}", m.id()),
            peer_urls: m.peer_urls().to_vec(),
            is_learner: m.is_learner(),
        })
        .collect();
    let name = list
        .members()
        .iter()
        .find(|m| m.id() == me)
        .map(|m| m.name().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("{me:x}"));
    Ok((name, format!("{cluster:x}"), members))
}

/// A client of `endpoint`, authenticated as etcdctl's `--user name:password` when given.
async fn connect(
    endpoint: &str,
    dial_timeout: Duration,
    user: Option<&str>,
) -> Result<etcd_client::Client, SnapshotCmdError> {
    let remote = |reason: String| SnapshotCmdError::Remote {
        endpoint: endpoint.to_string(),
        reason,
    };
    let mut opts = etcd_client::ConnectOptions::new().with_connect_timeout(dial_timeout);
    if let Some(user) = user {
        // etcdctl's form: `name:password`.
        let (name, password) = user
            .split_once(':')
            .ok_or_else(|| remote("--user must be NAME:PASSWORD".into()))?;
        opts = opts.with_user(name, password);
    }
    crate::etcd_tls::connect(endpoint, opts, dial_timeout)
        .await
        .map_err(|e| remote(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// list and prune

fn list(a: SnapshotDirArgs) -> Result<(), SnapshotCmdError> {
    let dir = snapshot_dir(a.dir.as_deref(), a.data_dir.as_deref(), "list")?;
    let entries = archive::list(&dir).map_err(io_err(&dir))?;
    if entries.is_empty() {
        println!("no snapshots in {}", dir.display());
        return Ok(());
    }
    let mut rows = vec![vec![
        "NAME".to_string(),
        "ORIGIN".into(),
        "CREATED".into(),
        "REVISION".into(),
        "SIZE".into(),
        "MEMBERS".into(),
    ]];
    if a.check {
        rows[0].push("CHECK".into());
    }
    for e in &entries {
        let name = e
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let origin = match e.origin() {
            Origin::Scheduled => "scheduled",
            Origin::OnDemand => "on-demand",
        };
        let mut row = match &e.meta {
            Some(m) => vec![
                name,
                origin.into(),
                m.created.clone(),
                m.revision.to_string(),
                e.size.to_string(),
                m.members
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ],
            None => vec![
                name,
                origin.into(),
                "-".into(),
                "-".into(),
                e.size.to_string(),
                "-".into(),
            ],
        };
        if a.check {
            row.push(match &e.meta {
                None => "-".into(),
                Some(m) => match archive::file_sha256(&e.path) {
                    Ok(sha) if sha == m.sha256 && e.size == m.size => "ok".into(),
                    Ok(_) => "CORRUPT".into(),
                    Err(err) => format!("unreadable: {err}"),
                },
            });
        }
        rows.push(row);
    }
    print_table(&rows);
    Ok(())
}

fn prune(a: SnapshotPruneArgs) -> Result<(), SnapshotCmdError> {
    let dir = snapshot_dir(a.dir.as_deref(), a.data_dir.as_deref(), "prune")?;
    let removed = archive::prune(&dir, a.retention).map_err(io_err(&dir))?;
    for p in &removed {
        println!("removed {}", p.display());
    }
    println!(
        "{} scheduled snapshot(s) removed, at most {} kept",
        removed.len(),
        a.retention
    );
    Ok(())
}

/// Prints rows as left-aligned columns, as kubectl's tables.
fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<w$}", w = widths[i]))
            .collect();
        println!("{}", line.join("   ").trim_end());
    }
}

/// Streams the snapshot into `part`; returns the database size and its SHA-256.
async fn save_to(
    endpoint: &str,
    part: &Path,
    dial_timeout: Duration,
    user: Option<&str>,
) -> Result<(u64, [u8; SHA256_LEN]), SnapshotCmdError> {
    let remote = |reason: String| SnapshotCmdError::Remote {
        endpoint: endpoint.to_string(),
        reason,
    };
    let mut client = connect(endpoint, dial_timeout, user).await?;
    let mut stream = client.snapshot().await.map_err(|e| remote(e.to_string()))?;

    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let file = opts.open(part).map_err(io_err(part))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);

    let mut total: Option<u64> = None;
    let mut received = 0u64;
    let mut digest = SnapshotDigest::new();
    let mut progress: Option<Progress> = None;
    loop {
        let msg = stream.message().await.map_err(|e| remote(e.to_string()))?;
        let Some(msg) = msg else {
            return Err(remote(match total {
                Some(t) if received == t => "the stream ended without the sha256 digest".into(),
                Some(t) => format!("the stream ended after {received} of {t} bytes"),
                None => "the stream ended before any data".into(),
            }));
        };
        let blob = msg.blob();
        // The first message tells the size: what it carries plus what remains.
        let total = *total.get_or_insert_with(|| {
            let t = msg.remaining_bytes().saturating_add(blob.len() as u64);
            progress = Some(Progress::bytes("saving snapshot", t));
            t
        });
        if received == total {
            // The data is complete: this is the digest of everything sent.
            let sent: [u8; SHA256_LEN] = blob.try_into().map_err(|_| {
                remote(format!(
                    "expected the 32-byte sha256 after {total} bytes, got {} more bytes",
                    blob.len()
                ))
            })?;
            let ours = digest.finish();
            if sent != ours {
                return Err(remote(format!(
                    "sha256 mismatch: the member sent {}, the received data hashes to {}",
                    hex(&sent),
                    hex(&ours)
                )));
            }
            if stream
                .message()
                .await
                .map_err(|e| remote(e.to_string()))?
                .is_some()
            {
                return Err(remote("unexpected data after the sha256 digest".into()));
            }
            // Same layout as etcdctl: the database, then its SHA-256.
            out.write_all(&sent).map_err(io_err(part))?;
            let file = out.into_inner().map_err(|e| io_err(part)(e.into_error()))?;
            file.sync_all().map_err(io_err(part))?;
            if let Some(p) = &progress {
                p.finish();
            }
            return Ok((total, sent));
        }
        let expected_remaining = total
            .checked_sub(received + blob.len() as u64)
            .ok_or_else(|| remote(format!("more data than the announced {total} bytes")))?;
        if msg.remaining_bytes() != expected_remaining {
            return Err(remote(format!(
                "inconsistent remaining_bytes {} after {} of {total} bytes",
                msg.remaining_bytes(),
                received + blob.len() as u64
            )));
        }
        digest.update(blob);
        out.write_all(blob).map_err(io_err(part))?;
        received += blob.len() as u64;
        if let Some(p) = &progress {
            p.set(received);
        }
    }
}

/// Renames the complete `.part` file into place and makes the rename durable.
fn finish_file(part: &Path, file: &Path) -> Result<(), SnapshotCmdError> {
    std::fs::rename(part, file).map_err(io_err(file))?;
    sync_parent(file)
}

fn sync_parent(path: &Path) -> Result<(), SnapshotCmdError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(io_err(parent))
}

// ---------------------------------------------------------------------------------------------
// restore

/// The temporary directory a restore builds in: hidden, next to the data directory (same
/// file system, so the final rename is atomic), named after this process.
fn restore_tmp_dir(data_dir: &Path) -> Result<PathBuf, SnapshotCmdError> {
    let name = data_dir
        .file_name()
        .ok_or_else(|| {
            SnapshotCmdError::Flags(format!(
                "--data-dir {}: needs a directory name",
                data_dir.display()
            ))
        })?
        .to_string_lossy()
        .into_owned();
    let parent = match data_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(parent.join(format!(".{name}.restoring-{}", std::process::id())))
}

fn restore(a: SnapshotRestoreArgs, tmp: &Path) -> Result<(), SnapshotCmdError> {
    // Flags first: nothing is read or written for a command that cannot succeed.
    if a.data_dir.symlink_metadata().is_ok() {
        return Err(SnapshotCmdError::Flags(format!(
            "data-dir {:?} exists",
            a.data_dir.display().to_string()
        )));
    }
    let cluster = if a.initial_cluster.is_empty() {
        a.initial_advertise_peer_urls
            .iter()
            .map(|u| format!("{}={u}", a.name))
            .collect::<Vec<_>>()
            .join(",")
    } else {
        a.initial_cluster.clone()
    };
    let members =
        parse_initial_cluster(&cluster).map_err(|e| SnapshotCmdError::Flags(e.to_string()))?;
    check_self(&members, &a.name, &a.initial_advertise_peer_urls)
        .map_err(|e| SnapshotCmdError::Flags(e.to_string()))?;

    // The whole file is checked before anything is created: against its metadata when it has some,
    // then its own trailer and pages.
    let file = &a.file;
    if !a.skip_hash_check {
        if let Some(meta) = archive::read_meta(file).map_err(io_err(file))? {
            let spin = Progress::spinner("checking the file against its metadata");
            let sha = archive::file_sha256(file).map_err(io_err(file))?;
            spin.finish();
            if sha != meta.sha256 {
                return Err(SnapshotCmdError::Flags(format!(
                    "{}: sha256 {sha} does not match {} recorded in {} (damaged or replaced; --skip-hash-check to use it anyway)",
                    file.display(),
                    meta.sha256,
                    archive::sidecar(file).display()
                )));
            }
        }
    }
    let spin = Progress::spinner(if a.skip_hash_check {
        "opening the snapshot"
    } else {
        "verifying sha256"
    });
    let reader = if a.skip_hash_check {
        BoltReader::open(file)
    } else {
        BoltReader::open_snapshot(file)
    }
    .map_err(snap_err(file))?;
    spin.finish();
    let spin = Progress::spinner("checking every page");
    let status = verify_etcd_file(&reader).map_err(snap_err(file))?;
    spin.finish();
    if auth_enabled(&reader).map_err(snap_err(file))? {
        eprintln!(
            "keel: warning: the snapshot's cluster had authentication enabled; keel does not serve \
             Auth yet, so its users and roles are not restored and the restored member accepts \
             unauthenticated clients"
        );
    }

    let parent = tmp.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    if tmp.exists() {
        // Left by an earlier run that had this process ID; it was never renamed into place.
        std::fs::remove_dir_all(tmp).map_err(io_err(tmp))?;
    }
    let res = restore_into(&a, &reader, &members, status.total_key, tmp);
    if res.is_err() {
        let _ = std::fs::remove_dir_all(tmp);
    }
    res
}

fn restore_into(
    a: &SnapshotRestoreArgs,
    reader: &BoltReader,
    members: &[InitialMember],
    total_entries: u64,
    tmp: &Path,
) -> Result<(), SnapshotCmdError> {
    std::fs::create_dir(tmp).map_err(io_err(tmp))?;
    let bar = Progress::count("restoring", total_entries);
    let opts = ImportOptions {
        raft_meta: Some(bootstrap_raft_state(members, &a.initial_cluster_token)),
    };
    let sum = import_etcd(&tmp.join("store"), reader, &opts, &|n| bar.set(n))
        .map_err(snap_err(&a.file))?;
    bar.finish();
    // The member's identity, as `keel server` records it on first start: fixed here so the
    // member joins the membership recorded above even if its flags drift, and a wrong
    // --initial-cluster-token is refused instead of forming a second cluster.
    let me = member_id(&a.initial_advertise_peer_urls, &a.initial_cluster_token);
    let cluster = cluster_id(&a.initial_cluster_token);
    let member_file = tmp.join("member");
    std::fs::write(&member_file, format!("{me:016x} {cluster:016x}\n"))
        .map_err(io_err(&member_file))?;
    std::fs::File::open(&member_file)
        .and_then(|f| f.sync_all())
        .map_err(io_err(&member_file))?;
    for sub in ["wal", "snap"] {
        let d = tmp.join(sub);
        std::fs::create_dir(&d).map_err(io_err(&d))?;
    }
    std::fs::File::open(tmp)
        .and_then(|d| d.sync_all())
        .map_err(io_err(tmp))?;
    if a.data_dir.symlink_metadata().is_ok() {
        // Someone created it while we worked; renaming would replace an empty directory.
        return Err(SnapshotCmdError::Flags(format!(
            "data-dir {:?} exists",
            a.data_dir.display().to_string()
        )));
    }
    std::fs::rename(tmp, &a.data_dir).map_err(io_err(&a.data_dir))?;
    sync_parent(&a.data_dir)?;
    println!(
        "Restored {} into {}: revision {}, compacted at {}, {} revisions ({} deletions), {} leases; member {me:016x} of {} member(s)",
        a.file.display(),
        a.data_dir.display(),
        sum.revision,
        sum.compact_revision,
        sum.kv_entries,
        sum.tombstones,
        sum.leases,
        members.len()
    );
    Ok(())
}

/// True if the snapshot's cluster had authentication on (etcd's `auth/authEnabled` = 1).
fn auth_enabled(reader: &BoltReader) -> Result<bool, keel_store::bbolt::SnapshotError> {
    let Some(auth) = reader.bucket(b"auth")? else {
        return Ok(false);
    };
    for pair in auth {
        let (k, v) = pair?;
        if k == b"authEnabled" {
            return Ok(v == [1]);
        }
    }
    Ok(false)
}

/// The Raft state a restored member starts from: the bootstrap membership (every member of
/// `--initial-cluster` a voter, as `keel server --initial-cluster-state new` would propose it)
/// applied at log index 0, term 0 — the position of the membership entry a fresh cluster
/// starts with. Raft then treats everything before index 1 as a snapshot: the first new
/// entries apply on top of the restored data, and a member added later is sent a snapshot of
/// it instead of a log that does not contain it.
fn bootstrap_raft_state(members: &[InitialMember], token: &str) -> Vec<u8> {
    let nodes: Vec<MemberPb> = members
        .iter()
        .map(|m| MemberPb {
            id: member_id(&m.peer_urls, token),
            name: m.name.clone(),
            peer_urls: m.peer_urls.clone(),
            // Each member publishes its client URLs once it runs.
            client_urls: Vec::new(),
        })
        .collect();
    let ids = nodes.iter().map(|n| n.id).collect();
    let membership = membership_from_pb(&MembershipPb {
        configs: vec![VoterSetPb { ids }],
        nodes,
    });
    let at = log_id_from_pb(&LogIdPb {
        term: 0,
        node_id: 0,
        index: 0,
    });
    applied_to_bytes(Some(&at), &StoredMembership::new(Some(at), membership))
}

// ---------------------------------------------------------------------------------------------
// progress

/// A progress display on stderr: an indicatif bar on a terminal; otherwise a line at every
/// quarter (so logs of scripted backups show progress without a line per chunk).
struct Progress {
    bar: Option<ProgressBar>,
    plain: Option<Plain>,
}

struct Plain {
    label: &'static str,
    total: u64,
    bytes: bool,
    shown: std::cell::Cell<u64>,
}

impl Progress {
    fn new(label: &'static str, total: u64, bytes: bool, template: &str) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_message(label);
            Progress {
                bar: Some(bar),
                plain: None,
            }
        } else {
            Progress {
                bar: None,
                plain: Some(Plain {
                    label,
                    total,
                    bytes,
                    shown: std::cell::Cell::new(0),
                }),
            }
        }
    }

    /// A byte count with a known total.
    fn bytes(label: &'static str, total: u64) -> Self {
        Self::new(
            label,
            total,
            true,
            "{msg} [{bar:40}] {bytes}/{total_bytes} ({binary_bytes_per_sec}, {eta})",
        )
    }

    /// An entry count with a known total.
    fn count(label: &'static str, total: u64) -> Self {
        Self::new(
            label,
            total,
            false,
            "{msg} [{bar:40}] {human_pos}/{human_len} entries ({per_sec}, {eta})",
        )
    }

    /// A step without a measurable size.
    fn spinner(label: &'static str) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new_spinner();
            bar.set_message(format!("{label} ..."));
            bar.enable_steady_tick(Duration::from_millis(120));
            Progress {
                bar: Some(bar),
                plain: None,
            }
        } else {
            eprintln!("keel: {label} ...");
            Progress {
                bar: None,
                plain: None,
            }
        }
    }

    fn set(&self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
        if let Some(p) = &self.plain {
            let quarter = done
                .saturating_mul(4)
                .checked_div(p.total)
                .unwrap_or(4)
                .min(4);
            if quarter > p.shown.get() {
                p.shown.set(quarter);
                let amount = if p.bytes {
                    format!("{}/{} bytes", done, p.total)
                } else {
                    format!("{}/{} entries", done, p.total)
                };
                eprintln!("keel: {}: {}% ({amount})", p.label, quarter * 25);
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            if let Some(len) = bar.length() {
                bar.set_position(len);
            }
            bar.finish();
        }
        if let Some(p) = &self.plain {
            self.set(p.total);
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}
