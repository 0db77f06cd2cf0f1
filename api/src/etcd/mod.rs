//! The etcd v3 gRPC services.
