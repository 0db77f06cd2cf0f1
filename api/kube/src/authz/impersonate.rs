//! Impersonation (`kubectl --as`, `--as-group`): the `Impersonate-User` and `Impersonate-Group` headers
//! make a request act as someone else, when the real user may `impersonate` each of them.

use axum::http::HeaderMap;

use super::attributes::{Attributes, ResourceAttributes};
use super::rbac::SERVICE_ACCOUNT_PREFIX;
use super::{Authorizer, AUTHENTICATED};
use crate::authn::Identity;
use crate::status::ApiError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";

/// The identity a request acts as: `user` itself without impersonation headers, the impersonated one
/// when every impersonation is allowed, or upstream's 403 for the first that is not.
pub(crate) fn acting_as(
    authz: &Authorizer,
    user: Identity,
    headers: &HeaderMap,
) -> Result<Identity, ApiError> {
    let name = headers
        .get(USER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let groups: Vec<String> = headers
        .get_all(GROUP)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let extras = headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-extra-") || k.as_str() == "impersonate-uid");
    let Some(name) = name else {
        if !groups.is_empty() || extras {
            return Err(ApiError::BadRequest(
                "requested impersonation of groups or extra fields without impersonating a user"
                    .into(),
            ));
        }
        return Ok(user);
    };
    let check = |resource: &str, namespace: &str, target: &str| {
        let a = Attributes::resource(
            &user,
            "impersonate",
            ResourceAttributes {
                group: String::new(),
                version: String::new(),
                resource: resource.to_string(),
                subresource: None,
                namespace: namespace.to_string(),
                name: Some(target.to_string()),
            },
        );
        authz.check(&a)
    };
    let mut acting_groups = Vec::new();
    match name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, sa)) => {
            check("serviceaccounts", ns, sa)?;
            // A service account's groups are known; they are added unless groups were asked for.
            if groups.is_empty() {
                acting_groups.push("system:serviceaccounts".to_string());
                acting_groups.push(format!("system:serviceaccounts:{ns}"));
            }
        }
        None => check("users", "", &name)?,
    }
    for g in &groups {
        check("groups", "", g)?;
    }
    for g in groups {
        if !acting_groups.contains(&g) {
            acting_groups.push(g);
        }
    }
    let unauthenticated = acting_groups.iter().any(|g| g == "system:unauthenticated");
    if name != "system:anonymous"
        && !unauthenticated
        && !acting_groups.iter().any(|g| g == AUTHENTICATED)
    {
        acting_groups.push(AUTHENTICATED.to_string());
    }
    Ok(Identity {
        user: name,
        groups: acting_groups,
    })
}
