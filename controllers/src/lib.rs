//! keel's controllers: the loops of the controller manager, each an ordinary Kubernetes client built on
//! kube-runtime that compares what is asked for with what exists and writes objects to close the gap.
//! They run in `keel server` on the member Raft elected leader (through the in-process client) or out
//! of process with `keel controllers --kubeconfig FILE`.

pub mod backoff;
pub mod clusterrole_aggregation;
pub mod context;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod error;
pub mod garbage_collector;
pub mod history;
pub mod informers;
pub mod job;
pub use keel_client_kit::lease;
pub mod manager;
pub mod metrics;
pub mod namespace;
pub mod node_lifecycle;
pub mod nodeipam;
pub mod owner;
pub mod pod_state;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod root_ca;
pub mod runner;
pub mod selector;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;
pub mod ttl_after_finished;
pub mod volume;

pub use context::Context;
pub use error::{Error, Result};
pub use manager::{run, run_while_leading, ControllerDef, Options, Selection};

/// The identity controllers act as.
pub const USER: &str = "system:kube-controller-manager";

/// The controllers, in upstream's names. Each module adds itself here.
fn registry() -> Vec<ControllerDef> {
    vec![
        serviceaccount::def(),
        root_ca::def(),
        endpointslice::def(),
        endpoints::def(),
        servicelb::def(),
        node_lifecycle::def(),
        node_lifecycle::taint_eviction::def(),
        nodeipam::def(),
        podgc::def(),
        replicaset::def(),
        replicaset::replication_controller_def(),
        deployment::def(),
        job::def(),
        ttl_after_finished::def(),
        cronjob::def(),
        disruption::def(),
        statefulset::def(),
        daemonset::def(),
        garbage_collector::def(),
        namespace::def(),
        clusterrole_aggregation::def(),
        resourcequota::def(),
        podautoscaler::def(),
        volume::binder::def(),
        volume::protection::pvc_def(),
        volume::protection::pv_def(),
        volume::ephemeral::def(),
    ]
}
