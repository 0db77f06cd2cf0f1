//! keel's front doors. Today: the etcd v3 gRPC API, served on one member's client URL.

pub mod etcd;
