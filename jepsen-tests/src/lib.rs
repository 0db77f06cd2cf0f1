//! Jepsen-style tests of keel: a cluster of real `keel server` processes (or real etcd 3.4, as a self-check),
//! each in its own network namespace; concurrent etcd-API clients recording every operation; faults injected
//! and healed; the histories checked for linearizability and the watch/lease guarantees.
//!
//! - The test kit (`keel-testkit`, the crate every keel test shares) starts the processes, namespaces and
//!   nftables rules.
//! - [`history`]: operations with invocation and completion times and outcomes.
//! - [`workload`]: registers, list-append transactions, watches and leases.
//! - [`nemesis`]: partitions, kills, pauses, membership changes, torn WAL tails.
//! - [`checker`]: the linearizability search and the watch checks.
//! - [`campaign`]: one phase per fault, with the report.

#![warn(missing_docs)]

pub mod campaign;
pub mod checker;
pub mod history;
pub mod nemesis;
pub mod workload;
