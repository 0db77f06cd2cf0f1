//! When each node was last heard from: the newer of its Lease's renewal and its Ready heartbeat, timed
//! on this process's clock (so that skew between the node and the controller does not matter), and
//! the conditions a silent node gets.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::taints::condition;

/// The grace of a node that never reported Ready (`--node-startup-grace-period`).
pub const NODE_STARTUP_GRACE_PERIOD: Duration = Duration::from_secs(60);
/// The reason of a condition the controller turned Unknown.
pub const STATUS_UNKNOWN: &str = "NodeStatusUnknown";
/// Its message.
pub const STATUS_UNKNOWN_MESSAGE: &str = "Kubelet stopped posting node status.";
/// The reason of a condition the kubelet never posted.
pub const NEVER_UPDATED: &str = "NodeStatusNeverUpdated";
/// Its message.
pub const NEVER_UPDATED_MESSAGE: &str = "Kubelet never posted node status.";
/// The conditions besides Ready that turn Unknown with it.
const OTHER_CONDITIONS: &[&str] = &["MemoryPressure", "DiskPressure", "PIDPressure"];

#[derive(Debug)]
struct Seen {
    probe: Instant,
    heartbeat: Option<jiff::Timestamp>,
    renewed: Option<jiff::Timestamp>,
}

/// What the controller heard from each node.
#[derive(Debug, Default)]
pub struct Health {
    nodes: HashMap<String, Seen>,
}

impl Health {
    /// Notes what `node` and its `lease` say now; returns how long since the node was last heard from.
    pub fn observe(&mut self, node: &Node, lease: Option<&Lease>) -> Duration {
        let heartbeat = condition(node, "Ready")
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(|t| t.0);
        let renewed = lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0);
        let now = Instant::now();
        let seen = self.nodes.entry(node.name_any()).or_insert(Seen {
            probe: now,
            heartbeat,
            renewed,
        });
        if heartbeat != seen.heartbeat
            || renewed.is_some_and(|r| seen.renewed.is_none_or(|s| r > s))
        {
            seen.probe = now;
        }
        seen.heartbeat = heartbeat;
        seen.renewed = renewed.or(seen.renewed);
        now.duration_since(seen.probe)
    }

    /// Forgets nodes that are gone.
    pub fn retain(&mut self, names: &[String]) {
        self.nodes.retain(|n, _| names.contains(n));
    }
}

/// The grace `node` gets: the startup grace until it first posts Ready, then `grace`.
pub fn grace_of(node: &Node, grace: Duration) -> Duration {
    if condition(node, "Ready").is_none() {
        NODE_STARTUP_GRACE_PERIOD.max(grace)
    } else {
        grace
    }
}

/// The conditions of a node that went silent: Ready and the pressure conditions Unknown (added when
/// missing); none when they already are.
pub fn unknown_conditions(node: &Node, now: jiff::Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions: Vec<NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut changed = false;
    for ty in std::iter::once("Ready").chain(OTHER_CONDITIONS.iter().copied()) {
        match conditions.iter_mut().find(|c| c.type_ == ty) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some(STATUS_UNKNOWN.into());
                c.message = Some(STATUS_UNKNOWN_MESSAGE.into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: ty.into(),
                    status: "Unknown".into(),
                    reason: Some(NEVER_UPDATED.into()),
                    message: Some(NEVER_UPDATED_MESSAGE.into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}
