//! keel's scheduler: assigns a node to every pod that has none, as kube-scheduler's default profile
//! would. An ordinary Kubernetes client (kube + kube-runtime): it runs in `keel server` on the member
//! Raft elected leader (through the in-process client, as `system:kube-scheduler`) or out of process
//! with `keel scheduler --kubeconfig FILE`, and holds the `kube-system/kube-scheduler` Lease.
//!
//! - [`cache`]: nodes and the pods on them (assumed pods included), and the per-cycle snapshot;
//! - [`queue`]: activeQ, backoffQ and the unschedulable pods;
//! - [`framework`]: extension points, one scheduling cycle, percentageOfNodesToScore, FitError;
//! - [`plugins`]: the default plugins with upstream's weights;
//! - [`scheduler`]: the loop (watches in, bindings, conditions and Events out);
//! - [`lease`] (from keel-client-kit): the leader Lease.

pub mod binder;
pub mod cache;
pub mod error;
pub mod framework;
pub mod informer;
pub mod metrics;
pub mod plugins;
pub mod pod_info;
pub mod preemption;
pub mod queue;
pub mod report;
pub mod resources;
pub mod scheduler;

use kube::Client;
use tokio::sync::watch;

pub use error::Error;
use keel_client_kit::leading::{self, Leader};
pub use keel_client_kit::{lease, quantity};
use lease::Mode;
pub use pod_info::DEFAULT_SCHEDULER_NAME;

/// The identity the scheduler acts as.
pub const USER: &str = "system:kube-scheduler";
/// The Lease the scheduler's leader holds.
pub const LEASE_NAME: &str = "kube-scheduler";

/// How the scheduler runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// This member's name: the Lease's holderIdentity and the Events' reportingInstance.
    pub holder: String,
    /// The `spec.schedulerName` this scheduler serves.
    pub scheduler_name: String,
    /// percentageOfNodesToScore (0 = adaptive, upstream's default).
    pub percentage_of_nodes_to_score: i64,
    /// Where attempts, queue sizes and preemptions are counted.
    pub metrics: metrics::Metrics,
}

impl Options {
    /// The default profile, held as `holder`.
    pub fn new(holder: impl Into<String>) -> Options {
        Options {
            holder: holder.into(),
            scheduler_name: DEFAULT_SCHEDULER_NAME.into(),
            percentage_of_nodes_to_score: 0,
            metrics: metrics::Metrics::default(),
        }
    }
}

/// Runs the scheduler until the returned future is dropped.
pub async fn run(client: Client, opts: Options) {
    scheduler::run(client, opts).await;
}

/// Runs the scheduler while `leading` is true (started when it turns true, cancelled when it turns
/// false) until `stop` fires. With [`Mode::Follow`] leadership comes from Raft and the Lease is simply
/// taken; with [`Mode::Elect`] `leading` comes from [`lease::elect`].
pub async fn run_while_leading(
    client: Client,
    opts: Options,
    leading: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    mode: Mode,
) {
    let holder = opts.holder.clone();
    let leader = Leader {
        client: client.clone(),
        what: "scheduler",
        lease_name: LEASE_NAME,
        holder: &holder,
        mode,
    };
    leading::run_while_leading(leader, leading, stop, || run(client.clone(), opts.clone())).await;
}
