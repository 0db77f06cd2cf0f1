//! Service-account tokens: the cluster's signing key (`key`), the JWTs it signs and checks (`token`), the
//! TokenRequest API (`request`, `kubectl create token`), the ServiceAccount admission plugin that mounts a
//! projected token into pods (`admission`), and the issuer discovery documents
//! (`/.well-known/openid-configuration`, `/openid/v1/jwks`).

pub(crate) mod admission;
pub(crate) mod key;
pub(crate) mod legacy;
pub(crate) mod request;
pub(crate) mod review;
pub(crate) mod token;

use serde_json::{json, Value};

/// The issuer and default audience of keel's tokens (kube-apiserver's usual `--service-account-issuer`).
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The user-name prefix of service accounts.
pub(crate) const USER_PREFIX: &str = "system:serviceaccount:";

/// The user name of a service account.
pub(crate) fn user_name(namespace: &str, name: &str) -> String {
    format!("{USER_PREFIX}{namespace}:{name}")
}

/// The groups of a service account's identity (with `system:authenticated`).
pub(crate) fn groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".into(),
    ]
}

/// `/.well-known/openid-configuration`: where relying parties find the key set.
pub(crate) fn openid_configuration(server_url: &str) -> Value {
    json!({
        "issuer": ISSUER,
        "jwks_uri": format!("{}/openid/v1/jwks", server_url.trim_end_matches('/')),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
}
