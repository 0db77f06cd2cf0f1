//! netprog: kube-proxy's job for a keel node. It watches Services, EndpointSlices and Nodes and keeps
//! one nftables table of its own (`table ip keel`) equal to what they say, replacing its contents in a
//! single `nft -f` transaction; it never touches another table and never flushes the ruleset.
//!
//! - [`model`]: what the rules are made of (service ports, endpoints, this node), free of API types;
//! - [`build`]: Services and EndpointSlices turned into that model (readiness, traffic policies);
//! - [`names`]: chain and set names as kube-proxy's nftables mode forms them;
//! - [`render`]: the model as nft text, one transaction, deterministic;
//! - [`nft`]: running `nft`, reading back what the table holds, removing it;
//! - [`routes`]: routes to other nodes' pod subnets, and the host settings forwarding needs;
//! - [`sync`]: the loop that watches, batches bursts, applies, and reports failures.

pub mod build;
pub mod error;
pub mod latency;
pub mod model;
pub mod names;
pub mod nft;
pub mod policy;
pub mod render;
pub mod routes;
pub mod sync;

pub use error::{Error, Result};
pub use sync::{Options, Stats};
