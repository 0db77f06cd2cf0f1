//! keel's node agent: the kubelet of a keel cluster. An ordinary Kubernetes client (kube +
//! kube-runtime) that registers its Node, renews its Lease in `kube-node-lease`, keeps the Node's
//! status, and runs the pods bound to it through containerd's CRI.
//!
//! - [`cri`]: the CRI v1 client over containerd's socket, and the labels that let a restarted agent
//!   find its sandboxes and containers again;
//! - [`image`]: OCI image archives built from local files, and their import into containerd;
//! - [`node`]: the machine's resources, registration, the node Lease, node status;
//! - [`cni`]: the bridge + host-local network config from the node's pod CIDR;
//! - [`log_rotation`]: container log files rotated by size, as the kubelet's log manager;
//! - [`pod`]: the pods bound to the node, each synced against the runtime by its worker;
//! - [`server`]: the agent's own HTTPS API on :10250 (container logs) for the API server;
//! - [`dns`]: the node's cluster DNS resolver (Services and pods by name), in place of CoreDNS;
//! - [`runtime`]: the config of a private containerd (`keel up`);
//! - [`hollow`]: `keel agent --hollow N`, N simulated nodes without containers (kubemark, KWOK);
//! - [`agent`]: all of it put together ([`agent::run`]).

pub mod agent;
pub mod cni;
pub mod cri;
pub mod dns;
pub mod error;
pub mod hollow;
pub mod image;
pub mod ingress;
pub mod log_rotation;
pub mod node;
pub mod pod;
pub mod runtime;
pub mod server;
pub mod storage;

pub use error::{Error, Result};
