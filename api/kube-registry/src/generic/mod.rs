//! The generic store (upstream's `registry/generic/registry.Store`): a create or an update of any kind, run
//! through the kind's strategy and the admission the layer above passes in, then written with a compare on
//! the key's mod revision. What differs by kind (defaults, status resets, generation, allocation,
//! subresource rules) is the strategy's; what needs the request's identity (admission plugins, the CSR
//! signer) is the [`Admission`] implementation's, so nothing here reaches up into authentication or the
//! HTTP layer.
//!
//! - `create`: a new object (a POST, a PUT to a missing object, an apply that creates).
//! - `update`: a read-modify-write of the stored object, retried when a race is lost and the client pinned
//!   no resourceVersion.

mod create;
mod update;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use create::create;
pub use update::{update, Updated};

use crate::apply::managed::Owner;
use crate::resource::ResourceDef;
use crate::status::{ApiError, Target};
use crate::storage::Storage;

/// How many times a write retries after losing a race it may retry (no client resourceVersion).
const RETRIES: usize = 8;

/// Metadata fields only the server sets.
const SERVER_META: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

/// The write being admitted.
#[derive(Clone, Copy)]
pub enum Operation<'a> {
    /// A new object.
    Create,
    /// A change to `old`, the stored object; `changed` says whether the new object differs from it.
    Update {
        /// The stored object.
        old: &'a Value,
        /// Whether the new object differs from the stored one (some plugins skip no-op writes).
        changed: bool,
    },
}

/// What admission is asked about: one step of one write.
pub struct Admitted<'a> {
    /// The kind as stored.
    pub def: &'a ResourceDef,
    /// The resource as the request named it (its version may differ from the stored one).
    pub requested: &'a ResourceDef,
    /// The namespace from the URL (namespaced kinds).
    pub namespace: Option<&'a str>,
    /// The subresource written, if any.
    pub subresource: Option<&'a str>,
    /// Create or update.
    pub op: Operation<'a>,
    /// The object's name (a server-named object's `generateName` prefix, as upstream admits it).
    pub name: &'a str,
    /// Whether the write is a dry run.
    pub dry_run: bool,
}

/// One admission step's answer, later.
pub type Step<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// The admission the layer above runs on each write, at the generic store's fixed places.
pub trait Admission: Send + Sync {
    /// The mutating plugins, on the decoded and defaulted object.
    fn mutate<'a>(&'a self, a: &'a Admitted<'a>, obj: &'a mut Value) -> Step<'a, ()>;

    /// What completes an object in the write that stores it once its own validation passed, with the
    /// server's credentials (a CertificateSigningRequest's requester, approval and certificate).
    fn complete<'a>(&'a self, a: &'a Admitted<'a>, obj: &'a mut Value) -> Step<'a, ()>;

    /// The validating plugins, after the object's own validation: a refusal, or warnings.
    fn validate<'a>(&'a self, a: &'a Admitted<'a>, obj: &'a Value) -> Step<'a, Vec<String>>;
}

/// How a write records field ownership in `metadata.managedFields`.
pub enum Tracking {
    /// A create, update or non-apply patch by this owner.
    Update(Owner),
    /// A server-side apply: the written object already carries its managedFields.
    Applied,
}

/// One write's request: what it writes, where, and the admission it passes.
pub struct Write<'a> {
    /// The store.
    pub storage: &'a Storage,
    /// The resource as the request named it (its version; the store converts to the storage version).
    pub def: &'a Arc<ResourceDef>,
    /// The namespace from the URL.
    pub namespace: Option<&'a str>,
    /// The name from the URL (empty for a POST to a collection).
    pub name: &'a str,
    /// The subresource written, if any.
    pub subresource: Option<&'a str>,
    /// Whether nothing is to be stored.
    pub dry_run: bool,
    /// How long an Event lives (zero: forever).
    pub event_ttl: Duration,
    /// Admission.
    pub admission: &'a dyn Admission,
}

impl Write<'_> {
    /// The object's key.
    fn key(&self) -> String {
        self.def.key(self.namespace, self.name)
    }

    /// Error target naming the object.
    fn target(&self) -> Target {
        Target::new(&self.def.group, &self.def.plural, self.name)
    }

    /// The lease an object of `storage` is written with: Events expire after the TTL, nothing else does.
    async fn ttl_lease(&self, storage: &str) -> Result<i64, ApiError> {
        ttl_lease(self.storage, self.event_ttl, storage).await
    }
}

/// The lease an object of the `storage` resource is written with (0: none): Events live `event_ttl`.
pub async fn ttl_lease(
    storage: &Storage,
    event_ttl: Duration,
    resource: &str,
) -> Result<i64, ApiError> {
    if resource != "events" || event_ttl.is_zero() {
        return Ok(0);
    }
    let secs = i64::try_from(event_ttl.as_secs())
        .unwrap_or(i64::MAX)
        .max(1);
    storage.ttl_lease(secs).await
}

/// The 409 for a stale resourceVersion.
pub fn conflict(target: Target) -> ApiError {
    ApiError::Conflict {
        target,
        detail: "the object has been modified; please apply your changes to the latest version and try again".into(),
    }
}
