//! keel's front doors: the etcd v3 gRPC API and the Kubernetes REST API, both served on one member from
//! the same in-process store handle.

pub mod etcd;
pub mod kube;
