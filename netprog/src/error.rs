//! netprog's errors.

use thiserror::Error;

/// What can go wrong while programming the node.
#[derive(Debug, Error)]
pub enum Error {
    /// A command (`nft`, `ip`) could not run or failed.
    #[error("{command}: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output, or why it did not start.
        message: String,
    },
    /// `nft` refused the rendered table (the previous one stays in force).
    #[error("nft refused the rule set: {0}")]
    Rejected(String),
    /// A setting or a value read from the API is unusable.
    #[error("{0}")]
    Config(String),
    /// A host setting (`/proc/sys/...`) could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A watch of the API failed for good.
    #[error("watching {what}: {message}")]
    Watch {
        /// The resource watched.
        what: &'static str,
        /// Why.
        message: String,
    },
}

/// netprog's result type.
pub type Result<T> = std::result::Result<T, Error>;
