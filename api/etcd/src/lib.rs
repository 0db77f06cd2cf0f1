//! The etcd v3 gRPC services on a member's client URL.

pub mod auth;
pub mod authority;
pub mod auto_compaction;
pub mod cluster;
pub mod coalesce;
pub mod codec;
pub mod election;
pub mod error;
pub mod gateway;
pub mod grpc_metrics;
pub mod header;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod metrics;
pub mod recipes;
pub mod server;
pub mod watch;

/// Generated service traits; message types come from `keel_store::pb`.
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

/// etcd's lock service (`v3lockpb`): messages and service trait.
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.serde.rs"));
}

/// etcd's election service (`v3electionpb`): messages and service trait.
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.serde.rs"));
}

/// The version Status and `/version` report. Chosen on purpose: kube-apiserver enables
/// watch-progress requests (consistent reads from its cache) only for etcd >= 3.4.31, and
/// keel's progress notifications follow those releases' semantics (see docs/etcd-compatibility.md).
pub const ETCD_VERSION: &str = "3.4.31";
/// The cluster version reported next to [`ETCD_VERSION`].
pub const ETCD_CLUSTER_VERSION: &str = "3.4.0";
