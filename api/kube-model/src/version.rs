//! The Kubernetes version keel serves, which `/version`, discovery and the OpenAPI documents all report.

/// kube-apiserver version keel reports; kubectl's dispatcher picks its client from `minor`.
pub const KUBE_MAJOR: &str = "1";
/// See [`KUBE_MAJOR`].
pub const KUBE_MINOR: &str = "32";
/// The `gitVersion` field of `/version`.
pub const KUBE_GIT_VERSION: &str = "v1.32.0-keel";
