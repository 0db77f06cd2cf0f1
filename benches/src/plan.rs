//! What a run measures: the full plan behind `docs/benchmarks.md`, and the `--quick` subset CI
//! runs to prove the benchmark still works.

use std::time::Duration;

use crate::load::Window;
use crate::workload::range::Shape;

/// One measured workload, run once on each system.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// Puts of fresh keys.
    Put { clients: usize, value_len: usize },
    /// Puts of fresh keys sent to followers only (each answered once that follower applied it).
    PutFollowers { clients: usize, value_len: usize },
    /// Txn compare mod_revision then put.
    Update { clients: usize, value_len: usize },
    /// Range reads.
    Range {
        shape: Shape,
        serializable: bool,
        clients: usize,
    },
    /// Watchers on one prefix fed by a few writers.
    Watch { watchers: usize, writers: usize },
    /// Keepalives of many leases.
    Lease { leases: usize, clients: usize },
}

fn size(bytes: usize) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

impl Step {
    /// Row label.
    pub(crate) fn name(&self) -> String {
        match *self {
            Step::Put { clients, value_len } => {
                format!("put {}, {clients} clients", size(value_len))
            }
            Step::PutFollowers { clients, value_len } => {
                format!(
                    "put {} through followers, {clients} clients",
                    size(value_len)
                )
            }
            Step::Update { clients, value_len } => {
                format!("guarded update {}, {clients} clients", size(value_len))
            }
            Step::Range {
                shape,
                serializable,
                clients,
            } => {
                let what = match shape {
                    Shape::OneKey => "1 key",
                    Shape::Prefix => "prefix 1000, limit 500",
                };
                let how = if serializable {
                    "serializable"
                } else {
                    "linearizable"
                };
                format!("range {what}, {how}, {clients} clients")
            }
            Step::Watch { watchers, writers } => {
                format!("watch fan-out, {watchers} watchers, {writers} writers")
            }
            Step::Lease { leases, clients } => {
                format!("lease keepalive, {leases} leases, {clients} clients")
            }
        }
    }

    /// Whether the step means anything on `members` members (a lone member has no followers).
    pub(crate) fn applies(&self, members: usize) -> bool {
        !matches!(self, Step::PutFollowers { .. }) || members > 1
    }

    /// Unit of the measured rate.
    pub(crate) fn unit(&self) -> &'static str {
        match self {
            Step::Watch { .. } => "events/s",
            Step::Lease { .. } => "keepalives/s",
            _ => "ops/s",
        }
    }
}

/// A whole run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// Cluster sizes, each run with every step.
    pub topologies: Vec<usize>,
    /// The workloads.
    pub steps: Vec<Step>,
    /// Warm-up and measured time of each workload.
    pub window: Window,
    /// Key counts at which memory and disk are measured.
    pub footprint_keys: Vec<usize>,
    /// Leader kills of the failover step (clusters of 3 members or more; 0 = no failover step).
    pub(crate) failover_kills: usize,
    /// Extra flags for keel's members in the measured steps.
    pub(crate) keel_args: Vec<String>,
}

/// Label of the failover rows (`--only failover` selects them).
pub(crate) const FAILOVER: &str = "failover";

impl Plan {
    /// Everything the issue asks for, 5 s per workload.
    pub(crate) fn full(secs: u64) -> Self {
        let mut steps = Vec::new();
        for value_len in [256, 4096] {
            for clients in [1, 16, 64, 256] {
                steps.push(Step::Put { clients, value_len });
            }
        }
        for clients in [1, 16, 64] {
            steps.push(Step::PutFollowers {
                clients,
                value_len: 256,
            });
        }
        steps.push(Step::Update {
            clients: 64,
            value_len: 1024,
        });
        for serializable in [false, true] {
            steps.push(Step::Range {
                shape: Shape::OneKey,
                serializable,
                clients: 64,
            });
            steps.push(Step::Range {
                shape: Shape::Prefix,
                serializable,
                clients: 16,
            });
        }
        steps.push(Step::Watch {
            watchers: 100,
            writers: 4,
        });
        steps.push(Step::Watch {
            watchers: 1000,
            writers: 4,
        });
        steps.push(Step::Lease {
            leases: 5000,
            clients: 64,
        });
        Plan {
            topologies: vec![1, 3],
            steps,
            window: Window {
                warmup: Duration::from_secs(1),
                measure: Duration::from_secs(secs),
            },
            footprint_keys: vec![100_000, 1_000_000],
            failover_kills: 7,
            keel_args: Vec::new(),
        }
    }

    /// A subset with tiny durations that finishes well under 2 minutes.
    pub(crate) fn quick() -> Self {
        Plan {
            topologies: vec![1, 3],
            steps: vec![
                Step::Put {
                    clients: 16,
                    value_len: 256,
                },
                Step::Put {
                    clients: 64,
                    value_len: 4096,
                },
                Step::Update {
                    clients: 16,
                    value_len: 1024,
                },
                Step::Range {
                    shape: Shape::OneKey,
                    serializable: false,
                    clients: 16,
                },
                Step::Range {
                    shape: Shape::Prefix,
                    serializable: true,
                    clients: 8,
                },
                Step::Watch {
                    watchers: 100,
                    writers: 2,
                },
                Step::Lease {
                    leases: 500,
                    clients: 16,
                },
            ],
            window: Window {
                warmup: Duration::from_millis(200),
                measure: Duration::from_secs(1),
            },
            footprint_keys: vec![10_000],
            failover_kills: 2,
            keel_args: Vec::new(),
        }
    }
}
