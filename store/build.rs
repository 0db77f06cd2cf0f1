//! Compiles keel's etcd wire-type definitions (messages only; services are generated in `api`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/etcd/mvcc/mvccpb/kv.proto",
        "proto/etcd/auth/authpb/auth.proto",
        "proto/etcd/etcdserver/etcdserverpb/rpc.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    prost_build::Config::new()
        .bytes(["."])
        .compile_protos(&protos, &["proto"])?;
    Ok(())
}
