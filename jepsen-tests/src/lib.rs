//! Jepsen-style tests of keel: a cluster of real `keel server` processes (or real etcd 3.4, as a self-check),
//! each in its own network namespace; concurrent etcd-API clients recording every operation; faults injected
//! and healed; the histories checked for linearizability and the watch/lease guarantees.
//!
//! - [`harness`]: the root package's test harness (real processes, namespaces, nftables), included as is.
//! - [`history`]: operations with invocation and completion times and outcomes.
//! - [`workload`]: registers, list-append transactions, watches and leases.
//! - [`nemesis`]: partitions, kills, pauses, membership changes, torn WAL tails.
//! - [`checker`]: the linearizability search and the watch checks.
//! - [`campaign`]: one phase per fault, with the report.

#![warn(missing_docs)]

/// The root package's integration-test harness (`tests/common/`): processes, clusters, namespaces.
#[path = "../../tests/common/mod.rs"]
#[allow(missing_docs)]
pub mod harness;

pub mod campaign;
pub mod checker;
pub mod history;
pub mod nemesis;
pub mod workload;
