//! Generates the snapshot service's Rust types (`Watch` and `ReportUsage`) with a vendored
//! `protoc`, so no system install is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let proto_root = "../../proto";
    let file = "../../proto/switchyard/snapshot/v1/snapshot.proto";
    println!("cargo:rerun-if-changed={file}");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&[file], &[proto_root])?;
    Ok(())
}
