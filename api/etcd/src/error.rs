//! The one place typed errors become gRPC statuses with etcd's codes and exact messages.

use keel_raft::error::ProposeError;
use keel_store::StoreError;
use tonic::{Code, Status};

/// Maps a store error to etcd's status.
pub fn store_status(e: &StoreError) -> Status {
    use StoreError::*;
    let code = match e {
        EmptyKey | KeyNotFound | ValueProvided | LeaseProvided | TooManyOps | DuplicateKey
        | RequestTooLarge | EmptyWatchRange => Code::InvalidArgument,
        Compacted | FutureRev | LeaseTtlTooLarge => Code::OutOfRange,
        LeaseNotFound => Code::NotFound,
        LeaseExists | RootUserNotExist | RootRoleNotExist | UserAlreadyExist | UserNotFound
        | RoleAlreadyExist | RoleNotFound | RoleNotGranted | PermissionNotGranted
        | AuthNotEnabled => Code::FailedPrecondition,
        UserEmpty | RoleEmpty | AuthFailed | PermissionNotGiven | InvalidAuthMgmt
        | AuthOldRevision => Code::InvalidArgument,
        PermissionDenied => Code::PermissionDenied,
        InvalidAuthToken => Code::Unauthenticated,
        // etcd has no status for it: gRPC-Go sends a plain error as Unknown.
        NoPasswordUser => Code::Unknown,
        NoSpace => Code::ResourceExhausted,
        CorruptCluster => Code::DataLoss,
        Backend(_) | Corrupt(_) => Code::Internal,
    };
    Status::new(code, e.to_string())
}

/// Maps a proposal error to etcd's status.
pub fn propose_status(e: &ProposeError) -> Status {
    match e {
        ProposeError::Store(s) => store_status(s),
        ProposeError::NotLeader => Status::failed_precondition(e.to_string()),
        ProposeError::NoLeader | ProposeError::Timeout | ProposeError::Stopped => {
            Status::unavailable(e.to_string())
        }
        ProposeError::Membership(m) => {
            use keel_raft::error::MembershipError as M;
            let code = match m {
                M::NotFound => Code::NotFound,
                M::InvalidUrls => Code::InvalidArgument,
                _ => Code::FailedPrecondition,
            };
            Status::new(code, e.to_string())
        }
    }
}

impl From<crate::error::ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match e {
            ApiError::Store(s) => store_status(&s),
            ApiError::Propose(p) => propose_status(&p),
        }
    }
}

/// Errors a handler can return.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Propose(#[from] ProposeError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_codes_and_messages() {
        let s = store_status(&StoreError::Compacted);
        assert_eq!(s.code(), Code::OutOfRange);
        assert_eq!(
            s.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );
        let s = propose_status(&ProposeError::NoLeader);
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(s.message(), "etcdserver: no leader");
        assert_eq!(
            store_status(&StoreError::LeaseNotFound).code(),
            Code::NotFound
        );
        let s = store_status(&StoreError::NoSpace);
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(s.message(), "etcdserver: mvcc: database space exceeded");
        let s = store_status(&StoreError::UserEmpty);
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "etcdserver: user name is empty");
        let s = store_status(&StoreError::PermissionDenied);
        assert_eq!(s.code(), Code::PermissionDenied);
        assert_eq!(s.message(), "etcdserver: permission denied");
        let s = store_status(&StoreError::InvalidAuthToken);
        assert_eq!(s.code(), Code::Unauthenticated);
        assert_eq!(s.message(), "etcdserver: invalid auth token");
        let s = store_status(&StoreError::RootUserNotExist);
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "etcdserver: root user does not exist");
        let s = store_status(&StoreError::CorruptCluster);
        assert_eq!(s.code(), Code::DataLoss);
        assert_eq!(s.message(), "etcdserver: corrupt cluster");
    }
}
