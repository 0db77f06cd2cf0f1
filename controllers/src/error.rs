//! What a reconcile can fail with.

/// A reconcile's failure; it is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object the controller read does not make sense (it is reported, then retried).
    #[error("{0}")]
    Invalid(String),
    /// A shared cache the controller waited on will never be filled (its watch task ended).
    #[error("the {0} cache stopped before it was filled")]
    CacheStopped(&'static str),
}

/// A reconcile's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether `e` is the API's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether `e` is the API's 409 (a conflicting write or an existing name).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}
