//! The agent's errors. Each names the step that failed; the pod worker turns them into the waiting
//! reasons and Events a kubelet reports (`ErrImagePull`, `CreateContainerError`, `RunContainerError`…).

use thiserror::Error;

/// What can go wrong in the node agent.
#[derive(Debug, Error)]
pub enum Error {
    /// The container runtime's socket cannot be reached.
    #[error("container runtime is down: cannot connect to {endpoint}: {source}")]
    Connect {
        /// The CRI endpoint.
        endpoint: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// A CRI call failed.
    #[error("{call}: {status}")]
    Cri {
        /// The RPC.
        call: &'static str,
        /// The runtime's answer.
        status: Box<tonic::Status>,
    },
    /// A Kubernetes API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What the call was for.
        what: String,
        /// The API's answer.
        #[source]
        source: Box<kube::Error>,
    },
    /// A file or directory of the agent's could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A command the agent runs (`ctr`) failed.
    #[error("{command}: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output or exit status.
        message: String,
    },
    /// The pod asks for something the agent cannot give (a missing ConfigMap key, a bad path…).
    #[error("{0}")]
    Config(String),
    /// A volume cannot be mounted yet (its claim is missing, unbound or going away): the whole
    /// `FailedMount` message.
    #[error("{0}")]
    Mount(String),
    /// A watch the agent keeps its caches with has ended (its stream retries errors, so this is a bug).
    #[error("the watch of {0} ended")]
    WatchEnded(&'static str),
}

impl Error {
    /// A CRI failure of `call`.
    pub fn cri(call: &'static str, status: tonic::Status) -> Error {
        Error::Cri {
            call,
            status: Box::new(status),
        }
    }

    /// A Kubernetes API failure while doing `what`.
    pub fn kube(what: impl Into<String>, source: kube::Error) -> Error {
        Error::Kube {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// An I/O failure on `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// The runtime's message alone (what a kubelet puts in a container's waiting message).
    pub fn runtime_message(&self) -> String {
        match self {
            Error::Cri { status, .. } => status.message().to_string(),
            other => other.to_string(),
        }
    }

    /// True when the API answered 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404))
    }
}

/// The agent's results.
pub type Result<T> = std::result::Result<T, Error>;
