//! One admission request as webhooks and policies see it: the operation, the resource as asked and as
//! stored, where, who, and the object before the write.

use serde_json::Value;

use crate::authn::Identity;
use crate::resource::ResourceDef;

/// What a webhook is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A changed object.
    Update,
    /// A deleted object (the old object only).
    Delete,
    /// A connection to a pod (exec, attach, portforward): the object is its options.
    Connect,
}

impl Operation {
    /// As AdmissionReview spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// One request as webhooks see it.
pub struct Request<'a> {
    /// Create, update or delete.
    pub operation: Operation,
    /// The resource as the client named it.
    pub requested: &'a ResourceDef,
    /// The resource in its stored version (the objects here are in it).
    pub stored: &'a ResourceDef,
    /// The namespace from the URL.
    pub namespace: Option<&'a str>,
    /// The object's name (empty for a server-named create, as upstream's mutating webhooks see it).
    pub name: &'a str,
    /// The subresource written, if any.
    pub subresource: Option<&'a str>,
    /// Whether it is a dry run.
    pub dry_run: bool,
    /// Who asks.
    pub identity: &'a Identity,
    /// The object before the write (update, delete).
    pub old: Option<&'a Value>,
    /// The authorizer CEL's `authorizer` variable asks (None: its checks error).
    pub authz: Option<&'a crate::authz::Authorizer>,
}
