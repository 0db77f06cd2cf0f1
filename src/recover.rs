//! `keel recover`: after a quorum loss, one command turns the most up-to-date surviving member's data
//! directory into a new one-member cluster holding everything it knew committed (etcd's
//! `--force-new-cluster`, done offline). The old directory is kept aside; the previous members are
//! recorded as removed, so a stale one that comes back is told so and stops; fresh members then join
//! with `etcdctl member add` as for any membership change (docs/operations.md).

use std::path::{Path, PathBuf};

use keel_raft::recover::{
    replay_committed, standalone_raft_meta, write_removed_members, write_standalone_vote,
    RecoverError,
};
use keel_store::bbolt::{BoltReader, EtcdMember};
use keel_store::etcd_snapshot::{import_etcd, ImportOptions};
use keel_store::StoreOptions;
use serde::Serialize;

use crate::cli::RecoverArgs;

/// Why recovery failed; the data directory is unchanged whenever this is returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecoverCmdError {
    #[error("{0}")]
    Flags(String),
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Snapshot { path: PathBuf, reason: String },
    #[error("internal error: {0}")]
    Internal(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RecoverCmdError + '_ {
    move |source| RecoverCmdError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A previous member, as `recovered.json` records it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Previous {
    id: String,
    name: String,
    peer_urls: Vec<String>,
    is_learner: bool,
}

/// `<data-dir>/recovered.json`: what the recovery did, for the operator and for support.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    recovered_at: String,
    member: String,
    member_id: String,
    cluster_id: String,
    revision: i64,
    applied_index: u64,
    discarded_entries: u64,
    previous_term: u64,
    previous_members: Vec<Previous>,
    previous_data_dir: String,
    keel_version: String,
}

/// Runs `keel recover`.
pub(crate) async fn run(a: RecoverArgs) -> Result<(), RecoverCmdError> {
    let dir = a.data_dir.clone();
    if !dir.join("member").is_file() {
        return Err(RecoverCmdError::Flags(format!(
            "{} is not a keel member's data directory (no member file)",
            dir.display()
        )));
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "data".into());
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let work = parent.join(format!(".{name}.recovering-{}", std::process::id()));
    let aside = parent.join(format!("{name}.pre-recover-{stamp}"));
    if aside.exists() {
        return Err(RecoverCmdError::Flags(format!(
            "{} exists; wait a second and retry",
            aside.display()
        )));
    }
    eprintln!("keel: replaying the committed log of {}", dir.display());
    let res = prepare(&dir, &work, &aside, &stamp).await;
    if res.is_err() {
        // Nothing was swapped yet: the data directory is as it was.
        let _ = std::fs::remove_dir_all(&work);
        return res.map(|_| ());
    }
    let record = res?;
    std::fs::rename(&dir, &aside).map_err(io_err(&dir))?;
    if let Err(e) = std::fs::rename(&work, &dir) {
        // Put the original back rather than leave no data directory.
        let _ = std::fs::rename(&aside, &dir);
        let _ = std::fs::remove_dir_all(&work);
        return Err(io_err(&dir)(e));
    }
    std::fs::File::open(&parent)
        .and_then(|d| d.sync_all())
        .map_err(io_err(&parent))?;

    println!(
        "Recovered {} as a one-member cluster: member {} ({}), revision {}, applied index {}{}.",
        dir.display(),
        record.member,
        record.member_id,
        record.revision,
        record.applied_index,
        if record.discarded_entries > 0 {
            format!(
                ", {} uncommitted log entries dropped",
                record.discarded_entries
            )
        } else {
            String::new()
        }
    );
    println!(
        "The previous data directory is kept at {}.",
        aside.display()
    );
    let others: Vec<&Previous> = record
        .previous_members
        .iter()
        .filter(|p| p.id != record.member_id)
        .collect();
    println!();
    println!("Next:");
    println!("  1. Start this member with its usual flags (it is the only member now).");
    if !others.is_empty() {
        println!("  2. The previous members were removed. One made with --init/--join that comes back with its old");
        println!("     data and flags is told a recovery left it out, keeps its old data directory aside and joins");
        println!("     again by itself with the server token it kept. Any other stops; for each of those, wipe its");
        println!("     data directory, then add it again and start it as an existing member:");
        for p in others {
            println!(
                "       etcdctl member add {} --peer-urls={}",
                p.name,
                p.peer_urls.join(",")
            );
        }
        println!("     and start it with --initial-cluster-state existing and the --initial-cluster that member add prints.");
    }
    Ok(())
}

/// Builds the recovered data directory in `work`; returns what it did.
async fn prepare(
    dir: &Path,
    work: &Path,
    aside: &Path,
    stamp: &str,
) -> Result<Record, RecoverCmdError> {
    let replayed = replay_committed(dir, StoreOptions::default()).await?;
    let me = replayed
        .members
        .iter()
        .find(|(id, _, _)| *id == replayed.member_id)
        .map(|(_, n, _)| n.clone())
        .ok_or_else(|| {
            RecoverCmdError::Flags(format!(
                "member {:016x} is not in its own membership (was it removed?); restore a snapshot instead",
                replayed.member_id
            ))
        })?;
    std::fs::create_dir(work).map_err(io_err(work))?;
    // The store is exported as an etcd snapshot and imported into the new directory: the same path as
    // `keel snapshot restore`, so the result is a store any member could have restored.
    let export = work.join("export.db");
    let store = replayed.store.clone();
    let members = vec![EtcdMember {
        id: replayed.member_id,
        name: me.name.clone(),
        peer_urls: me.peer_urls.clone(),
        client_urls: me.client_urls.clone(),
        is_learner: false,
    }];
    let applied = replayed.applied_index;
    let export_path = export.clone();
    let summary = tokio::task::spawn_blocking(move || {
        store.export_etcd(&export_path, members, applied, &|_| {})
    })
    .await
    .map_err(|e| RecoverCmdError::Internal(e.to_string()))?
    .map_err(|e| RecoverCmdError::Snapshot {
        path: export.clone(),
        reason: e.to_string(),
    })?;
    drop(replayed.store);
    eprintln!(
        "keel: exported revision {} ({} entries); building the new member",
        summary.revision, summary.total_key
    );
    let meta = standalone_raft_meta(replayed.member_id, &me, replayed.term, applied);
    let import_dir = work.join("store");
    let export_for_import = export.clone();
    tokio::task::spawn_blocking(move || {
        let reader = BoltReader::open(&export_for_import)?;
        import_etcd(
            &import_dir,
            &reader,
            &ImportOptions {
                raft_meta: Some(meta),
            },
            &|_| {},
        )
    })
    .await
    .map_err(|e| RecoverCmdError::Internal(e.to_string()))?
    .map_err(|e| RecoverCmdError::Snapshot {
        path: export.clone(),
        reason: e.to_string(),
    })?;
    std::fs::remove_file(&export).map_err(io_err(&export))?;
    std::fs::copy(dir.join("member"), work.join("member")).map_err(io_err(&work.join("member")))?;
    std::fs::create_dir(work.join("snap")).map_err(io_err(&work.join("snap")))?;
    write_standalone_vote(&work.join("wal"), replayed.member_id, replayed.term)?;
    let previous: Vec<u64> = replayed
        .members
        .iter()
        .map(|(id, _, _)| *id)
        .filter(|id| *id != replayed.member_id)
        .collect();
    write_removed_members(work, &previous)?;
    let record = Record {
        recovered_at: stamp.to_string(),
        member: me.name.clone(),
        member_id: format!("{:x}", replayed.member_id),
        cluster_id: format!("{:x}", replayed.cluster_id),
        revision: summary.revision,
        applied_index: applied,
        discarded_entries: replayed.discarded,
        previous_term: replayed.term,
        previous_members: replayed
            .members
            .iter()
            .map(|(id, n, learner)| Previous {
                id: format!("{id:x}"),
                name: n.name.clone(),
                peer_urls: n.peer_urls.clone(),
                is_learner: *learner,
            })
            .collect(),
        previous_data_dir: aside.display().to_string(),
        keel_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    carry_over(dir, work)?;
    let path = work.join("recovered.json");
    let text =
        serde_json::to_vec_pretty(&record).map_err(|e| RecoverCmdError::Internal(e.to_string()))?;
    std::fs::write(&path, text).map_err(io_err(&path))?;
    for p in [path.as_path(), work] {
        std::fs::File::open(p)
            .and_then(|f| f.sync_all())
            .map_err(io_err(p))?;
    }
    Ok(record)
}

/// Copies what the data directory holds besides the Raft log and the store (the PKI, the member's TLS
/// files, the kept tokens, the secrets' encryption key, the data format, …) into the new directory,
/// which would otherwise start without them. Scheduled snapshots stay in the kept directory.
fn carry_over(dir: &Path, work: &Path) -> Result<(), RecoverCmdError> {
    const REBUILT: [&str; 7] = [
        "store",
        "member",
        "snap",
        "wal",
        "removed-members",
        "recovered.json",
        "snapshots",
    ];
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name();
        let text = name.to_string_lossy();
        if REBUILT.contains(&text.as_ref()) || text.starts_with('.') || work.join(&name).exists() {
            continue;
        }
        copy_tree(&e.path(), &work.join(&name))?;
    }
    Ok(())
}

/// Copies a file or a directory tree, keeping permissions (keys stay private).
fn copy_tree(from: &Path, to: &Path) -> Result<(), RecoverCmdError> {
    let meta = std::fs::symlink_metadata(from).map_err(io_err(from))?;
    if meta.is_dir() {
        std::fs::create_dir(to).map_err(io_err(to))?;
        for e in std::fs::read_dir(from).map_err(io_err(from))? {
            let e = e.map_err(io_err(from))?;
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        }
        std::fs::set_permissions(to, meta.permissions()).map_err(io_err(to))?;
    } else if meta.is_file() {
        std::fs::copy(from, to).map_err(io_err(from))?;
    }
    Ok(())
}
