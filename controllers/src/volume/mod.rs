//! The storage controllers: the PersistentVolume binder, the protection of claims and volumes in use,
//! and the claims of generic ephemeral volumes. Volumes themselves are made and removed by a
//! provisioner (keel's node agents for `keel.io/local-path`); these loops only bind and guard them.

pub mod binder;
pub mod ephemeral;
pub mod protection;

use kube::runtime::events::EventType;
use kube::Resource;

use crate::context::Context;

/// Records an Event about `obj` from `reporter` (a repeat counts in the Event's series).
async fn event<K>(
    ctx: &Context,
    reporter: &str,
    obj: &K,
    kind: EventType,
    reason: &str,
    note: String,
) where
    K: Resource<DynamicType = ()>,
{
    ctx.publish(reporter, obj, kind, reason, note, true).await
}
