//! `keel status`: the cluster at a glance, from the etcd API as any client sees it (MemberList,
//! then Maintenance.Status of each member), plus what only a member's data directory shows
//! (its newest snapshot and Raft snapshot, its certificates' expiry).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use etcd_client::{ConnectOptions, StatusResponse};

use crate::cli::StatusArgs;

/// The file `keel server` writes its advertised client URLs to, one a line, for `keel status`.
pub(crate) const CLIENT_URLS_FILE: &str = "client-urls";

/// Why `keel status` could not report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    #[error("{0}")]
    Flags(String),
    #[error("no endpoint answered: {0}")]
    NoneAnswered(String),
}

/// What one member answered, or why it did not.
struct Row {
    name: String,
    endpoint: String,
    id: u64,
    learner: bool,
    status: Result<StatusResponse, String>,
}

/// Runs `keel status`.
pub(crate) async fn run(a: StatusArgs) -> Result<(), StatusError> {
    let _ = DIAL.set(a.dial_timeout);
    crate::etcd_tls::install(&a.tls, a.data_dir.as_deref()).map_err(StatusError::Flags)?;
    let endpoints = endpoints(&a);
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(a.dial_timeout)
        .with_timeout(a.command_timeout);
    if let Some(user) = &a.user {
        let (name, password) = user
            .split_once(':')
            .ok_or_else(|| StatusError::Flags("--user must be NAME:PASSWORD".into()))?;
        opts = opts.with_user(name, password);
    }
    let mut failures = Vec::new();
    let mut members = None;
    for ep in &endpoints {
        match member_list(ep, opts.clone()).await {
            Ok(m) => {
                members = Some(m);
                break;
            }
            Err(e) => failures.push(format!("{ep}: {e}")),
        }
    }
    let Some(members) = members else {
        return Err(StatusError::NoneAnswered(failures.join("; ")));
    };
    // Members are asked at once, so an unreachable one costs one dial timeout, not one each.
    let mut asks = Vec::new();
    for m in members {
        // A given endpoint that is one of the member's URLs wins over its first advertised one.
        let endpoint = m
            .client_urls()
            .iter()
            .find(|u| endpoints.contains(u))
            .or(m.client_urls().first())
            .cloned();
        let (name, id, learner) = (m.name().to_string(), m.id(), m.is_learner());
        let opts = opts.clone();
        asks.push(tokio::spawn(async move {
            let (endpoint, status) = match endpoint {
                Some(ep) => {
                    let s = member_status(&ep, opts).await;
                    (ep, s)
                }
                None => ("-".into(), Err("not started (no client URL)".into())),
            };
            Row {
                name,
                endpoint,
                id,
                learner,
                status,
            }
        }));
    }
    let mut rows = Vec::new();
    for ask in asks {
        match ask.await {
            Ok(row) => rows.push(row),
            Err(e) => return Err(StatusError::NoneAnswered(e.to_string())),
        }
    }
    rows.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
    if rows.iter().all(|r| r.status.is_err()) {
        let why: Vec<String> = rows
            .iter()
            .filter_map(|r| {
                r.status
                    .as_ref()
                    .err()
                    .map(|e| format!("{}: {e}", r.endpoint))
            })
            .collect();
        return Err(StatusError::NoneAnswered(why.join("; ")));
    }
    print!("{}", render(&rows));
    if let Some(dir) = &a.data_dir {
        let snapshots = a
            .snapshot_dir
            .clone()
            .unwrap_or_else(|| dir.join("snapshots"));
        print!("{}", local_report(dir, &snapshots, SystemTime::now()));
    }
    Ok(())
}

/// `--endpoints`, else the URLs `keel server` wrote into `--data-dir`, else etcd's default.
fn endpoints(a: &StatusArgs) -> Vec<String> {
    if !a.endpoints.is_empty() {
        return a.endpoints.clone();
    }
    if let Some(dir) = &a.data_dir {
        if let Ok(text) = std::fs::read_to_string(dir.join(CLIENT_URLS_FILE)) {
            let urls: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            if !urls.is_empty() {
                return urls;
            }
        }
    }
    vec!["http://127.0.0.1:2379".into()]
}

/// The dial timeout `keel status` was given (kept beside the options, which do not expose it).
static DIAL: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

fn opts_dial(_: &ConnectOptions) -> Duration {
    DIAL.get().copied().unwrap_or(Duration::from_secs(2))
}

async fn member_list(
    endpoint: &str,
    opts: ConnectOptions,
) -> Result<Vec<etcd_client::Member>, etcd_client::Error> {
    let dial = opts_dial(&opts);
    let mut c = crate::etcd_tls::connect(endpoint, opts, dial).await?;
    Ok(c.member_list().await?.members().to_vec())
}

async fn member_status(endpoint: &str, opts: ConnectOptions) -> Result<StatusResponse, String> {
    let unreachable = |e: etcd_client::Error| match e {
        // The status message alone ("tcp connect error", "Timeout expired"); the rest is noise.
        etcd_client::Error::GRpcStatus(s) => format!("unreachable: {}", s.message()),
        e => format!("unreachable: {e}"),
    };
    let dial = opts_dial(&opts);
    let mut c = crate::etcd_tls::connect(endpoint, opts, dial)
        .await
        .map_err(unreachable)?;
    c.status().await.map_err(unreachable)
}

/// The table, then the leader line.
fn render(rows: &[Row]) -> String {
    // The leader as the members that answered name it; its index is what the others lag behind.
    let leader_id = rows
        .iter()
        .filter_map(|r| r.status.as_ref().ok())
        .map(|s| s.leader())
        .find(|&l| l != 0);
    let leader_index = rows
        .iter()
        .filter(|r| Some(r.id) == leader_id)
        .find_map(|r| r.status.as_ref().ok().map(|s| s.raft_index()));
    let header = [
        "NAME", "ENDPOINT", "ID", "ROLE", "TERM", "INDEX", "APPLIED", "LAG", "DB SIZE",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in rows {
        let mut line = vec![r.name.clone(), r.endpoint.clone(), format!("{:x}", r.id)];
        match &r.status {
            Ok(s) => {
                let role = if Some(r.id) == leader_id {
                    "leader"
                } else if r.learner {
                    "learner"
                } else {
                    "follower"
                };
                let lag = leader_index
                    .map(|l| l.saturating_sub(s.raft_applied_index()).to_string())
                    .unwrap_or_else(|| "?".into());
                line.extend([
                    role.to_string(),
                    s.raft_term().to_string(),
                    s.raft_index().to_string(),
                    s.raft_applied_index().to_string(),
                    lag,
                    human_bytes(u64::try_from(s.db_size()).unwrap_or(0)),
                ]);
            }
            Err(e) => line.push(e.clone()),
        }
        table.push(line);
    }
    let mut widths = vec![0; header.len()];
    for line in &table {
        // An error fills the rest of its row and does not widen the columns.
        if line.len() == header.len() {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(cell.len());
            }
        }
    }
    let mut out = String::new();
    for line in &table {
        let cells: Vec<String> = line
            .iter()
            .enumerate()
            .map(|(i, c)| match widths.get(i) {
                Some(w) if i + 1 < line.len() => format!("{c:<w$}"),
                _ => c.clone(),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push('\n');
    match leader_id {
        Some(id) => {
            let name = rows
                .iter()
                .find(|r| r.id == id)
                .map_or("?", |r| r.name.as_str());
            out.push_str(&format!("leader: {name} ({id:x})\n"));
        }
        None => out.push_str("leader: none\n"),
    }
    out
}

/// The newest snapshot in `snapshots`, the newest Raft snapshot and the earliest certificate
/// expiry in the data dir `dir`.
fn local_report(dir: &Path, snapshots: &Path, now: SystemTime) -> String {
    let mut out = String::new();
    match crate::snapshot::archive::list(snapshots) {
        Ok(list) => match list.last() {
            Some(e) => {
                let at = SystemTime::UNIX_EPOCH
                    + Duration::from_secs(u64::try_from(e.modified).unwrap_or(0));
                let name = e
                    .path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                out.push_str(&format!(
                    "snapshots: newest {name}, {} ago, {} ({} in {})\n",
                    human_duration(now.duration_since(at).unwrap_or_default()),
                    human_bytes(e.size),
                    list.len(),
                    snapshots.display()
                ));
            }
            None => out.push_str(&format!("snapshots: none in {}\n", snapshots.display())),
        },
        Err(e) => out.push_str(&format!("snapshots: {}: {e}\n", snapshots.display())),
    }
    match keel_raft::metrics::newest_snapshot(dir) {
        Some(s) => {
            let age = now.duration_since(s.modified).unwrap_or_default();
            out.push_str(&format!(
                "raft snapshot: {} ago, {}\n",
                human_duration(age),
                human_bytes(s.size)
            ));
        }
        None => out.push_str("raft snapshot: none\n"),
    }
    if let Some(line) = certificate_expiry(
        &[
            ("", dir.join("pki")),
            ("tls/", dir.join(keel_kube_api::pki::MEMBER_TLS_DIR)),
        ],
        now,
    ) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// "certificates: earliest expiry ..." for the `*.crt` files in `dirs` (each named with its prefix:
/// `pki/` unprefixed, `tls/` for the peer and etcd certificates), if there are any.
fn certificate_expiry(dirs: &[(&str, PathBuf)], now: SystemTime) -> Option<String> {
    let mut files: Vec<(&str, PathBuf)> = Vec::new();
    for (prefix, dir) in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut these: Vec<(&str, PathBuf)> = entries
            .flatten()
            .map(|e| (*prefix, e.path()))
            .filter(|(_, p)| p.extension().is_some_and(|x| x == "crt"))
            .collect();
        these.sort();
        files.extend(these);
    }
    if files.is_empty() {
        return None;
    }
    let mut earliest: Option<(i64, String, String)> = None;
    let mut unreadable = Vec::new();
    for (prefix, f) in &files {
        let file = f.file_name().map_or_else(
            || f.display().to_string(),
            |n| format!("{prefix}{}", n.to_string_lossy()),
        );
        let Ok(bytes) = std::fs::read(f) else {
            unreadable.push(file);
            continue;
        };
        let mut parsed = false;
        for pem in x509_parser::pem::Pem::iter_from_buffer(&bytes).flatten() {
            let Ok(cert) = pem.parse_x509() else { continue };
            parsed = true;
            let after = cert.validity().not_after;
            if earliest
                .as_ref()
                .is_none_or(|(t, _, _)| after.timestamp() < *t)
            {
                earliest = Some((after.timestamp(), after.to_string(), file.clone()));
            }
        }
        if !parsed {
            unreadable.push(file);
        }
    }
    let mut line = match earliest {
        Some((at, when, file)) => {
            let now = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let days = (at - now).div_euclid(86_400);
            let left = if at <= now {
                "EXPIRED".to_string()
            } else {
                format!("in {days} days")
            };
            format!("certificates: earliest expiry {when} ({file}, {left})")
        }
        None if files.is_empty() => return None,
        None => "certificates: none readable".to_string(),
    };
    if !unreadable.is_empty() {
        line.push_str(&format!("; unreadable: {}", unreadable.join(", ")));
    }
    Some(line)
}

/// Bytes as etcdctl prints DB SIZE (SI units: `936 B`, `1.2 MB`).
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.0} {}", UNITS[unit])
    }
}

/// A rough age: `42s`, `7m`, `3h`, `12d`.
fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", s / 60),
        7_200..=172_799 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages() {
        assert_eq!(human_bytes(936), "936 B");
        assert_eq!(human_bytes(1_234_567), "1.2 MB");
        assert_eq!(human_bytes(25_000), "25 kB");
        assert_eq!(human_duration(Duration::from_secs(42)), "42s");
        assert_eq!(human_duration(Duration::from_secs(3 * 3600)), "3h");
    }

    #[test]
    fn no_pki_means_no_certificate_line() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            certificate_expiry(&[("", dir.path().join("pki"))], SystemTime::now()),
            None
        );
        let snaps = dir.path().join("snapshots");
        let report = local_report(dir.path(), &snaps, SystemTime::now());
        assert_eq!(
            report,
            format!(
                "snapshots: none in {}\nraft snapshot: none\n",
                snaps.display()
            )
        );
    }
}
