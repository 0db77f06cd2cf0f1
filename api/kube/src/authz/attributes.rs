//! Who asks to do what: a request's [`RequestInfo`] with the user it acts as, or a check made on a
//! user's behalf.

use crate::authn::Identity;
use crate::request_info::RequestInfo;

pub(crate) use crate::request_info::ResourceAttributes;

/// Who wants to do what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub user: Identity,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, or a special verb
    /// (`impersonate`, `bind`, `escalate`); for non-resource requests the lowercase HTTP method.
    pub verb: String,
    /// None for a non-resource request (`/healthz`, `/api`, `/metrics`, ...).
    pub resource: Option<ResourceAttributes>,
    /// The request path (what non-resource rules match).
    pub path: String,
}

impl Attributes {
    /// The attributes of a request, as it was read when it arrived.
    pub fn of(user: Identity, info: &RequestInfo) -> Self {
        Attributes {
            user,
            verb: info.verb.clone(),
            resource: info.resource.clone(),
            path: info.path.clone(),
        }
    }

    /// Attributes of a check made on the user's behalf (escalation, impersonation, reviews).
    pub fn resource(user: &Identity, verb: &str, r: ResourceAttributes) -> Self {
        Attributes {
            user: user.clone(),
            verb: verb.to_string(),
            resource: Some(r),
            path: String::new(),
        }
    }
}
