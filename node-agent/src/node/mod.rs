//! The agent's Node: [`machine`] reads what the machine has, [`register`] creates or adopts the Node
//! object, [`lease`] renews `kube-node-lease/<node>`, [`status`] keeps `status` (conditions,
//! capacity, images) current, [`routes`] keeps the cluster's private ranges from leaving the machine.

pub mod lease;
pub mod machine;
pub mod pressure;
pub mod register;
pub mod routes;
pub mod status;
