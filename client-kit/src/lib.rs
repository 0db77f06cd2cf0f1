//! What keel's Kubernetes clients (controllers, scheduler, node agent) share. Each is an ordinary
//! client of the API server; this crate holds the pieces all of them need, once.
//!
//! - [`lease`]: a leader Lease in `kube-system`, taken (Raft decided) or elected (client-go's way);
//! - [`leading`]: runs a component while this process leads, holding its Lease;
//! - [`quantity`]: resource quantities (`100m`, `1.5Gi`) as integers;
//! - [`labels`]: label selector matching;
//! - [`placement`]: taints against tolerations, node selectors and required node affinity;
//! - [`qos`]: a pod's QoS class;
//! - [`reflect`]: a watched kind's cache and its wake-up on change;
//! - [`upgrade`]: relaying an exec, attach or port-forward connection upgrade;
//! - [`quota`]: what objects consume under a ResourceQuota, shared by its admission and its controller;
//! - [`volume`]: claims and volumes: upstream's annotations, a claim's class, which volume fits a claim.

pub mod labels;
pub mod leading;
pub mod lease;
pub mod placement;
pub mod qos;
pub mod quantity;
pub mod quota;
pub mod reflect;
pub mod tls;
pub mod upgrade;
pub mod volume;
