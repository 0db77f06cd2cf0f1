//! Compiles keel's etcd wire-type definitions (messages only; services are generated in `api`),
//! with their proto3 JSON mapping as etcd's gateway speaks it (proto field names, unknown fields
//! ignored).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/etcd/mvcc/mvccpb/kv.proto",
        "proto/etcd/auth/authpb/auth.proto",
        "proto/etcd/etcdserver/etcdserverpb/rpc.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("etcd_descriptors.bin");
    prost_build::Config::new()
        .bytes(["."])
        .file_descriptor_set_path(&descriptors)
        .compile_protos(&protos, &["proto"])?;
    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptors)?)?
        .preserve_proto_field_names()
        .ignore_unknown_fields()
        .build(&[".mvccpb", ".authpb", ".etcdserverpb"])?;
    Ok(())
}
