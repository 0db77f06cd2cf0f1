//! Command-line interface. Server flags mirror etcd's where users already know them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// keel: a Kubernetes control plane with its etcd-compatible datastore built in.
#[derive(Debug, Parser)]
#[command(name = "keel", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one member (the etcd v3 API on its client URLs).
    Server(ServerArgs),
    /// Start a local cluster on loopback, ready for etcdctl; Ctrl-C stops it.
    Up(UpArgs),
}

/// Flags of `keel server`.
#[derive(Debug, Args, Clone)]
pub struct ServerArgs {
    /// Human-readable name of this member.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Directory for the WAL, snapshots and store.
    #[arg(long, default_value = "default.keel")]
    pub data_dir: PathBuf,
    /// Comma-separated URLs to serve clients on.
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    pub listen_client_urls: Vec<String>,
    /// Comma-separated client URLs to advertise to the cluster.
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    pub advertise_client_urls: Vec<String>,
    /// Comma-separated URLs to listen on for peer traffic.
    #[arg(long, default_value = "http://127.0.0.1:2380", value_delimiter = ',')]
    pub listen_peer_urls: Vec<String>,
    /// Comma-separated peer URLs to advertise to the cluster.
    #[arg(long, value_delimiter = ',')]
    pub initial_advertise_peer_urls: Vec<String>,
    /// Leader heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub heartbeat_interval: u64,
    /// Election timeout in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub election_timeout: u64,
    /// Applied entries between Raft snapshots.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_count: u64,
    /// Interval of periodic watch progress notifications (e.g. 10m, 5s, 100ms).
    #[arg(long = "experimental-watch-progress-notify-interval", default_value = "10m", value_parser = parse_duration)]
    pub progress_notify_interval: std::time::Duration,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
}

/// Flags of `keel up`.
#[derive(Debug, Args, Clone)]
pub struct UpArgs {
    /// Directory holding each member's data directory.
    #[arg(long, default_value = "keel-data")]
    pub data_dir: PathBuf,
    /// Log level for the members.
    #[arg(long, env = "KEEL_LOG", default_value = "warn")]
    pub log_level: String,
}

/// Parses `10m`, `5s`, `250ms` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(format!("bad duration unit in {s:?} (use ms, s, m or h)")),
    };
    Ok(std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("100ms"),
            Ok(std::time::Duration::from_millis(100))
        );
        assert_eq!(
            parse_duration("10m"),
            Ok(std::time::Duration::from_secs(600))
        );
        assert_eq!(parse_duration("3"), Ok(std::time::Duration::from_secs(3)));
        assert!(parse_duration("3d").is_err());
    }
}
