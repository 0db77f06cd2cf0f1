//! Why a benchmark could not run (timings never make it fail).

use std::path::PathBuf;

/// A reason the benchmark could not run to the end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// SIGINT or SIGTERM arrived; the clusters of the run were stopped.
    #[error("interrupted by {0}; the servers this run started are stopped")]
    Interrupted(&'static str),
    /// A server binary is missing.
    #[error("{what} not found at {path}: {hint}")]
    MissingBinary {
        what: &'static str,
        path: PathBuf,
        hint: &'static str,
    },
    /// A server process could not be spawned.
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    /// A member never answered a write.
    #[error("{kind} member at {url} not ready after {secs} s (log: {log})")]
    NotReady {
        kind: &'static str,
        url: String,
        secs: u64,
        log: String,
    },
    /// An etcd v3 call failed during setup.
    #[error("etcd client: {0}")]
    Client(#[from] etcd_client::Error),
    /// A workload finished without a single successful operation.
    #[error("{workload} on {kind}: no operation succeeded ({errors} errors, last: {last})")]
    NoProgress {
        workload: String,
        kind: &'static str,
        errors: u64,
        last: String,
    },
    /// A Kubernetes API call or client setup failed.
    #[error("Kubernetes API: {0}")]
    Kube(String),
    /// The service rules step (netprog, nft in a namespace of its own) could not run.
    #[error("service rules (netprog): {0}")]
    Netprog(String),
    /// Reading or writing a local file failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl From<keel_netprog::Error> for BenchError {
    fn from(e: keel_netprog::Error) -> Self {
        BenchError::Netprog(e.to_string())
    }
}

/// Result of a benchmark step.
pub(crate) type Result<T> = std::result::Result<T, BenchError>;
