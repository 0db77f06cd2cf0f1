//! Typed store errors. The etcd front door maps each to etcd's gRPC code and exact message.

use thiserror::Error;

/// Everything that can go wrong inside the store.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRev,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    #[error("mvcc: watcher range is empty")]
    EmptyWatchRange,
    /// A NOSPACE alarm is raised (or this write would pass the space quota).
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    /// A CORRUPT alarm is raised: the key space refuses every request.
    #[error("etcdserver: corrupt cluster")]
    CorruptCluster,
    // etcd's auth errors (auth/store.go), with the texts of their gRPC statuses.
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExist,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExist,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    /// etcd has no gRPC status for it: clients see the auth package's own text.
    #[error("auth: authentication failed, password was given for no password user")]
    NoPasswordUser,
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// The backend failed or holds data we cannot decode; the server must not go on.
    #[error("store backend: {0}")]
    Backend(String),
    /// A persisted record does not decode.
    #[error("store corrupt: {0}")]
    Corrupt(String),
}

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

impl From<prost::DecodeError> for StoreError {
    fn from(e: prost::DecodeError) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

impl StoreError {
    /// True for errors that say the store itself is broken (as opposed to a bad request).
    pub fn is_fatal(&self) -> bool {
        matches!(self, StoreError::Backend(_) | StoreError::Corrupt(_))
    }
}
