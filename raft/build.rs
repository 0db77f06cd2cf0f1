//! Compiles the peer transport (`proto/peer.proto`): messages, tonic server and client.
//!
//! etcd's response types are not generated again: they map to `keel-store`'s generated code, so
//! a forwarded result is the very type the store returned.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/peer.proto";
    // `peer.proto` imports etcd's rpc.proto from the store crate's proto tree.
    let includes = ["proto", "../store/proto"];
    println!("cargo:rerun-if-changed={proto}");
    println!("cargo:rerun-if-changed=../store/proto/etcd/etcdserver/etcdserverpb/rpc.proto");
    println!("cargo:rerun-if-changed=../store/proto/etcd/mvcc/mvccpb/kv.proto");
    println!("cargo:rerun-if-changed=../store/proto/etcd/auth/authpb/auth.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // prost's codec, but garbage from a peer is InvalidArgument rather than Internal.
        .codec_path("crate::peer::server::PeerCodec")
        .extern_path(".etcdserverpb", "::keel_store::pb::etcdserverpb")
        .extern_path(".mvccpb", "::keel_store::pb::mvccpb")
        .extern_path(".authpb", "::keel_store::pb::authpb")
        .compile_protos(&[proto], &includes)?;
    Ok(())
}
