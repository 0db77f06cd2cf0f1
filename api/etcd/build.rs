//! Generates the etcd v3 gRPC service traits; the message types come from `keel-store`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../store/proto/etcd/etcdserver/etcdserverpb/rpc.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .build_client(false)
        .codec_path("crate::codec::SizedProstCodec")
        .extern_path(".etcdserverpb", "::keel_store::pb::etcdserverpb")
        // Watch responses go out with their events encoded once for all watchers.
        .extern_path(
            ".etcdserverpb.WatchResponse",
            "::keel_store::watch::WireResponse",
        )
        .extern_path(".mvccpb", "::keel_store::pb::mvccpb")
        .extern_path(".authpb", "::keel_store::pb::authpb")
        .compile_protos(&[proto], &["../../store/proto"])?;
    Ok(())
}
