//! Pod priority (upstream's `scheduling.k8s.io` PriorityClasses).
//!
//! - The built-in classes `system-node-critical` (2000001000) and `system-cluster-critical` (2000000000)
//!   are created by every member at start when missing ([`bootstrap`], upstream's post-start hook
//!   `scheduling/bootstrap-system-priority-classes`); `/readyz` waits for it. Names with the `system-`
//!   prefix are reserved for them and values above 1000000000 for them alone (the strategy in
//!   `strategy/priorityclass.rs`); a DELETE of one of them alone is refused, as upstream's registry does
//!   (a collection delete is not checked, as upstream's is not).
//! - The Priority admission plugin is not here yet: pods keep the priority their defaults give.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tracing::{debug, info};

use crate::apply::managed::{self, Owner};
use crate::apply::shape::Shape;
use crate::handler::KubeState;
use crate::object;
use crate::resource::{self, ResourceDef};
use crate::status::ApiError;
use crate::storage::{Storage, WriteOutcome};

/// The highest value a class not built in may have (upstream's HighestUserDefinablePriority).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
/// The value of `system-cluster-critical` (upstream's SystemCriticalPriority).
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
/// The name prefix reserved for the built-in classes.
pub const SYSTEM_PREFIX: &str = "system-";
/// The preemption policy of pods and classes that name none.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";
/// The preemption policies a class may have.
pub const PREEMPTION_POLICIES: &[&str] = &[PREEMPT_LOWER_PRIORITY, "Never"];
/// Upstream's name of the post-start hook that creates the built-in classes (in `/readyz?verbose`).
pub const HOOK: &str = "poststarthook/scheduling/bootstrap-system-priority-classes";

/// One built-in class.
#[derive(Debug, Clone, Copy)]
pub struct SystemClass {
    /// Its name.
    pub name: &'static str,
    /// Its value.
    pub value: i64,
    /// Its description, as upstream writes it.
    pub description: &'static str,
}

/// The built-in classes, in upstream's order (none is the global default).
pub const SYSTEM_CLASSES: &[SystemClass] = &[
    SystemClass {
        name: "system-node-critical",
        value: SYSTEM_CRITICAL_PRIORITY + 1000,
        description: "Used for system critical pods that must not be moved from their current node.",
    },
    SystemClass {
        name: "system-cluster-critical",
        value: SYSTEM_CRITICAL_PRIORITY,
        description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    },
];

/// Whether `name` is a built-in class.
pub fn is_system_class(name: &str) -> bool {
    SYSTEM_CLASSES.iter().any(|c| c.name == name)
}

/// Checks that a class named with the reserved prefix is a built-in one as built in (upstream's
/// IsKnownSystemPriorityClass); the error is upstream's text.
pub fn known_system_class(name: &str, value: i64, global_default: bool) -> Result<(), String> {
    let Some(c) = SYSTEM_CLASSES.iter().find(|c| c.name == name) else {
        return Err(format!("{name} is not a known system priority class"));
    };
    if c.value != value {
        return Err(format!(
            "value of {} PriorityClass must be {}",
            c.name, c.value
        ));
    }
    if global_default {
        return Err(format!(
            "globalDefault of {} PriorityClass must be false",
            c.name
        ));
    }
    Ok(())
}

fn classes_def() -> Result<Arc<ResourceDef>, ApiError> {
    resource::find("scheduling.k8s.io", "v1", "priorityclasses")
        .ok_or_else(|| ApiError::Internal("priorityclasses are not served".into()))
}

/// A built-in class as the API would create it through the loopback client: defaulted, generation 1,
/// its fields owned by `kube-apiserver`.
pub fn system_class_object(c: &SystemClass) -> Value {
    let api_version = "scheduling.k8s.io/v1";
    let mut obj = json!({
        "apiVersion": api_version,
        "kind": "PriorityClass",
        "metadata": {
            "name": c.name,
            "uid": object::new_uid(),
            "creationTimestamp": object::now_rfc3339(),
            "generation": 1,
        },
        "value": c.value,
        "description": c.description,
        "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
    });
    let owner = Owner {
        manager: "kube-apiserver".into(),
        api_version: api_version.into(),
        subresource: String::new(),
    };
    managed::record_create(
        &mut obj,
        Shape::of_kind(api_version, "PriorityClass"),
        &owner,
        false,
    );
    obj
}

/// One pass of the bootstrap: creates each built-in class that does not exist (an existing one is left
/// as it is, as upstream leaves it).
pub async fn ensure_system_classes(storage: &Storage) -> Result<(), ApiError> {
    let def = classes_def()?;
    for c in SYSTEM_CLASSES {
        let key = def.key(None, c.name);
        if storage.get(&key, true).await?.is_some() {
            continue;
        }
        if let WriteOutcome::Done(_) = storage.put_if(&key, &system_class_object(c), 0).await? {
            info!(
                name = c.name,
                value = c.value,
                "created the built-in PriorityClass"
            );
        }
    }
    Ok(())
}

/// Runs [`ensure_system_classes`] until it succeeds (it needs a quorum), then marks the hook done for
/// `/readyz`. Every member runs it once at start, as every kube-apiserver runs its post-start hook.
pub async fn bootstrap(state: Arc<KubeState>) {
    let mut delay = Duration::from_millis(200);
    let mut stop = state.shutdown.clone();
    loop {
        match ensure_system_classes(&state.storage).await {
            Ok(()) => {
                state.priority_classes_ready.store(true, Ordering::Release);
                return;
            }
            Err(e) => debug!(error = %e, "creating the built-in PriorityClasses failed; retrying"),
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        // Short steps: `/readyz` waits for this, and a quorum usually appears within a second or two.
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_classes_are_upstreams() {
        assert_eq!(SYSTEM_CLASSES[0].value, 2_000_001_000);
        assert_eq!(SYSTEM_CLASSES[1].value, 2_000_000_000);
        assert!(known_system_class("system-node-critical", 2_000_001_000, false).is_ok());
        assert_eq!(
            known_system_class("system-node-critical", 5, false),
            Err("value of system-node-critical PriorityClass must be 2000001000".into())
        );
        assert_eq!(
            known_system_class("system-cluster-critical", 2_000_000_000, true),
            Err("globalDefault of system-cluster-critical PriorityClass must be false".into())
        );
        assert_eq!(
            known_system_class("system-x", 1, false),
            Err("system-x is not a known system priority class".into())
        );
    }

    #[test]
    fn built_in_objects_are_defaulted_and_owned() {
        let o = system_class_object(&SYSTEM_CLASSES[1]);
        assert_eq!(o["value"], 2_000_000_000);
        assert_eq!(o["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(o["metadata"]["generation"], 1);
        assert_eq!(
            o["metadata"]["managedFields"][0]["manager"],
            "kube-apiserver"
        );
    }
}
