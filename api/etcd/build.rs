//! Generates the etcd v3 gRPC service traits (the message types come from `keel-store`), and
//! etcd's lock and election services with their own messages and their proto3 JSON mapping.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rpc = "../../store/proto/etcd/etcdserver/etcdserverpb/rpc.proto";
    let lock = "proto/etcd/v3lockpb/v3lock.proto";
    let election = "proto/etcd/v3electionpb/v3election.proto";
    for p in [rpc, lock, election] {
        println!("cargo:rerun-if-changed={p}");
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("recipes_descriptors.bin");
    tonic_prost_build::configure()
        .build_client(false)
        .codec_path("crate::codec::SizedProstCodec")
        .bytes(".")
        .file_descriptor_set_path(&descriptors)
        .extern_path(".etcdserverpb", "::keel_store::pb::etcdserverpb")
        // Watch responses go out with their events encoded once for all watchers.
        .extern_path(
            ".etcdserverpb.WatchResponse",
            "::keel_store::watch::WireResponse",
        )
        .extern_path(".mvccpb", "::keel_store::pb::mvccpb")
        .extern_path(".authpb", "::keel_store::pb::authpb")
        .compile_protos(&[rpc, lock, election], &["../../store/proto", "proto"])?;
    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptors)?)?
        .extern_path(".etcdserverpb", "::keel_store::pb::etcdserverpb")
        .extern_path(".mvccpb", "::keel_store::pb::mvccpb")
        .preserve_proto_field_names()
        .ignore_unknown_fields()
        .build(&[".v3lockpb", ".v3electionpb"])?;
    Ok(())
}
