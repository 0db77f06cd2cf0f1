//! The labels and annotations the agent puts on CRI objects. They are the agent's only memory: a
//! restarted agent lists sandboxes and containers and matches them back to pods by these keys, as the
//! kubelet does with the same names.

use std::collections::HashMap;

/// Pod name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Pod namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Pod uid: the key every lookup uses.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Container name within the pod.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Marks objects made by keel's agent, so a shared runtime's other objects are never touched.
pub const MANAGED_BY: &str = "io.keel.managed-by";
/// The value of [`MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "keel-agent";
/// Annotation: the container's restart count.
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Annotation: hash of the container's spec, to notice a changed spec (upstream's hash is its own; ours is
/// only ever compared with ours).
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Annotation: the container's terminationGracePeriodSeconds, for a stop after the pod is gone.
pub const GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Annotation: the container's `terminationMessagePath` (upstream's name).
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
/// Annotation: the container's `terminationMessagePolicy` (upstream's name).
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// Annotation: `init` or `regular`.
pub const CONTAINER_TYPE: &str = "io.keel.container.type";

/// The selector of every object keel's agent made.
pub fn managed_selector() -> HashMap<String, String> {
    HashMap::from([(MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string())])
}
